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
