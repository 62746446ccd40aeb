// Pipeline stages each on their OWN parameters (a stage layout,
// ParameterLayout's StageSpan, and its own store) compute the whole model's
// loss and gradients, bit for bit in fp32: the residual stream and its
// gradient copied between the stages' boundaries as the executor will send
// them, and a tied model's wte gradient made whole by hand. This is
// test_pipeline_stage_model.cpp with the stores apart.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "pipeline_test_support.hpp"
#include "test_util.hpp"
#include "trainer/model/make_model.hpp"

namespace gt {
namespace {

using Case = test::FamilyCase;

class PipelineStageStore : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineStageStore, StagesOnTheirOwnStoresComputeTheWholeModelsGradients) {
  ModelConfig m = GetParam().arch == ModelArch::llama ? test::tiny_llama() : test::tiny_gpt();
  m.n_layer = 4;
  m.tie_embeddings = GetParam().tie;
  auto ops = make_cpu_ops(1);
  const test::MicroBatch mb(m);
  const int B = mb.B, T = mb.T;
  test::WholeModelStep whole(m, *ops, mb);

  struct Stage {
    ParameterLayout layout;
    LocalParameters store;
    std::unique_ptr<CausalLM> model;
  };
  std::vector<std::unique_ptr<Stage>> stages;
  for (const StageSpan span : {StageSpan{0, 1}, StageSpan{1, 3}, StageSpan{3, 4}}) {
    const ParameterLayout layout(m, span);
    auto s = std::unique_ptr<Stage>(new Stage{layout, LocalParameters(layout, *ops), nullptr});
    test::fill_initial(m, s->layout, s->store, *ops, 9);
    s->model = make_model(m, *ops, B, T, s->layout, s->store, TensorParallelGroup{},
                          Recompute::none, ComputeDType::fp32);
    // The model is its layout's stage; set_pipeline_stage agrees or refuses.
    EXPECT_EQ(s->model->first_layer(), span.first_layer);
    EXPECT_EQ(s->model->end_layer(), span.end_layer);
    s->model->set_pipeline_stage({span.first_layer, span.end_layer});
    const std::string e = test::error_message([&] { s->model->set_pipeline_stage({0, 4}); });
    EXPECT_NE(e.find("is not one of the parameter layout's chunks ["), std::string::npos) << e;
    stages.push_back(std::move(s));
  }
  Stage &first = *stages.front(), &last = *stages.back();

  float got_loss = 0.f;
  for (size_t k = 0; k < stages.size(); ++k) {
    CausalLM& model = *stages[k]->model;
    if (k > 0)
      ops->copy(model.stage_boundary(B, T).input,
                stages[k - 1]->model->stage_boundary(B, T).output);
    got_loss = model.forward(mb.tokens.data(), mb.targets.data(), B, T, mb.scale);
  }
  for (size_t k = stages.size(); k-- > 0;) {
    CausalLM& model = *stages[k]->model;
    if (k + 1 < stages.size())
      ops->copy(model.stage_boundary(B, T).output_grad,
                stages[k + 1]->model->stage_boundary(B, T).input_grad);
    if (k == 0 && m.tied_embeddings()) {
      test::fold_mirror_grads({&first.layout, &first.store}, {&last.layout, &last.store});
      if (HasFatalFailure()) return;
    }
    model.backward();
  }

  EXPECT_EQ(got_loss, whole.loss);
  std::vector<test::SplitPart> parts;
  for (const auto& s : stages) parts.push_back({&s->layout, &s->store});
  test::expect_split_grads(whole, parts);
  if (m.arch == ModelArch::gpt2) {  // the mirror's wpe: the last stage never embeds
    const ParamSpec& wpe = last.layout.at("wpe.weight");
    EXPECT_TRUE(wpe.mirror);
    const std::vector<float> g(last.store.grads() + wpe.offset,
                               last.store.grads() + wpe.offset + wpe.numel);
    EXPECT_EQ(g, std::vector<float>(g.size(), 0.f));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PipelineStageStore, test::pipeline_families(),
                         test::family_name);

}  // namespace
}  // namespace gt
