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
  // geom: this rank's segments; full_params: whether the parameters are
  // stored whole (their offsets are flat ones) or as the shard; moments:
  // floats of m and of v; dp_rank, tp_rank: for the replica-owner rule.
  ShardOptimizer(Ops& ops, Communicator& world, const ShardGeometry& geom, bool full_params,
                 int64_t moments, int dp_rank, int tp_rank);

  // The store's owned gradients (grads) and parameters (params), flat fp32;
  // params_bf16: their bf16 copy for AdamW to write in the same pass (empty:
  // none).
  struct State {
    TensorView params, grads, params_bf16;
  };

  // Collective over the world: the unsharded model's gradient norm.
  double grad_norm(const State& s);
  // AdamW step t with the gradients times `clip` (a host factor).
  void step(const State& s, const TrainConfig& tc, double lr, float clip, int64_t t);
  // Collective over the world. The global sum of squared gradients and a
  // finiteness check of `losses` (1-D fp32) are all-reduced on the device;
  // clip_scale turns them into clip_grad_norm_'s factor (tc.grad_clip), NaN
  // when either is not finite, and AdamW (step t) reads it there: a
  // non-finite step changes nothing, on every rank alike.
  void clipped_step(const State& s, const TrainConfig& tc, double lr, int64_t t, TensorView losses);
  struct Outcome {
    double grad_norm;  // before clipping (NaN/inf when not finite)
    bool applied;      // false: the update was skipped (non-finite norm or loss)
  };
  // The last clipped_step's norm and verdict (one read of the device).
  Outcome outcome();

  // The moments, at the same state offsets as the gradients the runs read.
  float* m() { return m_.f32(); }
  float* v() { return v_.f32(); }
  int64_t moment_bytes() const { return static_cast<int64_t>(m_.bytes() + v_.bytes()); }

 private:
  // Sums this rank's counted squares into stats_[0] and the squares of
  // `losses` (when not empty) into [1] (else 0), then all-reduces both.
  void reduce_stats(const TensorView& grads, const TensorView& losses);
  // AdamW over every owned run: the gradient times `clip` and, when not
  // empty, the device factor `scale` (which may skip the step).
  void update(const State& s, const TrainConfig& tc, double lr, float clip, TensorView scale,
              int64_t t);
  TensorView view(float* p, std::initializer_list<int64_t> shape) const;

  Ops& ops_;
  Communicator& world_;
  std::vector<AdamWRun> adamw_runs_;
  std::vector<AdamWRun> norm_runs_;
  Buffer m_, v_;
  // Device scalars of a step: [0] sum of squares, [1] loss check (both
  // all-reduced over the world), [2] clip factor (NaN: skip).
  Buffer stats_;
};

}  // namespace gt
