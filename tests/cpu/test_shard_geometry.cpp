// Shard geometry and the tensor-parallel layout: every element of every
// global parameter is held by exactly one (tp rank, fsdp shard), and the
// boxes a segment maps to address exactly the elements a reference slicing
// of the global tensor gives.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "kernels/core/error.hpp"
#include "test_ops_common.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/sharding/shard_geometry.hpp"

namespace gt {
namespace {

ModelConfig small_model() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 24;  // not a multiple of 16: padding inside units
  m.vocab_size = 40;
  m.block_size = 10;
  return m;
}

TEST(ParameterLayout, TensorParallelShapesFollowTheMegatronPlan) {
  const ModelConfig m = small_model();
  const ParameterLayout l(m, 4, 1);
  // The vocabulary of 40 is stored padded to 128 rows: 32 per tp rank.
  EXPECT_EQ(l.at("wte.weight").shape, (std::vector<int64_t>{32, 24}));
  EXPECT_EQ(l.at("wte.weight").global_shape, (std::vector<int64_t>{128, 24}));
  EXPECT_EQ(l.at("wte.weight").pad_rows, 88);
  EXPECT_EQ(l.at("h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{18, 24}));
  EXPECT_EQ(l.at("h.0.attn.c_attn.weight").parts, 3);
  EXPECT_EQ(l.at("h.0.attn.c_proj.weight").shape, (std::vector<int64_t>{24, 6}));
  EXPECT_EQ(l.at("h.1.mlp.c_fc.bias").shape, (std::vector<int64_t>{24}));
  EXPECT_EQ(l.at("h.1.mlp.c_proj.bias").shape, (std::vector<int64_t>{24}));
  EXPECT_TRUE(l.at("h.1.ln_2.bias").tp_partial_grad);
  EXPECT_TRUE(l.at("wpe.weight").tp_partial_grad);
  EXPECT_FALSE(l.at("h.1.mlp.c_proj.bias").tp_partial_grad);  // taken from the gathered grad
  EXPECT_FALSE(l.at("wte.weight").tp_partial_grad);
  // q rows of tp rank 1 start at global row 6, k rows at 24 + 6.
  const ParamSpec& qkv = l.at("h.0.attn.c_attn.weight");
  EXPECT_EQ(l.global_row(qkv, 0), 6);
  EXPECT_EQ(l.global_row(qkv, 6), 30);
  EXPECT_EQ(l.global_row(qkv, 17), 59);
  EXPECT_EQ(l.global_col(l.at("h.0.mlp.c_proj.weight"), 2), 26);
  // tp = 1 is the plain layout, with the same offsets.
  const ParameterLayout one(m), one_again(m, 1, 0, 1);
  EXPECT_EQ(one.total(), one_again.total());
  EXPECT_EQ(one.global_numel(), l.global_numel());
}

TEST(ParameterLayout, RejectsATpThatDoesNotDivideTheModel) {
  ModelConfig m = small_model();
  m.vocab_size = 42;  // padded to 128: tp = 4 divides it
  EXPECT_NO_THROW(ParameterLayout(m, 4, 0));
  m.n_head = 6;  // 24 channels and 6 heads split 3 ways; 128 padded rows do not
  test::expect_error_containing([&] { ParameterLayout(m, 3, 0); },
                                "the vocabulary is padded for tp=1 (128 rows), not for tp=3");
  const ParameterLayout three(padded_for_tp(m, 3), 3, 2);  // 384 rows, 128 a rank
  EXPECT_EQ(three.at("wte.weight").shape[0], 128);
  EXPECT_EQ(three.at("wte.weight").saved_shape()[0], 42);
  m.n_head = 4;
  test::expect_error_containing([&] { ParameterLayout(m, 3, 0); }, "model.n_head=4");
}

TEST(ParameterLayout, CountsParametersWithoutTheVocabularyPadding) {
  ModelConfig m;  // GPT-2 124M
  m.n_layer = 12;
  m.n_head = 12;
  m.n_embd = 768;
  m.vocab_size = 50257;
  m.block_size = 1024;
  const ParameterLayout l(m);
  EXPECT_EQ(l.at("wte.weight").global_shape, (std::vector<int64_t>{50304, 768}));
  EXPECT_EQ(l.global_numel(), 124439808);  // HF's GPT2LMHeadModel, tied
}

// Llama 3 8B (HF config.json dimensions): 8,030,261,248 parameters, HF's
// LlamaForCausalLM count with its untied lm_head; q/k/v split by heads under
// tp (k and v narrower: 8 key/value heads), o and down split by columns.
ModelConfig llama3_8b() {
  ModelConfig m;
  m.arch = ModelArch::llama;
  m.n_layer = 32;
  m.n_head = 32;
  m.n_kv_head = 8;
  m.n_embd = 4096;
  m.multiple_of = 1024;
  m.ffn_dim_multiplier = 1.3;
  m.vocab_size = 128256;
  m.block_size = 8192;
  return m;
}

TEST(ParameterLayout, LlamaFollowsItsPlacementTable) {
  const ModelConfig m = llama3_8b();
  const ParameterLayout one(m);
  EXPECT_EQ(one.global_numel(), 8030261248);
  EXPECT_EQ(one.units().size(), 34u);  // embed, 32 layers, head (norm, lm_head)
  const ParameterLayout l(m, 8, 3);
  EXPECT_EQ(l.at("embed_tokens.weight").shape, (std::vector<int64_t>{128256 / 8, 4096}));
  EXPECT_EQ(l.at("layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{512, 4096}));
  EXPECT_EQ(l.at("layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{128, 4096}));
  EXPECT_EQ(l.at("layers.0.self_attn.o_proj.weight").shape, (std::vector<int64_t>{4096, 512}));
  EXPECT_EQ(l.at("layers.31.mlp.gate_proj.weight").shape, (std::vector<int64_t>{1792, 4096}));
  EXPECT_EQ(l.at("layers.31.mlp.down_proj.weight").shape, (std::vector<int64_t>{4096, 1792}));
  EXPECT_EQ(l.at("lm_head.weight").shape, (std::vector<int64_t>{128256 / 8, 4096}));
  EXPECT_TRUE(l.at("layers.2.input_layernorm.weight").tp_partial_grad);
  EXPECT_TRUE(l.at("norm.weight").tp_partial_grad);
  EXPECT_FALSE(l.at("layers.2.input_layernorm.weight").decay);
  EXPECT_TRUE(l.at("lm_head.weight").decay);
  // k rows of tp rank 3 are heads 3 (of 8): global rows 384.. 511.
  EXPECT_EQ(l.global_row(l.at("layers.0.self_attn.k_proj.weight"), 0), 384);
  EXPECT_EQ(l.global_col(l.at("layers.0.self_attn.o_proj.weight"), 0), 3 * 512);
  // Tied (Llama 3.2 1B's choice): no lm_head, 128256 * 4096 fewer.
  ModelConfig tied = m;
  tied.tie_embeddings = true;
  EXPECT_EQ(ParameterLayout(tied).find("lm_head.weight"), nullptr);
  EXPECT_EQ(ParameterLayout(tied).global_numel(), 8030261248 - 128256LL * 4096);
  // tp must divide the key/value heads too.
  test::expect_error_containing([&] { ParameterLayout(m, 16, 0); },
                                "parallel.tp=16 must divide model.n_head=32, model.n_kv_head=8");
}

// The shipped Llama configs load and count HF's parameters: 8B
// 8,030,261,248 and 70B 70,553,706,496 (meta-llama's model cards), the tiny
// one what its comment says.
TEST(ParameterLayout, ShippedLlamaConfigsCountHfsParameters) {
  auto model_of = [](const std::string& name) {
    return load_config(std::string(GT_SOURCE_DIR) + "/configs/" + name + ".yaml", {}).model;
  };
  EXPECT_EQ(ParameterLayout(model_of("llama3_8b")).global_numel(), 8030261248);
  EXPECT_EQ(ParameterLayout(model_of("llama3_70b")).global_numel(), 70553706496);
  const ModelConfig tiny = model_of("llama_tiny");
  EXPECT_EQ(tiny.ffn_width(), 352);
  EXPECT_EQ(tiny.kv_heads(), 2);
}

TEST(ShardGeometry, UnitsArePaddedAndShardsCoverEachUnitOnce) {
  const ModelConfig m = small_model();
  for (int fsdp : {1, 2, 3, 4}) {
    const ParameterLayout l(m, 2, 0, fsdp);
    int64_t covered = 0;
    for (int r = 0; r < fsdp; ++r) {
      ShardGeometry g(l, fsdp, r);
      for (size_t u = 0; u < l.units().size(); ++u) {
        EXPECT_EQ(l.units()[u].size() % fsdp, 0);
        EXPECT_EQ(g.shard_begin(static_cast<int>(u)),
                  l.units()[u].begin + r * g.shard_size(static_cast<int>(u)));
      }
      for (const auto& s : g.owned()) covered += s.size();
    }
    int64_t real = 0;
    for (const auto& s : l.specs()) real += s.numel;
    EXPECT_EQ(covered, real) << "fsdp=" << fsdp;  // each real element owned exactly once
  }
}

// Every (tp rank, fsdp rank) maps its owned segments to global boxes; counting
// each global element's owners must give exactly one everywhere, and the
// element a box addresses must be the one the reference slicing holds.
TEST(ShardGeometry, BoxesTileEveryGlobalTensorExactlyOnce) {
  const ModelConfig m = small_model();
  const ParameterLayout global(m);
  for (auto [tp, fsdp] : {std::pair<int, int>{1, 1}, {2, 1}, {1, 3}, {2, 2}, {4, 3}}) {
    SCOPED_TRACE(testing::Message() << "tp=" << tp << " fsdp=" << fsdp);
    std::map<std::string, std::vector<int>> owners;
    for (const auto& s : global.specs()) owners[s.name].assign(static_cast<size_t>(s.numel), 0);
    for (int t = 0; t < tp; ++t) {
      const ParameterLayout l(m, tp, t, fsdp);
      for (int f = 0; f < fsdp; ++f) {
        ShardGeometry g(l, fsdp, f);
        for (const auto& seg : g.owned()) {
          const ParamSpec& s = *seg.spec;
          const int64_t gcols = cols_2d(s.global_shape), lcols = cols_2d(s.shape);
          int64_t seen = 0;
          for (const auto& b : segment_boxes(l, s, seg.local_begin, seg.local_end)) {
            EXPECT_EQ(b.offset, seen);
            for (int64_t r = 0; r < b.rows; ++r)
              for (int64_t c = 0; c < b.cols; ++c) {
                owners[s.name][static_cast<size_t>((b.row0 + r) * gcols + b.col0 + c)]++;
                // The local element this box position stands for.
                const int64_t local = seg.local_begin + b.offset + r * b.cols + c;
                EXPECT_EQ(l.global_row(s, local / lcols), b.row0 + r);
                EXPECT_EQ(l.global_col(s, local % lcols), b.col0 + c);
              }
            seen += b.rows * b.cols;
          }
          EXPECT_EQ(seen, seg.size());
        }
      }
    }
    for (const auto& [name, count] : owners) {
      // Replicated tensors are owned once per tp rank; split ones once.
      const int want = (tp > 1 && ParameterLayout(m, tp, 0).at(name).split == TpSplit::replicated)
                           ? tp
                           : 1;
      for (size_t i = 0; i < count.size(); ++i)
        ASSERT_EQ(count[i], want) << name << " element " << i;
    }
  }
}

}  // namespace
}  // namespace gt
