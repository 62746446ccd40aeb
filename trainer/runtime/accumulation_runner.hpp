// AccumulationRunner: the StepRunner (step_runner.hpp) of a layout without
// pipeline stages: one model (owned here, as the pipeline executor owns its
// instances), each micro-batch's forward then backward in turn, the
// gradients accumulating in the store.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/mesh.hpp"
#include "trainer/model/causal_lm.hpp"
#include "trainer/runtime/step_runner.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {

class AccumulationRunner final : public StepRunner {
 public:
  // (B, T): every micro-batch's shape. The references outlive the runner;
  // `model` reads its parameters from `params`.
  AccumulationRunner(std::unique_ptr<CausalLM> model, ShardedParameters& params,
                     const DeviceMesh& mesh, int B, int T);

  void train(int micro_batches, const FillMicroBatch& fill, float grad_scale) override;
  TensorView pending_loss_sums() override { return model_->pending_loss_sums(); }
  double take_loss() override { return model_->take_loss(); }
  MoeStepStats take_moe_stats() override { return model_->take_moe_stats(); }
  double eval_loss_sum(int micro_batches, const FillMicroBatch& fill) override;
  int64_t activation_bytes() const override { return model_->activation_bytes(); }

 private:
  std::unique_ptr<CausalLM> model_;
  ShardedParameters& params_;
  const DeviceMesh& mesh_;
  int B_, T_;
  std::vector<int32_t> tokens_, targets_;  // (B*T) host rows
};

}  // namespace gt
