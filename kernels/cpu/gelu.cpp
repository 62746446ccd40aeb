// tanh-approximate GELU (torch.nn.GELU(approximate="tanh")), elementwise on
// any contiguous fp32 shape. Invariant: gelu_backward assigns dinp.
// Computed in the equivalent logistic form 0.5 x (1 + tanh u) = x s with
// s = 1 / (1 + exp(-2u)): it needs one exp, and stays accurate in the left
// tail where 1 + tanh u would cancel.
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fast_math.hpp"

namespace gt::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(TensorView out, TensorView inp) {
  expect_f32_any(inp, "gelu inp");
  expect_f32_any(out, "gelu out");
  expect_same_shape(out, inp, "gelu out", "gelu inp");
  const int64_t n = inp.numel();
  const float* x = inp.f32();
  float* y = out.f32();
#pragma omp parallel for simd if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    y[i] = xi / (1.f + fast_exp(-2.f * u));
  }
}

void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) {
  expect_f32_any(inp, "gelu inp");
  expect_f32_any(dinp, "gelu dinp");
  expect_f32_any(dout, "gelu dout");
  expect_same_shape(dinp, inp, "gelu dinp", "gelu inp");
  expect_same_shape(dout, inp, "gelu dout", "gelu inp");
  const int64_t n = inp.numel();
  const float* x = inp.f32();
  const float* dy = dout.f32();
  float* dx = dinp.f32();
#pragma omp parallel for simd if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    const float e = fast_exp(-2.f * u), s = 1.f / (1.f + e);
    // d/dx [x s] = s + x s (1 - s) 2 du/dx, with 1 - s = e s.
    const float du = kSqrt2OverPi * (1.f + 3.f * kCubic * xi * xi);
    dx[i] = dy[i] * (s + 2.f * xi * e * s * s * du);
  }
}

}  // namespace gt::cpu
