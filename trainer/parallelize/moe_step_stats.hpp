// MoeStepStats: what a Mixtral rank's routers did over one optimizer step,
// read back once per step for the metrics (aux_loss, expert_imbalance,
// dropped_tokens). A dense model's is empty (micro_batches 0).
#pragma once

#include <cstdint>
#include <vector>

namespace gt {

struct MoeStepStats {
  double aux_sum = 0;      // the micro-batches' load-balancing losses, summed (unscaled)
  int micro_batches = 0;   // how many micro-batches trained (forward with a backward)
  int experts = 0;         // E
  std::vector<float> counts;  // (blocks, E): tokens routed to each expert, over the k slots,
                              // summed over the micro-batches and the micro-batches' ranks;
                              // a pipeline rank's chunks' blocks one after another
  std::vector<int> layers;    // (blocks): the block index of each counts row
  int64_t dropped = 0;     // slots the capacity factor dropped (this rank's rows)
};

}  // namespace gt
