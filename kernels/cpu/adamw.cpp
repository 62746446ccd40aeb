// The optimizer-side reductions and updates: sum_squares (for the global
// gradient norm) and one torch.optim.AdamW step on a flat segment.
// Invariants: sum_squares accumulates in double over fixed-size chunks summed
// in chunk order, so the norm is bitwise identical for any thread count.
// adamw_update follows torch.optim.AdamW (non-amsgrad, non-foreach):
// decoupled decay of the parameter first, then the bias-corrected step.
#include <algorithm>
#include <cmath>
#include <vector>

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

void adamw_update(TensorView param, TensorView grad, TensorView m, TensorView v,
                  const Ops::AdamWParams& p) {
  expect_f32_any(param, "adamw param");
  const int64_t n = param.numel();
  GT_CHECK(param.ndim == 1, "adamw param must be 1-D, got ", param.shape_str());
  expect_f32(grad, {n}, "adamw grad");
  expect_f32(m, {n}, "adamw m");
  expect_f32(v, {n}, "adamw v");
  GT_CHECK(p.t >= 1, "adamw step t counts from 1, got ", p.t);

  // torch computes the bias corrections in Python floats (double).
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.t));
  const float step_size = static_cast<float>(static_cast<double>(p.lr) / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.f - p.lr * p.weight_decay;
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps, gs = p.grad_scale;

  float* w = param.f32();
  const float* g = grad.f32();
  float* mm = m.f32();
  float* vv = v.f32();
#pragma omp parallel for simd if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float mi = b1 * mm[i] + (1.f - b1) * gi;
    const float vi = b2 * vv[i] + (1.f - b2) * gi * gi;
    mm[i] = mi;
    vv[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    w[i] = w[i] * decay - step_size * (mi / denom);
  }
}

}  // namespace gt::cpu
