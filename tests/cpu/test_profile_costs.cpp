// The per-op FLOP and byte formulas (trainer/profile/op_costs.hpp) on small
// shapes, each against a count written out by hand or by a naive loop, and
// the Profiler observing a backend's ops: the calls run unchanged, the
// formula's costs are recorded while the profiler records, nothing otherwise.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "test_util.hpp"
#include "trainer/profile/op_costs.hpp"
#include "trainer/profile/op_descriptions.hpp"
#include "trainer/profile/profiler.hpp"

namespace gt {
namespace {

TEST(ProfileCosts, MatmulForward) {
  // R=3, C=5, OC=7: 2*3*5*7 FLOPs; inp 15 + weight 35 + bias 7 + out 21 floats.
  OpCost c = op_cost::matmul_forward(3, 5, 7, true);
  EXPECT_EQ(c.flops, 210.0);
  EXPECT_EQ(c.bytes, 4.0 * (15 + 35 + 7 + 21));
  c = op_cost::matmul_forward(3, 5, 7, false);
  EXPECT_EQ(c.bytes, 4.0 * (15 + 35 + 21));
}

TEST(ProfileCosts, MatmulBackwardCountsDinpOnlyWhenAsked) {
  // dinp and dweight: 2 GEMMs of 2*3*5*7.
  OpCost c = op_cost::matmul_backward(3, 5, 7, true, true);
  EXPECT_EQ(c.flops, 420.0);
  // dout 21 + inp 15 + dweight 35 read+written + weight 35 + dinp 15 + dbias 7 read+written
  EXPECT_EQ(c.bytes, 4.0 * (21 + 15 + 70 + 35 + 15 + 14));
  c = op_cost::matmul_backward(3, 5, 7, false, false);
  EXPECT_EQ(c.flops, 210.0);
  EXPECT_EQ(c.bytes, 4.0 * (21 + 15 + 70));
}

// The MoE grouped GEMM: the observer cannot read the offsets (device
// memory), so every one of the N dispatch rows is counted (exact when
// dropless). N=6, C=5, OC=7, G=3.
TEST(ProfileCosts, GroupedMatmulCountsEveryDispatchRow) {
  OpCost f = op_cost::grouped_matmul_forward(6, 5, 7, 3);
  EXPECT_EQ(f.flops, 2.0 * 6 * 5 * 7);
  EXPECT_EQ(f.bytes, 4.0 * (30 + 105 + 42 + 4));  // inp, weight, out, offsets
  EXPECT_EQ(op_cost::grouped_matmul_forward(6, 5, 7, 3, 2).bytes, 2.0 * (30 + 105 + 42) + 16);
  OpCost b = op_cost::grouped_matmul_backward(6, 5, 7, 3, true);
  EXPECT_EQ(b.flops, 4.0 * 6 * 5 * 7);
  // dout, inp, dweight read + written, offsets; weight and dinp for dinp.
  EXPECT_EQ(b.bytes, 4.0 * (42 + 30 + 210 + 4 + 105 + 30));
  b = op_cost::grouped_matmul_backward(6, 5, 7, 3, false);
  EXPECT_EQ(b.flops, 2.0 * 6 * 5 * 7);
  EXPECT_EQ(b.bytes, 4.0 * (42 + 30 + 210 + 4));
}

TEST(ProfilingOps, GroupedMatmulIsAGemmWithItsFormula) {
  auto ops = make_cpu_ops(1);
  Profiler prof(ProfileSchedule{1, 1}, false, 0);
  prof.observe(*ops);
  std::vector<float> inp = test::random_vector(6 * 5, 1), w = test::random_vector(3 * 7 * 5, 2),
                     out(6 * 7);
  std::vector<int32_t> offsets = {0, 2, 2, 5};  // row 5 past offsets[G]: still counted
  prof.begin_step(0);
  ops->grouped_matmul_forward(cpu_f32(out.data(), {6, 7}), cpu_f32(inp.data(), {6, 5}),
                              cpu_f32(w.data(), {3, 7, 5}), cpu_i32(offsets.data(), {4}));
  prof.end_step();
  const ProfileStats& s = prof.stats();
  ASSERT_EQ(s.ops.size(), 1u);
  EXPECT_EQ(s.ops[0].name, "grouped_matmul_forward G=3 M=6 N=7 K=5");
  EXPECT_EQ(s.ops[0].cls, OpClass::gemm);
  EXPECT_EQ(s.ops[0].flops, op_cost::grouped_matmul_forward(6, 5, 7, 3).flops);
  EXPECT_EQ(s.ops[0].bytes, op_cost::grouped_matmul_forward(6, 5, 7, 3).bytes);
  for (const char* op : {"grouped_matmul_forward", "grouped_matmul_backward"})
    EXPECT_TRUE(has_op_formula(op)) << op;
}

// Multiply-adds of a naive full (non-causal) attention, counted by loops.
double naive_attention_flops(int B, int NH, int T, int hs, bool backward) {
  double macs = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) {
          macs += hs;  // S[i][j] = q_i . k_j   (backward: dP[i][j] = dy_i . v_j)
          macs += hs;  // y_i += P[i][j] v_j    (backward: dQ_i += dS[i][j] k_j)
          if (backward) macs += 2 * hs;  // dK_j += dS[i][j] q_i ; dV_j += P[i][j] dy_i
        }
  return 2 * macs;
}

TEST(ProfileCosts, AttentionFollowsTheFullSquareConvention) {
  const int B = 2, NH = 3, T = 5, hs = 4, C = NH * hs;
  const int64_t saved = int64_t(B) * NH * T * T;
  OpCost f = op_cost::attention_forward(B, NH, T, hs, saved);
  EXPECT_EQ(f.flops, naive_attention_flops(B, NH, T, hs, false));
  EXPECT_EQ(f.bytes, 4.0 * (B * T * 3 * C + B * T * C + saved));
  OpCost b = op_cost::attention_backward(B, NH, T, hs, saved);
  EXPECT_EQ(b.flops, naive_attention_flops(B, NH, T, hs, true));
  // reads dout, qkv, out, saved; writes dqkv.
  EXPECT_EQ(b.bytes, 4.0 * (B * T * C + B * T * 3 * C + B * T * C + saved + B * T * 3 * C));
}

// Grouped-query attention: qkv holds NH query heads and KV key and value
// heads each; the products are the query heads' as before.
TEST(ProfileCosts, GroupedQueryAttentionMovesItsNarrowerKeysAndValues) {
  const int B = 2, NH = 4, KV = 2, T = 5, hs = 4, C = NH * hs, QKV = (NH + 2 * KV) * hs;
  const int64_t saved = int64_t(B) * NH * T;
  const OpCost f = op_cost::attention_forward(B, NH, T, hs, saved, 2, KV);
  EXPECT_EQ(f.flops, op_cost::attention_forward(B, NH, T, hs, saved, 2).flops);
  EXPECT_EQ(f.bytes, 2.0 * (B * T * QKV + B * T * C) + 4.0 * saved);
  const OpCost b = op_cost::attention_backward(B, NH, T, hs, saved, 2, KV);
  EXPECT_EQ(b.flops, op_cost::attention_backward(B, NH, T, hs, saved, 2).flops);
  EXPECT_EQ(b.bytes, 2.0 * (B * T * C + B * T * QKV + B * T * C + B * T * QKV) + 4.0 * saved);
  // KV = NH is multi-head attention: the 3C of qkv.
  EXPECT_EQ(op_cost::attention_forward(B, NH, T, hs, saved, 2, NH).bytes,
            op_cost::attention_forward(B, NH, T, hs, saved, 2).bytes);
}

// (query, key) pairs a causal mask leaves between a block of queries and a
// block of keys at global positions, by a loop over every pair.
double naive_pairs(int Tq, int Tk, int q_pos, int k_pos) {
  double n = 0;
  for (int i = 0; i < Tq; ++i)
    for (int j = 0; j < Tk; ++j) n += k_pos + j <= q_pos + i ? 1 : 0;
  return n;
}

TEST(ProfileCosts, CausalPairsCountTheVisibleBlockPairs) {
  // The diagonal, keys wholly before, wholly after, partly after, and
  // blocks of different lengths either way.
  const int cases[][4] = {{5, 5, 0, 0},   {4, 6, 10, 2},  {4, 4, 0, 8},  {6, 3, 2, 4},
                          {3, 7, 20, 19}, {7, 3, 0, 5},  {1, 1, 0, 0},  {8, 8, 8, 0},
                          {8, 8, 3, 6},   {2, 9, 4, 0}};
  for (const auto& c : cases)
    EXPECT_EQ(op_cost::causal_pairs(c[0], c[1], c[2], c[3]), naive_pairs(c[0], c[1], c[2], c[3]))
        << c[0] << " " << c[1] << " " << c[2] << " " << c[3];
  EXPECT_EQ(op_cost::causal_pairs(0, 4, 0, 0), 0.0);
  EXPECT_EQ(op_cost::causal_pairs(16, 16, 0, 0), 16 * 17 / 2.0);
}

TEST(ProfileCosts, AttentionBlocksCountTheirVisiblePairs) {
  const int B = 2, NH = 4, KV = 2, hs = 8, Tq = 6, Tk = 5;
  const double pairs = naive_pairs(Tq, Tk, 3, 1);
  const double q = B * Tq * NH * hs, kv = B * Tk * KV * hs, rows = B * NH * Tq;
  // Forward: Q K^T and P V, a multiply-add each per pair and feature; q,
  // k, v read (bf16 here), out and lse written, or read too when merging.
  OpCost f = op_cost::attention_block_forward(B, NH, KV, hs, Tq, Tk, 3, 1, false, 2);
  EXPECT_EQ(f.flops, 2.0 * 2 * B * NH * hs * pairs);
  EXPECT_EQ(f.bytes, 2.0 * (q + 2 * kv) + 4.0 * (q + rows));
  f = op_cost::attention_block_forward(B, NH, KV, hs, Tq, Tk, 3, 1, true, 2);
  EXPECT_EQ(f.bytes, 2.0 * (q + 2 * kv) + 4.0 * 2 * (q + rows));
  // Backward: S again, dP, dQ, dK, dV; dout, q, k, v read; lse and delta
  // read; dq, dk, dv accumulated in fp32.
  const OpCost b = op_cost::attention_block_backward(B, NH, KV, hs, Tq, Tk, 3, 1, 4);
  EXPECT_EQ(b.flops, 5 * 2.0 * B * NH * hs * pairs);
  EXPECT_EQ(b.bytes, 4.0 * (2 * q + 2 * kv) + 4.0 * 2 * rows + 4.0 * 2 * (q + 2 * kv));
  // A block no query sees costs no products, only its traffic.
  EXPECT_EQ(op_cost::attention_block_forward(B, NH, KV, hs, Tq, Tk, 0, 10, false).flops, 0.0);
  // delta: a multiply-add per element of dout o out.
  const OpCost d = op_cost::attention_row_dot(B, Tq, NH, hs, 2, 4);
  EXPECT_EQ(d.flops, 2.0 * q);
  EXPECT_EQ(d.bytes, q * (2 + 4) + 4.0 * rows);
  // cast_rows moves what cast moves for its rows x cols elements.
  EXPECT_EQ(op_cost::cast_rows(3, 5, 4, 2).bytes, op_cost::cast(15, 4, 2).bytes);
  EXPECT_EQ(op_cost::cast_rows(3, 5, 4, 2).flops, 0.0);
}

// The profiler costs each attention-over-blocks call by its own positions
// (one row per block shape, the FLOPs of every call summed), and the
// strided K|V copy as cast_rows.
TEST(ProfilingOps, AttentionBlocksAreCostedByTheirPositions) {
  auto ops = make_cpu_ops(1);
  Profiler prof(ProfileSchedule{1, 1}, false, 0);
  prof.observe(*ops);
  const int B = 1, NH = 2, KV = 1, hs = 4, T = 4;
  auto q = test::random_vector(B * T * NH * hs, 1), k = test::random_vector(B * T * KV * hs, 2),
       v = test::random_vector(B * T * KV * hs, 3);
  std::vector<float> out(B * T * NH * hs), lse(B * NH * T),
      scratch(static_cast<size_t>(ops->attention_block_scratch_elems(B, NH, T, T)));
  const TensorView Q = cpu_f32(q.data(), {B, T, NH * hs}), K = cpu_f32(k.data(), {B, T, KV * hs}),
                   V = cpu_f32(v.data(), {B, T, KV * hs}), O = cpu_f32(out.data(), {B, T, NH * hs}),
                   S = cpu_f32(scratch.data(), {int64_t(scratch.size())}),
                   LSE = cpu_f32(lse.data(), {B, NH, T});
  prof.begin_step(0);
  // Queries at 4..7: keys at 0..3 all visible, then their own diagonal.
  ops->attention_block_forward(O, LSE, S, Q, K, V, 4, 0, NH, KV, false);
  ops->attention_block_forward(O, LSE, S, Q, K, V, 4, 4, NH, KV, true);
  std::vector<uint16_t> half(B * T * KV * hs);
  ops->cast_rows(make_view(half.data(), DType::bf16, Device::cpu, {B * T, KV * hs}),
                 cpu_f32(k.data(), {B * T, KV * hs}));
  prof.end_step();
  const ProfileStats& s = prof.stats();
  ASSERT_EQ(s.ops.size(), 2u);
  EXPECT_EQ(s.ops[0].name, "attention_block_forward B=1 NH=2 KV=1 hs=4 Tq=4 Tk=4");
  EXPECT_EQ(s.ops[0].count, 2);
  EXPECT_EQ(s.ops[0].flops, 4.0 * B * NH * hs * (16 + 10));
  EXPECT_EQ(s.ops[0].bytes,
            op_cost::attention_block_forward(B, NH, KV, hs, T, T, 4, 0, false).bytes +
                op_cost::attention_block_forward(B, NH, KV, hs, T, T, 4, 4, true).bytes);
  EXPECT_EQ(s.ops[1].name, "cast_rows");
  EXPECT_EQ(s.ops[1].bytes, op_cost::cast_rows(B * T, KV * hs, 4, 2).bytes);
  for (const char* op : {"attention_block_forward", "attention_block_backward",
                         "attention_row_dot", "cast_rows"})
    EXPECT_TRUE(has_op_formula(op)) << op;
}

TEST(ProfileCosts, LayerNorm) {
  OpCost f = op_cost::layernorm_forward(3, 8);
  EXPECT_EQ(f.flops, 8.0 * 24);
  EXPECT_EQ(f.bytes, 4.0 * (24 + 8 + 8 + 24 + 3 + 3));  // inp, w, b ; out, mean, rstd
  OpCost b = op_cost::layernorm_backward(3, 8);
  EXPECT_EQ(b.flops, 19.0 * 24);
  // dout, inp, weight, mean, rstd read; dinp, dweight, dbias read + written
  EXPECT_EQ(b.bytes, 4.0 * (24 + 24 + 8 + 3 + 3 + 48 + 16 + 16));
}

TEST(ProfileCosts, Elementwise) {
  EXPECT_EQ(op_cost::gelu_forward(10).flops, 90.0);
  EXPECT_EQ(op_cost::gelu_forward(10).bytes, 80.0);
  EXPECT_EQ(op_cost::gelu_backward(10).flops, 200.0);
  EXPECT_EQ(op_cost::gelu_backward(10).bytes, 120.0);
  EXPECT_EQ(op_cost::add(10).bytes, 120.0);
  EXPECT_EQ(op_cost::accumulate(10).bytes, 120.0);
  EXPECT_EQ(op_cost::add_bias(3, 4).bytes, 4.0 * (24 + 4));
  EXPECT_EQ(op_cost::zero(10, 4).bytes, 40.0);
  EXPECT_EQ(op_cost::zero(10, 4).flops, 0.0);
  EXPECT_EQ(op_cost::copy(10, 2).bytes, 40.0);
  EXPECT_EQ(op_cost::cast(10, 4, 2).bytes, 60.0);  // fp32 read, bf16 written
  EXPECT_EQ(op_cost::cast(10, 2, 4).bytes, 60.0);
  EXPECT_EQ(op_cost::cast(10, 4, 2).flops, 0.0);
  EXPECT_EQ(op_cost::sum_squares(10).flops, 20.0);
  EXPECT_EQ(op_cost::sum_squares(10).bytes, 40.0);
  EXPECT_EQ(op_cost::adamw(10).flops, 150.0);
  EXPECT_EQ(op_cost::adamw(10).bytes, 280.0);  // 4 read, 3 written
}

TEST(ProfileCosts, CrossEntropy) {
  OpCost c = op_cost::softmax_cross_entropy(4, 10, false);
  EXPECT_EQ(c.flops, 160.0);
  EXPECT_EQ(c.bytes, 4.0 * (40 + 4 + 4));  // logits, targets ; losses
  c = op_cost::softmax_cross_entropy(4, 10, true);
  EXPECT_EQ(c.flops, 200.0);
  EXPECT_EQ(c.bytes, 4.0 * (40 + 4 + 4 + 40));
  EXPECT_EQ(op_cost::cross_entropy_shard_max(4, 10).bytes, 4.0 * 44);
  // bf16 logits (the bf16 model): the (R, V) passes at 2 bytes, the rows fp32.
  EXPECT_EQ(op_cost::softmax_cross_entropy(4, 10, true, 2).bytes, 2.0 * (40 + 40) + 4.0 * (4 + 4));
  EXPECT_EQ(op_cost::cross_entropy_shard_sums(4, 10).flops, 120.0);
  EXPECT_EQ(op_cost::cross_entropy_shard_finish(4, 10, true).bytes, 4.0 * (80 + 20));
  EXPECT_EQ(op_cost::cross_entropy_shard_finish(4, 10, false).flops, 0.0);
}

TEST(ProfileCosts, EmbeddingReadsEachTableRowAtMostOnce) {
  // B*T = 6 tokens, vocab 4: at most the 4 rows are read.
  OpCost f = op_cost::embedding_forward(2, 3, 5, 4);
  EXPECT_EQ(f.flops, 30.0);
  EXPECT_EQ(f.bytes, 4.0 * (6 + 4 * 5 + 3 * 5 + 30));
  OpCost b = op_cost::embedding_backward(2, 3, 5, 100);
  EXPECT_EQ(b.flops, 60.0);
  EXPECT_EQ(b.bytes, 4.0 * (30 + 6 + 2 * 30 + 2 * 15));
  EXPECT_EQ(op_cost::token_embedding_forward(6, 5, 100).bytes, 4.0 * (6 + 30 + 30));
  EXPECT_EQ(op_cost::position_embedding_forward(6, 5, 3).bytes, 4.0 * (60 + 15));
}

TEST(ProfileSchedule, ProfilesTheLastStepsOfEachPeriod) {
  ProfileSchedule s{10, 2};
  std::vector<int64_t> got;
  for (int64_t step = 0; step < 30; ++step)
    if (s.profiled(step)) got.push_back(step);
  EXPECT_EQ(got, (std::vector<int64_t>{8, 9, 18, 19, 28, 29}));
  EXPECT_TRUE((ProfileSchedule{1, 1}).profiled(0));
  EXPECT_FALSE((ProfileSchedule{0, 1}).profiled(5));
}

TEST(ProfilingOps, ForwardsAndRecordsOnlyWhileRecording) {
  auto ops = make_cpu_ops(1);
  Profiler prof(ProfileSchedule{2, 1}, false, 0);
  prof.observe(*ops);
  const int R = 3, C = 5, OC = 7;
  auto x = test::random_vector(R * C, 1), w = test::random_vector(OC * C, 2),
       b = test::random_vector(OC, 3);
  std::vector<float> out(R * OC), ref(R * OC);
  make_cpu_ops(1)->matmul_forward(cpu_f32(ref.data(), {R, OC}), cpu_f32(x.data(), {R, C}),
                                  cpu_f32(w.data(), {OC, C}), cpu_f32(b.data(), {OC}));

  prof.begin_step(0);  // not profiled (every 2: step 1, 3, ...)
  EXPECT_FALSE(prof.recording());
  ops->matmul_forward(cpu_f32(out.data(), {R, OC}), cpu_f32(x.data(), {R, C}),
                      cpu_f32(w.data(), {OC, C}), cpu_f32(b.data(), {OC}));
  EXPECT_FALSE(prof.end_step().profiled);
  EXPECT_EQ(out, ref);
  EXPECT_TRUE(prof.stats().ops.empty());

  prof.begin_step(1);
  EXPECT_TRUE(prof.recording());
  ops->matmul_forward(cpu_f32(out.data(), {R, OC}), cpu_f32(x.data(), {R, C}),
                      cpu_f32(w.data(), {OC, C}), cpu_f32(b.data(), {OC}));
  ops->zero(cpu_f32(out.data(), {R * OC}));
  const Profiler::StepResult r = prof.end_step();
  EXPECT_TRUE(r.profiled);
  const ProfileStats& s = prof.stats();
  EXPECT_EQ(s.steps, 1);
  ASSERT_EQ(s.ops.size(), 2u);
  EXPECT_EQ(s.ops[0].cls, OpClass::gemm);
  EXPECT_EQ(s.ops[0].name, "matmul_forward M=3 N=7 K=5");
  EXPECT_EQ(s.ops[0].count, 1);
  EXPECT_EQ(s.ops[0].flops, op_cost::matmul_forward(R, C, OC, true).flops);
  EXPECT_EQ(s.ops[0].bytes, op_cost::matmul_forward(R, C, OC, true).bytes);
  EXPECT_GT(s.ops[0].seconds, 0.0);
  EXPECT_EQ(s.ops[1].name, "zero");  // elementwise ops: one row whatever the size
  EXPECT_LE(s.ops[0].seconds + s.ops[1].seconds, r.seconds);
}

TEST(ProfilingOps, ForwardsCastAsAnElementwiseOpCountingBothDtypes) {
  auto ops = make_cpu_ops(1);
  Profiler prof(ProfileSchedule{1, 1}, false, 0);
  prof.observe(*ops);
  const int64_t n = 6;
  std::vector<float> x{1.f, 1.f + 1.f / 256.f, -2.f, 3.f, 0.f, 1e30f}, back(n);
  std::vector<uint16_t> b(n);
  const TensorView b16 = make_view(b.data(), DType::bf16, Device::cpu, {n});
  prof.begin_step(0);
  ops->cast(b16, cpu_f32(x.data(), {n}));
  ops->cast(cpu_f32(back.data(), {n}), b16);
  prof.end_step();
  EXPECT_EQ(b[1], 0x3F80);  // forwarded: the tie rounded to even
  EXPECT_EQ(back[1], 1.f);
  const ProfileStats& s = prof.stats();
  ASSERT_EQ(s.ops.size(), 1u);  // both directions share one row
  EXPECT_EQ(s.ops[0].cls, OpClass::elementwise);
  EXPECT_EQ(s.ops[0].name, "cast");
  EXPECT_EQ(s.ops[0].count, 2);
  EXPECT_EQ(s.ops[0].flops, 0.0);
  EXPECT_EQ(s.ops[0].bytes, 2 * op_cost::cast(n, 4, 2).bytes);
}

}  // namespace
}  // namespace gt
