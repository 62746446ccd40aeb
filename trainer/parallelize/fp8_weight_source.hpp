// Fp8WeightSource: where the fp8 linear layers (Fp8Linear) find a weight
// already in fp8 form instead of quantising it themselves. The parameter
// store is one (trainer/model/parameter_store.hpp): under ZeRO-3's fp8
// all-gather (parallel.fp8_allgather) it holds the blocks' fp8 weights as
// the codes it gathered (trainer/sharding/fp8_gathered_weights.hpp).
#pragma once

#include <cstdint>

#include "kernels/core/tensor.hpp"

namespace gt {

class Fp8WeightSource {
 public:
  virtual ~Fp8WeightSource() = default;
  // The fp8 form of the linear weight at `w` (`numel` elements of a unit in
  // use, as the store gave it): its codes (u8, numel, in w's layout) and
  // scale (1), valid while the unit is in use, and true; false when there is
  // none (the layer quantises w itself).
  virtual bool fp8_weight(const float* /*w*/, int64_t /*numel*/, TensorView* /*codes*/,
                          TensorView* /*scale*/) {
    return false;
  }
};

}  // namespace gt
