#include "trainer/parallelize/pipeline_stages.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/core/error.hpp"
#include "trainer/parallelize/model_placement.hpp"

namespace gt {

double block_matmul_weights(const ModelConfig& m) {
  // Every block is alike: block 0 of a one-block copy of the model stands for all.
  ModelConfig one = m;
  one.n_layer = 1;
  double weights = 0;
  for (const PlacedUnit& unit : model_placement(one))
    for (const PlacedParameter& p : unit.params)
      if (p.layer == 0 && p.shape.size() == 2)
        weights += static_cast<double>(p.shape[0]) * static_cast<double>(p.shape[1]);
  return weights;
}

double lm_head_block_equivalents(const ModelConfig& m) {
  // The head computes the padding's columns too (micro_batch_flops counts them).
  return static_cast<double>(m.padded_vocab_size()) * m.n_embd / block_matmul_weights(m);
}

std::vector<int> pipeline_layer_split(const ModelConfig& m, int pp, int virtual_stages,
                                      const std::vector<int>& pp_layers) {
  if (pp < 1) fail("pipeline stages: parallel.pp=", pp, " must be >= 1");
  if (virtual_stages < 1)
    fail("pipeline stages: parallel.pp_virtual_stages=", virtual_stages, " must be >= 1");
  const int L = m.n_layer, S = pp * virtual_stages;
  if (!pp_layers.empty()) {
    int sum = 0;
    for (size_t c = 0; c < pp_layers.size(); ++c) {
      if (pp_layers[c] < 1)
        fail("pipeline stages: parallel.pp_layers[", c, "]=", pp_layers[c],
             ": every chunk holds at least one block");
      sum += pp_layers[c];
    }
    if (static_cast<int>(pp_layers.size()) != S)
      fail("pipeline stages: parallel.pp_layers has ", pp_layers.size(), " entries; expected pp x ",
           "pp_virtual_stages = ", pp, " x ", virtual_stages, " = ", S);
    if (sum != L)
      fail("pipeline stages: parallel.pp_layers adds up to ", sum, " blocks; model.n_layer=", L);
    return pp_layers;
  }
  if (S > L)
    fail("pipeline stages: pp x pp_virtual_stages = ", pp, " x ", virtual_stages, " = ", S,
         " chunks of at least one block each; model.n_layer=", L);
  if (S == 1) return {L};
  const double head = lm_head_block_equivalents(m);
  // n_last blocks on the last chunk, the rest over S - 1 chunks: the
  // heaviest chunk's work, minimised; ties go to the larger n_last.
  int best_last = 1;
  double best = std::numeric_limits<double>::infinity();
  for (int last = 1; last <= L - (S - 1); ++last) {
    const int rest = L - last;
    const double heaviest = std::max<double>((rest + S - 2) / (S - 1), last + head);
    if (heaviest <= best) {
      best = heaviest;
      best_last = last;
    }
  }
  const int rest = L - best_last, base = rest / (S - 1), extra = rest % (S - 1);
  std::vector<int> split(static_cast<size_t>(S), base);
  split.back() = best_last;
  for (int k = 0; k < extra; ++k) ++split[static_cast<size_t>(S - 2 - k)];
  return split;
}

std::vector<int> pipeline_rank_blocks(const std::vector<int>& split, int pp) {
  GT_CHECK(pp >= 1 && split.size() % static_cast<size_t>(pp) == 0, "pp=", pp, " with ",
           split.size(), " chunks");
  std::vector<int> blocks(static_cast<size_t>(pp), 0);
  for (size_t c = 0; c < split.size(); ++c) blocks[c % static_cast<size_t>(pp)] += split[c];
  return blocks;
}

}  // namespace gt
