// tanh-approximate GELU (torch.nn.GELU(approximate="tanh")), elementwise on
// any contiguous fp32 shape, or bf16 storage (all tensors of a call bf16:
// fp32_access.hpp). Invariant: gelu_backward assigns dinp.
// Computed in the equivalent logistic form 0.5 x (1 + tanh u) = x s with
// s = 1 / (1 + exp(-2u)): it needs one exp, and stays accurate in the left
// tail where 1 + tanh u would cancel.
// The loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at
// load time (target_clones): GELU is memory-light arithmetic, so vector width
// is its speed, and the binary still runs on any x86-64.
#include <algorithm>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fast_math.hpp"
#include "kernels/cpu/fp32_access.hpp"

namespace gt::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
constexpr int64_t kChunk = 1 << 14;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GT_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GT_VECTOR_CLONES
#endif

GT_VECTOR_CLONES void gelu_forward_span(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    y[i] = xi / (1.f + fast_exp(-2.f * u));
  }
}

GT_VECTOR_CLONES void gelu_backward_span(const float* x, const float* dy, float* dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    const float e = fast_exp(-2.f * u), s = 1.f / (1.f + e);
    // d/dx [x s] = s + x s (1 - s) 2 du/dx, with 1 - s = e s formed first:
    // in the left tail e reaches ~1e38 and x * e would overflow to -inf.
    const float du = kSqrt2OverPi * (1.f + 3.f * kCubic * xi * xi);
    const float one_minus_s = e * s;
    dx[i] = dy[i] * (s + 2.f * xi * one_minus_s * s * du);
  }
}
}  // namespace

void gelu_forward(TensorView out, TensorView inp) {
  expect_storage_any(inp, inp.dtype, "gelu inp");
  expect_storage_any(out, inp.dtype, "gelu out (inp's dtype)");
  expect_same_shape(out, inp, "gelu out", "gelu inp");
  const int64_t n = inp.numel();
  const Fp32In x_in(inp);
  Fp32Out y_out(out);
  const float* x = x_in.get();
  float* y = y_out.get();
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t c = 0; c < n; c += kChunk)
    gelu_forward_span(x + c, y + c, std::min(kChunk, n - c));
  y_out.store();
}

void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) {
  expect_storage_any(inp, inp.dtype, "gelu inp");
  expect_storage_any(dinp, inp.dtype, "gelu dinp (inp's dtype)");
  expect_storage_any(dout, inp.dtype, "gelu dout (inp's dtype)");
  expect_same_shape(dinp, inp, "gelu dinp", "gelu inp");
  expect_same_shape(dout, inp, "gelu dout", "gelu inp");
  const int64_t n = inp.numel();
  const Fp32In x_in(inp), dy_in(dout);
  Fp32Out dx_out(dinp);
  const float* x = x_in.get();
  const float* dy = dy_in.get();
  float* dx = dx_out.get();
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t c = 0; c < n; c += kChunk)
    gelu_backward_span(x + c, dy + c, dx + c, std::min(kChunk, n - c));
  dx_out.store();
}

}  // namespace gt::cpu
