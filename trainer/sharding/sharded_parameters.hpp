// ShardedParameters: one rank's parameters, gradients and AdamW state for a
// layout dp x fsdp x cp x tp, and every data-axis collective of a training
// step. It is the ParameterStore the model reads from; the model's unit
// hooks are where communication starts (DeviceMesh axes: dp, fsdp, tp).
// Under context parallelism the "dp" and "fsdp" below are the replica and
// shard groups of data_parallel_groups.hpp, cp folded into one of them
// (dp x cp at fsdp = 1, fsdp x cp beyond): f then counts fsdp x cp ranks. It holds the
// parameters, their bf16 copy and the checkpoint pieces, and delegates to
// strategies chosen at construction: reading a unit's parameters (whole, or
// gathered with prefetch at stage 3) to UnitParameters
// (unit_parameters.hpp), the gradients and their reduction to a
// GradientReducer (gradient_reducer.hpp), the norm and AdamW to a
// ShardOptimizer (shard_optimizer.hpp).
//
// What each rank stores (T = this tp rank's flat parameter count, padded; f =
// fsdp), buffer by buffer as ShardedStatePlan (state_plan.hpp) sizes it:
//   fsdp = 1        params T, grads T, AdamW m+v 2T. Gradients are all-reduced
//                   over dp in buckets of parallel.bucket_mb, each started as
//                   soon as backward has finished every parameter in it (the
//                   flat layout is in reverse backward order) on the last
//                   micro-batch, and waited only before the optimizer.
//   fsdp_stage 1    params T, grads T (+ the reduced shard T/f), m+v 2T/f. After
//                   the last micro-batch each unit's gradients are
//                   reduce-scattered as soon as its backward is done; the
//                   optimizer updates the shard and all-gathers the parameters.
//   fsdp_stage 2    params T, grads T/f (+ 4 unit buffers), m+v 2T/f. Every
//                   micro-batch reduce-scatters each unit's gradients into the
//                   shard (accumulated), overlapped with the next unit's backward.
//   fsdp_stage 3    params T/f (+ 4 unit buffers), grads as stage 2, m+v 2T/f.
//                   A block's parameters are all-gathered before use, the next
//                   block's gather prefetched while the current one computes;
//                   the two most recent blocks stay in their buffers, so
//                   backward re-gathers all but the last two. embed and head
//                   stay gathered from their forward to their backward.
//   dp > 1 with fsdp > 1 (HSDP): the reduced shards are all-reduced over dp.
//   bf16 runs with whole parameters add their bf16 copy (T/2 in fp32 terms),
//   written by AdamW in the same pass, and the model casts no weight.
// On a pipeline stage's layout (ParameterLayout's StageSpan) all of this
// holds within the stage, its units [embed] blocks [mirror head]; the
// forwards and backwards of different micro-batches may interleave as a
// pipeline schedule runs them, over several model instances sharing the
// store (stage 3's gathers and stages 2-3's reductions hold for any such
// order: unit_parameters.hpp, gradient_reducer.cpp), and on a pipeline
// rank's layout of several chunks (interleaved_1f1b). The mirror of wte
// is stored like any unit; the grad norm skips it (counted by the first
// stage), so its world-wide sum is the whole model's.
// Under tensor parallelism the gradients of parameters marked tp_partial_grad
// (LayerNorms, wpe) are all-reduced over tp before the data-axis reduction.
//
// Expert parallelism (parallel.ep > 1): a rank stores only its experts
// (ParameterLayout's expert units), and what holds above holds for them over
// the expert-data-parallel group (the mesh's edp: the ranks holding the same
// experts) instead of the data axes: at fsdp = 1 their gradients are
// all-reduced over edp; at fsdp > 1 their state is sharded over the whole of
// edp (no replicas). So the store keeps two parts, the dense one and the
// experts', each its own layout, geometry, plan, storage, reducer and unit
// strategy; one ShardOptimizer takes one norm over both. A block's hooks
// start its expert unit's too (gathered with it, reduced after it), so the
// model sees one store whose units are the whole layout's. At ep = 1 there
// is one part, the whole layout.
//
// Invariants: collectives on each axis start in the same order on every rank
// (a fixed schedule; completions never trigger launches); padding elements are
// zero in every buffer; no rank's storage overlaps another's in the
// checkpoint pieces it saves (each replica is written by its owner:
// owns_replica, trainer/parallelize/placement.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/mesh.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/sharding/data_parallel_groups.hpp"
#include "trainer/sharding/gradient_reducer.hpp"
#include "trainer/sharding/shard_geometry.hpp"
#include "trainer/sharding/shard_optimizer.hpp"
#include "trainer/sharding/state_plan.hpp"
#include "trainer/sharding/unit_parameters.hpp"

