// Fused softmax + cross-entropy over rows of logits (R,V).
// Invariants: losses[r] = logsumexp(logits[r]) - logits[r][target[r]], with
// the row max subtracted first; when dlogits is given it is assigned
// (softmax - onehot) * grad_scale and may alias logits, so every read of a
// row's logits happens before that row is overwritten. Targets are validated
// up front: an out-of-range target is a data error, reported with its value.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fast_math.hpp"

namespace gt::cpu {

void softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                           TensorView targets, float grad_scale) {
  GT_CHECK(logits.ndim == 2, "cross-entropy logits must be (R, V), got ", logits.shape_str());
  const int64_t R = logits.shape[0], V = logits.shape[1];
  GT_CHECK(V > 0, "cross-entropy over an empty vocabulary");
  expect_f32(logits, {R, V}, "cross-entropy logits");
  expect_f32(losses, {R}, "cross-entropy losses");
  expect_i32(targets, {R}, "cross-entropy targets");
  const bool want_grad = !dlogits.empty();
  if (want_grad) expect_f32(dlogits, {R, V}, "cross-entropy dlogits");

  const int32_t* tgt = targets.i32();
  for (int64_t r = 0; r < R; ++r)
    if (tgt[r] < 0 || tgt[r] >= V)
      fail("cross-entropy target ", tgt[r], " at row ", r, " is out of range [0, ", V, ")");

  const float* x = logits.f32();
  float* dx = want_grad ? dlogits.f32() : nullptr;
  float* loss = losses.f32();
#pragma omp parallel for schedule(static) if (R * V >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * V;
    const int64_t t = tgt[r];
    const float x_t = xr[t];
    float mx = xr[0];
    for (int64_t j = 1; j < V; ++j) mx = std::max(mx, xr[j]);
    // The sum runs in double: V is ~50k and the loss is logged and compared.
    double sum = 0.0;
    if (want_grad) {
      float* dr = dx + r * V;
      // The exponentials are parked in dlogits (possibly logits itself); the
      // row's logits are not needed again after this loop.
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) dr[j] = fast_exp(xr[j] - mx);
      for (int64_t j = 0; j < V; ++j) sum += dr[j];
      const float k = static_cast<float>(static_cast<double>(grad_scale) / sum);
      for (int64_t j = 0; j < V; ++j) dr[j] *= k;
      dr[t] -= grad_scale;
    } else {
      for (int64_t j = 0; j < V; ++j) sum += fast_exp(xr[j] - mx);
    }
    loss[r] = static_cast<float>(std::log(sum) + static_cast<double>(mx) - x_t);
  }
}

}  // namespace gt::cpu

// Vocab-parallel cross-entropy: the three per-shard passes of Ops (stats,
// sums, finish). Sums run in double like the fused op; every row is owned by
// one thread, so results do not depend on the thread count.
namespace gt::cpu {

namespace {
struct ShardRows {
  int64_t R, Vs;
};
ShardRows shard_rows(const TensorView& logits, const char* what) {
  GT_CHECK(logits.ndim == 2, what, ": logits must be (R, V_shard), got ", logits.shape_str());
  ShardRows s{logits.shape[0], logits.shape[1]};
  expect_f32(logits, {s.R, s.Vs}, what);
  return s;
}
}  // namespace

void cross_entropy_shard_max(TensorView row_max, TensorView logits) {
  const ShardRows s = shard_rows(logits, "cross-entropy shard logits");
  expect_f32(row_max, {s.R}, "cross-entropy shard row_max");
  const float* x = logits.f32();
  float* mx = row_max.f32();
#pragma omp parallel for schedule(static) if (s.R * s.Vs >= kParallelMin)
  for (int64_t r = 0; r < s.R; ++r) {
    const float* xr = x + r * s.Vs;
    float m = xr[0];
    for (int64_t j = 1; j < s.Vs; ++j) m = std::max(m, xr[j]);
    mx[r] = m;
  }
}

void cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit, TensorView logits,
                              TensorView targets, TensorView row_max, int64_t vocab_start) {
  const ShardRows s = shard_rows(logits, "cross-entropy shard logits");
  expect_f32(sumexp, {s.R}, "cross-entropy shard sumexp");
  expect_f32(target_logit, {s.R}, "cross-entropy shard target_logit");
  expect_i32(targets, {s.R}, "cross-entropy shard targets");
  expect_f32(row_max, {s.R}, "cross-entropy shard row_max");
  const float* x = logits.f32();
  const int32_t* tgt = targets.i32();
  const float* mx = row_max.f32();
  float* se = sumexp.f32();
  float* tl = target_logit.f32();
#pragma omp parallel for schedule(static) if (s.R * s.Vs >= kParallelMin)
  for (int64_t r = 0; r < s.R; ++r) {
    const float* xr = x + r * s.Vs;
    double sum = 0.0;
    for (int64_t j = 0; j < s.Vs; ++j) sum += fast_exp(xr[j] - mx[r]);
    se[r] = static_cast<float>(sum);
    const int64_t t = tgt[r] - vocab_start;
    tl[r] = (t >= 0 && t < s.Vs) ? xr[t] : 0.f;
  }
}

void cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                TensorView targets, TensorView row_max, TensorView sumexp,
                                TensorView target_logit, int64_t vocab_start, float grad_scale) {
  const ShardRows s = shard_rows(logits, "cross-entropy shard logits");
  expect_f32(losses, {s.R}, "cross-entropy shard losses");
  expect_i32(targets, {s.R}, "cross-entropy shard targets");
  expect_f32(row_max, {s.R}, "cross-entropy shard row_max");
  expect_f32(sumexp, {s.R}, "cross-entropy shard sumexp");
  expect_f32(target_logit, {s.R}, "cross-entropy shard target_logit");
  const bool want_grad = !dlogits.empty();
  if (want_grad) expect_f32(dlogits, {s.R, s.Vs}, "cross-entropy shard dlogits");
  const float* x = logits.f32();
  const int32_t* tgt = targets.i32();
  const float* mx = row_max.f32();
  const float* se = sumexp.f32();
  const float* tl = target_logit.f32();
  float* loss = losses.f32();
  float* dx = want_grad ? dlogits.f32() : nullptr;
#pragma omp parallel for schedule(static) if (s.R * s.Vs >= kParallelMin)
  for (int64_t r = 0; r < s.R; ++r) {
    loss[r] = static_cast<float>(std::log(static_cast<double>(se[r])) +
                                 static_cast<double>(mx[r]) - tl[r]);
    if (!want_grad) continue;
    const float* xr = x + r * s.Vs;
    float* dr = dx + r * s.Vs;
    const float k = static_cast<float>(static_cast<double>(grad_scale) / se[r]);
#pragma omp simd
    for (int64_t j = 0; j < s.Vs; ++j) dr[j] = fast_exp(xr[j] - mx[r]) * k;
    const int64_t t = tgt[r] - vocab_start;
    if (t >= 0 && t < s.Vs) dr[t] -= grad_scale;
  }
}

}  // namespace gt::cpu
