// Activation placements (trainer/parallelize/activation_placement.hpp): the
// misuses a tensor- or context-parallel data flow makes easy to write, each
// planted and each caught by the layer's placement check at entry, with one
// line naming the layer, the tensor and both placements, before any
// arithmetic (the outputs keep their sentinel values): not left to show up
// as a loss mismatch. Placements do not depend on the degrees, so one rank
// checks the flow a layout would have.
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_ops.hpp"
#include "test_ops_common.hpp"
#include "trainer/parallelize/context_parallel.hpp"
#include "trainer/parallelize/tp_layers.hpp"

namespace gt::test {
namespace {

constexpr float kSentinel = 123.f;
constexpr int64_t kR = 8, kC = 8, kN = 12;

const AxisPlacement kSeq = AxisPlacement::shard(ActDim::sequence);

// The message of what `f` throws ("" if nothing).
template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool untouched(const std::vector<float>& v) {
  for (float x : v)
    if (x != kSentinel) return false;
  return true;
}

struct Fixture {
  std::unique_ptr<Ops> ops = cpu_ops(1);
  TpLayerContext ctx{*ops, TensorParallelGroup{}, ComputeDType::fp32,
                     TpLayerContext::scratch(1, true, ComputeDType::fp32, kR, kN), {}};
  std::vector<float> x = random_vector(kR * kC, 1), w = random_vector(kN * kC, 2);
  std::vector<float> out = std::vector<float>(kR * kN, kSentinel);
  std::vector<float> dx = std::vector<float>(kR * kC, kSentinel);
  std::vector<float> dw = std::vector<float>(kN * kC, kSentinel);
  TensorView none;
};

// c_attn's gather dropped: its backward handed the input as the norm wrote
// it (this rank's rows only), not the gathered rows its forward multiplied.
TEST(ActivationPlacement, ColumnLayerBackwardWithoutTheForwardsGatherIsCaught) {
  Fixture f;
  ColumnParallelLinear c_attn(f.ctx, "c_attn", ActDim::heads);
  const Activation ln1{f32(f.x, {kR, kC}), sequence_shard(), "h.0.ln_1"};
  const Activation dqkv{f32(f.out, {kR, kN}), {AxisPlacement::shard(ActDim::heads), kSeq},
                        "d(h.0.qkv)"};
  const std::string e = thrown([&] {
    c_attn.backward({f32(f.dx, {kR, kC}), "d(h.0.ln_1)"}, f32(f.dw, {kN, kC}), f.none, dqkv, ln1,
                    f32(f.w, {kN, kC}));
  });
  EXPECT_EQ(e,
            "c_attn backward: input (gathered in forward) 'h.0.ln_1' is {tp: shard(sequence), "
            "cp: shard(sequence)}; expected tp: replicated");
  EXPECT_TRUE(untouched(f.dx));
  EXPECT_TRUE(untouched(f.dw));
}

// A forward fed rows that were already gathered (a gather done twice, or
// the norm's output skipped): the gather refuses before moving anything.
TEST(ActivationPlacement, ColumnLayerFedGatheredRowsIsCaught) {
  Fixture f;
  ColumnParallelLinear c_fc(f.ctx, "c_fc", ActDim::hidden);
  Activation ln2{f32(f.x, {kR, kC}), {AxisPlacement::replicated(), kSeq}, "h.0.ln_2"};
  const std::string e = thrown([&] {
    c_fc.forward({f32(f.out, {kR, kN}), "h.0.mlp.gelu"}, ln2, f32(f.w, {kN, kC}), f.none);
  });
  EXPECT_EQ(e,
            "c_fc forward: input 'h.0.ln_2' is {tp: replicated, cp: shard(sequence)}; expected "
            "tp: shard(sequence)");
  EXPECT_TRUE(untouched(f.out));
}

// attn.c_proj's reduce-scatter dropped: the local product (this rank's
// partial sums) added to the residual stream as if it were the sum.
TEST(ActivationPlacement, ResidualAddOfAPartialSumIsCaught) {
  std::vector<float> res(kR * kC, kSentinel), y(kR * kC, 1.f);
  const Activation x{f32(y, {kR, kC}), sequence_shard(), "h.0.input"};
  const Activation proj{f32(y, {kR, kC}), {AxisPlacement::partial(), kSeq}, "h.0.attn.c_proj"};
  const std::string e =
      thrown([&] { added(f32(res, {kR, kC}), x, proj, "h.0.res2", "residual add", nullptr); });
  EXPECT_EQ(e,
            "residual add: addend 'h.0.attn.c_proj' is {tp: partial, cp: shard(sequence)}; "
            "expected {tp: shard(sequence), cp: shard(sequence)}");
}

// A row-parallel layer fed the sequence shard (mlp.c_proj called on ln_2's
// rows, c_fc dropped): its input must be cut along the features.
TEST(ActivationPlacement, RowLayerFedTheSequenceShardIsCaught) {
  Fixture f;
  RowParallelLinear proj(f.ctx, "mlp.c_proj", ActDim::hidden);
  std::vector<float> w2 = random_vector(kC * kC, 3);
  const Activation ln2{f32(f.x, {kR, kC}), sequence_shard(), "h.0.ln_2"};
  const std::string e = thrown([&] {
    proj.forward({f32(f.dx, {kR, kC}), "h.0.mlp.c_proj"}, ln2, f32(w2, {kC, kC}), f.none);
  });
  EXPECT_EQ(e,
            "mlp.c_proj forward: input 'h.0.ln_2' is {tp: shard(sequence), cp: "
            "shard(sequence)}; expected tp: shard(hidden)");
  EXPECT_TRUE(untouched(f.dx));
}

// The loss over features that are not the vocabulary (the LM head skipped,
// ln_f's rows fed to the loss).
TEST(ActivationPlacement, CrossEntropyOverNonVocabularyColumnsIsCaught) {
  Fixture f;
  VocabParallelCrossEntropy loss(f.ctx);
  std::vector<float> losses(kR, kSentinel);
  std::vector<int32_t> targets(kR, 1);
  const Activation lnf{f32(f.x, {kR, kC}), {AxisPlacement::replicated(), kSeq}, "ln_f"};
  const Activation tgt{i32(targets, {kR}), {AxisPlacement::replicated(), kSeq}, "targets"};
  const std::string e = thrown([&] {
    loss.forward({f32(losses, {kR}), "losses"}, TensorView{}, lnf, tgt, kC, 1.f);
  });
  EXPECT_EQ(e,
            "cross_entropy forward: logits 'ln_f' is {tp: replicated, cp: shard(sequence)}; "
            "expected tp: shard(vocabulary)");
  EXPECT_TRUE(untouched(losses));
}

// Context parallelism: a cp shard fed where a replica is expected. The
// attention of this rank's queries over every rank's keys given this rank's
// own K|V (the all-gather skipped): refused before any block is attended.
TEST(ActivationPlacement, AttentionOverAllKeysGivenOneRanksShardIsCaught) {
  auto ops = cpu_ops(1);
  const int B = 1, T = 4, NH = 2, hs = 4, W = 3 * NH * hs;
  ContextParallelAttention attn(*ops, ContextParallelGroup{}, SequenceChunks(T, 1, true),
                                ComputeDType::fp32, B, NH, NH, hs);
  std::vector<float> qkv = random_vector(B * T * W, 4), saved(B * NH * T, kSentinel);
  const ActivationPlacement heads{AxisPlacement::shard(ActDim::heads), kSeq};
  const Activation q{f32(qkv, {B, T, W}), heads, "h.0.qkv"};
  const Activation own_kv{f32(qkv, {B, T, W}), heads, "h.0.qkv keys, values"};  // not gathered
  const std::string e = thrown([&] { attn.attend(f32(saved, {B * NH * T}), q, own_kv, NH, NH); });
  EXPECT_EQ(e,
            "cp attend: keys and values 'h.0.qkv keys, values' is {tp: shard(heads), cp: "
            "shard(sequence)}; expected {tp: shard(heads), cp: replicated}");
  EXPECT_TRUE(untouched(saved));
}

// And the other way: attention handed the whole sequence (every cp rank's
// rows, cp replicated) where its own rows are expected.
TEST(ActivationPlacement, AttentionGivenAReplicatedSequenceIsCaught) {
  auto ops = cpu_ops(1);
  const int B = 1, T = 4, NH = 2, hs = 4, W = 3 * NH * hs;
  ContextParallelAttention attn(*ops, ContextParallelGroup{}, SequenceChunks(T, 1, true),
                                ComputeDType::fp32, B, NH, NH, hs);
  std::vector<float> qkv = random_vector(B * T * W, 5), out(B * T * NH * hs, kSentinel),
                     saved(static_cast<size_t>(ops->attention_saved_elems(B, NH, T)));
  const Activation whole{f32(qkv, {B, T, W}),
                         {AxisPlacement::shard(ActDim::heads), AxisPlacement::replicated()},
                         "h.0.qkv"};
  const std::string e = thrown([&] {
    attn.forward({f32(out, {B, T, NH * hs}), "h.0.attn"},
                 f32(saved, {static_cast<int64_t>(saved.size())}), whole, NH, NH);
  });
  EXPECT_EQ(e,
            "attention forward: input 'h.0.qkv' is {tp: shard(heads), cp: replicated}; expected "
            "{tp: shard(heads), cp: shard(sequence)}");
  EXPECT_TRUE(untouched(out));
}

// The placements the layers give: the tp mappings change them, a per-row op
// keeps them, every layer output says what it is.
TEST(ActivationPlacement, LayersGiveThePlacementsTheirDualsExpect) {
  Fixture f;
  ColumnParallelLinear c_fc(f.ctx, "c_fc", ActDim::hidden);
  RowParallelLinear proj(f.ctx, "mlp.c_proj", ActDim::hidden);
  Activation ln2{f32(f.x, {kR, kC}), sequence_shard(), "h.0.ln_2"};
  const Activation up = c_fc.forward({f32(f.out, {kR, kN}), "h.0.mlp.gelu"}, ln2,
                                     f32(f.w, {kN, kC}), f.none);
  EXPECT_EQ(ln2.placement.str(), "{tp: replicated, cp: shard(sequence)}") << "gathered in place";
  EXPECT_EQ(up.placement.str(), "{tp: shard(hidden), cp: shard(sequence)}");
  EXPECT_EQ(up.name, "h.0.mlp.gelu");
  std::vector<float> w2 = random_vector(kC * kN, 6), y(kR * kC);
  const Activation down = proj.forward({f32(y, {kR, kC}), "h.0.mlp.c_proj"}, up,
                                       f32(w2, {kC, kN}), f.none);
  EXPECT_EQ(down.placement, sequence_shard()) << "the partial sums reduce-scattered";
  EXPECT_EQ(rowwise(f32(y, {kR, kC}), down, "h.0.res3").placement, sequence_shard());
}

}  // namespace
}  // namespace gt::test
