// The MoE router on the CPU (moe_kernels.hpp): softmax, top-k selection and
// renormalisation (HF Mixtral's), its backward, the load statistics and the
// load-balancing loss. fp32 math; each row is independent, so rows run in
// parallel and every result is the same for any thread count.
//
// The backward, for one row with probs p (E), chosen experts e_j, their sum
// S = sum_j p_{e_j} and weights w_j = p_{e_j} / S:
//   d w_j / d p_i = (delta(i, e_j) - w_j) / S   (i chosen), so
//   dp_{e_j} += (dw_j - sum_i dw_i w_i) / S;  dp_e += dprob_shared[e] for all e;
//   dlogit_e = p_e (dp_e - sum_e' p_e' dp_e')                (softmax backward)
//            + z_grad 2 lse p_e                               (d lse^2 / d logit_e)
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/moe_kernels.hpp"

namespace gt::cpu {

namespace {

// The selection order of top-k: a before b when its score is larger, ties to
// the lower index. NaN scores sort last, so the order stays total.
float sort_key(float score) {
  return std::isnan(score) ? -std::numeric_limits<float>::infinity() : score;
}
bool before(float key_a, int64_t a, float key_b, int64_t b) {
  return key_a > key_b || (key_a == key_b && a < b);
}

}  // namespace

void check_experts(const TensorView& topk_expert, int64_t E, const char* op) {
  const int32_t* ex = topk_expert.i32();
  const int64_t n = topk_expert.numel();
  for (int64_t s = 0; s < n; ++s)
    if (ex[s] < 0 || ex[s] >= E)
      fail(op, ": topk_expert[", s, "] = ", ex[s], " is not an expert in [0, ", E, ")");
}

void moe_router_forward(TensorView probs, TensorView lse, TensorView topk_expert,
                        TensorView topk_weight, TensorView logits, TensorView bias) {
  GT_CHECK(logits.ndim == 2 && topk_expert.ndim == 2, "moe router logits ", logits.shape_str(),
           " topk_expert ", topk_expert.shape_str());
  const int64_t R = logits.shape[0], E = logits.shape[1], k = topk_expert.shape[1];
  GT_CHECK(k >= 1 && k <= E, "moe router: k = ", k, " outside [1, ", E, "]");
  expect_f32(logits, {R, E}, "moe router logits");
  expect_f32(probs, {R, E}, "moe router probs");
  expect_f32(lse, {R}, "moe router lse");
  expect_i32(topk_expert, {R, k}, "moe router topk_expert");
  expect_f32(topk_weight, {R, k}, "moe router topk_weight");
  if (!bias.empty()) expect_f32(bias, {E}, "moe router bias");
  const float* x = logits.f32();
  const float* b = bias.empty() ? nullptr : bias.f32();
  float* p = probs.f32();
  float* ls = lse.f32();
  int32_t* ex = topk_expert.i32();
  float* tw = topk_weight.f32();
#pragma omp parallel for if (R * E >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * E;
    float* pr = p + r * E;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t e = 0; e < E; ++e) m = std::fmax(m, xr[e]);
    float sum = 0.f;
    for (int64_t e = 0; e < E; ++e) {
      pr[e] = std::exp(xr[e] - m);
      sum += pr[e];
    }
    for (int64_t e = 0; e < E; ++e) pr[e] /= sum;
    ls[r] = m + std::log(sum);
    // Pick j: the first expert, in selection order, after pick j - 1. O(k E)
    // with no scratch; k is small (2 for Mixtral, 8 for the largest).
    int32_t* er = ex + r * k;
    float chosen = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t prev = j > 0 ? er[j - 1] : -1;
      const float prev_key = j > 0 ? sort_key(pr[prev] + (b ? b[prev] : 0.f)) : 0.f;
      int64_t best = -1;
      float best_key = 0.f;
      for (int64_t e = 0; e < E; ++e) {
        const float key = sort_key(pr[e] + (b ? b[e] : 0.f));
        if (prev >= 0 && !before(prev_key, prev, key, e)) continue;
        if (best < 0 || before(key, e, best_key, best)) {
          best = e;
          best_key = key;
        }
      }
      er[j] = static_cast<int32_t>(best);
      chosen += pr[best];
    }
    // The weights are the probs themselves (without the bias), renormalised.
    for (int64_t j = 0; j < k; ++j) tw[r * k + j] = pr[er[j]] / chosen;
  }
}

