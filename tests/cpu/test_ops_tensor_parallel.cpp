// The ops tensor parallelism adds: the split token/position embedding, the
// row bias and the vocab-parallel cross-entropy. Each is checked against the
// one-rank op it replaces, with the vocabulary cut into shards the way the
// tp ranks hold it and the cross-shard reductions done here by hand.
#include <cmath>

#include "kernels/core/bf16.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

TEST(CpuTensorParallelOps, SplitEmbeddingSumsToTheFusedOne) {
  auto ops = cpu_ops();
  const int64_t B = 2, T = 5, C = 70, V = 12, maxT = 6, R = B * T;  // C spans two channel blocks
  std::vector<int32_t> tok = random_ints(R, 1, 0, static_cast<int32_t>(V));
  std::vector<float> wte = random_vector(V * C, 2), wpe = random_vector(maxT * C, 3);
  std::vector<float> fused(R * C);
  ops->embedding_forward(f32(fused, {B, T, C}), i32(tok, {B, T}), f32(wte, {V, C}),
                         f32(wpe, {maxT, C}));
  for (int shards : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << "shards=" << shards);
    const int64_t Vs = V / shards;
    std::vector<float> sum(R * C, 0.f);
    for (int s = 0; s < shards; ++s) {
      std::vector<float> part(R * C, 5.f);  // assigned: the pre-fill must vanish
      ops->token_embedding_forward(f32(part, {R, C}), i32(tok, {R}),
                                   cpu_f32(wte.data() + s * Vs * C, {Vs, C}), s * Vs);
      for (int64_t i = 0; i < R * C; ++i) sum[i] += part[i];
    }
    // Positions added per row range, as each sequence shard does.
    const int64_t half = R / 2;
    ops->position_embedding_forward(cpu_f32(sum.data(), {half, C}), f32(wpe, {maxT, C}), 0, T);
    ops->position_embedding_forward(cpu_f32(sum.data() + half * C, {R - half, C}),
                                    f32(wpe, {maxT, C}), half, T);
    EXPECT_TRUE(all_close(sum, fused, 1e-6f, 1e-6f));
  }
}

TEST(CpuTensorParallelOps, SplitEmbeddingBackwardMatchesTheFusedOne) {
  auto ops = cpu_ops();
  const int64_t B = 3, T = 4, C = 70, V = 9, maxT = 5, R = B * T;
  std::vector<int32_t> tok = random_ints(R, 11, 0, static_cast<int32_t>(V));
  tok[5] = tok[0];  // repeated tokens: the backward is a scatter-add
  std::vector<float> dout = random_vector(R * C, 12);
  std::vector<float> dwte(V * C, 0.5f), dwpe(maxT * C, 0.5f);
  ops->embedding_backward(f32(dwte, {V, C}), f32(dwpe, {maxT, C}), f32(dout, {B, T, C}),
                          i32(tok, {B, T}));
  const int shards = 3;
  const int64_t Vs = V / shards;
  std::vector<float> split_wte(V * C, 0.5f), split_wpe(maxT * C, 0.5f);
  for (int s = 0; s < shards; ++s)
    ops->token_embedding_backward(cpu_f32(split_wte.data() + s * Vs * C, {Vs, C}),
                                  f32(dout, {R, C}), i32(tok, {R}), s * Vs);
  const int64_t cut = 7;  // an uneven row split with a wrap past T
  ops->position_embedding_backward(f32(split_wpe, {maxT, C}), cpu_f32(dout.data(), {cut, C}), 0,
                                   T);
  ops->position_embedding_backward(f32(split_wpe, {maxT, C}),
                                   cpu_f32(dout.data() + cut * C, {R - cut, C}), cut, T);
  EXPECT_TRUE(all_close(split_wte, dwte, 1e-6f, 1e-6f));
  EXPECT_TRUE(all_close(split_wpe, dwpe, 1e-6f, 1e-6f));
}

TEST(CpuTensorParallelOps, PositionEmbeddingRejectsTooLongSequences) {
  auto ops = cpu_ops();
  std::vector<float> out(4 * 8), wpe(3 * 8);
  expect_error_containing(
      [&] { ops->position_embedding_forward(f32(out, {4, 8}), f32(wpe, {3, 8}), 0, 4); },
      "sequence length 4");
}

TEST(CpuTensorParallelOps, AddBiasAddsToEveryRow) {
  auto ops = cpu_ops();
  const int64_t R = 300, C = 70;  // large enough for the parallel loop
  std::vector<float> x = random_vector(R * C, 21), b = random_vector(C, 22), want(x);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) want[r * C + c] += b[c];
  ops->add_bias(f32(x, {R, C}), f32(b, {C}));
  EXPECT_TRUE(all_close(x, want, 0.f, 0.f));
}

