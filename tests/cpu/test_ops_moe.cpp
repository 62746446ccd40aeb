// The mixture-of-experts ops on the CPU backend, through the Ops entry points
// (kernels/ops.hpp, "Mixture of experts"): the router against a direct
// computation and finite differences, the dispatch plan hand-checked
// (dropless, empty groups, capacity drops), permute/combine as adjoints and
// by finite differences, the grouped GEMM against per-group matmuls in fp32
// and bf16, the load-balancing loss against transformers'
// load_balancing_loss_func written out, every entry's contract, and a whole
// MoE MLP (router -> plan -> permute -> expert GEMMs -> combine) checked by
// finite differences w.r.t. its input, router weight and expert weights.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "test_ops_common.hpp"

namespace gt::test {
namespace {

std::vector<float> zeros(int64_t n, float fill = 0.f) {
  return std::vector<float>(static_cast<size_t>(n), fill);
}
std::vector<int32_t> izeros(int64_t n, int32_t fill = 0) {
  return std::vector<int32_t>(static_cast<size_t>(n), fill);
}
double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// ---------------------------------------------------------------- router

struct Routed {
  std::vector<float> probs, lse, weight;
  std::vector<int32_t> expert;
};

Routed route(Ops& ops, std::vector<float>& logits, int64_t R, int64_t E, int64_t k,
             std::vector<float>* bias = nullptr) {
  Routed o{zeros(R * E), zeros(R), zeros(R * k), izeros(R * k)};
  ops.moe_router_forward(f32(o.probs, {R, E}), f32(o.lse, {R}), i32(o.expert, {R, k}),
                         f32(o.weight, {R, k}), f32(logits, {R, E}),
                         bias ? f32(*bias, {E}) : TensorView{});
  return o;
}

// HF Mixtral's routing in double: softmax, the top k of probs + bias
// (descending, ties to the lower index), their probs renormalised.
Routed route_reference(const std::vector<float>& logits, int64_t R, int64_t E, int64_t k,
                       const std::vector<float>* bias = nullptr) {
  Routed o{zeros(R * E), zeros(R), zeros(R * k), izeros(R * k)};
  for (int64_t r = 0; r < R; ++r) {
    const float* x = &logits[r * E];
    double m = -INFINITY, sum = 0;
    for (int64_t e = 0; e < E; ++e) m = std::max(m, double(x[e]));
    std::vector<double> p(E);
    for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(double(x[e]) - m);
    for (int64_t e = 0; e < E; ++e) o.probs[r * E + e] = static_cast<float>(p[e] /= sum);
    o.lse[r] = static_cast<float>(m + std::log(sum));
    std::vector<int> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    auto score = [&](int e) { return p[e] + (bias ? (*bias)[e] : 0.0); };
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score(a) > score(b); });
    double chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += p[idx[j]];
    for (int64_t j = 0; j < k; ++j) {
      o.expert[r * k + j] = idx[j];
      o.weight[r * k + j] = static_cast<float>(p[idx[j]] / chosen);
    }
  }
  return o;
}

TEST(MoeRouter, ForwardIsSoftmaxTopKRenormalised) {
  auto ops = cpu_ops(1);
  const int64_t R = 7, E = 6, k = 2;
  std::vector<float> logits = random_vector(R * E, 1, -2.f, 2.f);
  const Routed got = route(*ops, logits, R, E, k), want = route_reference(logits, R, E, k);
  EXPECT_EQ(got.expert, want.expert);
  EXPECT_TRUE(all_close(got.probs, want.probs, 1e-7f, 1e-5f));
  EXPECT_TRUE(all_close(got.lse, want.lse, 1e-6f, 1e-5f));
  EXPECT_TRUE(all_close(got.weight, want.weight, 1e-7f, 1e-5f));
  for (int64_t r = 0; r < R; ++r)
    EXPECT_NEAR(got.weight[r * k] + got.weight[r * k + 1], 1.f, 1e-6f) << r;
}

// DeepSeek-V3's selection bias: it changes which experts are chosen, never
// the weights' values (the chosen probs without the bias, renormalised).
TEST(MoeRouter, BiasChangesTheSelectionNotTheWeights) {
  auto ops = cpu_ops(1);
  const int64_t R = 7, E = 6, k = 2;
  std::vector<float> logits = random_vector(R * E, 2, -2.f, 2.f);
  std::vector<float> bias = zeros(E);
  bias[5] = 1.f;  // probs are below 1: expert 5 comes first in every row
  const Routed plain = route(*ops, logits, R, E, k), got = route(*ops, logits, R, E, k, &bias);
  const Routed want = route_reference(logits, R, E, k, &bias);
  EXPECT_EQ(got.expert, want.expert);
  EXPECT_NE(got.expert, plain.expert);  // the bias did change the selection
  EXPECT_EQ(got.probs, plain.probs);
  for (int64_t r = 0; r < R; ++r) {
    EXPECT_EQ(got.expert[r * k], 5);
    const float p5 = got.probs[r * E + 5], p1 = got.probs[r * E + got.expert[r * k + 1]];
    EXPECT_NEAR(got.weight[r * k], p5 / (p5 + p1), 1e-6f) << r;
  }
  EXPECT_TRUE(all_close(got.weight, want.weight, 1e-7f, 1e-5f));
}

// Ties (a documented convention: torch.topk leaves their order open) go to
// the lower expert index.
TEST(MoeRouter, TiesGoToTheLowerExpertIndex) {
  auto ops = cpu_ops(1);
  const int64_t R = 3, E = 5, k = 3;
  std::vector<float> logits = {0, 0, 0, 0, 0,     // all equal: 0, 1, 2
                               1, 3, -1, 3, 3,    // 3 three times: 1, 3, 4
                               2, 5, 2, 2, -4};   // 5 first, then the 2s: 1, 0, 2
  const Routed got = route(*ops, logits, R, E, k);
  EXPECT_EQ(got.expert, (std::vector<int32_t>{0, 1, 2, 1, 3, 4, 1, 0, 2}));
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(got.weight[j], 1.f / 3, 1e-6f);
}

