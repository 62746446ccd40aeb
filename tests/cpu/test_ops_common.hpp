// Helpers shared by the CPU op tests (tests/cpu/test_ops_*.cpp): the backend
// under test, the scalar probe L = sum(out o W) computed in double, and a
// central finite-difference gradient of it. Everything is header-only and in
// an unnamed namespace so each test file stays self-contained.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/bf16.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "test_util.hpp"

namespace gt::test {
namespace {

inline std::unique_ptr<Ops> cpu_ops(int threads = 0) { return make_cpu_ops(threads); }

inline TensorView f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return cpu_f32(v.data(), shape);
}
inline TensorView i32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return cpu_i32(v.data(), shape);
}
// bf16 bits held in a uint16_t vector, as a bf16 view.
inline TensorView bf16_view(std::vector<uint16_t>& v, std::initializer_list<int64_t> shape) {
  return make_view(v.data(), DType::bf16, Device::cpu, shape);
}

inline std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// L = sum(out o w) in double, the scalar whose gradient every backward is checked against.
inline double weighted_sum(const std::vector<float>& out, const std::vector<float>& w) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * w[i];
  return s;
}

// dL/dx by central differences, perturbing each float of x by +-h in place
// (restored afterwards). The divisor is the step actually taken in float.
inline std::vector<float> numeric_grad(std::vector<float>& x, const std::function<double()>& loss,
                                       float h = 1e-3f) {
  std::vector<float> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    const float xp = x0 + h, xm = x0 - h;
    x[i] = xp;
    const double lp = loss();
    x[i] = xm;
    const double lm = loss();
    x[i] = x0;
    g[i] = static_cast<float>((lp - lm) / (static_cast<double>(xp) - xm));
  }
  return g;
}

// Analytic vs numeric gradient: tolerance 1e-2 relative to the largest
// numeric entry (finite differences in fp32 are noisy near zero) plus atol.
inline ::testing::AssertionResult grad_close(const std::vector<float>& analytic,
                                             const std::vector<float>& numeric,
                                             float atol = 1e-4f, float rel = 1e-2f) {
  float mx = 0.f;
  for (float g : numeric) mx = std::max(mx, std::fabs(g));
  if (mx == 0.f) return ::testing::AssertionFailure() << "numeric gradient is all zero";
  return all_close(analytic, numeric, atol + rel * mx, rel);
}

inline std::vector<float> plus(const std::vector<float>& a, float c) {
  std::vector<float> r(a);
  for (float& x : r) x += c;
  return r;
}

// Expects fn to throw gt::Error whose message contains `needle`.
inline void expect_error_containing(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected gt::Error containing \"" << needle << "\", nothing thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << needle << "\"";
  }
}

}  // namespace
}  // namespace gt::test
