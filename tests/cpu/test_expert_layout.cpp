// Expert parallelism's storage (ParameterLayout's ExpertShard and
// LayoutPart): at ep > 1 a rank's layout holds only its E/ep experts of each
// block, in an expert unit per block after every other unit; the dense and
// expert parts hold the same tensors at the same offsets within each unit,
// and the ep ranks' layouts together hold every expert once.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "layout_matrix_models.hpp"
#include "test_util.hpp"
#include "trainer/model/parameter_layout.hpp"

namespace gt {
namespace {

ModelConfig model() {
  ModelConfig m = test::matrix_mixtral();  // 4 experts
  m.n_layer = 3;
  return m;
}

std::string expert_name(int l, int e, const char* w) {
  return "layers." + std::to_string(l) + ".block_sparse_moe.experts." + std::to_string(e) + "." +
         w + ".weight";
}

TEST(ExpertLayout, EachEpRankHoldsItsExpertsInUnitsOfTheirOwn) {
  const ModelConfig m = model();
  const ParameterLayout one(m);
  std::map<std::string, int> holders;  // expert tensor -> ep ranks holding it
  for (int rank = 0; rank < 2; ++rank) {
    const ParameterLayout all(m, {StageSpan{}}, 1, 0, 1, ExpertShard{2, rank});
    // embed, 3 blocks, head, then one expert unit per block.
    ASSERT_EQ(all.units().size(), one.units().size() + 3);
    for (int l = 0; l < m.n_layer; ++l) {
      const int u = all.expert_unit(l);
      ASSERT_EQ(u, static_cast<int>(one.units().size()) + l);
      EXPECT_TRUE(all.units()[static_cast<size_t>(u)].experts);
      EXPECT_EQ(all.units()[static_cast<size_t>(u)].name,
                "layers." + std::to_string(l) + ".block_sparse_moe.experts");
      // Its experts: [2 rank, 2 rank + 2), w1|w3 pairs then the w2s.
      const int e0 = 2 * rank;
      EXPECT_EQ(all.at(expert_name(l, e0, "w1")).offset, all.units()[static_cast<size_t>(u)].begin);
      EXPECT_LT(all.at(expert_name(l, e0 + 1, "w3")).offset, all.at(expert_name(l, e0, "w2")).offset);
      for (int e = 0; e < m.n_experts; ++e)
        for (const char* w : {"w1", "w2", "w3"}) {
          const std::string name = expert_name(l, e, w);
          const bool mine = e / 2 == rank;
          EXPECT_EQ(all.find(name) != nullptr, mine) << name;
          EXPECT_TRUE(all.in_model(name)) << name;
          if (mine) {
            EXPECT_EQ(all.at(name).unit, u) << name;
            ++holders[name];
          }
        }
      // The router stays in the block's unit.
      const std::string gate = "layers." + std::to_string(l) + ".block_sparse_moe.gate.weight";
      EXPECT_EQ(all.at(gate).unit, all.block_unit(l));
    }
    // The whole model's expert count is ep times a rank's.
    EXPECT_EQ(all.expert_unit(m.n_layer), -1);
  }
  EXPECT_EQ(holders.size(), static_cast<size_t>(m.n_layer * m.n_experts * 3));
  for (const auto& [name, n] : holders) EXPECT_EQ(n, 1) << name;
}

TEST(ExpertLayout, ThePartsHoldTheWholesUnitsAtTheSameOffsetsWithinEach) {
  const ModelConfig m = model();
  const ExpertShard shard{2, 1};
  const ParameterLayout all(m, {StageSpan{}}, 1, 0, 1, shard);
  const ParameterLayout dense(m, {StageSpan{}}, 1, 0, 4, shard, LayoutPart::dense);
  const ParameterLayout experts(m, {StageSpan{}}, 1, 0, 2, shard, LayoutPart::experts);
  ASSERT_EQ(dense.units().size() + experts.units().size(), all.units().size());
  EXPECT_EQ(experts.embed_unit(), -1);
  EXPECT_EQ(experts.head_unit(), -1);
  EXPECT_EQ(dense.embed_unit(), all.embed_unit());
  EXPECT_EQ(dense.head_unit(), all.head_unit());
  std::set<std::string> seen;
  for (const ParameterLayout* part : {&dense, &experts})
    for (const ParamSpec& s : part->specs()) {
      const ParamSpec& w = all.at(s.name);
      const ParamUnit& pu = part->units()[static_cast<size_t>(s.unit)];
      const ParamUnit& wu = all.units()[static_cast<size_t>(w.unit)];
      EXPECT_EQ(s.offset - pu.begin, w.offset - wu.begin) << s.name;
      EXPECT_EQ(pu.name, wu.name) << s.name;
      EXPECT_EQ(pu.size() % (part == &dense ? 4 : 2), 0) << pu.name;
      seen.insert(s.name);
    }
  EXPECT_EQ(seen.size(), all.specs().size());
  // The experts part's blocks are the expert units, in layer order.
  for (int l = 0; l < m.n_layer; ++l) {
    EXPECT_EQ(experts.block_unit(l), l);
    EXPECT_EQ(dense.block_unit(l), all.block_unit(l));
    EXPECT_EQ(experts.units()[static_cast<size_t>(l)].name,
              all.units()[static_cast<size_t>(all.expert_unit(l))].name);
  }
}

TEST(ExpertLayout, BadExpertShardsAreRefusedByName) {
  const ModelConfig m = model();
  EXPECT_NE(test::error_message([&] {
              ParameterLayout(m, {StageSpan{}}, 1, 0, 1, ExpertShard{3, 0});
            }).find("parallel.ep=3 must divide model.n_experts=4"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] {
              ParameterLayout(test::matrix_llama(), {StageSpan{}}, 1, 0, 1, ExpertShard{2, 0});
            }).find("a model without experts"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] {
              ParameterLayout(m, {StageSpan{}}, 1, 0, 1, ExpertShard{1, 0},
                              LayoutPart::experts);
            }).find("a layout part other than the whole at parallel.ep=1"),
            std::string::npos);
}

}  // namespace
}  // namespace gt
