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
  const int B = 2, T = 8;
  const float scale = 1.f / (B * T);
  auto ops = make_cpu_ops(1);
  const auto tokens = test::random_ints(B * T, 1, 0, m.vocab_size);
  const auto targets = test::random_ints(B * T, 2, 0, m.vocab_size);
  auto fill = [&](const ParameterLayout& layout, LocalParameters& store) {
    test::fill_initial(m, layout, store, *ops, 9);
  };

  test::WholeModelStep whole(m, *ops, B, T, tokens.data(), targets.data(), scale, 9);
  const ParameterLayout& whole_layout = whole.layout;
  LocalParameters& whole_store = whole.store;
  const float want_loss = whole.loss;

  struct Stage {
    ParameterLayout layout;
    LocalParameters store;
    std::unique_ptr<CausalLM> model;
  };
  std::vector<std::unique_ptr<Stage>> stages;
  for (const StageSpan span : {StageSpan{0, 1}, StageSpan{1, 3}, StageSpan{3, 4}}) {
    const ParameterLayout layout(m, span);
    auto s = std::unique_ptr<Stage>(new Stage{layout, LocalParameters(layout, *ops), nullptr});
    fill(s->layout, s->store);
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
    got_loss = model.forward(tokens.data(), targets.data(), B, T, scale);
  }
  for (size_t k = stages.size(); k-- > 0;) {
    CausalLM& model = *stages[k]->model;
    if (k + 1 < stages.size())
      ops->copy(model.stage_boundary(B, T).output_grad,
                stages[k + 1]->model->stage_boundary(B, T).input_grad);
    if (k == 0 && m.tied_embeddings()) {
      // The mirror's gradient (the LM head's share of wte's) into the first
      // stage's before its backward: the embedding then accumulates onto it
      // (parameter gradients add), in the whole model's order of additions.
      const ParamUnit& mirror = last.layout.units()[static_cast<size_t>(last.layout.embed_unit())];
      const ParamUnit& embed = first.layout.units()[static_cast<size_t>(first.layout.embed_unit())];
      ASSERT_TRUE(mirror.mirror && !embed.mirror);
      ASSERT_EQ(mirror.size(), embed.size());
      std::copy(last.store.grads() + mirror.begin, last.store.grads() + mirror.end,
                first.store.grads() + embed.begin);
    }
    model.backward();
  }

  EXPECT_EQ(got_loss, want_loss);
  for (const ParamSpec& w : whole_layout.specs()) {
    const float* want = whole_store.grads() + w.offset;
    int holders = 0;
    for (const auto& s : stages) {
      const ParamSpec* mine = s->layout.find(w.name);
      if (!mine || mine->mirror) continue;
      ++holders;
      const float* got = s->store.grads() + mine->offset;
      EXPECT_EQ(std::vector<float>(got, got + w.numel), std::vector<float>(want, want + w.numel))
          << w.name;
    }
    EXPECT_EQ(holders, 1) << w.name;
  }
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
