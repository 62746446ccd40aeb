// RouterBias: aux-loss-free load balancing for a mixture of experts
// (model.router_bias_update_rate > 0; DeepSeek-V3, Megatron-Core's
// --moe-router-enable-expert-bias).
//
// Each block's router has a per-expert bias b (E) added to the router's
// probabilities for choosing the top k only: the combine weights stay the
// renormalised probabilities without it (ops.hpp's moe_router_forward), so
// the bias has no gradient. After every applied optimizer step each bias
// moves against its expert's load error:
//   b_e += rate x sign(mean_e' c_e' - c_e)
// c_e the tokens routed to expert e by that block over the step's global
// batch (counted over the k slots, every data rank's micro-batches, summed
// over the data ranks so that every rank computes the same b); an expert
// above the mean load loses rate, one below gains it, one at the mean keeps
// its bias. A skipped step (non-finite) leaves the biases as they were.
//
// The table holds every block's row (n_layer, E) on every rank (a few
// floats); this rank's models read the rows of the blocks it runs, and the
// update and the checkpoint touch those rows only. Checkpoint tensors:
// "router_bias.model.layers.N.block_sparse_moe.gate", shape [E], saved by
// the rank at data, tp and cp coordinate 0 of the stage holding block N.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/mesh.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/config/config.hpp"
#include "trainer/parallelize/moe_step_stats.hpp"

namespace gt {

class RouterBias {
 public:
  // `layers`: the blocks this rank runs (its pipeline chunks'), ascending.
  RouterBias(Ops& ops, const ModelConfig& cfg, std::vector<int> layers);

  // (n_layer, E) fp32 on the backend: block l's bias is row l.
  TensorView table() const;
  // The step's router counts (this data rank's, stats.layers' rows) summed
  // over `data`, then every held block's bias moved (header). Collective
  // over `data`: every data rank calls it after every applied step.
  void update(const MoeStepStats& stats, Communicator& data);

  // Checkpoint pieces of the held blocks: to save (only on the saving rank of
  // `coord`: data, tp and cp coordinate 0; none elsewhere), or to load
  // (every rank; then finish_load()).
  std::vector<TensorPiece> pieces_to_save(const MeshCoord& coord);
  std::vector<TensorPiece> pieces_to_load();
  void finish_load();  // the loaded rows onto the backend

  // A copy of the table (n_layer x E, row-major), for tests and logs.
  const std::vector<float>& host() const { return host_; }
  // The checkpoint name of block l's bias.
  static std::string tensor_name(int layer);

 private:
  std::vector<TensorPiece> pieces();

  Ops& ops_;
  int L_, E_;
  float rate_;
  std::vector<int> layers_;
  std::vector<float> host_;    // (L, E): the authoritative copy, uploaded after each change
  Buffer table_;               // (L, E) on the backend
  Buffer counts_;              // (L, E) the step's counts, summed over the data ranks
  std::vector<float> counts_host_;
};

}  // namespace gt
