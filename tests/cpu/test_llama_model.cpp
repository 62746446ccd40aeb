// The Llama model (trainer/model/llama.hpp) on one CPU rank: every parameter
// tensor's gradient against central differences (grouped-query attention,
// RoPE, RMSNorm, SwiGLU, untied and tied heads), micro-batch accumulation,
// recomputation bit for bit, bf16 near fp32, and the activation plan's bytes
// equal to what the model allocates.
#include <cmath>
#include <random>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_gradcheck.hpp"
#include "model_steps.hpp"
#include "test_util.hpp"
#include "trainer/model/llama.hpp"
#include "trainer/model/llama_activation_plan.hpp"

namespace gt {
namespace {

void expect_gradients_match_finite_differences(const ModelConfig& m) {
  auto ops = make_cpu_ops(1);
  Llama model(m, *ops, 2, 5);
  test::expect_gradients_match_finite_differences(model, 2, 5);
}

ModelConfig gradcheck_llama() {
  ModelConfig m = test::tiny_llama();
  m.vocab_size = 11;
  m.block_size = 8;
  return m;
}

TEST(LlamaModel, EveryParameterTensorMatchesFiniteDifferences) {
  expect_gradients_match_finite_differences(gradcheck_llama());
}

TEST(LlamaModel, TiedHeadAndMultiHeadAttentionMatchFiniteDifferences) {
  ModelConfig m = gradcheck_llama();
  m.tie_embeddings = true;
  m.n_kv_head = 0;  // = n_head
  expect_gradients_match_finite_differences(m);
}

TEST(LlamaModel, RopeScalingMatchesFiniteDifferences) {
  ModelConfig m = gradcheck_llama();
  m.rope_scaling = RopeScaling{8.0, 1.0, 4.0, 4};  // Llama 3.1's rule at a short original length
  expect_gradients_match_finite_differences(m);
}

TEST(LlamaModel, GradientsAccumulateAcrossMicroBatches) {
  auto ops = make_cpu_ops(1);
  test::expect_gradients_accumulate_across_micro_batches(test::tiny_llama(), *ops, 4, 6);
}

// Recomputation reruns the forward's ops on the same inputs: every loss,
// norm, parameter and moment is bit for bit the run that keeps everything.
TEST(LlamaModel, RecomputeTrainsBitForBit) {
  auto ops = make_cpu_ops(1);
  test::StepOptions o;
  o.model = test::tiny_llama();
  const test::StepTrace keep = test::train_steps(*ops, o);
  for (Recompute mode : {Recompute::mlp, Recompute::block}) {
    o.recompute = mode;
    const test::StepTrace again = test::train_steps(*ops, o);
    EXPECT_EQ(again.losses, keep.losses) << to_string(mode);
    EXPECT_EQ(again.norms, keep.norms) << to_string(mode);
    EXPECT_EQ(again.pieces, keep.pieces) << to_string(mode);
  }
}

// bf16 storage rounds every activation once: the losses stay near fp32's.
TEST(LlamaModel, Bf16TrainsNearFp32) {
  auto ops = make_cpu_ops(1);
  const ModelConfig m = test::tiny_llama();
  const test::StepTrace f32 = test::train_steps(*ops, 3, m, 2, 8, ComputeDType::fp32);
  const test::StepTrace b16 = test::train_steps(*ops, 3, m, 2, 8, ComputeDType::bf16);
  ASSERT_EQ(f32.losses.size(), b16.losses.size());
  for (size_t i = 0; i < f32.losses.size(); ++i)
    EXPECT_NEAR(b16.losses[i], f32.losses[i], 2e-2 * std::fabs(f32.losses[i])) << "loss " << i;
  EXPECT_NE(b16.losses, f32.losses);  // bf16 did round something
}

// What the model allocates is the plan the planner sums, in every mode.
TEST(LlamaModel, ActivationBytesAreThePlans) {
  auto ops = make_cpu_ops(1);
  const ModelConfig m = test::tiny_llama();
  for (Recompute mode : {Recompute::none, Recompute::mlp, Recompute::block})
    for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16}) {
      Llama model(m, *ops, 3, 8, mode, dtype);
      ActivationShape s;
      s.max_rows = 3;
      s.max_seq = 8;
      s.recompute = mode;
      s.dtype = dtype;
      s.attention_saved = ops->attention_saved_elems(3, m.n_head, 8);
      s.attention_scratch = ops->attention_scratch_elems(3, m.n_head, 8);
      EXPECT_EQ(model.activation_bytes(), plan_llama_activations(m, s).bytes())
          << to_string(mode) << " " << to_string(dtype);
    }
}

TEST(LlamaModel, AGpt2ConfigIsRefusedByName) {
  auto ops = make_cpu_ops(1);
  const std::string e = test::error_message([&] { Llama model(test::tiny_gpt(), *ops, 2, 8); });
  EXPECT_NE(e.find("model.arch=gpt2 given to the Llama model"), std::string::npos) << e;
}

}  // namespace
}  // namespace gt
