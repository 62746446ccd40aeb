// A pipeline rank of several chunks (interleaved_1f1b's virtual stages: rank
// r of p holds stages r, r + p, ...) as ONE ParameterLayout and one store:
// the ranks' units and saved pieces are together the whole model's, none
// twice, the mirror of a tied wte on the rank of the last chunk only; chunks
// out of order, overlapping or empty are refused by their numbers; and one
// model per chunk over the rank's one store computes, stage by stage, the
// whole model's loss and gradients bit for bit in fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "parallel/mesh.hpp"
#include "pipeline_test_support.hpp"
#include "test_util.hpp"
#include "trainer/model/make_model.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {
namespace {

using Case = test::FamilyCase;

ModelConfig model_of(const Case& c, int n_layer) {
  ModelConfig m = c.arch == ModelArch::llama ? test::tiny_llama() : test::tiny_gpt();
  m.n_layer = n_layer;
  m.tie_embeddings = c.tie;
  return m;
}

// Rank r's chunks when p * v stages of one block each cut the model: the
// stages r, r + p, ... (stage s is chunk s / p of rank s % p).
std::vector<StageSpan> rank_chunks(int rank, int p, int v) {
  std::vector<StageSpan> chunks;
  for (int k = 0; k < v; ++k) chunks.push_back({k * p + rank, k * p + rank + 1});
  return chunks;
}

const ParamUnit& unit_at(const ParameterLayout& l, int unit) {
  return l.units()[static_cast<size_t>(unit)];
}

class PipelineChunks : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineChunks, RanksOfTwoChunksHoldTheWholeLayoutsUnitsOnce) {
  for (const int p : {2, 3}) {
    const int v = 2;
    const ModelConfig m = model_of(GetParam(), p * v);
    for (const auto& [tp, unit_multiple] : {std::pair{1, 1}, std::pair{2, 4}}) {
      for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
        const ParameterLayout whole(m, tp, tp_rank, unit_multiple);
        std::multiset<std::string> units;  // every rank's own units (no mirror)
        int64_t numel = 0;
        for (int r = 0; r < p; ++r) {
          const std::vector<StageSpan> chunks = rank_chunks(r, p, v);
          const ParameterLayout rank(m, chunks, tp, tp_rank, unit_multiple);
          const std::string at = "p " + std::to_string(p) + " rank " + std::to_string(r) + " tp " +
                                 std::to_string(tp_rank);
          const bool first = r == 0, last = r == p - 1;  // holds block 0, block n_layer - 1
          EXPECT_FALSE(rank.whole_model()) << at;
          ASSERT_EQ(rank.chunks().size(), chunks.size()) << at;
          for (size_t k = 0; k < chunks.size(); ++k) {
            EXPECT_EQ(rank.chunks()[k].first_layer, chunks[k].first_layer) << at;
            EXPECT_EQ(rank.chunks()[k].end_layer, chunks[k].end_layer) << at;
          }
          EXPECT_EQ(rank.head_unit() >= 0, last) << at;
          EXPECT_EQ(rank.embed_unit() >= 0, first || (last && m.tied_embeddings())) << at;
          EXPECT_FALSE(rank.embed_read_by_two_chunks()) << at;
          // Units: [embed] the blocks in layer order [mirror head].
          std::vector<std::string> want_order;
          if (first) want_order.push_back("embed");
          for (int l = 0; l < m.n_layer; ++l) {
            const bool holds = l % p == r;
            ASSERT_EQ(rank.block_unit(l) >= 0, holds) << at << " block " << l;
            if (!holds) continue;
            want_order.push_back(unit_at(whole, whole.block_unit(l)).name);
            EXPECT_EQ(unit_at(rank, rank.block_unit(l)).name, want_order.back()) << at;
            EXPECT_EQ(rank.block_unit(l), rank.first_block_unit() + l / p) << at;
          }
          EXPECT_EQ(rank.block_unit(-1), -1);
          EXPECT_EQ(rank.block_unit(m.n_layer), -1);
          if (last && !first && m.tied_embeddings()) want_order.push_back("embed");
          if (last) want_order.push_back("head");
          std::vector<std::string> order;
          for (const ParamUnit& u : rank.units()) {
            order.push_back(u.name);
            const auto it = std::find_if(whole.units().begin(), whole.units().end(),
                                         [&](const ParamUnit& w) { return w.name == u.name; });
            ASSERT_NE(it, whole.units().end()) << at << " " << u.name;
            EXPECT_EQ(u.size(), it->size()) << at << " " << u.name;
            EXPECT_EQ(u.mirror, last && !first && u.name == "embed") << at;
            if (!u.mirror) units.insert(u.name);
          }
          EXPECT_EQ(order, want_order) << at;
          for (const ParamSpec& s : rank.specs()) {
            const ParamSpec& w = whole.at(s.name);
            EXPECT_EQ(s.shape, w.shape) << at << " " << s.name;
            EXPECT_EQ(s.offset - unit_at(rank, s.unit).begin,
                      w.offset - unit_at(whole, w.unit).begin)
                << at << " " << s.name;
          }
          for (const ParamSpec& w : whole.specs()) EXPECT_TRUE(rank.in_model(w.name)) << at;
          const std::string e = test::error_message([&] { (void)rank.first_layer(); });
          EXPECT_NE(e.find("a layout of 2 pipeline chunks"), std::string::npos) << e;
          numel += rank.global_numel();
        }
        std::multiset<std::string> want;
        for (const ParamUnit& u : whole.units()) want.insert(u.name);
        EXPECT_EQ(units, want) << "p " << p;
        EXPECT_EQ(numel, whole.global_numel()) << "p " << p;
      }
    }
  }
}