// The whole router by finite differences: L = sum(c1 o topk_weight) +
// sum_r sum_e shared[e] probs[r, e] + zc sum_r lse_r^2, whose gradient
// moe_router_backward gives with dtopk_weight = c1, dprob_shared = shared,
// z_grad = zc. Each row's logits are a permutation of values 0.4 apart (plus
// noise below 0.1), so the top-k margins (>= 0.2) far exceed the FD step
// (5e-3) and no perturbation changes the selection.
TEST(MoeRouter, BackwardMatchesFiniteDifferences) {
  auto ops = cpu_ops(1);
  const int64_t R = 5, E = 6, k = 2;
  std::vector<float> logits(R * E);
  const std::vector<float> noise = random_vector(R * E, 3, -0.05f, 0.05f);
  const std::vector<int32_t> shuffle = random_ints(R * E, 4, 0, 1 << 20);
  for (int64_t r = 0; r < R; ++r) {
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return shuffle[r * E + a] < shuffle[r * E + b]; });
    for (int64_t e = 0; e < E; ++e) logits[r * E + e] = 0.4f * order[e] - 1.f + noise[r * E + e];
  }
  const std::vector<float> c1 = random_vector(R * k, 5), shared = random_vector(E, 6);
  const float zc = 0.3f;
  auto loss = [&] {
    const Routed o = route(*ops, logits, R, E, k);
    double L = weighted_sum(o.weight, c1);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t e = 0; e < E; ++e) L += double(shared[e]) * o.probs[r * E + e];
      L += zc * double(o.lse[r]) * o.lse[r];
    }
    return L;
  };
  Routed o = route(*ops, logits, R, E, k);
  std::vector<float> dlogits = zeros(R * E, 42.f), dw = c1, sh = shared;
  ops->moe_router_backward(f32(dlogits, {R, E}), f32(dw, {R, k}), f32(o.probs, {R, E}),
                           f32(o.lse, {R}), i32(o.expert, {R, k}), f32(o.weight, {R, k}),
                           f32(sh, {E}), zc);
  EXPECT_TRUE(grad_close(dlogits, numeric_grad(logits, loss, 5e-3f)));
  // Without the shared term and the z-loss: only the top-k path.
  std::vector<float> d2 = zeros(R * E);
  ops->moe_router_backward(f32(d2, {R, E}), f32(dw, {R, k}), f32(o.probs, {R, E}),
                           f32(o.lse, {R}), i32(o.expert, {R, k}), f32(o.weight, {R, k}), {}, 0.f);
  auto topk_loss = [&] { return weighted_sum(route(*ops, logits, R, E, k).weight, c1); };
  EXPECT_TRUE(grad_close(d2, numeric_grad(logits, topk_loss, 5e-3f)));
}

TEST(MoeRouter, StatsAccumulateCountsAndProbSums) {
  auto ops = cpu_ops(1);
  const int64_t R = 4, E = 3, k = 2;
  std::vector<float> probs = random_vector(R * E, 7, 0.f, 1.f);
  std::vector<int32_t> ex = {0, 2, 2, 1, 0, 1, 2, 0};
  std::vector<float> counts = {1.f, 2.f, 3.f}, sums = {0.5f, 0.5f, 0.5f};
  ops->moe_router_stats(f32(counts, {E}), f32(sums, {E}), f32(probs, {R, E}), i32(ex, {R, k}));
  EXPECT_EQ(counts, (std::vector<float>{1.f + 3, 2.f + 2, 3.f + 3}));
  for (int64_t e = 0; e < E; ++e) {
    double s = 0.5;
    for (int64_t r = 0; r < R; ++r) s += probs[r * E + e];
    EXPECT_NEAR(sums[e], s, 1e-6) << e;
  }
}

// ---------------------------------------------------------------- dispatch plan

struct Plan {
  std::vector<int32_t> positions, offsets;
};
Plan plan(Ops& ops, std::vector<int32_t>& ex, std::vector<float>& w, int64_t R, int64_t k,
          int64_t E, int64_t capacity) {
  Plan p{izeros(R * k, 99), izeros(E + 1, 99)};
  ops.moe_dispatch_plan(i32(p.positions, {R, k}), i32(p.offsets, {E + 1}), i32(ex, {R, k}),
                        f32(w, {R, k}), capacity);
  return p;
}

// Slots (r, j) of 4 rows, k = 2, over 5 experts of which 2 (middle) and 4
// (last) get nothing:
//   slot  0:(0,0) 1:(0,1) 2:(1,0) 3:(1,1) 4:(2,0) 5:(2,1) 6:(3,0) 7:(3,1)
//   exp   1       0       1       3       0       1       1       0
std::vector<int32_t> plan_experts() { return {1, 0, 1, 3, 0, 1, 1, 0}; }

TEST(MoeDispatchPlan, DroplessIsAStableSortByExpert) {
  auto ops = cpu_ops(1);
  std::vector<int32_t> ex = plan_experts();
  std::vector<float> w = random_vector(8, 8, 0.f, 1.f);
  const Plan p = plan(*ops, ex, w, 4, 2, 5, 0);
  // expert 0: slots 1, 4, 7 -> rows 0..2; expert 1: slots 0, 2, 5, 6 -> rows
  // 3..6; expert 3: slot 3 -> row 7; experts 2 and 4 empty.
  EXPECT_EQ(p.offsets, (std::vector<int32_t>{0, 3, 7, 7, 8, 8}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{3, 0, 4, 7, 1, 5, 6, 2}));
  // A capacity no expert exceeds drops nothing.
  EXPECT_EQ(plan(*ops, ex, w, 4, 2, 5, 4).positions, p.positions);
}

