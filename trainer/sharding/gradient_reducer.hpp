// GradientReducer: how one rank's gradients become the reduced gradients it
// owns, over the data axes, in one optimizer step. One strategy per layout,
// chosen once at construction (make_gradient_reducer) instead of a branch on
// the ZeRO stage in every hook; each stores exactly its part of the
// ShardedStatePlan (state_plan.hpp) and nothing else:
//
//   fsdp = 1     DdpBuckets: full gradients (T), all-reduced over dp in buckets
//                of parallel.bucket_mb, each started as soon as backward has
//                finished every parameter in it (the flat layout is in
//                reverse backward order) on the last micro-batch.
//   stage 1      ShardAfterLastMicroBatch: full gradients (T) accumulate over
//                the micro-batches; after the last one each unit is
//                reduce-scattered over fsdp into the shard (S) as soon as its
//                backward is done.
//   stages 2, 3  ShardEveryMicroBatch: four unit-sized slots (embed, head,
//                two blocks); every micro-batch reduce-scatters each unit's
//                gradients into the shard, where they accumulate, overlapped
//                with the next unit's backward.
//   HSDP         (dp > 1 with fsdp > 1) the final shards are all-reduced over
//                dp, each as soon as it is final.
//
// Every data-axis reduction runs at parallel.reduce_dtype through a
// GradientWire (gradient_wire.hpp): fp32, or bf16 on the wire into copies
// cut from one allocation the state plan sizes (wire_bf16), widened back
// into the fp32 gradients on completion.
//
// Before a unit's data-axis reduction, the gradients its placement marks
// tp-partial (LayerNorms, wpe: ParamSpec::tp_partial_grad) are all-reduced
// over tp, always in fp32: a few vectors per block, where bf16 would save
// nothing worth a rounding. Collectives start in the same order on every rank (a fixed
// schedule); completion never starts anything.
//
// The hooks, in a step: begin_step(); per micro-batch begin_micro_batch(last),
// then for each unit in backward order before_backward(u), the model writes
// unit_grads(u), after_backward(u); finally finish(), after which owned()
// holds the reduced gradients of what this rank owns (T at fsdp = 1, else
// its shard S). progress() polls the collectives in flight (MPI moves them
// only inside MPI calls). On a pipeline rank of several chunks
// (interleaved_1f1b) the backwards of chunks and micro-batches interleave:
// begin_micro_batch(last) comes before each chunk's backward, `last` when it
// is that chunk's last micro-batch of the step. This works since a chunk's
// last backward follows the last backward of every chunk above it (flat
// order is the reverse of one micro-batch's backward order).
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/sharding/gradient_wire.hpp"
#include "trainer/sharding/shard_geometry.hpp"
#include "trainer/sharding/state_plan.hpp"

namespace gt {

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;

  virtual void begin_step() = 0;
  virtual void begin_micro_batch(bool last) = 0;
  // Where backward writes (accumulates) unit `unit`'s gradients.
  virtual float* unit_grads(int unit) = 0;
  virtual void before_backward(int unit) = 0;
  virtual void after_backward(int unit) = 0;
  virtual void finish() = 0;
  virtual void progress() = 0;
  // The reduced gradients of what this rank owns, valid after finish().
  virtual const Buffer& owned() const = 0;
  // Bytes of gradient storage (ShardedParameters::memory's grads).
  virtual int64_t bytes() const = 0;
};

// What every strategy works with. The references outlive the reducer.
struct GradientReducerContext {
  const ParameterLayout& layout;
  const ShardGeometry& geom;
  const ShardedStatePlan& plan;
  Ops& ops;
  Communicator& dp;
  Communicator& fsdp;
  Communicator& tp;
  double bucket_mb;  // DdpBuckets' bucket size
  ComputeDType reduce_dtype = ComputeDType::fp32;  // parallel.reduce_dtype
};

// The strategy for plan.fsdp and plan.full_grads (see above).
std::unique_ptr<GradientReducer> make_gradient_reducer(const GradientReducerContext& ctx);

}  // namespace gt
