// Whole-model finite-difference check: the analytic gradient of the mean
// cross-entropy with respect to every parameter tensor (a few elements of
// each) matches a central difference of the forward pass.
#include <cmath>
#include <random>

#include "kernels/cpu/cpu_ops.hpp"
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
  const int B = 2, T = 5;
  GPT model(m, *ops, B, T);
  // Larger-than-GPT-2 init so gradients are well above fp32 noise.
  auto init = test::random_vector(static_cast<size_t>(model.layout().total()), 7, -0.5f, 0.5f);
  std::copy(init.begin(), init.end(), model.params());
  for (const auto& s : model.layout().specs())
    if (s.name.find("ln_") != std::string::npos && s.name.find(".weight") != std::string::npos)
      for (int64_t i = 0; i < s.numel; ++i) model.params()[s.offset + i] += 1.f;
  auto tokens = test::random_ints(B * T, 3, 0, m.vocab_size);
  auto targets = test::random_ints(B * T, 4, 0, m.vocab_size);

  model.zero_grads();
  model.forward(tokens.data(), targets.data(), B, T, 1.f / (B * T));
  model.backward();
  std::vector<float> analytic(model.grads(), model.grads() + model.layout().total());

  auto loss_at = [&](int64_t idx, float delta) {
    const float saved = model.params()[idx];
    model.params()[idx] = saved + delta;
    const double l = model.forward(tokens.data(), targets.data(), B, T, 0.f);
    model.params()[idx] = saved;
    return l;
  };
  std::mt19937 rng(11);
  int checked = 0;
  for (const auto& s : model.layout().specs()) {
    for (int k = 0; k < 4; ++k) {
      const int64_t idx = s.offset + static_cast<int64_t>(rng() % s.numel);
      const float eps = 1e-2f;
      const double fd = (loss_at(idx, eps) - loss_at(idx, -eps)) / (2.0 * eps);
      const double an = analytic[idx];
      EXPECT_NEAR(an, fd, 2e-3 + 3e-2 * std::fabs(fd))
          << s.name << " element " << (idx - s.offset);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 * static_cast<int>(model.layout().specs().size()));
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
