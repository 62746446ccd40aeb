// SwiGLU (Llama's MLP activation): see llama_kernels.hpp. silu(g) = g s(g)
// with s the logistic function; silu'(g) = s (1 + g (1 - s)).
#include <cmath>

#include "kernels/cpu/fp32_access.hpp"
#include "kernels/cpu/llama_kernels.hpp"

namespace gt::cpu {

namespace {
void check(const TensorView& gu, const TensorView& y, const char* y_what, int64_t* R, int64_t* F) {
  GT_CHECK(gu.ndim == 2 && gu.shape[1] % 2 == 0, "swiglu gu must be (R, 2F), got ", gu.shape_str());
  *R = gu.shape[0];
  *F = gu.shape[1] / 2;
  expect_f32_or_bf16(gu, {*R, 2 * *F}, "swiglu gu");
  expect_storage_any(y, gu.dtype, y_what);
  expect_shape(y, {*R, *F}, y_what);
}
}  // namespace

void swiglu_forward(TensorView out, TensorView gu) {
  int64_t R = 0, F = 0;
  check(gu, out, "swiglu out (gu's dtype)", &R, &F);
  const Fp32In gu_in(gu);
  Fp32Out y_out(out);
  const float* a = gu_in.get();
  float* y = y_out.get();
#pragma omp parallel for if (R * F >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* g = a + r * 2 * F;
    const float* u = g + F;
    float* yr = y + r * F;
    for (int64_t i = 0; i < F; ++i) yr[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
  }
  y_out.store();
}

void swiglu_backward(TensorView dgu, TensorView dout, TensorView gu) {
  int64_t R = 0, F = 0;
  check(gu, dout, "swiglu dout (gu's dtype)", &R, &F);
  expect_storage_any(dgu, gu.dtype, "swiglu dgu (gu's dtype)");
  expect_shape(dgu, {R, 2 * F}, "swiglu dgu");
  const Fp32In gu_in(gu), dy_in(dout);
  Fp32Out dgu_out(dgu);
  const float* a = gu_in.get();
  const float* dy = dy_in.get();
  float* d = dgu_out.get();
#pragma omp parallel for if (R * F >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* g = a + r * 2 * F;
    const float* u = g + F;
    const float* dyr = dy + r * F;
    float* dg = d + r * 2 * F;
    float* du = dg + F;
    for (int64_t i = 0; i < F; ++i) {
      const float s = 1.f / (1.f + std::exp(-g[i]));
      const float silu = g[i] * s;
      dg[i] = dyr[i] * u[i] * s * (1.f + g[i] * (1.f - s));
      du[i] = dyr[i] * silu;
    }
  }
  dgu_out.store();
}

}  // namespace gt::cpu
