// ShardOptimizer: the optimizer step over the state one rank owns, the
// strategy ShardedParameters runs after its gradients are reduced. It owns
// the AdamW moments (S floats each at fsdp > 1, else T: ShardedStatePlan) and
// the step's device scalars, and describes the owned elements as runs:
//   * AdamW runs (parameter offset, state offset, n, decay), adjacent
//     segments of equal decay merged: one launch per step;
//   * norm runs: the gradient elements this rank counts in the global norm,
//     each element of the unsharded gradient counted once over the world (a
//     replica by its owner only: owns_replica, trainer/parallelize/placement.hpp).
// The parameters and gradients it reads and writes are the store's, passed
// per call as flat views of the backend's memory.
//
// The state may come in several shares (ShardedParameters' parts: at
// parallel.ep > 1 the experts are sharded and reduced over other ranks than
// the rest), each with its own geometry, storage and moments; one norm and
// one clip factor cover them all, so the step is clip_grad_norm_ over the
// whole model, then AdamW on every share.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"
#include "trainer/config/config.hpp"
#include "trainer/sharding/shard_geometry.hpp"

namespace gt {

class ShardOptimizer {
 public:
  // One share of the state. geom: this rank's segments of it; full_params:
  // whether its parameters are stored whole (their offsets are flat ones) or
  // as the shard; moments: floats of m and of v; replica_rank: this rank's
  // index among the ranks holding the same share (the replica-owner rule).
  struct Share {
    const ShardGeometry* geom = nullptr;
    bool full_params = true;
    int64_t moments = 0;
    int replica_rank = 0;
  };
  // tp_rank: for the replica-owner rule.
  ShardOptimizer(Ops& ops, Communicator& world, const std::vector<Share>& shares, int tp_rank);

  // A share's owned gradients (grads) and parameters (params), flat fp32;
  // params_bf16: their bf16 copy for AdamW to write in the same pass (empty:
  // none). One per share, in the shares' order.
  struct State {
    TensorView params, grads, params_bf16;
  };
  using States = std::vector<State>;

  // Collective over the world: the unsharded model's gradient norm.
  double grad_norm(const States& s);
  // AdamW step t with the gradients times `clip` (a host factor).
  void step(const States& s, const TrainConfig& tc, double lr, float clip, int64_t t);
  // Collective over the world. The global sum of squared gradients and a
  // finiteness check of `losses` (1-D fp32) are all-reduced on the device;
  // clip_scale turns them into clip_grad_norm_'s factor (tc.grad_clip), NaN
  // when either is not finite, and AdamW (step t) reads it there: a
  // non-finite step changes nothing, on every rank alike.
  void clipped_step(const States& s, const TrainConfig& tc, double lr, int64_t t,
                    TensorView losses);
  struct Outcome {
    double grad_norm;  // before clipping (NaN/inf when not finite)
    bool applied;      // false: the update was skipped (non-finite norm or loss)
  };
  // The last clipped_step's norm and verdict (one read of the device).
  Outcome outcome();

  // Share `share`'s moments, at the same state offsets as the gradients the
  // runs read.
  float* m(size_t share) { return shares_.at(share).m.f32(); }
  float* v(size_t share) { return shares_.at(share).v.f32(); }
  int64_t moment_bytes() const;

 private:
  // Sums this rank's counted squares of every share into stats_[0] and the
  // squares of `losses` (when not empty) into [1] (else 0), then
  // all-reduces both.
  void reduce_stats(const States& s, const TensorView& losses);
  // AdamW over every owned run: the gradient times `clip` and, when not
  // empty, the device factor `scale` (which may skip the step).
  void update(const States& s, const TrainConfig& tc, double lr, float clip, TensorView scale,
              int64_t t);
  TensorView view(float* p, std::initializer_list<int64_t> shape) const;

  Ops& ops_;
  Communicator& world_;
  struct ShareState {
    std::vector<AdamWRun> adamw_runs;
    std::vector<AdamWRun> norm_runs;
    Buffer m, v;
  };
  std::vector<ShareState> shares_;
  // Device scalars of a step: [0] sum of squares, [1] loss check (both
  // all-reduced over the world), [2] clip factor (NaN: skip), [3] a share's
  // sum of squares before it is added to [0].
  Buffer stats_;
};

}  // namespace gt
