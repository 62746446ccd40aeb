// tanh-approximate GELU (torch.nn.GELU(approximate="tanh")), elementwise on
// any contiguous fp32 shape. Invariant: gelu_backward assigns dinp.
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"

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
    y[i] = 0.5f * xi * (1.f + std::tanh(u));
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
    const float th = std::tanh(u);
    // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx
    const float du = kSqrt2OverPi * (1.f + 3.f * kCubic * xi * xi);
    dx[i] = dy[i] * (0.5f * (1.f + th) + 0.5f * xi * (1.f - th * th) * du);
  }
}

}  // namespace gt::cpu
