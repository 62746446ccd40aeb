// Whole-model finite differences for any family (CausalLM): the analytic
// gradient of the mean cross-entropy with respect to every parameter tensor
// (four elements of each, drawn from the rows that are not vocabulary
// padding) against a central difference of the forward pass.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "test_util.hpp"
#include "trainer/model/causal_lm.hpp"
#include "trainer/model/make_model.hpp"

namespace gt::test {

// `model` owns its parameters (the one-rank constructor) on the CPU backend
// and was built for (B, T). Its weights are set here: uniform in [-0.5, 0.5],
// larger than any init so gradients stand well above fp32 noise, with the
// norms' weights (Init::ones) moved near 1.
inline void expect_gradients_match_finite_differences(CausalLM& model, int B, int T) {
  const int vocab = model.config().vocab_size;
  auto init = random_vector(static_cast<size_t>(model.layout().total()), 7, -0.5f, 0.5f);
  std::copy(init.begin(), init.end(), model.params());
  for (const auto& s : model.layout().specs())
    if (s.init == Init::ones)
      for (int64_t i = 0; i < s.numel; ++i) model.params()[s.offset + i] += 1.f;
  auto tokens = random_ints(static_cast<size_t>(B * T), 3, 0, vocab);
  auto targets = random_ints(static_cast<size_t>(B * T), 4, 0, vocab);

  model.zero_grads();
  model.forward(tokens.data(), targets.data(), B, T, 1.f / static_cast<float>(B * T));
  model.backward();
  const std::vector<float> analytic(model.grads(), model.grads() + model.layout().total());

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
    const int64_t cols = s.shape.size() == 2 ? s.shape[1] : 1;
    const int64_t real = (s.shape[0] - s.pad_rows) * cols;  // padding's gradient is 0 by design
    for (int k = 0; k < 4; ++k) {
      const int64_t idx = s.offset + static_cast<int64_t>(rng() % static_cast<uint64_t>(real));
      const float eps = 1e-2f;
      const double fd = (loss_at(idx, eps) - loss_at(idx, -eps)) / (2.0 * eps);
      EXPECT_NEAR(analytic[static_cast<size_t>(idx)], fd, 2e-3 + 3e-2 * std::fabs(fd))
          << s.name << " element " << (idx - s.offset);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4 * static_cast<int>(model.layout().specs().size()));
}

// Two micro-batches of B/2 rows accumulate the gradients one batch of B rows
// gives (backward() adds into the store), for the family `m` names.
inline void expect_gradients_accumulate_across_micro_batches(const ModelConfig& m, Ops& ops, int B,
                                                             int T) {
  const auto whole = make_model(m, ops, B, T), halves = make_model(m, ops, B / 2, T);
  for (CausalLM* model : {whole.get(), halves.get()})
    for_each_initial_parameter(m, 5, [&](const ParamSpec& s, const float* data) {
      std::copy(data, data + s.numel, model->params() + s.offset);
    });
  auto tokens = random_ints(static_cast<size_t>(B * T), 8, 0, m.vocab_size);
  auto targets = random_ints(static_cast<size_t>(B * T), 9, 0, m.vocab_size);
  const float scale = 1.f / static_cast<float>(B * T);
  whole->zero_grads();
  whole->forward(tokens.data(), targets.data(), B, T, scale);
  whole->backward();
  halves->zero_grads();
  for (int h = 0; h < 2; ++h) {
    const int off = h * (B / 2) * T;
    halves->forward(tokens.data() + off, targets.data() + off, B / 2, T, scale);
    halves->backward();
  }
  const size_t n = static_cast<size_t>(whole->layout().total());
  EXPECT_TRUE(all_close(halves->grads(), whole->grads(), n, 1e-6f, 1e-4f));
}

}  // namespace gt::test
