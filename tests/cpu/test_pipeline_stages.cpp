// The pipeline's stage split (trainer/parallelize/pipeline_stages.hpp): every
// chunk holds at least one block and the chunks add up to the model; the
// default split weighs the LM head as lm_head_block_equivalents() blocks,
// so the last stage holds fewer blocks; explicit parallel.pp_layers come back
// as given; impossible splits are errors naming the numbers. The expected
// values are recomputed from the rule, not written down.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "test_util.hpp"
#include "trainer/parallelize/pipeline_stages.hpp"
#include "trainer/profile/model_flops.hpp"

namespace gt {
namespace {

using test::error_message;

Config config(const std::string& name) {
  return load_config(std::string(GT_SOURCE_DIR) + "/configs/" + name + ".yaml", {});
}

// The heaviest chunk's work under the rule: its blocks, plus the head's
// share on the last chunk.
double heaviest(const std::vector<int>& split, double head) {
  double worst = 0;
  for (size_t c = 0; c < split.size(); ++c)
    worst = std::max(worst, split[c] + (c + 1 == split.size() ? head : 0.0));
  return worst;
}

TEST(PipelineStages, BlockWeightsAreTheFlopCountsBlocks) {
  for (const char* name : {"gpt2_1.5b", "llama3_8b", "llama3_70b"}) {
    const ModelConfig m = config(name).model;
    EXPECT_DOUBLE_EQ(block_matmul_weights(m), block_matmuls(m).total()) << name;
    EXPECT_DOUBLE_EQ(lm_head_block_equivalents(m),
                     double(m.padded_vocab_size()) * m.n_embd / block_matmuls(m).total())
        << name;
  }
}

TEST(PipelineStages, BalancedSplitsOfGpt2XlAndLlama70b) {
  for (const char* name : {"gpt2_1.5b", "llama3_70b"}) {
    const ModelConfig m = config(name).model;
    const double head = lm_head_block_equivalents(m);
    for (int pp : {4, 8, 16})
      for (int v : {1, 2}) {
        const std::string at =
            std::string(name) + " pp=" + std::to_string(pp) + " v=" + std::to_string(v);
        const std::vector<int> split = pipeline_layer_split(m, pp, v, {});
        ASSERT_EQ(split.size(), static_cast<size_t>(pp * v)) << at;
        EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), m.n_layer) << at;
        for (int n : split) EXPECT_GE(n, 1) << at;
        // The head's share shows: the last chunk holds the fewest blocks.
        EXPECT_EQ(split.back(), *std::min_element(split.begin(), split.end())) << at;
        EXPECT_LT(split.back(), *std::max_element(split.begin(), split.end() - 1)) << at;
        // No other split with every chunk >= 1 has a lighter heaviest chunk:
        // check against the best possible with n_last blocks last and the
        // rest spread evenly, for every n_last.
        double best = 1e300;
        const int S = pp * v;
        for (int last = 1; last <= m.n_layer - (S - 1); ++last)
          best =
              std::min(best, std::max(std::ceil(double(m.n_layer - last) / (S - 1)), last + head));
        EXPECT_DOUBLE_EQ(heaviest(split, head), best) << at;
        // The non-last chunks differ by at most one block.
        const auto [lo, hi] = std::minmax_element(split.begin(), split.end() - 1);
        EXPECT_LE(*hi - *lo, 1) << at;
        // Deterministic.
        EXPECT_EQ(pipeline_layer_split(m, pp, v, {}), split) << at;
        // Ranks hold their chunks r, r + p, ...
        const std::vector<int> ranks = pipeline_rank_blocks(split, pp);
        ASSERT_EQ(ranks.size(), static_cast<size_t>(pp)) << at;
        for (int r = 0; r < pp; ++r) {
          int sum = 0;
          for (int c = r; c < S; c += pp) sum += split[static_cast<size_t>(c)];
          EXPECT_EQ(ranks[static_cast<size_t>(r)], sum) << at;
        }
      }
  }
}

TEST(PipelineStages, OneChunkIsTheWholeModelAndExplicitLayersComeBack) {
  const ModelConfig m = config("gpt2_1.5b").model;
  EXPECT_EQ(pipeline_layer_split(m, 1, 1, {}), std::vector<int>{m.n_layer});
  std::vector<int> mine(8, 6);
  EXPECT_EQ(pipeline_layer_split(m, 4, 2, mine), mine);
  mine = {20, 10, 10, 8};
  EXPECT_EQ(pipeline_layer_split(m, 4, 1, mine), mine);
}

TEST(PipelineStages, ImpossibleSplitsNameTheNumbers) {
  const ModelConfig m = config("gpt2_1.5b").model;  // 48 blocks
  auto error = [&](int pp, int v, std::vector<int> layers) {
    return error_message([&] { pipeline_layer_split(m, pp, v, layers); });
  };
  EXPECT_NE(error(0, 1, {}).find("parallel.pp=0 must be >= 1"), std::string::npos);
  EXPECT_NE(error(2, 0, {}).find("parallel.pp_virtual_stages=0 must be >= 1"), std::string::npos);
  EXPECT_NE(error(32, 2, {}).find("pp x pp_virtual_stages = 32 x 2 = 64 chunks"), std::string::npos)
      << error(32, 2, {});
  EXPECT_NE(error(32, 2, {}).find("model.n_layer=48"), std::string::npos);
  EXPECT_NE(
      error(4, 1, {12, 12, 12}).find("3 entries; expected pp x pp_virtual_stages = 4 x 1 = 4"),
      std::string::npos)
      << error(4, 1, {12, 12, 12});
  EXPECT_NE(error(2, 1, {48, 0}).find("parallel.pp_layers[1]=0"), std::string::npos);
  EXPECT_NE(error(2, 1, {24, 23}).find("adds up to 47 blocks; model.n_layer=48"),
            std::string::npos);
}

}  // namespace
}  // namespace gt
