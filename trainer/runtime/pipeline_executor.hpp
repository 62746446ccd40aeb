// PipelineExecutor: the StepRunner (step_runner.hpp) of a pipeline stage,
// parallel.pp > 1. It runs this rank's action list (pipeline_schedule.hpp:
// forwards, backwards, sends and receives of one optimizer step, whatever
// the schedule) over this rank's chunk models and the `pp` communicator.
//
// Model instances: a chunk (global stage s = c * p + rank, its blocks a
// CausalLM::set_pipeline_stage span) keeps the activations of every
// micro-batch it has forwarded and not yet backwarded, so it has one model
// instance per micro-batch it holds at once (instances_per_chunk: p on the
// first stage under 1f1b (at most m), m under gpipe), all over the one ShardedParameters
// (their gradients accumulate there). An instance is taken by the first
// action of a micro-batch on the chunk (its recv_act or forward) and given
// back after its backward's send.
//
// Messages: activations (the residual stream, the activations' dtype) on tag
// 0, their gradients (fp32) on tag 1, each in the order both sides' lists
// issue them (the simulator checks that order per channel). Sends are
// started and waited before their buffer is used again (the instance's next
// micro-batch) or at the end of the step; a receive is waited right before
// the compute that needs it: those waits are the pipeline's bubble as this
// rank's host sees it (last_wait_ms). On a device backend the waits are
// ordered on the stream and the host rarely blocks in them, so there the
// trace's blocks, not this figure, show the bubble.
//
// Gradient reductions: before every backward the store is told whether it
// is its chunk's last backward of the step (begin_micro_batch), so DDP's
// buckets and ZeRO's reduce-scatters of that chunk's units start on it, as
// in gradient accumulation. After finish_gradients, a tied embedding's two copies (wte
// on the first stage, its mirror under the LM head on the last) exchange
// their reduced gradients and both add them (a + b on both sides: equal
// bits), so AdamW keeps the copies equal (Megatron's embedding group).
//
// A mixture of experts' router statistics ride along (stage_boundary's
// router views): the partial sums after each activation on tag 3, the
// totals after each gradient on tag 4, so the load-balancing loss pools
// every layer of a micro-batch across the stages (mixture_of_experts.hpp).
//
// The loss: the last stage's instances hold the per-position losses; their
// mean is shared over pp (take_loss), and every stage hands the optimizer a
// loss view for its finiteness check (zeros where there is no loss).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/collective_context.hpp"
#include "parallel/mesh.hpp"
#include "trainer/model/causal_lm.hpp"
#include "trainer/parallelize/pipeline_schedule.hpp"
#include "trainer/runtime/step_runner.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {

// How many micro-batches each of a rank's v chunks holds at once in its
// action list (forwarded, not yet backwarded): its model instances.
std::vector<int> instances_per_chunk(const std::vector<PipeAction>& list, int pp,
                                     int virtual_stages);

class PipelineExecutor final : public StepRunner {
 public:
  // One chunk of this rank: its global stage and its model instances (each
  // already set to the chunk's blocks).
  struct Chunk {
    int stage = 0;
    std::vector<std::unique_ptr<CausalLM>> instances;
  };
  // `actions`: this rank's list for spec (build_pipeline_schedule), chunks
  // in chunk order. `context` (may be null) names the action in progress in
  // a collective-deadline message. The references outlive the executor.
  PipelineExecutor(const PipeScheduleSpec& spec, std::vector<PipeAction> actions,
                   std::vector<Chunk> chunks, ShardedParameters& params, const DeviceMesh& mesh,
                   Ops& ops, int B, int T, CollectiveContext* context);
  ~PipelineExecutor() override;

  void train(int micro_batches, const FillMicroBatch& fill, float grad_scale) override;
  TensorView pending_loss_sums() override;
  double take_loss() override;
  double eval_loss_sum(int micro_batches, const FillMicroBatch& fill) override;
  int64_t activation_bytes() const override;
  double last_wait_ms() const override { return wait_ms_; }
  // Every instance's, merged: sums over the instances of a chunk, each
  // chunk's blocks one after another (a stage's own blocks only; the aux
  // loss and its micro-batches only on the last stage).
  MoeStepStats take_moe_stats() override;

  void set_block_hook(BlockHook hook) override { block_hook_ = std::move(hook); }
  bool first_stage() const { return rank_ == 0; }
  bool last_stage() const { return rank_ == p_ - 1; }

 private:
  struct Instance {
    CausalLM* model = nullptr;
    std::vector<CommHandle> sends;  // in flight from its boundary buffers
    int micro = -1;                 // the micro-batch it holds; -1: free
    int forwards = 0;               // forward_train calls since take_loss (last stage)
  };
  using Clock = std::chrono::steady_clock;

  int chunk_of(int stage) const;
  // The instance holding (micro, stage), taking a free one if none does.
  Instance& instance_for(int micro, int stage);
  // last_backward: a backward that is its chunk's last of the step.
  void run(const PipeAction& a, const FillMicroBatch& fill, float grad_scale, bool last_backward);
  // A boundary tensor (fp32 or bf16) on the wire: sent in flight from the
  // instance's buffers; received and waited (the wait counted as the bubble).
  CommHandle send(TensorView view, int peer, int tag);
  void recv(TensorView view, int peer, int tag);
  // Waits an instance's sends (all instances'), counted as waiting on a neighbour.
  void wait_sends(Instance& in);
  void wait_sends();
  // The tied embedding's gradient summed between the first and last stage.
  void sum_tied_embedding_grads();
  void set_phase(const std::string& what) const;

  PipeScheduleSpec spec_;
  std::vector<PipeAction> actions_;
  std::vector<bool> last_backward_;  // per action: its chunk's last backward of the step
  std::vector<Chunk> chunks_;
  std::vector<std::vector<Instance>> instances_;  // [chunk][slot]
  ShardedParameters& params_;
  const DeviceMesh& mesh_;
  Communicator& pp_;
  Ops& ops_;
  int B_, T_, p_, rank_;
  CollectiveContext* context_;
  // The context's phase when the step (or evaluation) began: the pipeline
  // names its actions under it, and it is put back on every exit.
  std::string phase_;
  std::vector<int32_t> tokens_, targets_;  // (B*T) host rows of the micro-batch in hand
  Buffer losses_;     // (instances x B*T) the last stage's loss sums, gathered for the optimizer
  Buffer tied_peer_;  // the other stage's share of the tied embedding's gradient
  double wait_ms_ = 0.0;
  BlockHook block_hook_;
};

}  // namespace gt
