// GPT's two ways of getting the loss: forward() reads each micro-batch's
// losses back (evaluation, tests); forward_train() adds them up on the
// device and take_loss() reads them once per optimizer step (the training
// loop: no wait on the host per micro-batch). Both give the same mean.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "test_util.hpp"
#include "trainer/model/gpt.hpp"

namespace gt {
namespace {

TEST(ModelLoss, TakeLossIsTheMeanOfTheMicroBatchesForwardReads) {
  auto ops = make_cpu_ops(1);
  const ModelConfig m = test::tiny_gpt();
  const int B = 2, T = 8, micro = 3;
  std::vector<std::vector<int32_t>> tokens, targets;
  for (int k = 0; k < micro; ++k) {
    tokens.push_back(test::random_ints(B * T, 10 + k, 0, m.vocab_size));
    targets.push_back(test::random_ints(B * T, 20 + k, 0, m.vocab_size));
  }
  for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16}) {
    SCOPED_TRACE(to_string(dtype));
    GPT model(m, *ops, B, T, Recompute::none, dtype);
    double want = 0;
    for (int k = 0; k < micro; ++k)
      want += model.forward(tokens[k].data(), targets[k].data(), B, T, 0.f) / micro;
    EXPECT_TRUE(std::isnan(model.take_loss())) << "nothing taken yet";
    for (int k = 0; k < micro; ++k) {
      model.forward_train(tokens[k].data(), targets[k].data(), B, T, 1.f);
      model.backward();
    }
    EXPECT_NEAR(model.take_loss(), want, 1e-6 * want);
    EXPECT_TRUE(std::isnan(model.take_loss())) << "take_loss forgets what it read";
    // A second step starts a fresh sum.
    model.forward_train(tokens[0].data(), targets[0].data(), B, T, 1.f);
    model.backward();
    const double first = model.forward(tokens[0].data(), targets[0].data(), B, T, 0.f);
    EXPECT_NEAR(model.take_loss(), first, 1e-6 * first);
  }
}

TEST(ModelLoss, MicroBatchesOfOneStepMustHaveTheSameRows) {
  auto ops = make_cpu_ops(1);
  const ModelConfig m = test::tiny_gpt();
  GPT model(m, *ops, 2, 8);
  const auto tok = test::random_ints(16, 1, 0, m.vocab_size);
  model.forward_train(tok.data(), tok.data(), 2, 8, 1.f);
  model.backward();
  try {
    model.forward_train(tok.data(), tok.data(), 1, 8, 1.f);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPT::forward_train: 8 rows after micro-batches of 16"),
              std::string::npos)
        << e.what();
  }
}

// A Llama config must not train GPT-2 in its place: GPT stops with the
// family named (make_model picks the right class).
TEST(ModelLoss, AnotherFamilysConfigStopsAtTheGptModel) {
  ModelConfig m = test::tiny_gpt();
  m.arch = ModelArch::llama;
  auto ops = make_cpu_ops(1);
  try {
    GPT model(m, *ops, 2, 8, Recompute::none, ComputeDType::fp32);
    ADD_FAILURE() << "GPT accepted model.arch=llama";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.arch=llama given to the GPT-2 model"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gt
