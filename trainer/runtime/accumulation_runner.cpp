#include "trainer/runtime/accumulation_runner.hpp"

namespace gt {

AccumulationRunner::AccumulationRunner(std::unique_ptr<CausalLM> model, ShardedParameters& params,
                                       const DeviceMesh& mesh, int B, int T)
    : model_(std::move(model)),
      params_(params),
      mesh_(mesh),
      B_(B),
      T_(T),
      tokens_(static_cast<size_t>(B) * T),
      targets_(tokens_.size()) {}

void AccumulationRunner::train(int micro_batches, const FillMicroBatch& fill, float grad_scale) {
  params_.begin_step();
  for (int k = 0; k < micro_batches; ++k) {
    params_.begin_micro_batch(k + 1 == micro_batches);
    fill(k, tokens_.data(), targets_.data());
    model_->forward_train(tokens_.data(), targets_.data(), B_, T_, grad_scale);
    model_->backward();
  }
  params_.finish_gradients();
}

double AccumulationRunner::eval_loss_sum(int micro_batches, const FillMicroBatch& fill) {
  double sum = 0.0;
  for (int k = 0; k < micro_batches; ++k) {
    fill(k, tokens_.data(), targets_.data());
    model_->queue_forward(tokens_.data(), targets_.data(), B_, T_, 0.f);
    mesh_.drain();  // the forward's collectives, with their deadlines, before the read
    sum += model_->read_forward_loss(B_, T_);
  }
  return sum;
}

}  // namespace gt
