// StepRunner: how one optimizer step's micro-batches run through this rank's
// model(s), the one place the trainer's step differs between layouts with
// and without pipeline stages (parallel.pp):
//
//   AccumulationRunner (pp = 1)  one model: forward and backward of each
//                                micro-batch in turn (gradient accumulation);
//   PipelineExecutor   (pp > 1)  this stage's chunk models, one instance per
//                                micro-batch it holds at once, running the
//                                schedule's action list with the sends and
//                                receives between stages
//                                (pipeline_executor.hpp).
//
// Both drive the ShardedParameters' step hooks the same way: begin_step(),
// begin_micro_batch(last) before each backward, finish_gradients(); after
// train() the store holds the step's reduced gradients, ready for the
// optimizer. The loss and the evaluation sums they return are the same on
// every rank of a pipeline (its last stage computes them and shares them);
// the caller averages over the data ranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "kernels/core/tensor.hpp"
#include "trainer/parallelize/moe_step_stats.hpp"

namespace gt {

// Fills micro-batch k of the step (or of an evaluation batch): tokens and
// targets, (B*T) host rows each.
using FillMicroBatch = std::function<void(int k, int32_t* tokens, int32_t* targets)>;

class StepRunner {
 public:
  virtual ~StepRunner() = default;

  // The step's forwards and backwards over `micro_batches` micro-batches,
  // dlogits scaled by grad_scale on the stage that computes the loss;
  // returns with the gradients reduced (finish_gradients) and, with tied
  // embeddings over several stages, summed between their first and last.
  virtual void train(int micro_batches, const FillMicroBatch& fill, float grad_scale) = 0;
  // This rank's per-position training losses of the step on the backend (a
  // 1-D fp32 view, all zeros on a stage without the loss): for the
  // optimizer's finiteness check, before take_loss().
  virtual TensorView pending_loss_sums() = 0;
  // The step's mean training loss over this data rank's micro-batches,
  // equal on every stage of the pipeline (collective over pp); forgets it.
  virtual double take_loss() = 0;
  // Forward only: the sum over `micro_batches` micro-batches of each one's
  // mean loss, equal on every stage (collective over pp).
  virtual double eval_loss_sum(int micro_batches, const FillMicroBatch& fill) = 0;
  // What a mixture's routers did in the steps since the last call (this
  // data rank's micro-batches; empty for a dense model); forgets it.
  virtual MoeStepStats take_moe_stats() { return {}; }
  // Bytes of every activation buffer this rank allocated (all its model instances).
  virtual int64_t activation_bytes() const = 0;
  // Per step (pp > 1): milliseconds this rank's host waited on a neighbour
  // stage (the pipeline's bubble as this rank saw it); 0 without stages.
  virtual double last_wait_ms() const { return 0.0; }

  // Reports each block of a pipeline schedule ("F3@s1": micro-batch 3's
  // forward on stage 1) with its host begin and end, for the trace; a
  // runner without a schedule has none.
  using BlockHook =
      std::function<void(const std::string& name, std::chrono::steady_clock::time_point begin,
                         std::chrono::steady_clock::time_point end)>;
  virtual void set_block_hook(BlockHook hook) { (void)hook; }
};

}  // namespace gt
