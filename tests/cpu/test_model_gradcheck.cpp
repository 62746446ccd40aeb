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
  const int B = 4, T = 6;
  GPT whole(m, *ops, B, T), halves(m, *ops, B / 2, T);
  init_gpt2_parameters(whole.layout(), m.n_layer, 5, whole.params());
  init_gpt2_parameters(halves.layout(), m.n_layer, 5, halves.params());
  auto tokens = test::random_ints(B * T, 8, 0, m.vocab_size);
  auto targets = test::random_ints(B * T, 9, 0, m.vocab_size);

  whole.zero_grads();
  whole.forward(tokens.data(), targets.data(), B, T, 1.f / (B * T));
  whole.backward();
  halves.zero_grads();
  for (int h = 0; h < 2; ++h) {
    const int off = h * (B / 2) * T;
    halves.forward(tokens.data() + off, targets.data() + off, B / 2, T, 1.f / (B * T));
    halves.backward();
  }
  const size_t n = static_cast<size_t>(whole.layout().total());
  EXPECT_TRUE(test::all_close(halves.grads(), whole.grads(), n, 1e-6f, 1e-4f));
}

}  // namespace
}  // namespace gt
