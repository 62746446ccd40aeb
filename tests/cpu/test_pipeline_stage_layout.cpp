// The parameter side of one pipeline stage (ParameterLayout's StageSpan):
// the stages of a split hold together exactly the whole layout's units
// (names, sizes, shapes), the last stage of a tied model a mirror of the
// embed unit besides; unit lookups answer -1 for what a stage lacks; and
// ShardedParameters on each stage, fed every initial tensor, saves pieces
// whose union is the whole model's, the mirror never among them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "parallel/mesh.hpp"
#include "pipeline_test_support.hpp"
#include "test_util.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {
namespace {

using Case = test::FamilyCase;

ModelConfig model_of(const Case& c) {
  ModelConfig m = c.arch == ModelArch::llama ? test::tiny_llama() : test::tiny_gpt();
  m.n_layer = 4;
  m.tie_embeddings = c.tie;
  return m;
}

using Split = std::vector<StageSpan>;
const std::vector<Split> kSplits = {{{0, 1}, {1, 3}, {3, 4}}, {{0, 2}, {2, 4}}, {{0, 3}, {3, 4}}};

class PipelineStageLayout : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineStageLayout, StagesHoldTheWholeLayoutsUnitsAndTheLastATiedMirror) {
  const ModelConfig m = model_of(GetParam());
  for (const auto& [tp, unit_multiple] : {std::pair{1, 1}, std::pair{2, 4}}) {
    for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
      const ParameterLayout whole(m, tp, tp_rank, unit_multiple);
      EXPECT_TRUE(whole.whole_model());
      for (const Split& split : kSplits) {
        std::vector<std::string> units;  // the stages' own units, in stage order
        int64_t numel = 0;
        for (size_t k = 0; k < split.size(); ++k) {
          const ParameterLayout stage(m, split[k], tp, tp_rank, unit_multiple);
          const bool first = k == 0, last = k + 1 == split.size();
          const std::string at = "stage " + std::to_string(k) + " tp " + std::to_string(tp_rank);
          EXPECT_FALSE(stage.whole_model()) << at;
          EXPECT_EQ(stage.head_unit() >= 0, last) << at;
          EXPECT_EQ(stage.embed_unit() >= 0, first || (last && m.tied_embeddings())) << at;
          numel += stage.global_numel();
          for (int l = 0; l < m.n_layer; ++l) {
            const bool holds = l >= split[k].first_layer && l < split[k].end_layer;
            ASSERT_EQ(stage.block_unit(l) >= 0, holds) << at << " block " << l;
            if (holds) {
              EXPECT_EQ(stage.units()[static_cast<size_t>(stage.block_unit(l))].name,
                        whole.units()[static_cast<size_t>(whole.block_unit(l))].name);
            }
          }
          for (const ParamUnit& u : stage.units()) {
            // Every unit, the mirror too, is the whole layout's unit of that name.
            const auto it = std::find_if(whole.units().begin(), whole.units().end(),
                                         [&](const ParamUnit& w) { return w.name == u.name; });
            ASSERT_NE(it, whole.units().end()) << at << " " << u.name;
            EXPECT_EQ(u.size(), it->size()) << at << " " << u.name;
            EXPECT_EQ(u.mirror, last && !first && u.name == whole.units()[0].name) << at;
            if (!u.mirror) units.push_back(u.name);
          }
          for (const ParamSpec& s : stage.specs()) {
            const ParamSpec& w = whole.at(s.name);
            EXPECT_EQ(s.shape, w.shape) << at << " " << s.name;
            EXPECT_EQ(s.global_shape, w.global_shape) << at << " " << s.name;
            EXPECT_EQ(s.offset - stage.units()[static_cast<size_t>(s.unit)].begin,
                      w.offset - whole.units()[static_cast<size_t>(w.unit)].begin);
            EXPECT_EQ(s.mirror, stage.units()[static_cast<size_t>(s.unit)].mirror);
          }
          for (const ParamSpec& w : whole.specs()) EXPECT_TRUE(stage.in_model(w.name)) << at;
          EXPECT_FALSE(stage.in_model("h.9.ln_1.weight"));
        }
        std::vector<std::string> want;
        for (const ParamUnit& u : whole.units()) want.push_back(u.name);
        EXPECT_EQ(units, want);
        EXPECT_EQ(numel, whole.global_numel());
      }
    }
  }
}

TEST_P(PipelineStageLayout, SpansOutsideTheModelAreRefusedByTheirNumbers) {
  const ModelConfig m = model_of(GetParam());
  for (const StageSpan& s : {StageSpan{2, 2}, StageSpan{0, 5}, StageSpan{-1, 2}}) {
    const std::string e = test::error_message([&] { ParameterLayout(m, s); });
    EXPECT_NE(e.find("is not a non-empty span of the model's 4 blocks"), std::string::npos) << e;
  }
}

using Saved = test::SavedPieces;
constexpr auto collect = test::collect_pieces;

TEST_P(PipelineStageLayout, TheStagesCheckpointPiecesAreTheWholeModelsAndNoMirror) {
  const ModelConfig m = model_of(GetParam());
  auto ops = make_cpu_ops(1);
  const DeviceMesh mesh = DeviceMesh::in_process();
  const ParameterLayout whole(m);
  test::LoadedParameters whole_state(m, whole, mesh, *ops);
  Saved want;
  collect(whole_state.params.pieces_to_save(), want, "whole");

  for (const Split& split : kSplits) {
    Saved got;
    for (size_t k = 0; k < split.size(); ++k) {
      const ParameterLayout layout(m, split[k]);
      // Every tensor fed to every stage: the others' are skipped.
      test::LoadedParameters state(m, layout, mesh, *ops);
      ShardedParameters& params = state.params;
      const std::string at = "stage " + std::to_string(k);
      const std::string e = test::error_message([&] {
        const std::vector<float> x(4);
        params.load_global("h.9.ln_1.weight", x.data());
      });
      EXPECT_NE(e.find("unknown parameter 'h.9.ln_1.weight'"), std::string::npos) << at << e;
      collect(params.pieces_to_save(), got, at);
      // The mirror is loaded (from the same tensor) though never saved.
      const int embed = layout.embed_unit();
      if (embed >= 0 && layout.units()[static_cast<size_t>(embed)].mirror) {
        const auto wte = std::find_if(layout.specs().begin(), layout.specs().end(),
                                      [&](const ParamSpec& s) { return s.unit == embed; });
        bool read = false;
        for (const TensorPiece& p : params.pieces_to_load())
          if (p.name == "param." + wte->name) {
            const auto& w = want.at(p.name).begin()->second;
            EXPECT_EQ(std::vector<float>(p.data, p.data + w.size()), w) << at;
            read = true;
          }
        EXPECT_TRUE(read) << at << ": the mirror is read from a checkpoint";
      }
    }
    EXPECT_EQ(got, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PipelineStageLayout, test::pipeline_families(),
                         test::family_name);

}  // namespace
}  // namespace gt