TEST(MoeDispatchPlan, CapacityDropsTheLowestWeightThenTheLaterRow) {
  auto ops = cpu_ops(1);
  std::vector<int32_t> ex = plan_experts();
  // expert 0 (slots 1, 4, 7): 0.3, 0.5, 0.5 -> slot 1 (lowest weight, though
  // the earliest row) is dropped. expert 1 (slots 0, 2, 5, 6): 0.7, 0.5,
  // 0.5, 0.5 -> slot 0 kept, then of the equal 0.5s the earliest (slot 2):
  // slots 5 and 6 are dropped.
  std::vector<float> w = {0.7f, 0.3f, 0.5f, 0.9f, 0.5f, 0.5f, 0.5f, 0.5f};
  const Plan p = plan(*ops, ex, w, 4, 2, 5, 2);
  EXPECT_EQ(p.offsets, (std::vector<int32_t>{0, 2, 4, 4, 5, 5}));
  // Kept slots keep row order within their group: expert 0 rows 0, 1 =
  // slots 4, 7; expert 1 rows 2, 3 = slots 0, 2; expert 3 row 4 = slot 3.
  EXPECT_EQ(p.positions, (std::vector<int32_t>{2, -1, 3, 4, 0, -1, -1, 1}));
  for (int run = 0; run < 3; ++run) {
    const Plan again = plan(*ops, ex, w, 4, 2, 5, 2);
    EXPECT_EQ(again.positions, p.positions);
    EXPECT_EQ(again.offsets, p.offsets);
  }
  // Capacity 1: row 3 loses both of its slots.
  const Plan one = plan(*ops, ex, w, 4, 2, 5, 1);
  EXPECT_EQ(one.offsets, (std::vector<int32_t>{0, 1, 2, 2, 3, 3}));
  EXPECT_EQ(one.positions, (std::vector<int32_t>{1, -1, -1, 2, 0, -1, -1, -1}));
}

// ---------------------------------------------------------------- permute, combine

// The routing above planned with a capacity: 0 fills all 8 buffer rows; 2
// drops 3 slots (rows 5..7 unused); 1 drops 5, row 3's both (rows 3..7 unused).
struct Dispatch {
  int64_t R = 4, k = 2, E = 5, C = 3, N = 8;
  std::vector<int32_t> ex = plan_experts();
  std::vector<float> w = {0.7f, 0.3f, 0.5f, 0.9f, 0.5f, 0.5f, 0.5f, 0.5f};
  Plan p;
  explicit Dispatch(Ops& ops, int64_t capacity) { p = plan(ops, ex, w, R, k, E, capacity); }
  TensorView positions() { return i32(p.positions, {R, k}); }
};

// permute_backward is permute's adjoint: <permute(x), y> = <x, permute_backward(y)>
// over the rows the plan fills; dropped slots contribute nothing.
TEST(MoePermute, BackwardIsTheAdjointAndDroppedSlotsGiveNothing) {
  auto ops = cpu_ops(1);
  for (int64_t capacity : {0, 2, 1}) {
    SCOPED_TRACE(capacity);
    Dispatch d(*ops, capacity);
    std::vector<float> x = random_vector(d.R * d.C, 9), y = random_vector(d.N * d.C, 10);
    std::vector<float> px = zeros(d.N * d.C), dx = zeros(d.R * d.C, 7.f);
    ops->moe_permute(f32(px, {d.N, d.C}), f32(x, {d.R, d.C}), d.positions());
    ops->moe_permute_backward(f32(dx, {d.R, d.C}), f32(y, {d.N, d.C}), d.positions());
    EXPECT_NEAR(dot(px, y), dot(x, dx), 1e-5);
    const int64_t kept = d.p.offsets[d.E];
    for (int64_t i = kept * d.C; i < d.N * d.C; ++i) EXPECT_EQ(px[i], 0.f) << i;  // left
    if (capacity == 1) {
      for (int64_t c = 0; c < d.C; ++c) EXPECT_EQ(dx[3 * d.C + c], 0.f);  // row 3 fully dropped
    }
  }
}

TEST(MoePermute, LeavesUnmappedRowsAndCopiesBf16Bits) {
  auto ops = cpu_ops(1);
  Dispatch d(*ops, 2);
  std::vector<uint16_t> x = to_bf16(random_vector(d.R * d.C, 11));
  std::vector<uint16_t> out(d.N * d.C, 0x1234);
  ops->moe_permute(bf16_view(out, {d.N, d.C}), bf16_view(x, {d.R, d.C}), d.positions());
  for (int64_t r = 0; r < d.R; ++r)
    for (int64_t j = 0; j < d.k; ++j) {
      const int32_t p = d.p.positions[r * d.k + j];
      if (p < 0) continue;
      for (int64_t c = 0; c < d.C; ++c) EXPECT_EQ(out[p * d.C + c], x[r * d.C + c]);
    }
  for (int64_t i = d.p.offsets[d.E] * d.C; i < d.N * d.C; ++i) EXPECT_EQ(out[i], 0x1234);
}

std::vector<float> combine(Ops& ops, Dispatch& d, std::vector<float>& eo, std::vector<float>& w) {
  std::vector<float> out = zeros(d.R * d.C, 5.f);
  ops.moe_combine_forward(f32(out, {d.R, d.C}), f32(eo, {d.N, d.C}), d.positions(),
                          f32(w, {d.R, d.k}));
  return out;
}