void moe_router_backward(TensorView dlogits, TensorView dtopk_weight, TensorView probs,
                         TensorView lse, TensorView topk_expert, TensorView topk_weight,
                         TensorView dprob_shared, float z_grad) {
  GT_CHECK(probs.ndim == 2 && topk_expert.ndim == 2, "moe router probs ", probs.shape_str(),
           " topk_expert ", topk_expert.shape_str());
  const int64_t R = probs.shape[0], E = probs.shape[1], k = topk_expert.shape[1];
  expect_f32(dlogits, {R, E}, "moe router dlogits");
  expect_f32(dtopk_weight, {R, k}, "moe router dtopk_weight");
  expect_f32(probs, {R, E}, "moe router probs");
  expect_f32(lse, {R}, "moe router lse");
  expect_i32(topk_expert, {R, k}, "moe router topk_expert");
  expect_f32(topk_weight, {R, k}, "moe router topk_weight");
  if (!dprob_shared.empty()) expect_f32(dprob_shared, {E}, "moe router dprob_shared");
  check_experts(topk_expert, E, "moe_router_backward");
  const float* p = probs.f32();
  const float* ls = lse.f32();
  const int32_t* ex = topk_expert.i32();
  const float* tw = topk_weight.f32();
  const float* dtw = dtopk_weight.f32();
  const float* shared = dprob_shared.empty() ? nullptr : dprob_shared.f32();
  float* dl = dlogits.f32();
#pragma omp parallel for if (R * E >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* pr = p + r * E;
    const int32_t* er = ex + r * k;
    const float* wr = tw + r * k;
    const float* dwr = dtw + r * k;
    float* dp = dl + r * E;  // d(probs) first, then d(logits) in place
    for (int64_t e = 0; e < E; ++e) dp[e] = shared ? shared[e] : 0.f;
    float S = 0.f, dot = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      S += pr[er[j]];
      dot += dwr[j] * wr[j];
    }
    for (int64_t j = 0; j < k; ++j) dp[er[j]] += (dwr[j] - dot) / S;
    float pdp = 0.f;
    for (int64_t e = 0; e < E; ++e) pdp += pr[e] * dp[e];
    const float z = z_grad * 2.f * ls[r];
    for (int64_t e = 0; e < E; ++e) dp[e] = pr[e] * (dp[e] - pdp) + z * pr[e];
  }
}

void moe_router_stats(TensorView counts, TensorView prob_sums, TensorView probs,
                      TensorView topk_expert) {
  GT_CHECK(probs.ndim == 2 && topk_expert.ndim == 2, "moe router probs ", probs.shape_str(),
           " topk_expert ", topk_expert.shape_str());
  const int64_t R = probs.shape[0], E = probs.shape[1], k = topk_expert.shape[1];
  expect_f32(counts, {E}, "moe router counts");
  expect_f32(prob_sums, {E}, "moe router prob_sums");
  expect_f32(probs, {R, E}, "moe router probs");
  expect_i32(topk_expert, {R, k}, "moe router topk_expert");
  check_experts(topk_expert, E, "moe_router_stats");
  // One pass over the rows in order, summed in double: cheap next to the
  // router GEMM, and the same for any thread count.
  std::vector<double> c(static_cast<size_t>(E), 0.0), s(static_cast<size_t>(E), 0.0);
  const float* p = probs.f32();
  const int32_t* ex = topk_expert.i32();
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t e = 0; e < E; ++e) s[e] += p[r * E + e];
    for (int64_t j = 0; j < k; ++j) c[ex[r * k + j]] += 1.0;
  }
  float* cnt = counts.f32();
  float* ps = prob_sums.f32();
  for (int64_t e = 0; e < E; ++e) {
    cnt[e] += static_cast<float>(c[e]);
    ps[e] += static_cast<float>(s[e]);
  }
}

void moe_load_balance(TensorView aux, TensorView dprob, TensorView counts, TensorView prob_sums,
                      double rows, float grad_coef) {
  GT_CHECK(counts.ndim == 1, "moe load balance counts must be (E), got ", counts.shape_str());
  const int64_t E = counts.shape[0];
  expect_f32(aux, {1}, "moe load balance aux");
  expect_f32(dprob, {E}, "moe load balance dprob");
  expect_f32(counts, {E}, "moe load balance counts");
  expect_f32(prob_sums, {E}, "moe load balance prob_sums");
  GT_CHECK(rows >= 1, "moe load balance: rows must be >= 1, got ", rows);
  const float* c = counts.f32();
  const float* s = prob_sums.f32();
  float* d = dprob.f32();
  double loss = 0.0;
  for (int64_t e = 0; e < E; ++e) loss += (c[e] / rows) * (s[e] / rows);
  aux.f32()[0] = static_cast<float>(static_cast<double>(E) * loss);
  const double scale = static_cast<double>(grad_coef) * static_cast<double>(E) / (rows * rows);
  for (int64_t e = 0; e < E; ++e) d[e] = static_cast<float>(scale * c[e]);
}

}  // namespace gt::cpu
