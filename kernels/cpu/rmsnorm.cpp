// RMSNorm (HF LlamaRMSNorm), row-wise: see llama_kernels.hpp. Like
// layernorm.cpp: rows are independent in forward and in dinp; the weight
// gradient is reduced per channel block in row order (deterministic).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fp32_access.hpp"
#include "kernels/cpu/llama_kernels.hpp"

namespace gt::cpu {

namespace {
constexpr int64_t kChannelBlock = 64;
}  // namespace

void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight,
                     float eps) {
  GT_CHECK(inp.ndim == 2, "rmsnorm inp must be (R, C), got ", inp.shape_str());
  const int64_t R = inp.shape[0], C = inp.shape[1];
  expect_f32_or_bf16(inp, {R, C}, "rmsnorm inp");
  expect_storage_any(out, inp.dtype, "rmsnorm out (inp's dtype)");
  expect_shape(out, {R, C}, "rmsnorm out");
  expect_f32(rstd, {R}, "rmsnorm rstd");
  expect_f32(weight, {C}, "rmsnorm weight");
  GT_CHECK(eps > 0, "rmsnorm eps ", eps);

  const Fp32In x_in(inp);
  Fp32Out o_out(out);
  const float* x = x_in.get();
  const float* w = weight.f32();
  float* o = o_out.get();
  float* rs = rstd.f32();
#pragma omp parallel for if (R * C >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * C;
    float ss = 0.f;
    for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const float rsv = 1.f / std::sqrt(ss / static_cast<float>(C) + eps);
    float* orow = o + r * C;
    for (int64_t c = 0; c < C; ++c) orow[c] = xr[c] * rsv * w[c];
    rs[r] = rsv;
  }
  o_out.store();
}

void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                      TensorView weight, TensorView rstd, TensorView dinp_bf16) {
  GT_CHECK(inp.ndim == 2, "rmsnorm inp must be (R, C), got ", inp.shape_str());
  const int64_t R = inp.shape[0], C = inp.shape[1];
  expect_f32_or_bf16(inp, {R, C}, "rmsnorm inp");
  expect_f32(dinp, {R, C}, "rmsnorm dinp");
  if (!dinp_bf16.empty()) {
    expect_f32_or_bf16(dinp_bf16, {R, C}, "rmsnorm dinp_bf16");
    GT_CHECK(dinp_bf16.dtype == DType::bf16, "rmsnorm dinp_bf16: expected bf16, got fp32");
  }
  expect_f32_or_bf16(dout, {R, C}, "rmsnorm dout");
  expect_f32(dweight, {C}, "rmsnorm dweight");
  expect_f32(weight, {C}, "rmsnorm weight");
  expect_f32(rstd, {R}, "rmsnorm rstd");

  const Fp32In x_in(inp), dy_in(dout);
  const float* x = x_in.get();
  const float* dy = dy_in.get();
  const float* w = weight.f32();
  const float* rs = rstd.f32();
  float* dx = dinp.f32();
  float* dw = dweight.f32();
  const bool par = R * C >= kParallelMin;

  // With n = x * rstd and g = dout * weight: dx = rstd * (g - n * mean(g * n)).
#pragma omp parallel for if (par)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    const float rsv = rs[r];
    float sum_gn = 0.f;
    for (int64_t c = 0; c < C; ++c) sum_gn += dyr[c] * w[c] * xr[c] * rsv;
    const float mean_gn = sum_gn / static_cast<float>(C);
    float* dxr = dx + r * C;
    for (int64_t c = 0; c < C; ++c) dxr[c] += rsv * (dyr[c] * w[c] - xr[c] * rsv * mean_gn);
  }

  const int64_t nblocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    float acc[kChannelBlock] = {};
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = x + r * C;
      const float* dyr = dy + r * C;
      const float rsv = rs[r];
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += dyr[c] * xr[c] * rsv;
    }
    for (int64_t c = c0; c < c1; ++c) dw[c] += acc[c - c0];
  }
  if (!dinp_bf16.empty()) cast(dinp_bf16, dinp);  // the accumulated rows, rounded
}

}  // namespace gt::cpu
