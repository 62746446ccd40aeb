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
//                       backward. Each forward gathers afresh (the
//                       parameters may have changed). With fp8 all-gather
//                       (Fp8GatherOptions, fp8_gathered_weights.hpp) a
//                       block's fp8 weights travel as codes and the rest of
//                       its parameters in fp32 beside them.
//
// Hooks, as ParameterStore calls them (trainer/model/parameter_store.hpp):
// begin_forward, then before_forward/after_forward per unit in forward order
// (embed, blocks, head), before_backward/after_backward per unit in backward
// order. Gathers start in the same order on every rank (a fixed schedule);
// completion never starts anything.
//
// Pipeline stages (ParameterLayout's StageSpan): the same, over the stage's
// units [embed] blocks [mirror head], for any order of whole forward and
// backward passes of different micro-batches (a pipeline schedule's: 1F1B
// runs F1 between F0 and B0, so B0 finds F1's gathers in the slots; they
// hold the same values within a step). A pass asks for whatever it needs and
// gets it gathered, resident or not; the prefetch (forward_prefetch,
// backward_prefetch) never looks past the stage's ends, since what comes
// after a pass (a forward or a backward) is the executor's.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/sharding/fp8_gathered_weights.hpp"
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
  // The parameters changed (AdamW, loading): what is derived from them is stale.
  virtual void parameters_changed() {}
  // Fp8WeightSource::fp8_weight (the store answers through its units).
  virtual bool fp8_weight(const float* /*w*/, int64_t /*numel*/, TensorView* /*codes*/,
                          TensorView* /*scale*/) {
    return false;
  }
};

// The unit stage 3 prefetches when `unit`'s forward (backward) begins on
// `layout`, -1 for none: the next unit of the pass within the layout's
// units, a pure function of the layout so that every rank of an fsdp group
// starts the same gathers. Whole model, forward: embed, block 0 .. the last
// block, head; backward: embed -> head -> the last block .. block 0 ->
// embed (resident then: the whole model's embed is in use throughout its
// backward). A stage: its own ends (a first stage's last block and a last
// stage's first block prefetch nothing, nor does a middle stage's lowest
// block in backward); a tied last stage's head prefetches its mirror of
// embed (GPT's LM head reads it next), and the mirror prefetches the head
// in backward, as embed does. A rank of several chunks (interleaved_1f1b):
// each chunk's own ends likewise, never into another chunk's blocks.
int forward_prefetch(const ParameterLayout& layout, int unit);
int backward_prefetch(const ParameterLayout& layout, int unit);

// `params` is the rank's parameter storage (the whole flat parameters, or
// its shard at stage 3, as plan.full_params says); it outlives the strategy.
// fp8: stage 3 only (whole parameters have nothing to gather).
std::unique_ptr<UnitParameters> make_unit_parameters(const ParameterLayout& layout,
                                                     const ShardGeometry& geom,
                                                     const ShardedStatePlan& plan,
                                                     const Buffer& params, Ops& ops,
                                                     Communicator& fsdp, Communicator& tp,
                                                     const Fp8GatherOptions& fp8 = {});

}  // namespace gt
