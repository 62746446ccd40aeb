// Row-wise LayerNorm (torch.nn.LayerNorm: eps 1e-5, biased variance).
// Invariants: forward saves mean and rstd per row; backward ACCUMULATES into
// dinp (the residual stream) and into dweight/dbias. The parameter-gradient
// reduction over rows runs per channel block in row order, so it is bitwise
// deterministic for any thread count.
// bf16 storage: inp and out may be bf16 together (forward), inp and dout may
// each be bf16 in backward; parameters, statistics and dinp stay fp32
// (fp32_access.hpp: the fp32 code on the bf16 values, outputs rounded once).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fp32_access.hpp"

namespace gt::cpu {

namespace {
constexpr float kEps = 1e-5f;
constexpr int64_t kChannelBlock = 64;
}  // namespace

void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                       TensorView weight, TensorView bias) {
  GT_CHECK(inp.ndim == 2, "layernorm inp must be (R, C), got ", inp.shape_str());
  const int64_t R = inp.shape[0], C = inp.shape[1];
  expect_f32_or_bf16(inp, {R, C}, "layernorm inp");
  expect_storage_any(out, inp.dtype, "layernorm out (inp's dtype)");
  expect_shape(out, {R, C}, "layernorm out");
  expect_f32(mean, {R}, "layernorm mean");
  expect_f32(rstd, {R}, "layernorm rstd");
  expect_f32(weight, {C}, "layernorm weight");
  expect_f32(bias, {C}, "layernorm bias");

  const Fp32In x_in(inp);
  Fp32Out o_out(out);
  const float* x = x_in.get();
  const float* w = weight.f32();
  const float* bi = bias.f32();
  float* o = o_out.get();
  float* mu = mean.f32();
  float* rs = rstd.f32();
#pragma omp parallel for if (R * C >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * C;
    // Two passes (mean, then centred squares) avoid the cancellation of
    // E[x^2] - E[x]^2 on rows with a large mean.
    float s = 0.f;
    for (int64_t c = 0; c < C; ++c) s += xr[c];
    const float m = s / static_cast<float>(C);
    float ss = 0.f;
    for (int64_t c = 0; c < C; ++c) {
      const float dx = xr[c] - m;
      ss += dx * dx;
    }
    const float rsv = 1.f / std::sqrt(ss / static_cast<float>(C) + kEps);
    float* orow = o + r * C;
    for (int64_t c = 0; c < C; ++c) orow[c] = (xr[c] - m) * rsv * w[c] + bi[c];
    mu[r] = m;
    rs[r] = rsv;
  }
  o_out.store();
}

void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                        TensorView inp, TensorView weight, TensorView mean, TensorView rstd,
                        TensorView dinp_bf16) {
  GT_CHECK(inp.ndim == 2, "layernorm inp must be (R, C), got ", inp.shape_str());
  const int64_t R = inp.shape[0], C = inp.shape[1];
  if (!dinp_bf16.empty()) {
    expect_f32_or_bf16(dinp_bf16, {R, C}, "layernorm dinp_bf16");
    GT_CHECK(dinp_bf16.dtype == DType::bf16, "layernorm dinp_bf16: expected bf16, got fp32");
  }
  expect_f32_or_bf16(inp, {R, C}, "layernorm inp");
  expect_f32(dinp, {R, C}, "layernorm dinp");
  expect_f32_or_bf16(dout, {R, C}, "layernorm dout");
  expect_f32(dweight, {C}, "layernorm dweight");
  expect_f32(dbias, {C}, "layernorm dbias");
  expect_f32(weight, {C}, "layernorm weight");
  expect_f32(mean, {R}, "layernorm mean");
  expect_f32(rstd, {R}, "layernorm rstd");

  const Fp32In x_in(inp);
  const float* x = x_in.get();
  const Fp32In dy_in(dout);
  const float* dy = dy_in.get();
  const float* w = weight.f32();
  const float* mu = mean.f32();
  const float* rs = rstd.f32();
  float* dx = dinp.f32();
  float* dw = dweight.f32();
  float* db = dbias.f32();
  const bool par = R * C >= kParallelMin;

  // dinp: with n = normalised input and g = dout*weight,
  //   dx = rstd * (g - mean(g) - n * mean(g*n)); rows are independent.
#pragma omp parallel for if (par)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    const float m = mu[r], rsv = rs[r];
    float sum_g = 0.f, sum_gn = 0.f;
    for (int64_t c = 0; c < C; ++c) {
      const float g = dyr[c] * w[c];
      sum_g += g;
      sum_gn += g * (xr[c] - m) * rsv;
    }
    const float mean_g = sum_g / static_cast<float>(C);
    const float mean_gn = sum_gn / static_cast<float>(C);
    float* dxr = dx + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const float n = (xr[c] - m) * rsv;
      dxr[c] += rsv * (dyr[c] * w[c] - mean_g - n * mean_gn);
    }
  }

  const int64_t nblocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    float acc_w[kChannelBlock] = {};
    float acc_b[kChannelBlock] = {};
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = x + r * C;
      const float* dyr = dy + r * C;
      const float m = mu[r], rsv = rs[r];
      for (int64_t c = c0; c < c1; ++c) {
        acc_w[c - c0] += dyr[c] * (xr[c] - m) * rsv;
        acc_b[c - c0] += dyr[c];
      }
    }
    for (int64_t c = c0; c < c1; ++c) {
      dw[c] += acc_w[c - c0];
      db[c] += acc_b[c - c0];
    }
  }
  if (!dinp_bf16.empty()) cast(dinp_bf16, dinp);  // the accumulated rows, rounded
}

}  // namespace gt::cpu