TEST(MoeCombine, BackwardMatchesFiniteDifferences) {
  auto ops = cpu_ops(1);
  for (int64_t capacity : {0, 1}) {
    SCOPED_TRACE(capacity);
    Dispatch d(*ops, capacity);
    std::vector<float> eo = random_vector(d.N * d.C, 12), w = d.w;
    const std::vector<float> probe = random_vector(d.R * d.C, 13);
    const float sentinel = -3.f;
    std::vector<float> deo = zeros(d.N * d.C, sentinel), dw = zeros(d.R * d.k, 9.f),
                       dout = probe;
    ops->moe_combine_backward(f32(deo, {d.N, d.C}), f32(dw, {d.R, d.k}), f32(dout, {d.R, d.C}),
                              f32(eo, {d.N, d.C}), d.positions(), f32(w, {d.R, d.k}));
    auto loss = [&] { return weighted_sum(combine(*ops, d, eo, w), probe); };
    const std::vector<float> num_eo = numeric_grad(eo, loss), num_w = numeric_grad(w, loss);
    // Rows no kept slot maps to are left; their numeric gradient is 0.
    const int64_t kept = d.p.offsets[d.E];
    for (int64_t i = kept * d.C; i < d.N * d.C; ++i) {
      EXPECT_EQ(deo[i], sentinel) << i;
      deo[i] = 0.f;
    }
    EXPECT_TRUE(grad_close(deo, num_eo));
    EXPECT_TRUE(grad_close(dw, num_w));
    for (int64_t s = 0; s < d.R * d.k; ++s) {
      if (d.p.positions[s] < 0) {
        EXPECT_EQ(dw[s], 0.f) << s;
      }
    }
    if (capacity == 1) {
      const std::vector<float> out = combine(*ops, d, eo, w);
      for (int64_t c = 0; c < d.C; ++c) EXPECT_EQ(out[3 * d.C + c], 0.f);  // row 3 fully dropped
    }
  }
}

// bf16 storage: the fp32 combine of the bf16 values, rounded once.
TEST(MoeCombine, Bf16IsTheFp32CombineOnBf16ValuesRounded) {
  auto ops = cpu_ops(1);
  Dispatch d(*ops, 0);
  std::vector<uint16_t> eo16 = to_bf16(random_vector(d.N * d.C, 14)), out16(d.R * d.C);
  std::vector<float> eo = from_bf16(eo16), w = d.w;
  ops->moe_combine_forward(bf16_view(out16, {d.R, d.C}), bf16_view(eo16, {d.N, d.C}),
                           d.positions(), f32(w, {d.R, d.k}));
  EXPECT_EQ(out16, to_bf16(combine(*ops, d, eo, w)));
  std::vector<uint16_t> dout16 = to_bf16(random_vector(d.R * d.C, 15)), deo16(d.N * d.C);
  std::vector<float> dout = from_bf16(dout16), deo = zeros(d.N * d.C), dw16 = zeros(d.R * d.k),
                     dw = zeros(d.R * d.k);
  ops->moe_combine_backward(bf16_view(deo16, {d.N, d.C}), f32(dw16, {d.R, d.k}),
                            bf16_view(dout16, {d.R, d.C}), bf16_view(eo16, {d.N, d.C}),
                            d.positions(), f32(w, {d.R, d.k}));
  ops->moe_combine_backward(f32(deo, {d.N, d.C}), f32(dw, {d.R, d.k}), f32(dout, {d.R, d.C}),
                            f32(eo, {d.N, d.C}), d.positions(), f32(w, {d.R, d.k}));
  EXPECT_EQ(deo16, to_bf16(deo));
  EXPECT_EQ(dw16, dw);
}

// ---------------------------------------------------------------- grouped GEMM

// 5 groups over 11 rows: 0 (first) and 2 (middle) and 4 (last) empty; rows
// 9 and 10 lie past offsets[G] and must stay untouched.
struct Grouped {
  static constexpr int64_t N = 11, C = 7, OC = 5, G = 5;
  std::vector<int32_t> offsets = {0, 0, 5, 5, 9, 9};
  std::vector<float> inp = random_vector(N * C, 21), weight = random_vector(G * OC * C, 22),
                     dout = random_vector(N * OC, 23);
};
constexpr float kSentinel = 1234.5f;

TEST(GroupedMatmul, ForwardIsThePerGroupMatmul) {
  auto ops = cpu_ops(1);
  Grouped g;
  const int64_t N = g.N, C = g.C, OC = g.OC, G = g.G;
  std::vector<float> out = zeros(N * OC, kSentinel);
  ops->grouped_matmul_forward(f32(out, {N, OC}), f32(g.inp, {N, C}), f32(g.weight, {G, OC, C}),
                              i32(g.offsets, {G + 1}));
  for (int64_t e = 0; e < G; ++e) {
    const int64_t r0 = g.offsets[e], n = g.offsets[e + 1] - r0;
    if (n == 0) continue;
    std::vector<float> want = zeros(n * OC),
                       x(g.inp.begin() + r0 * C, g.inp.begin() + (r0 + n) * C),
                       w(g.weight.begin() + e * OC * C, g.weight.begin() + (e + 1) * OC * C);
    ops->matmul_forward(f32(want, {n, OC}), f32(x, {n, C}), f32(w, {OC, C}), {});
    EXPECT_EQ(std::vector<float>(out.begin() + r0 * OC, out.begin() + (r0 + n) * OC), want) << e;
  }
  for (int64_t i = g.offsets[G] * OC; i < N * OC; ++i) EXPECT_EQ(out[i], kSentinel) << i;
}