// The vocab-parallel cross-entropy over `shards` vocabulary shards of the
// (R, V) logits whose first vocab_size columns are the vocabulary (the rest
// padding), with the max and sum reductions of the tp ranks done here.
void sharded_cross_entropy(Ops& ops, std::vector<float>& logits, std::vector<int32_t>& tgt,
                           int64_t R, int64_t V, int64_t vocab_size, int shards, float scale,
                           bool grad, std::vector<float>& losses, std::vector<float>& dlogits) {
  const int64_t Vs = V / shards;
  std::vector<std::vector<float>> part(shards);
  for (int s = 0; s < shards; ++s) {
    part[s].resize(R * Vs);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < Vs; ++j) part[s][r * Vs + j] = logits[r * V + s * Vs + j];
  }
  std::vector<float> row_max(R, -INFINITY), sumexp(R, 0.f), target_logit(R, 0.f);
  for (int s = 0; s < shards; ++s) {
    std::vector<float> m(R);
    ops.cross_entropy_shard_max(f32(m, {R}), f32(part[s], {R, Vs}), s * Vs, vocab_size);
    for (int64_t r = 0; r < R; ++r) row_max[r] = std::max(row_max[r], m[r]);
  }
  for (int s = 0; s < shards; ++s) {
    std::vector<float> se(R), tl(R);
    ops.cross_entropy_shard_sums(f32(se, {R}), f32(tl, {R}), f32(part[s], {R, Vs}), i32(tgt, {R}),
                                 f32(row_max, {R}), s * Vs, vocab_size);
    for (int64_t r = 0; r < R; ++r) sumexp[r] += se[r], target_logit[r] += tl[r];
  }
  losses.assign(R, 0.f);
  dlogits.assign(R * V, 0.f);
  for (int s = 0; s < shards; ++s) {
    std::vector<float> l(R);
    // dlogits aliases the shard's logits, as in the model.
    ops.cross_entropy_shard_finish(f32(l, {R}), grad ? f32(part[s], {R, Vs}) : TensorView{},
                                   f32(part[s], {R, Vs}), i32(tgt, {R}), f32(row_max, {R}),
                                   f32(sumexp, {R}), f32(target_logit, {R}), s * Vs, vocab_size,
                                   scale);
    losses = l;  // the same on every shard
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < Vs; ++j) dlogits[r * V + s * Vs + j] = part[s][r * Vs + j];
  }
}

TEST(CpuTensorParallelOps, VocabParallelCrossEntropyMatchesTheFusedOne) {
  auto ops = cpu_ops();
  for (auto [R, V] : {std::pair<int64_t, int64_t>{5, 36}, {40, 1200}}) {  // serial, parallel
    SCOPED_TRACE(testing::Message() << "R=" << R << " V=" << V);
    std::vector<float> logits = random_vector(R * V, 31, -4.f, 4.f);
    for (int64_t j = 0; j < V; ++j) logits[j] += 100.f;  // only max subtraction keeps exp finite
    std::vector<int32_t> tgt = random_ints(R, 32, 0, static_cast<int32_t>(V));
    tgt[R - 1] = static_cast<int32_t>(V - 1);
    const float scale = 0.3f;
    std::vector<float> fused_loss(R), fused_d(logits);
    ops->softmax_cross_entropy(f32(fused_loss, {R}), f32(fused_d, {R, V}), f32(fused_d, {R, V}),
                               i32(tgt, {R}), V, scale);
    for (int shards : {1, 2, 3}) {
      SCOPED_TRACE(testing::Message() << "shards=" << shards);
      std::vector<float> loss, d;
      sharded_cross_entropy(*ops, logits, tgt, R, V, V, shards, scale, true, loss, d);
      EXPECT_TRUE(all_close(loss, fused_loss, 1e-5f, 1e-5f));
      EXPECT_TRUE(all_close(d, fused_d, 1e-7f, 1e-5f));
      std::vector<float> loss_only, unused;
      sharded_cross_entropy(*ops, logits, tgt, R, V, V, shards, scale, false, loss_only, unused);
      EXPECT_TRUE(all_close(loss_only, fused_loss, 1e-5f, 1e-5f));
    }
  }
}

