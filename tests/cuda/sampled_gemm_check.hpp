// Checks a GEMM too large to recompute on the host (the LM head: 16384 x
// 50304 x 768, 1.3 TFLOP) on a random sample of its outputs: each sampled
// D(i, j) against the double-precision sum over k of A(i, k) * B(k, j), read
// from the very device values the GEMM read. Used by the production-shape
// tests (gt_cuda_tests) and by gpu_bench's check of its LM-head rows.
//
// Matrices are device memory reached through element strides, so a transposed
// operand is a stride swap: element (r, c) lives at
// data + (r * row_stride + c * col_stride) elements. Rows and columns come to
// the host with one strided cudaMemcpy2D each; nothing here launches a kernel,
// so the reference shares no code with the kernels it checks.
//
// Tolerance, per sample: |got - want| <= out_rel * |want| + acc_rel * sum_k |a b|.
// out_rel covers rounding the result to D's dtype (bf16: 2^-9, so 2^-8 with
// slack; fp32: 1e-6); acc_rel covers fp32 accumulation in any order (1e-4 of
// the sum of magnitudes). A wrong operand, transpose or stride is off by about
// |want| ~ sum |a b| / sqrt(K) for random inputs, 80x over acc_rel at K = 16384.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace gt::test {

struct StridedDeviceMatrix {
  const void* data = nullptr;
  DType dtype = DType::f32;  // f32 or bf16
  int64_t row_stride = 0, col_stride = 1;
};

struct SampledGemmReport {
  int samples = 0;
  double worst_ratio = 0.0;  // max over samples of |got - want| / tolerance; <= 1 passes
  int64_t row = -1, col = -1;
  double got = 0.0, want = 0.0;
  bool ok() const { return samples > 0 && worst_ratio <= 1.0; }
  std::string describe() const {
    std::ostringstream o;
    o << samples << " samples, worst |got - want| / tolerance " << worst_ratio << " at (" << row
      << ", " << col << "): got " << got << ", want " << want;
    return o.str();
  }
};

namespace sampled_gemm_detail {

inline double widen(const unsigned char* p, DType dtype) {
  if (dtype == DType::bf16) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// n elements of m starting at (r, c), stepping (dr, dc), widened to double.
inline std::vector<double> fetch(const StridedDeviceMatrix& m, int64_t r, int64_t c, int64_t dr,
                                 int64_t dc, int64_t n) {
  const size_t es = dtype_size(m.dtype);
  const int64_t step = dr * m.row_stride + dc * m.col_stride;
  const auto* src =
      static_cast<const unsigned char*>(m.data) + (r * m.row_stride + c * m.col_stride) * es;
  std::vector<unsigned char> raw(static_cast<size_t>(n) * es);
  CUDA_CHECK(cudaMemcpy2D(raw.data(), es, src, static_cast<size_t>(step) * es, es,
                          static_cast<size_t>(n), cudaMemcpyDeviceToHost));
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = widen(raw.data() + i * es, m.dtype);
  return out;
}

}  // namespace sampled_gemm_detail

// D (M, N) = A (M, K) * B (K, N) (+ bias (N), on the device, when given),
// checked at every pair of `rows` random rows and `cols` random columns: each
// row of A and column of B crosses to the host once (a column of a row-major
// matrix is a strided copy, slow for long K). The device must be idle (call
// after synchronising the GEMM's stream).
inline SampledGemmReport check_gemm_samples(const StridedDeviceMatrix& A,
                                            const StridedDeviceMatrix& B,
                                            const StridedDeviceMatrix& D, int64_t M, int64_t N,
                                            int64_t K, int rows, int cols, uint64_t seed,
                                            const StridedDeviceMatrix* bias = nullptr) {
  using sampled_gemm_detail::fetch;
  const double out_rel = D.dtype == DType::bf16 ? std::ldexp(1.0, -8) : 1e-6;
  const double acc_rel = 1e-4;
  std::mt19937_64 rng(seed);
  std::vector<int64_t> is(static_cast<size_t>(rows)), js(static_cast<size_t>(cols));
  for (int64_t& i : is) i = static_cast<int64_t>(rng() % static_cast<uint64_t>(M));
  for (int64_t& j : js) j = static_cast<int64_t>(rng() % static_cast<uint64_t>(N));
  std::vector<std::vector<double>> b_cols;
  std::vector<double> bias_at;
  for (int64_t j : js) {
    b_cols.push_back(fetch(B, 0, j, 1, 0, K));  // column j of B
    bias_at.push_back(bias ? fetch(*bias, 0, j, 0, 1, 1)[0] : 0.0);
  }
  SampledGemmReport rep;
  rep.worst_ratio = -1.0;
  for (int64_t i : is) {
    const std::vector<double> a = fetch(A, i, 0, 0, 1, K);  // row i of A
    const std::vector<double> got_row = fetch(D, i, 0, 0, 1, N);
    for (size_t t = 0; t < js.size(); ++t) {
      const std::vector<double>& b = b_cols[t];
      double want = bias_at[t], mag = std::fabs(bias_at[t]);
      for (int64_t k = 0; k < K; ++k) {
        want += a[k] * b[k];
        mag += std::fabs(a[k] * b[k]);
      }
      const double got = got_row[static_cast<size_t>(js[t])];
      const double tol = out_rel * std::fabs(want) + acc_rel * mag + 1e-30;
      const double ratio = std::isfinite(got) ? std::fabs(got - want) / tol : INFINITY;
      ++rep.samples;
      if (ratio > rep.worst_ratio) {
        rep.worst_ratio = ratio;
        rep.row = i;
        rep.col = js[t];
        rep.got = got;
        rep.want = want;
      }
    }
  }
  return rep;
}

// The LM head's three GEMMs as CudaOps runs them, after one forward and one
// backward that used the logits as their own gradient:
//   forward  logits (R, V) = x (R, C) wte (V, C)^T   bf16 in, bf16 out
//   dinp     dx (R, C)     = logits (R, V) wte       bf16 out
//   dweight  dwte (V, C)   = logits^T x              fp32, accumulated from zero
// each checked at rows x cols samples. x, wte, logits and dx hold bf16.
struct LmHeadReports {
  SampledGemmReport forward, dinp, dweight;
  bool ok() const { return forward.ok() && dinp.ok() && dweight.ok(); }
};
inline LmHeadReports check_lm_head_samples(const void* x, const void* wte, const void* logits,
                                           const void* dx, const float* dwte, int64_t R, int64_t V,
                                           int64_t C, int rows, int cols) {
  using M = StridedDeviceMatrix;
  const M xm{x, DType::bf16, C, 1}, wt{wte, DType::bf16, 1, C},  // wte^T (C, V)
      wm{wte, DType::bf16, C, 1}, lm{logits, DType::bf16, V, 1},
      lt{logits, DType::bf16, 1, V},  // logits^T (V, R)
      dxm{dx, DType::bf16, C, 1}, dwm{dwte, DType::f32, C, 1};
  LmHeadReports r;
  r.forward = check_gemm_samples(xm, wt, lm, R, V, C, rows, cols, 1);
  r.dinp = check_gemm_samples(lm, wm, dxm, R, C, V, rows, cols, 2);
  r.dweight = check_gemm_samples(lt, xm, dwm, V, C, R, rows, cols, 3);
  return r;
}

}  // namespace gt::test