namespace gt {

struct MemoryFigures {
  int64_t params = 0, grads = 0, optimizer = 0;                    // bytes this rank holds
  int64_t params_unsharded = 0, grads_unsharded = 0, optimizer_unsharded = 0;  // tp shard, one rank
};

class ShardedParameters final : public ParameterStore {
 public:
  // bf16_params: keep the parameters' bf16 copy for bf16 GEMMs
  // (ParameterStore::keeps_bf16_params) where the parameters are whole
  // (fsdp = 1 or stages 1-2); stage 3 gathers units and the model casts.
  // reduce_dtype: parallel.reduce_dtype, the precision of the gradient
  // reductions over dp and fsdp (gradient_reducer.hpp).
  // fp8: parallel.fp8_allgather (stage 3; the layout's units padded to 4 x
  // the shard degree; the dense part's only: the experts' GEMMs are not fp8,
  // so their units are gathered in fp32).
  // parts: at layout.experts().ep > 1 its LayoutPart::dense and ::experts
  // layouts (the dense one padded as `layout`, the experts' to
  // expert_shard_degree), kept by the store; none at ep = 1.
  ShardedParameters(const ParameterLayout& layout, const DeviceMesh& mesh, FsdpStage fsdp_stage,
                    double bucket_mb, Ops& ops, bool bf16_params = false,
                    ComputeDType reduce_dtype = ComputeDType::fp32,
                    const Fp8GatherOptions& fp8 = {},
                    std::vector<std::unique_ptr<ParameterLayout>> parts = {});
  ~ShardedParameters() override;
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  // ParameterStore.
  float* unit_params(int unit) override;
  float* unit_grads(int unit) override;
  bool keeps_bf16_params() const override { return keeps_bf16_; }
  const uint16_t* unit_params_bf16(int unit) override;
  void begin_forward(bool backward_follows) override;
  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;
  bool fp8_weight(const float* w, int64_t numel, TensorView* codes, TensorView* scale) override;

  // One optimizer step: begin_step(); for each micro-batch
  // begin_micro_batch(last) + model forward/backward; finish_gradients();
  // then either clipped_adamw_step() + step_outcome() (the trainer: norm,
  // clip factor and the skip decision stay on the device, read once after)
  // or grad_norm() + adamw_step() (a host clip factor).
  void begin_step();
  void begin_micro_batch(bool last);
  void finish_gradients();
  double grad_norm();  // collective over the world; the unsharded model's norm
  // After finish_gradients: the reduced gradients this rank owns of unit
  // `unit` (the whole unit at fsdp = 1, else its shard), to be changed in
  // place before the optimizer (the pipeline's tied-embedding sum).
  TensorView owned_unit_grads(int unit);
  void adamw_step(const TrainConfig& tc, double lr, float clip, int64_t t);
  // Collective over the world. The global sum of squared gradients and a
  // finiteness check of `losses` (this rank's, any 1-D fp32 view of the
  // backend's memory) are all-reduced on the device; clip_scale turns them
  // into clip_grad_norm_'s factor (tc.grad_clip), NaN when either is not
  // finite, and AdamW (step t) reads it there: a non-finite step changes
  // nothing, on every rank alike.
  void clipped_adamw_step(const TrainConfig& tc, double lr, int64_t t, TensorView losses);
  using StepOutcome = ShardOptimizer::Outcome;  // grad_norm (before clipping), applied
  // The last clipped_adamw_step's norm and verdict (one read of the device).
  StepOutcome step_outcome();