TEST(GroupedMatmul, BackwardIsThePerGroupMatmulBackward) {
  auto ops = cpu_ops(1);
  Grouped g;
  const int64_t N = g.N, C = g.C, OC = g.OC, G = g.G;
  const float pre = 0.25f;  // dweight accumulates
  std::vector<float> dinp = zeros(N * C, kSentinel), dweight = zeros(G * OC * C, pre);
  ops->grouped_matmul_backward(f32(dinp, {N, C}), f32(dweight, {G, OC, C}), f32(g.dout, {N, OC}),
                               f32(g.inp, {N, C}), f32(g.weight, {G, OC, C}),
                               i32(g.offsets, {G + 1}));
  for (int64_t e = 0; e < G; ++e) {
    const int64_t r0 = g.offsets[e], n = g.offsets[e + 1] - r0;
    std::vector<float> dw_got(dweight.begin() + e * OC * C, dweight.begin() + (e + 1) * OC * C);
    if (n == 0) {
      EXPECT_EQ(dw_got, zeros(OC * C, pre)) << e;  // an empty group adds nothing
      continue;
    }
    std::vector<float> x(g.inp.begin() + r0 * C, g.inp.begin() + (r0 + n) * C),
        w(g.weight.begin() + e * OC * C, g.weight.begin() + (e + 1) * OC * C),
        dy(g.dout.begin() + r0 * OC, g.dout.begin() + (r0 + n) * OC), dx = zeros(n * C),
        dw = zeros(OC * C, pre);
    ops->matmul_backward(f32(dx, {n, C}), f32(dw, {OC, C}), {}, f32(dy, {n, OC}), f32(x, {n, C}),
                         f32(w, {OC, C}));
    EXPECT_EQ(std::vector<float>(dinp.begin() + r0 * C, dinp.begin() + (r0 + n) * C), dx) << e;
    EXPECT_EQ(dw_got, dw) << e;
  }
  for (int64_t i = g.offsets[G] * C; i < N * C; ++i) EXPECT_EQ(dinp[i], kSentinel) << i;
  // dinp empty: dweight only.
  std::vector<float> dw_only = zeros(G * OC * C, pre);
  ops->grouped_matmul_backward({}, f32(dw_only, {G, OC, C}), f32(g.dout, {N, OC}),
                               f32(g.inp, {N, C}), f32(g.weight, {G, OC, C}),
                               i32(g.offsets, {G + 1}));
  EXPECT_EQ(dw_only, dweight);
}

// bf16: bit for bit the fp32 grouped GEMM of the bf16 values, rounded once
// (dweight stays fp32, the fp32 result itself).
TEST(GroupedMatmul, Bf16IsTheFp32GemmOfBf16ValuesRounded) {
  auto ops = cpu_ops(1);
  Grouped g;
  const int64_t N = g.N, C = g.C, OC = g.OC, G = g.G;
  const uint16_t sentinel16 = bf16_from_float(kSentinel);
  std::vector<uint16_t> x16 = to_bf16(g.inp), w16 = to_bf16(g.weight), dy16 = to_bf16(g.dout);
  std::vector<float> x = from_bf16(x16), w = from_bf16(w16), dy = from_bf16(dy16);
  const TensorView off = i32(g.offsets, {G + 1});

  std::vector<uint16_t> out16(N * OC, sentinel16);
  std::vector<float> out = zeros(N * OC, kSentinel);
  ops->grouped_matmul_forward(bf16_view(out16, {N, OC}), bf16_view(x16, {N, C}),
                              bf16_view(w16, {G, OC, C}), off);
  ops->grouped_matmul_forward(f32(out, {N, OC}), f32(x, {N, C}), f32(w, {G, OC, C}), off);
  EXPECT_EQ(out16, to_bf16(out));  // the sentinel rows included: both left

  std::vector<uint16_t> dx16(N * C, sentinel16);
  std::vector<float> dx = zeros(N * C, kSentinel), dw16 = zeros(G * OC * C),
                     dw = zeros(G * OC * C);
  ops->grouped_matmul_backward(bf16_view(dx16, {N, C}), f32(dw16, {G, OC, C}),
                               bf16_view(dy16, {N, OC}), bf16_view(x16, {N, C}),
                               bf16_view(w16, {G, OC, C}), off);
  ops->grouped_matmul_backward(f32(dx, {N, C}), f32(dw, {G, OC, C}), f32(dy, {N, OC}),
                               f32(x, {N, C}), f32(w, {G, OC, C}), off);
  EXPECT_EQ(dx16, to_bf16(dx));
  EXPECT_EQ(dw16, dw);
}

// The CPU kernel reads the offsets (host memory) and refuses a bad plan.
TEST(GroupedMatmul, RejectsOffsetsOutsideTheRows) {
  auto ops = cpu_ops(1);
  Grouped g;
  const int64_t N = g.N, C = g.C, OC = g.OC, G = g.G;
  std::vector<float> out = zeros(N * OC);
  for (auto [bad, needle] :
       {std::pair<std::vector<int32_t>, const char*>{{0, 3, 2, 5, 9, 9}, "must not decrease"},
        {{0, 0, 5, 5, 9, 12}, "exceeds the 11 rows"},
        {{1, 1, 5, 5, 9, 9}, "offsets[0] = 1"}}) {
    expect_error_containing(
        [&] {
          ops->grouped_matmul_forward(f32(out, {N, OC}), f32(g.inp, {N, C}),
                                      f32(g.weight, {G, OC, C}), i32(bad, {G + 1}));
        },
        needle);
  }
}

// ---------------------------------------------------------------- load balance

// transformers' load_balancing_loss_func (no attention mask), written out
// in double over the layers' gate logits concatenated (rows, E):
//   routing_weights = softmax(logits); selected = topk(routing_weights, k)
//   expert_mask = one_hot(selected, E)                        (rows, k, E)
//   tokens_per_expert = mean(expert_mask, dim=0)              (k, E)
//   router_prob_per_expert = mean(routing_weights, dim=0)     (E)
//   loss = E * sum(tokens_per_expert * router_prob_per_expert)
double hf_load_balancing_loss(const std::vector<double>& probs, const std::vector<int>& mask_idx,
                              int64_t rows, int64_t E, int64_t k) {
  std::vector<double> tokens(k * E, 0.0), prob(E, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) tokens[j * E + mask_idx[r * k + j]] += 1.0 / rows;
    for (int64_t e = 0; e < E; ++e) prob[e] += probs[r * E + e] / rows;
  }
  double loss = 0;
  for (int64_t j = 0; j < k; ++j)
    for (int64_t e = 0; e < E; ++e) loss += tokens[j * E + e] * prob[e];
  return loss * E;
}

