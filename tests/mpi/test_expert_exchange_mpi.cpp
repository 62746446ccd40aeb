// Expert parallelism's token exchange (trainer/parallelize/expert_exchange.hpp)
// inside the mixture layer, with the running world as the ep group (2 and 4
// ranks): each rank's output rows and input gradient equal those of the same
// layer without ep on the same rows, and the expert and router gradients
// summed over the ranks equal the sums without ep (each expert's share is
// computed once, on its owner). Routed at random, and routed so that every
// token picks the first ranks' experts: the other ranks receive no rows and
// still take part in every exchange. And under a capacity factor: the same
// slots dropped, the buffers sized for the capacity rather than the worst
// dropless case.
#include <random>

#include "kernels/cpu/cpu_ops.hpp"
#include "layout_matrix_models.hpp"
#include "mpi_test_util.hpp"
#include "trainer/parallelize/mixture_of_experts.hpp"

namespace gt::test {
namespace {

std::vector<float> normal(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

struct Result {
  std::vector<float> out, dx, dgate, dw13, dw2;
  std::vector<float> counts;  // tokens per expert this rank routed
};

// One forward and backward of a one-block mixture over this rank's rows.
Result run_layer(const ModelConfig& m, int64_t R, const ExpertParallelGroup& ep,
                 std::vector<float> x, std::vector<float> gate, std::vector<float> w13,
                 std::vector<float> w2, const std::vector<float>& dout) {
  CpuOps ops;
  const int64_t C = m.n_embd, F = m.ffn_width(), E = m.n_experts;
  MixtureOfExperts moe(ops, m, R, 1, DType::f32, false, TensorParallelGroup{},
                       ContextParallelGroup{}, ep);
  Result r;
  r.out.assign(static_cast<size_t>(R * C), 0.f);
  r.dx.assign(static_cast<size_t>(R * C), 0.f);
  r.dgate.assign(gate.size(), 0.f);
  r.dw13.assign(w13.size(), 0.f);
  r.dw2.assign(w2.size(), 0.f);
  // A rank holds only its El experts [rank El, (rank + 1) El): the views
  // start there, and the gradients of the others stay zero.
  const int64_t El = E / ep.size(), first = El * ep.rank();
  const MixtureOfExperts::Weights w{cpu_f32(gate.data(), {E, C}),
                                    cpu_f32(w13.data() + first * 2 * F * C, {El, 2 * F, C}),
                                    cpu_f32(w2.data() + first * C * F, {El, C, F})};
  const MixtureOfExperts::Weights dw{cpu_f32(r.dgate.data(), {E, C}),
                                     cpu_f32(r.dw13.data() + first * 2 * F * C, {El, 2 * F, C}),
                                     cpu_f32(r.dw2.data() + first * C * F, {El, C, F})};
  const Activation xa{cpu_f32(x.data(), {R, C}), sequence_shard(), "x"};
  moe.begin_micro_batch();
  moe.forward(0, xa, cpu_f32(r.out.data(), {R, C}), w);
  moe.finish_micro_batch(1.f / static_cast<float>(R), R);
  std::vector<float> d = dout;
  const Activation da{cpu_f32(d.data(), {R, C}), sequence_shard(), "dout"};
  moe.backward(0, da, cpu_f32(r.dx.data(), {R, C}), xa, w, dw);
  r.counts = moe.take_step_stats().counts;
  return r;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.f, std::abs(want[i])));
  EXPECT_LT(worst, 1e-5f) << what;
}

void check(bool skewed, double capacity_factor = 0) {
  auto w = test_world();
  const int P = w->size();
  ModelConfig m = matrix_mixtral();  // C 32, F 32, E 4, k 2
  m.capacity_factor = capacity_factor;
  if (P < 2 || m.n_experts % P != 0) GTEST_SKIP() << "needs 2 or 4 ranks";
  const int64_t R = 6, C = m.n_embd, F = m.ffn_width(), E = m.n_experts;
  std::vector<float> x = normal(R * C, 100 + uint32_t(w->rank()), 1.f);
  std::vector<float> gate = normal(E * C, 7, 0.2f);
  if (skewed) {  // feature 0 decides: experts 0 and 1 win on every row
    for (int64_t r = 0; r < R; ++r) x[static_cast<size_t>(r * C)] = 5.f;
    for (int64_t e = 0; e < E; ++e) gate[static_cast<size_t>(e * C)] = e < 2 ? 10.f + e : -10.f;
  }
  const std::vector<float> w13 = normal(E * 2 * F * C, 8, 0.1f), w2 = normal(E * C * F, 9, 0.1f);
  const std::vector<float> dout = normal(R * C, 200 + uint32_t(w->rank()), 1.f);

  const Result alone = run_layer(m, R, ExpertParallelGroup{}, x, gate, w13, w2, dout);
  const Result split = run_layer(m, R, ExpertParallelGroup{w.get()}, x, gate, w13, w2, dout);
  expect_near(split.out, alone.out, "out");
  expect_near(split.dx, alone.dx, "dx");
  EXPECT_EQ(split.counts, alone.counts);
  // Parameter gradients: their sum over the ranks (what the data-parallel
  // reduction forms).
  auto summed = [&](std::vector<float> v) {
    w->all_reduce_sum(v.data(), static_cast<int64_t>(v.size())).wait();
    return v;
  };
  expect_near(summed(split.dgate), summed(alone.dgate), "d(gate)");
  expect_near(summed(split.dw13), summed(alone.dw13), "d(w1|w3)");
  expect_near(summed(split.dw2), summed(alone.dw2), "d(w2)");
  if (skewed) {
    // Every rank routed all its rows to experts 0 and 1: the ranks holding
    // the others received nothing, and their experts' gradients are zero.
    std::vector<float> counts = split.counts;
    w->all_reduce_sum(counts.data(), E).wait();
    EXPECT_EQ(counts[0], float(R * P));
    EXPECT_EQ(counts[1], float(R * P));
    for (int64_t e = 2; e < E; ++e) EXPECT_EQ(counts[static_cast<size_t>(e)], 0.f);
    const int64_t per_expert = 2 * F * C;
    for (int64_t i = 2 * per_expert; i < E * per_expert; ++i)
      ASSERT_EQ(split.dw13[static_cast<size_t>(i)], 0.f) << "expert " << i / per_expert;
  }
}

TEST(ExpertExchange, MixtureWithEpEqualsTheMixtureWithout) { check(false); }

TEST(ExpertExchange, RanksThatReceiveNoTokensStillExchange) { check(true); }

// capacity 1.0: ceil(1 x 2 x 6 / 4) = 3 of each expert's slots kept per
// rank; skewed, the 6 rows' 12 slots all want experts 0 and 1: half dropped.
TEST(ExpertExchange, CapacityDropsTheSameSlotsWithEp) {
  check(false, 1.0);
  check(true, 1.0);
  const ModelConfig m = [] {
    ModelConfig c = matrix_mixtral();
    c.capacity_factor = 1.0;
    return c;
  }();
  // The experts' buffers: E x capacity rows, not P x R k.
  EXPECT_EQ(MixtureOfExperts::expert_rows(m, 6, 2), 4 * 3);
  EXPECT_EQ(MixtureOfExperts::expert_rows(matrix_mixtral(), 6, 2), 2 * 6 * 2);
  EXPECT_EQ(MixtureOfExperts::expert_rows(m, 6, 1), 6 * 2);
}

}  // namespace
}  // namespace gt::test