  // Copies this rank's part of a global parameter (the whole tensor of
  // `global.global_shape`, as for_each_initial_parameter gives it). On a
  // pipeline stage's layout a parameter of another stage is skipped (every
  // stage can be fed every tensor), as is an expert another ep rank holds;
  // one of no stage throws.
  void load_global(const std::string& name, const float* data);
  // Checkpoint pieces: what this rank writes (its own, deduplicated across
  // replicas; never a pipeline stage's mirror of wte) and what it reads
  // (everything it stores, the mirror included: it reads the first stage's
  // wte and, kept equal by the executor, its moments). Their data is host
  // memory: on a device backend a host copy (downloaded for saving), valid
  // until the next call; after reading into pieces_to_load()'s pieces call
  // finish_load(), which uploads them (nothing to do on a host backend).
  std::vector<TensorPiece> pieces_to_save();
  std::vector<TensorPiece> pieces_to_load();
  void finish_load();

  MemoryFigures memory() const;
  FsdpStage fsdp_stage() const { return stage_; }

 private:
  // One part of the state (see the header): a layout of one kind and
  // everything stored and done for it.
  struct Part {
    const ParameterLayout* layout = nullptr;
    std::unique_ptr<ParameterLayout> own_layout;  // at ep > 1 (both parts' own)
    int first_unit = 0;  // the whole layout's index of this part's unit 0
    Communicator* dp = nullptr;    // replicas: the gradients' all-reduce
    Communicator* fsdp = nullptr;  // the shard group
    std::unique_ptr<ShardGeometry> geom;
    ShardedStatePlan plan;
    Buffer params;  // full (T) or shard storage
    // bf16 copy of params (full only). Fresh after AdamW wrote it (fsdp = 1)
    // or the post-step gather's cast (stages 1-2); any other write to params
    // (loading) marks it stale and begin_forward casts it again.
    Buffer params_bf16;
    bool params_bf16_stale = true;
    // The gradients and their reduction, one strategy per layout.
    std::unique_ptr<GradientReducer> reducer;
    // Where the model reads each unit's parameters: params itself, or (stage
    // 3) unit slots gathered from it.
    std::unique_ptr<UnitParameters> units;
    bool full_params() const { return plan.full_params; }
  };
  void add_part(const ParameterLayout& layout, std::unique_ptr<ParameterLayout> own,
                Communicator& dp, Communicator& fsdp, int first_unit, double bucket_mb,
                bool bf16_params, ComputeDType reduce_dtype, const Fp8GatherOptions& fp8);
  // The part holding whole-layout unit `unit`, and its index there.
  Part& part_of(int unit, int* local);
  // The expert part's unit started with block unit `unit`'s hooks, -1 for none.
  int experts_with(int unit) const;
  void progress();
  std::vector<TensorPiece> pieces(size_t part, const std::vector<ParamSegment>& segs, bool params,
                                  bool moments, bool dedup);
  // Points `pieces` at host copies when the backend's memory is not the
  // host's (downloading them first when `download`); remembers where each
  // came from for finish_load().
  std::vector<TensorPiece> stage_on_host(std::vector<TensorPiece> pieces, bool download);
  TensorView view(float* p, std::initializer_list<int64_t> shape) const;
  // The owned parameters, gradients and (fsdp = 1, bf16) the bf16 copy
  // AdamW writes in the same pass, as the optimizer reads them, per part.
  ShardOptimizer::States optimizer_states();
  // After AdamW: stages 1-2 all-gather the updated shards; the bf16 copy is
  // cast again unless AdamW wrote it.
  void after_update(const ShardOptimizer::States& states);
  void refresh_bf16_params(Part& p);
  void parameters_loaded();

  const ParameterLayout& layout_;
  Ops& ops_;
  Communicator& tp_;
  Communicator& world_;
  int tp_rank_;
  FsdpStage stage_;
  bool keeps_bf16_ = false;
  // A one-rank group: the expert part's replicas at fsdp > 1 (sharded over
  // all of edp) and its shard group at fsdp = 1.
  std::unique_ptr<Communicator> self_;
  std::vector<std::unique_ptr<Part>> parts_;  // the dense part (or the whole), then the experts'
  std::vector<int> experts_with_;  // per whole-layout unit: experts_with()
  // The optimizer step over the owned state of every part (the AdamW
  // moments live there).
  std::unique_ptr<ShardOptimizer> optimizer_;
  struct Staged {
    float* device;
    float* host;
    int64_t n;
  };
  std::vector<float> host_stage_;  // checkpoint pieces on a device backend
  std::vector<Staged> staged_;
};

}  // namespace gt