TEST(MoeLoadBalance, IsTransformersLoadBalancingLossPooledOverLayers) {
  auto ops = cpu_ops(1);
  const int64_t L = 2, R = 6, E = 4, k = 2, rows = L * R;
  const float coef = 0.02f;
  std::vector<float> counts = zeros(E), sums = zeros(E);
  std::vector<double> all_probs;
  std::vector<int> all_idx;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<float> logits = random_vector(R * E, 30 + l, -2.f, 2.f);
    Routed o = route(*ops, logits, R, E, k);
    ops->moe_router_stats(f32(counts, {E}), f32(sums, {E}), f32(o.probs, {R, E}),
                          i32(o.expert, {R, k}));
    // The reference's own softmax and top-k (double), per layer's rows.
    const Routed ref = route_reference(logits, R, E, k);
    for (int64_t r = 0; r < R; ++r) {
      double m = -INFINITY, s = 0;
      for (int64_t e = 0; e < E; ++e) m = std::max(m, double(logits[r * E + e]));
      for (int64_t e = 0; e < E; ++e) s += std::exp(logits[r * E + e] - m);
      for (int64_t e = 0; e < E; ++e) all_probs.push_back(std::exp(logits[r * E + e] - m) / s);
      for (int64_t j = 0; j < k; ++j) all_idx.push_back(ref.expert[r * k + j]);
    }
  }
  std::vector<float> aux = {-1.f}, dprob = zeros(E, -1.f);
  ops->moe_load_balance(f32(aux, {1}), f32(dprob, {E}), f32(counts, {E}), f32(sums, {E}),
                        static_cast<double>(rows), coef);
  const double want = hf_load_balancing_loss(all_probs, all_idx, rows, E, k);
  EXPECT_NEAR(aux[0], want, 1e-6 * want);
  // d(aux)/d(probs[r, e]) with the selection held (it carries no gradient,
  // as in torch): the same for every row, by central differences (exact up
  // to rounding: the loss is linear in the probs).
  for (int64_t e = 0; e < E; ++e) {
    std::vector<double> p = all_probs;
    const double h = 1e-4;
    p[3 * E + e] += h;
    const double up = hf_load_balancing_loss(p, all_idx, rows, E, k);
    p[3 * E + e] -= 2 * h;
    const double down = hf_load_balancing_loss(p, all_idx, rows, E, k);
    EXPECT_NEAR(dprob[e], coef * (up - down) / (2 * h), 1e-7) << e;
  }
}

// ---------------------------------------------------------------- contracts

TEST(MoeOps, EveryEntryChecksItsContract) {
  auto ops = cpu_ops(1);
  const int64_t R = 3, E = 4, k = 2, C = 5, N = R * k;
  std::vector<float> fRE = zeros(R * E), fR = zeros(R), fRk = zeros(R * k), fE = zeros(E),
                     fNC = zeros(N * C), fRC = zeros(R * C), f1 = zeros(1);
  std::vector<int32_t> iRk = izeros(R * k), iE1 = izeros(E + 1), iR5 = izeros(R * 5);
  std::vector<float> fbad = zeros(64);
  std::vector<uint16_t> hRk(R * k);
  const TensorView none;
  expect_error_containing(
      [&] {
        ops->moe_router_forward(f32(fRE, {R, E}), f32(fR, {R}), f32(fRk, {R, k}),
                                f32(fRk, {R, k}), f32(fRE, {R, E}), none);
      },
      "CpuOps::moe_router_forward: topk_expert must be int32, got fp32");
  expect_error_containing(
      [&] {
        ops->moe_router_forward(f32(fRE, {R, E}), f32(fR, {R}), i32(iR5, {R, 5}),
                                f32(fbad, {R, 5}), f32(fRE, {R, E}), none);
      },
      "CpuOps::moe_router_forward: topk_expert (3, 5): k = 5 outside [1, E = 4]");
  expect_error_containing(
      [&] {
        ops->moe_router_backward(f32(fRE, {R, E}), f32(fRk, {R, k}), f32(fRE, {R, E}),
                                 f32(fR, {R}), i32(iRk, {R, k}), f32(fRk, {R, k}),
                                 f32(fbad, {E + 1}), 0.f);
      },
      "CpuOps::moe_router_backward: dprob_shared must be (4), got (5)");
  expect_error_containing(
      [&] {
        ops->moe_router_stats(f32(fE, {E}), f32(fbad, {E - 1}), f32(fRE, {R, E}),
                              i32(iRk, {R, k}));
      },
      "CpuOps::moe_router_stats: prob_sums must be (4), got (3)");
  expect_error_containing(
      [&] {
        ops->moe_dispatch_plan(i32(iRk, {R, k}), i32(iE1, {E + 1}), i32(iRk, {R, k}),
                               f32(fRk, {R, k}), -1);
      },
      "CpuOps::moe_dispatch_plan: capacity must be >= 0");
  expect_error_containing(
      [&] { ops->moe_permute(f32(fNC, {N, C}), f32(fRC, {R, C}), f32(fRk, {R, k})); },
      "CpuOps::moe_permute: positions must be int32, got fp32");
  expect_error_containing(
      [&] {
        ops->moe_permute_backward(f32(fRC, {R, C}), f32(fNC, {N - 1, C}), i32(iRk, {R, k}));
      },
      "CpuOps::moe_permute_backward: dout must be (6, 5), got (5, 5)");
  expect_error_containing(
      [&] {
        ops->moe_combine_forward(f32(fRC, {R, C}), f32(fNC, {N, C}), i32(iRk, {R, k}),
                                 bf16_view(hRk, {R, k}));
      },
      "CpuOps::moe_combine_forward: topk_weight must be fp32, got bf16");
  expect_error_containing(
      [&] {
        ops->moe_combine_backward(f32(fNC, {N, C}), f32(fRk, {k, R}), f32(fRC, {R, C}),
                                  f32(fNC, {N, C}), i32(iRk, {R, k}), f32(fRk, {R, k}));
      },
      "CpuOps::moe_combine_backward: dtopk_weight must be (3, 2), got (2, 3)");
  // grouped GEMM: G = 2 groups of (OC = 3, C = 5)
  std::vector<float> w = zeros(2 * 3 * C), y = zeros(N * 3);
  std::vector<int32_t> off3 = izeros(3);
  expect_error_containing(
      [&] {
        ops->grouped_matmul_forward(f32(y, {N, 3}), f32(fNC, {N, C}), f32(w, {2, 3, C}),
                                    i32(iE1, {2}));
      },
      "CpuOps::grouped_matmul_forward: offsets must be (3), got (2)");
  std::vector<uint16_t> w16(2 * 3 * C);
  expect_error_containing(
      [&] {
        ops->grouped_matmul_backward(f32(fNC, {N, C}), bf16_view(w16, {2, 3, C}),
                                     f32(y, {N, 3}), f32(fNC, {N, C}), f32(w, {2, 3, C}),
                                     i32(off3, {3}));
      },
      "CpuOps::grouped_matmul_backward: dweight must be fp32, got bf16");
  expect_error_containing(
      [&] {
        ops->grouped_matmul_forward(f32(y, {N, 3}), f32(fNC, {N, C}), bf16_view(w16, {2, 3, C}),
                                    i32(off3, {3}));
      },
      "CpuOps::grouped_matmul_forward: weight is bf16 but inp is fp32");
  expect_error_containing(
      [&] {
        ops->moe_load_balance(f32(f1, {1}), f32(fE, {E}), f32(fE, {E}), f32(fE, {E}), 0.0, 1.f);
      },
      "CpuOps::moe_load_balance: rows must be >= 1, got 0");
}

