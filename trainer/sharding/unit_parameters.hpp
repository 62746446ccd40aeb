// UnitParameters: where the model reads a unit's parameters from during a
// step, one strategy per layout, chosen once at construction
// (make_unit_parameters) instead of a stage test in every hook:
//
//   WholeParameters     fsdp = 1 or stages 1-2: every rank stores the whole
//                       flat parameters; the hooks have nothing to do.
//   GatheredParameters  stage 3: a rank stores its shard; a unit is
//                       all-gathered over fsdp into one of four unit-sized
//                       slots (embed, head, two blocks) before use, the next
//                       unit's gather prefetched while this one computes. The
//                       two most recent blocks stay in their slots, so
//                       backward re-gathers all but the last two; embed and
//                       head stay gathered from their forward to their
//                       backward. Each micro-batch gathers afresh (the
//                       parameters may have changed).
//
// Hooks, as ParameterStore calls them (trainer/model/parameter_store.hpp):
// begin_forward, then before_forward/after_forward per unit in forward order
// (embed, blocks, head), before_backward/after_backward per unit in backward
// order. Gathers start in the same order on every rank (a fixed schedule);
// completion never starts anything.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/sharding/shard_geometry.hpp"
#include "trainer/sharding/state_plan.hpp"

namespace gt {

class UnitParameters {
 public:
  virtual ~UnitParameters() = default;
  // Unit `unit`'s parameters as the model reads them (valid between its
  // before_* and after_* hooks).
  virtual float* unit_params(int unit) = 0;
  virtual void begin_forward(bool backward_follows) = 0;
  virtual void before_forward(int unit) = 0;
  virtual void after_forward(int unit) = 0;
  virtual void before_backward(int unit) = 0;
  virtual void after_backward(int unit) = 0;
  virtual void progress() = 0;
  // Bytes of the unit slots (0 when the parameters are whole).
  virtual int64_t slot_bytes() const = 0;
};

// `params` is the rank's parameter storage (the whole flat parameters, or
// its shard at stage 3, as plan.full_params says); it outlives the strategy.
std::unique_ptr<UnitParameters> make_unit_parameters(const ParameterLayout& layout,
                                                     const ShardGeometry& geom,
                                                     const ShardedStatePlan& plan,
                                                     const Buffer& params, Ops& ops,
                                                     Communicator& fsdp);

}  // namespace gt
