// The optimizer-side reductions and updates: sum_squares (for the global
// gradient norm) and one torch.optim.AdamW step over runs of flat buffers.
// Invariants: sum_squares accumulates in double over fixed-size chunks summed
// in chunk order, so the norm is bitwise identical for any thread count.
// adamw_update follows torch.optim.AdamW (non-amsgrad, non-foreach):
// decoupled decay of the parameter first, then the bias-corrected step.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/core/bf16.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace gt::cpu {

namespace {
constexpr int64_t kSumChunk = 1 << 14;
}  // namespace

double sum_squares(TensorView t) {
  expect_f32_any(t, "sum_squares t");
  const int64_t n = t.numel();
  const float* x = t.f32();
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kSumChunk, hi = std::min(n, lo + kSumChunk);
    double s = 0.0;
    for (int64_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

void sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs) {
  expect_f32(out, {1}, "sum_squares_runs out");
  expect_f32_any(x, "sum_squares_runs x");
  GT_CHECK(x.ndim == 1, "sum_squares_runs x must be 1-D, got ", x.shape_str());
  check_state_runs("sum_squares_runs", runs, x.numel());
  // Each run in chunks of kSumChunk summed in chunk order (sum_squares's
  // order), the runs in their order: the same total for any thread count.
  double total = 0.0;
  for (const auto& r : runs)
    if (r.n > 0) total += sum_squares(make_view(x.f32() + r.state, DType::f32, Device::cpu, {r.n}));
  out.f32()[0] = static_cast<float>(total);
}

void clip_scale(TensorView scale, TensorView stats, float max_norm) {
  expect_f32(scale, {1}, "clip_scale scale");
  expect_f32(stats, {2}, "clip_scale stats");
  const float sq = stats.f32()[0], loss_check = stats.f32()[1];
  float s = std::numeric_limits<float>::quiet_NaN();
  if (std::isfinite(sq) && std::isfinite(loss_check))
    s = max_norm > 0.f ? std::min(1.f, max_norm / (std::sqrt(sq) + 1e-6f)) : 1.f;
  scale.f32()[0] = s;
}

void adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                       TensorView param_bf16, TensorView scale, const std::vector<AdamWRun>& runs,
                       const Ops::AdamWParams& p) {
  expect_f32_any(param, "adamw param");
  GT_CHECK(param.ndim == 1, "adamw param must be 1-D, got ", param.shape_str());
  expect_f32_any(grad, "adamw grad");
  GT_CHECK(grad.ndim == 1, "adamw grad must be 1-D, got ", grad.shape_str());
  const int64_t n_state = grad.numel();
  expect_f32(m, {n_state}, "adamw m");
  expect_f32(v, {n_state}, "adamw v");
  if (!param_bf16.empty()) {
    expect_storage_any(param_bf16, DType::bf16, "adamw param_bf16");
    expect_same_shape(param_bf16, param, "adamw param_bf16", "param");
  }
  GT_CHECK(p.t >= 1, "adamw step t counts from 1, got ", p.t);
  check_adamw_runs("adamw_update_runs", runs, param.numel(), n_state);
  if (!scale.empty()) expect_f32(scale, {1}, "adamw scale");
  const float device_scale = scale.empty() ? 1.f : scale.f32()[0];
  if (!std::isfinite(device_scale)) return;  // clip_scale's verdict: skip the step

  // torch computes the bias corrections in Python floats (double).
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.t));
  const float step_size = static_cast<float>(static_cast<double>(p.lr) / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps;
  // The two factors multiply the gradient one after the other, as on the device.
  const float gs = p.grad_scale, ds = device_scale;

  for (const auto& r : runs) {
    const float decay = 1.f - p.lr * (r.decay ? p.weight_decay : 0.f);
    float* w = param.f32() + r.param;
    uint16_t* w16 =
        param_bf16.empty() ? nullptr : static_cast<uint16_t*>(param_bf16.data) + r.param;
    const float* g = grad.f32() + r.state;
    float* mm = m.f32() + r.state;
    float* vv = v.f32() + r.state;
    const int64_t n = r.n;
#pragma omp parallel for simd if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] * gs * ds;
      const float mi = b1 * mm[i] + (1.f - b1) * gi;
      const float vi = b2 * vv[i] + (1.f - b2) * gi * gi;
      mm[i] = mi;
      vv[i] = vi;
      const float denom = std::sqrt(vi) / bc2_sqrt + eps;
      w[i] = w[i] * decay - step_size * (mi / denom);
    }
    if (w16) {
#pragma omp parallel for simd if (n >= kParallelMin)
      for (int64_t i = 0; i < n; ++i) w16[i] = bf16_from_float(w[i]);
    }
  }
}

}  // namespace gt::cpu