// What only the CPU kernels can check (the values in host memory).
TEST(MoeOps, CpuKernelsRejectBadIndices) {
  auto ops = cpu_ops(1);
  std::vector<int32_t> ex = {0, 4}, pos = {0, 1}, off = izeros(5);
  std::vector<float> w = {0.5f, 0.5f};
  expect_error_containing(
      [&] { ops->moe_dispatch_plan(i32(pos, {1, 2}), i32(off, {5}), i32(ex, {1, 2}),
                                   f32(w, {1, 2}), 0); },
      "topk_expert[1] = 4 is not an expert in [0, 4)");
  std::vector<int32_t> bad_pos = {0, 2};
  std::vector<float> x = zeros(3), out = zeros(2 * 3);
  expect_error_containing(
      [&] { ops->moe_permute(f32(out, {2, 3}), f32(x, {1, 3}), i32(bad_pos, {1, 2})); },
      "positions[1] = 2 is neither -1 nor a row in [0, 2)");
}

// Rows large enough for the OpenMP loops: every output the same, bit for
// bit, on one thread and on two.
TEST(MoeOps, ResultsDoNotDependOnTheThreadCount) {
  const int64_t R = 2048, E = 8, k = 2, C = 8, N = R * k;
  auto run = [&](int threads) {
    auto ops = cpu_ops(threads);
    std::vector<float> logits = random_vector(R * E, 50, -2.f, 2.f);
    Routed o = route(*ops, logits, R, E, k);
    Plan p = plan(*ops, o.expert, o.weight, R, k, E, R / 8);
    const TensorView pos = i32(p.positions, {R, k});
    std::vector<float> x = random_vector(R * C, 51), dy = random_vector(R * C, 52);
    std::vector<float> xs = zeros(N * C), out = zeros(R * C), dxs = zeros(N * C),
                       dx = zeros(R * C), dw = zeros(R * k), dl = zeros(R * E), sh(E, 0.01f);
    ops->moe_permute(f32(xs, {N, C}), f32(x, {R, C}), pos);
    ops->moe_combine_forward(f32(out, {R, C}), f32(xs, {N, C}), pos, f32(o.weight, {R, k}));
    ops->moe_combine_backward(f32(dxs, {N, C}), f32(dw, {R, k}), f32(dy, {R, C}),
                              f32(xs, {N, C}), pos, f32(o.weight, {R, k}));
    ops->moe_permute_backward(f32(dx, {R, C}), f32(dxs, {N, C}), pos);
    ops->moe_router_backward(f32(dl, {R, E}), f32(dw, {R, k}), f32(o.probs, {R, E}),
                             f32(o.lse, {R}), i32(o.expert, {R, k}), f32(o.weight, {R, k}),
                             f32(sh, {E}), 1e-3f);
    std::vector<float> all = o.probs;
    for (const std::vector<float>* v : {&o.weight, &out, &dxs, &dx, &dw, &dl})
      all.insert(all.end(), v->begin(), v->end());
    for (int32_t i : p.positions) all.push_back(static_cast<float>(i));
    return all;
  };
  const std::vector<float> one = run(1), two = run(2);
  EXPECT_EQ(one, two);
}

// ---------------------------------------------------------------- a whole MoE MLP

// Mixtral's sparse MoE block, composed from the ops: logits = x Wr^T;
// router; plan (dropless); xs = permute(x); gu = grouped(xs, W1) with W1
// (E, 2F, C) giving [gate | up]; h = swiglu(gu); ye = grouped(h, W2) with W2
// (E, C, F); out = combine(ye). Loss = sum(out o probe) + the load-balancing
// loss (coefficient aux_coef) + the z-loss zc mean_r lse_r^2. Its backward,
// composed from the backward ops, against central differences w.r.t. x, Wr,
// and the W1 and W2 of every expert.
struct MoeMlp {
  Ops& ops;
  int64_t R = 6, C = 8, E = 4, k = 2, F = 6, N = R * k;
  float aux_coef = 0.1f, zc = 0.05f;
  // Seeds 154/155: a top-k margin of 0.24 and every expert given rows.
  std::vector<float> x = random_vector(R * C, 154), wr = random_vector(E * C, 155),
                     w1 = random_vector(E * 2 * F * C, 42, -0.5f, 0.5f),
                     w2 = random_vector(E * C * F, 43, -0.5f, 0.5f),
                     probe = random_vector(R * C, 44);
  // forward state
  std::vector<float> logits, xs, gu, h, ye, out, counts, sums, aux, dprob;
  Routed o;
  Plan p;

  explicit MoeMlp(Ops& o_) : ops(o_) {}