// A padded vocabulary split over tp ranks: V = 36 real columns padded to 64
// in 4 shards of 16 puts the end of the vocabulary inside shard 2 and leaves
// shard 3 all padding (its row max is -inf). Losses and the real columns'
// gradient are those of the unpadded fused op; padding gets zero gradient,
// whatever its logits hold.
TEST(CpuTensorParallelOps, VocabParallelCrossEntropyIgnoresThePadding) {
  auto ops = cpu_ops();
  const int64_t R = 7, V = 36, Vp = 64;
  const std::vector<float> real = random_vector(R * V, 33, -4.f, 4.f);
  std::vector<float> padded(R * Vp, 50.f);  // padding logits above every real one
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < V; ++j) padded[r * Vp + j] = real[r * V + j];
  std::vector<int32_t> tgt = random_ints(R, 34, 0, static_cast<int32_t>(V));
  tgt[0] = static_cast<int32_t>(V - 1);
  const float scale = 0.3f;
  std::vector<float> want_loss(R), want_d(real);
  ops->softmax_cross_entropy(f32(want_loss, {R}), f32(want_d, {R, V}), f32(want_d, {R, V}),
                             i32(tgt, {R}), V, scale);
  for (int shards : {1, 2, 4}) {
    SCOPED_TRACE(testing::Message() << "shards=" << shards);
    std::vector<float> loss, d;
    sharded_cross_entropy(*ops, padded, tgt, R, Vp, V, shards, scale, true, loss, d);
    EXPECT_TRUE(all_close(loss, want_loss, 1e-5f, 1e-5f));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < Vp; ++j) {
        if (j >= V) {
          ASSERT_EQ(d[r * Vp + j], 0.f) << "padding row " << r << " col " << j;
        } else {
          ASSERT_NEAR(d[r * Vp + j], want_d[r * V + j],
                      1e-7f + 1e-5f * std::fabs(want_d[r * V + j]))
              << "row " << r << " col " << j;
        }
      }
  }
}

// bf16 logits through the three shard passes (the bf16 model under tp): each
// pass is the fp32 pass on the widened values, bit for bit, and the bf16
// dlogits are its gradient rounded to nearest even, here for a shard that
// ends in padding.
TEST(CpuTensorParallelOps, VocabParallelCrossEntropyTakesBf16Logits) {
  auto ops = cpu_ops();
  const int64_t R = 40, Vs = 700, start = 700, vocab = 1300;  // columns [600, 700) padding
  std::vector<float> x = random_vector(R * Vs, 35, -6.f, 6.f);
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    bits[i] = bf16_from_float(x[i]);
    x[i] = bf16_to_float(bits[i]);
  }
  std::vector<int32_t> tgt = random_ints(R, 36, 0, static_cast<int32_t>(vocab));
  std::vector<float> m32(R), m16(R), se32(R), se16(R), tl32(R), tl16(R), l32(R), l16(R);
  ops->cross_entropy_shard_max(f32(m32, {R}), f32(x, {R, Vs}), start, vocab);
  ops->cross_entropy_shard_max(f32(m16, {R}), bf16_view(bits, {R, Vs}), start, vocab);
  EXPECT_TRUE(all_close(m16, m32, 0.f, 0.f));
  ops->cross_entropy_shard_sums(f32(se32, {R}), f32(tl32, {R}), f32(x, {R, Vs}), i32(tgt, {R}),
                                f32(m32, {R}), start, vocab);
  ops->cross_entropy_shard_sums(f32(se16, {R}), f32(tl16, {R}), bf16_view(bits, {R, Vs}),
                                i32(tgt, {R}), f32(m32, {R}), start, vocab);
  EXPECT_TRUE(all_close(se16, se32, 0.f, 0.f));
  EXPECT_TRUE(all_close(tl16, tl32, 0.f, 0.f));
  std::vector<float> d32(x.size());
  ops->cross_entropy_shard_finish(f32(l32, {R}), f32(d32, {R, Vs}), f32(x, {R, Vs}), i32(tgt, {R}),
                                  f32(m32, {R}), f32(se32, {R}), f32(tl32, {R}), start, vocab,
                                  0.25f);
  ops->cross_entropy_shard_finish(f32(l16, {R}), bf16_view(bits, {R, Vs}), bf16_view(bits, {R, Vs}),
                                  i32(tgt, {R}), f32(m32, {R}), f32(se32, {R}), f32(tl32, {R}),
                                  start, vocab,
                                  0.25f);  // in place
  EXPECT_TRUE(all_close(l16, l32, 0.f, 0.f));
  for (size_t i = 0; i < bits.size(); ++i)
    ASSERT_EQ(bits[i], bf16_from_float(d32[i])) << "dlogits element " << i;
}

}  // namespace
}  // namespace gt::test