TEST_P(PipelineChunks, OneChunkIsTheStageLayoutAndTheWholeModelIsUnchanged) {
  const ModelConfig m = model_of(GetParam(), 4);
  for (const StageSpan span : {StageSpan{0, -1}, StageSpan{1, 3}}) {
    const ParameterLayout one(m, span, 2, 1, 4);
    const ParameterLayout chunks(m, std::vector<StageSpan>{span}, 2, 1, 4);
    ASSERT_EQ(one.units().size(), chunks.units().size());
    for (size_t u = 0; u < one.units().size(); ++u) {
      EXPECT_EQ(one.units()[u].name, chunks.units()[u].name);
      EXPECT_EQ(one.units()[u].begin, chunks.units()[u].begin);
      EXPECT_EQ(one.units()[u].end, chunks.units()[u].end);
    }
    EXPECT_EQ(one.total(), chunks.total());
    EXPECT_EQ(chunks.first_layer(), span.first_layer);
    EXPECT_EQ(chunks.end_layer(), span.end_layer < 0 ? 4 : span.end_layer);
  }
  // The whole model: embed 0, block l at 1 + l, head last, packed in that order.
  const ParameterLayout whole(m);
  EXPECT_TRUE(whole.whole_model());
  EXPECT_EQ(whole.embed_unit(), 0);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(whole.block_unit(l), 1 + l);
  EXPECT_EQ(whole.head_unit(), 5);
  int64_t end = 0;
  for (const ParamUnit& u : whole.units()) {
    EXPECT_EQ(u.begin, end) << u.name;
    end = u.end;
  }
  EXPECT_EQ(end, whole.total());
}

TEST_P(PipelineChunks, ChunksOutOfOrderOverlappingOrEmptyAreRefusedByTheirNumbers) {
  const ModelConfig m = model_of(GetParam(), 4);
  using Chunks = std::vector<StageSpan>;
  const std::vector<std::pair<Chunks, std::string>> bad = {
      {{{2, 3}, {0, 1}},
       "pipeline chunk 1 of 2 of blocks [0, 1) does not come after chunk 0 of "
       "blocks [2, 3)"},
      {{{0, 2}, {1, 3}},
       "pipeline chunk 1 of 2 of blocks [1, 3) does not come after chunk 0 of "
       "blocks [0, 2)"},
      {{{0, 1}, {2, 2}},
       "pipeline chunk 1 of 2 of blocks [2, 2) is not a non-empty span of the "
       "model's 4 blocks"},
      {{{0, 1}, {3, 5}}, "pipeline chunk 1 of 2 of blocks [3, 5) is not a non-empty span"},
      {{}, "a parameter layout of no pipeline chunks"},
  };
  for (const auto& [chunks, want] : bad) {
    const std::string e = test::error_message([&] { ParameterLayout(m, chunks); });
    EXPECT_NE(e.find(want), std::string::npos) << e;
  }
}

using Saved = test::SavedPieces;
constexpr auto collect = test::collect_pieces;

TEST_P(PipelineChunks, TheRanksCheckpointPiecesAreTheWholeModelsAndNoMirror) {
  auto ops = make_cpu_ops(1);
  const DeviceMesh mesh = DeviceMesh::in_process();
  for (const int p : {2, 3}) {
    const ModelConfig m = model_of(GetParam(), 2 * p);
    const ParameterLayout whole(m);
    test::LoadedParameters whole_state(m, whole, mesh, *ops);
    Saved want;
    collect(whole_state.params.pieces_to_save(), want, "whole");
    Saved want_read;
    collect(whole_state.params.pieces_to_load(), want_read, "whole");
    Saved got, got_read;
    for (int r = 0; r < p; ++r) {
      const ParameterLayout layout(m, rank_chunks(r, p, 2));
      // Every tensor fed to every rank: the others' are skipped.
      test::LoadedParameters state(m, layout, mesh, *ops);
      ShardedParameters& params = state.params;
      const std::string at = "p " + std::to_string(p) + " rank " + std::to_string(r);
      collect(params.pieces_to_save(), got, at);
      // A rank reads what it saves and its mirror, read, never saved.
      std::vector<TensorPiece> read;
      for (const TensorPiece& piece : params.pieces_to_load()) {
        const std::string name = piece.name.substr(piece.name.find('.') + 1);  // "param.<name>"
        if (!layout.at(name).mirror) read.push_back(piece);
      }
      collect(read, got_read, at);
    }
    EXPECT_EQ(got, want) << "p " << p;
    EXPECT_EQ(got_read, want_read) << "p " << p;
  }
}

