// Whole-model finite-difference check of GPT-2 (tests/model_gradcheck.hpp):
// the analytic gradient with respect to every parameter tensor matches a
// central difference of the forward pass.
#include <cmath>
#include <random>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_gradcheck.hpp"
#include "test_util.hpp"
#include "trainer/model/gpt.hpp"

namespace gt {
namespace {

TEST(ModelGradcheck, EveryParameterTensorMatchesFiniteDifferences) {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 8;
  m.vocab_size = 11;
  m.block_size = 8;
  auto ops = make_cpu_ops(1);
  GPT model(m, *ops, 2, 5);
  test::expect_gradients_match_finite_differences(model, 2, 5);
}

TEST(ModelGradcheck, GradientsAccumulateAcrossMicroBatches) {
  ModelConfig m;
  m.n_layer = 1;
  m.n_head = 2;
  m.n_embd = 8;
  m.vocab_size = 13;
  m.block_size = 6;
  auto ops = make_cpu_ops(1);
  test::expect_gradients_accumulate_across_micro_batches(m, *ops, 4, 6);
}

}  // namespace
}  // namespace gt