  double forward() {
    logits = zeros(R * E);
    ops.matmul_forward(f32(logits, {R, E}), f32(x, {R, C}), f32(wr, {E, C}), {});
    o = route(ops, logits, R, E, k);
    p = plan(ops, o.expert, o.weight, R, k, E, 0);
    xs = zeros(N * C);
    gu = zeros(N * 2 * F);
    h = zeros(N * F);
    ye = zeros(N * C);
    ops.moe_permute(f32(xs, {N, C}), f32(x, {R, C}), i32(p.positions, {R, k}));
    const TensorView off = i32(p.offsets, {E + 1});
    ops.grouped_matmul_forward(f32(gu, {N, 2 * F}), f32(xs, {N, C}), f32(w1, {E, 2 * F, C}), off);
    ops.swiglu_forward(f32(h, {N, F}), f32(gu, {N, 2 * F}));
    ops.grouped_matmul_forward(f32(ye, {N, C}), f32(h, {N, F}), f32(w2, {E, C, F}), off);
    out = zeros(R * C);
    ops.moe_combine_forward(f32(out, {R, C}), f32(ye, {N, C}), i32(p.positions, {R, k}),
                            f32(o.weight, {R, k}));
    counts = zeros(E);
    sums = zeros(E);
    ops.moe_router_stats(f32(counts, {E}), f32(sums, {E}), f32(o.probs, {R, E}),
                         i32(o.expert, {R, k}));
    aux = zeros(1);
    dprob = zeros(E);
    ops.moe_load_balance(f32(aux, {1}), f32(dprob, {E}), f32(counts, {E}), f32(sums, {E}),
                         static_cast<double>(R), aux_coef);
    double z = 0;
    for (float l : o.lse) z += double(l) * l;
    return weighted_sum(out, probe) + aux_coef * double(aux[0]) + zc * z / R;
  }

  struct Grads {
    std::vector<float> x, wr, w1, w2;
  };
  Grads backward() {
    forward();
    const TensorView pos = i32(p.positions, {R, k}), off = i32(p.offsets, {E + 1});
    std::vector<float> dout = probe, dye = zeros(N * C), dw = zeros(R * k), dh = zeros(N * F),
                       dgu = zeros(N * 2 * F), dxs = zeros(N * C), dlogits = zeros(R * E);
    Grads g{zeros(R * C), zeros(E * C), zeros(E * 2 * F * C), zeros(E * C * F)};
    ops.moe_combine_backward(f32(dye, {N, C}), f32(dw, {R, k}), f32(dout, {R, C}),
                             f32(ye, {N, C}), pos, f32(o.weight, {R, k}));
    ops.grouped_matmul_backward(f32(dh, {N, F}), f32(g.w2, {E, C, F}), f32(dye, {N, C}),
                                f32(h, {N, F}), f32(w2, {E, C, F}), off);
    ops.swiglu_backward(f32(dgu, {N, 2 * F}), f32(dh, {N, F}), f32(gu, {N, 2 * F}));
    ops.grouped_matmul_backward(f32(dxs, {N, C}), f32(g.w1, {E, 2 * F, C}), f32(dgu, {N, 2 * F}),
                                f32(xs, {N, C}), f32(w1, {E, 2 * F, C}), off);
    std::vector<float> dx_experts = zeros(R * C);
    ops.moe_permute_backward(f32(dx_experts, {R, C}), f32(dxs, {N, C}), pos);
    // d(loss)/d(lse_r^2) = zc / R; dprob (moe_load_balance, scaled by aux_coef).
    ops.moe_router_backward(f32(dlogits, {R, E}), f32(dw, {R, k}), f32(o.probs, {R, E}),
                            f32(o.lse, {R}), i32(o.expert, {R, k}), f32(o.weight, {R, k}),
                            f32(dprob, {E}), zc / R);
    ops.matmul_backward(f32(g.x, {R, C}), f32(g.wr, {E, C}), {}, f32(dlogits, {R, E}),
                        f32(x, {R, C}), f32(wr, {E, C}));
    ops.accumulate(f32(g.x, {R * C}), f32(dx_experts, {R * C}));
    return g;
  }

  // The smallest gap, over rows, between the k-th and (k+1)-th logit: the
  // selection (all the loss depends on discretely) holds while every
  // perturbation moves each logit by less than half of it.
  float topk_margin() {
    forward();
    float margin = INFINITY;
    for (int64_t r = 0; r < R; ++r) {
      std::vector<float> l(logits.begin() + r * E, logits.begin() + (r + 1) * E);
      std::sort(l.rbegin(), l.rend());
      margin = std::min(margin, l[k - 1] - l[k]);
    }
    return margin;
  }
};

TEST(MoeMlp, RouterAndExpertGradientsMatchFiniteDifferences) {
  auto ops = cpu_ops(1);
  MoeMlp m(*ops);
  // FD step 1e-2: a step moves a logit by at most 1e-2 * max|x| or |Wr|
  // (<= 1), so a top-k margin above 0.05 keeps the selection; these seeds
  // give one (asserted, so a change of inputs cannot silently break it).
  const float h = 1e-2f;
  ASSERT_GT(m.topk_margin(), 0.05f);
  const MoeMlp::Grads g = m.backward();
  auto loss = [&] { return m.forward(); };
  // Every expert gets rows in this routing (so every W1/W2 gradient is exercised).
  for (int64_t e = 0; e < m.E; ++e) EXPECT_GT(m.p.offsets[e + 1], m.p.offsets[e]) << e;
  EXPECT_TRUE(grad_close(g.x, numeric_grad(m.x, loss, h)));
  EXPECT_TRUE(grad_close(g.wr, numeric_grad(m.wr, loss, h)));
  EXPECT_TRUE(grad_close(g.w1, numeric_grad(m.w1, loss, h)));
  EXPECT_TRUE(grad_close(g.w2, numeric_grad(m.w2, loss, h)));
}

}  // namespace
}  // namespace gt::test