// p = 2, v = 2 on 4 blocks: rank 0 runs stages 0 and 2 (blocks [0,1), [2,3)),
// rank 1 stages 1 and 3 (blocks [1,2), [3,4)). Each rank: one layout, one
// store, one model per chunk.
TEST_P(PipelineChunks, OneModelPerChunkOverOneStoreComputesTheWholeModelsGradients) {
  const ModelConfig m = model_of(GetParam(), 4);
  const int p = 2, v = 2;
  auto ops = make_cpu_ops(1);
  const test::MicroBatch mb(m);
  const int B = mb.B, T = mb.T;
  const auto& tokens = mb.tokens;
  const auto& targets = mb.targets;
  const float scale = mb.scale;
  test::WholeModelStep whole(m, *ops, mb);

  struct Rank {
    ParameterLayout layout;
    LocalParameters store;
    std::vector<std::unique_ptr<CausalLM>> models;  // one per chunk
  };
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < p; ++r) {
    const ParameterLayout layout(m, rank_chunks(r, p, v));
    auto rank = std::unique_ptr<Rank>(new Rank{layout, LocalParameters(layout, *ops), {}});
    test::fill_initial(m, rank->layout, rank->store, *ops, 9);
    for (const StageSpan& chunk : rank->layout.chunks()) {
      auto model = make_model(m, *ops, B, T, rank->layout, rank->store, TensorParallelGroup{},
                              Recompute::none, ComputeDType::fp32);
      // Not yet told its chunk: no forward; a span not a chunk: refused.
      EXPECT_FALSE(model->stage_set());
      std::string e =
          test::error_message([&] { model->forward(tokens.data(), targets.data(), B, T, scale); });
      EXPECT_NE(e.find("before set_pipeline_stage()"), std::string::npos) << e;
      e = test::error_message([&] { model->set_pipeline_stage({0, 2}); });
      const std::string chunks = r == 0 ? "[0, 1) [2, 3)" : "[1, 2) [3, 4)";
      EXPECT_NE(e.find("is not one of the parameter layout's chunks " + chunks), std::string::npos)
          << e;
      model->set_pipeline_stage({chunk.first_layer, chunk.end_layer});
      EXPECT_EQ(model->first_layer(), chunk.first_layer);
      rank->models.push_back(std::move(model));
    }
    ranks.push_back(std::move(rank));
  }
  const int S = p * v;
  auto stage_model = [&](int s) -> CausalLM& {
    return *ranks[static_cast<size_t>(s % p)]->models[static_cast<size_t>(s / p)];
  };
  Rank &first = *ranks.front(), &last = *ranks.back();

  float got_loss = 0.f;
  for (int s = 0; s < S; ++s) {
    if (s > 0)
      ops->copy(stage_model(s).stage_boundary(B, T).input,
                stage_model(s - 1).stage_boundary(B, T).output);
    got_loss = stage_model(s).forward(tokens.data(), targets.data(), B, T, scale);
  }
  for (int s = S; s-- > 0;) {
    if (s + 1 < S)
      ops->copy(stage_model(s).stage_boundary(B, T).output_grad,
                stage_model(s + 1).stage_boundary(B, T).input_grad);
    if (s == 0 && m.tied_embeddings()) {
      test::fold_mirror_grads({&first.layout, &first.store}, {&last.layout, &last.store});
      if (HasFatalFailure()) return;
    }
    stage_model(s).backward();
  }

  EXPECT_EQ(got_loss, whole.loss);
  std::vector<test::SplitPart> parts;
  for (const auto& rank : ranks) parts.push_back({&rank->layout, &rank->store});
  test::expect_split_grads(whole, parts);
}

// p = 1 with two chunks of a tied model: "embed" read by both ends.
TEST_P(PipelineChunks, BothEndsOnOneRankShareTheEmbedUnit) {
  const ModelConfig m = model_of(GetParam(), 4);
  const ParameterLayout layout(m, std::vector<StageSpan>{{0, 2}, {2, 4}});
  EXPECT_EQ(layout.embed_read_by_two_chunks(), m.tied_embeddings());
  EXPECT_EQ(layout.embed_unit(), 0);
  EXPECT_FALSE(unit_at(layout, 0).mirror);
  EXPECT_EQ(layout.units().size(), 6u);  // embed, four blocks, head: no mirror
}

INSTANTIATE_TEST_SUITE_P(Families, PipelineChunks, test::pipeline_families(), test::family_name);

}  // namespace
}  // namespace gt
