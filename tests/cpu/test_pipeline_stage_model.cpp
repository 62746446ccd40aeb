// A model cut into pipeline stages (CausalLM::set_pipeline_stage) computes
// what the whole model does: three stages over one parameter store, the
// residual stream handed forward and its gradient back through each stage's
// boundary tensors, give the whole model's loss and gradients, for both
// families (GPT-2's tied head on the last stage, Llama's untied one), in
// fp32 and bf16. What the pipeline executor will move between ranks is
// exactly these boundaries.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "test_util.hpp"
#include "trainer/model/make_model.hpp"

namespace gt {
namespace {

struct Case {
  ModelArch arch;
  ComputeDType dtype;
};

class PipelineStageModel : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineStageModel, ThreeStagesComputeTheWholeModelsLossAndGradients) {
  ModelConfig m = GetParam().arch == ModelArch::llama ? test::tiny_llama() : test::tiny_gpt();
  m.n_layer = 4;
  const ComputeDType dtype = GetParam().dtype;
  const int B = 2, T = 8;
  auto ops = make_cpu_ops(1);
  const ParameterLayout layout(m);
  LocalParameters store(layout, *ops);
  for_each_initial_parameter(m, 9, [&](const ParamSpec& s, const float* data) {
    std::copy(data, data + s.numel, store.params() + layout.at(s.name).offset);
  });
  const auto tokens = test::random_ints(B * T, 1, 0, m.vocab_size);
  const auto targets = test::random_ints(B * T, 2, 0, m.vocab_size);
  const float scale = 1.f / (B * T);
  const size_t n = static_cast<size_t>(layout.total());
  auto build = [&] {
    return make_model(m, *ops, B, T, layout, store, TensorParallelGroup{}, Recompute::none, dtype);
  };

  const auto whole = build();
  for (const TensorView& t :
       {whole->stage_boundary(B, T).input, whole->stage_boundary(B, T).output})
    EXPECT_TRUE(t.empty()) << "the whole model has no stage boundary";
  ops->zero(make_view(store.grads(), DType::f32, Device::cpu, {layout.total()}));
  const float want_loss = whole->forward(tokens.data(), targets.data(), B, T, scale);
  whole->backward();
  const std::vector<float> want_grads(store.grads(), store.grads() + n);

  // Blocks [0, 1), [1, 3), [3, 4): the middle stage neither embeds nor heads.
  std::vector<std::unique_ptr<CausalLM>> stages;
  for (auto [first, end] : {std::pair{0, 1}, std::pair{1, 3}, std::pair{3, 4}}) {
    stages.push_back(build());
    stages.back()->set_pipeline_stage({first, end});
  }
  EXPECT_TRUE(stages[0]->embeds() && !stages[0]->heads());
  EXPECT_TRUE(!stages[1]->embeds() && !stages[1]->heads());
  EXPECT_TRUE(!stages[2]->embeds() && stages[2]->heads());
  ops->zero(make_view(store.grads(), DType::f32, Device::cpu, {layout.total()}));
  float got_loss = 0.f;
  for (size_t s = 0; s < stages.size(); ++s) {
    if (s > 0)
      ops->copy(stages[s]->stage_boundary(B, T).input, stages[s - 1]->stage_boundary(B, T).output);
    got_loss = stages[s]->forward(tokens.data(), targets.data(), B, T, scale);
  }
  for (size_t s = stages.size(); s-- > 0;) {
    if (s + 1 < stages.size())
      ops->copy(stages[s]->stage_boundary(B, T).output_grad,
                stages[s + 1]->stage_boundary(B, T).input_grad);
    stages[s]->backward();
  }
  const std::vector<float> got_grads(store.grads(), store.grads() + n);

  if (dtype == ComputeDType::fp32) {
    // The same ops on the same values, bit for bit: the one difference, the
    // residual add a stage's end does alone rather than fused into the next
    // LayerNorm, rounds the same fp32 sum.
    EXPECT_EQ(got_loss, want_loss);
    EXPECT_EQ(got_grads, want_grads);
  } else {
    // bf16: the stage's output is the bf16-rounded residual stream, which
    // the whole GPT-2's fused add-and-LayerNorm normalises unrounded.
    EXPECT_NEAR(got_loss, want_loss, 1e-2 * want_loss);
    EXPECT_TRUE(test::all_close(got_grads, want_grads, 2e-3f, 5e-2f));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PipelineStageModel,
                         ::testing::Values(Case{ModelArch::gpt2, ComputeDType::fp32},
                                           Case{ModelArch::gpt2, ComputeDType::bf16},
                                           Case{ModelArch::llama, ComputeDType::fp32},
                                           Case{ModelArch::llama, ComputeDType::bf16}),
                         [](const auto& info) {
                           return std::string(to_string(info.param.arch)) + "_" +
                                  to_string(info.param.dtype);
                         });

TEST(PipelineStageModel, AnEmptyOrOutOfRangeSpanIsRefusedByItsNumbers) {
  auto ops = make_cpu_ops(1);
  const auto model = make_model(test::tiny_llama(), *ops, 2, 8);
  for (auto [first, end] : {std::pair{1, 1}, std::pair{0, 3}, std::pair{-1, 1}}) {
    const std::string e = test::error_message([&] { model->set_pipeline_stage({first, end}); });
    EXPECT_NE(e.find("is not a non-empty span of the model's 2 blocks"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace gt
