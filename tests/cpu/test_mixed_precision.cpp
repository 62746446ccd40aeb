// bf16 (runtime.dtype=bf16: bf16 activation storage, trainer/model/gpt.hpp
// "Precision"; the weight copies of trainer/parallelize/linear_precision.hpp) on the
// CPU backend, which computes the same function as the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/core/bf16.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "offhost_ops.hpp"
#include "test_util.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/parallelize/linear_precision.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {
namespace {

TEST(LinearPrecision, Fp32PassesOperandsThroughAndBf16RoundsThem) {
  auto ops = make_cpu_ops(1);
  const std::vector<float> x = test::random_vector(37, 5);
  Buffer xb = ops->allocate(x.size() * 4);
  const TensorView xv = xb.f32_view({37});
  ops->upload(xv, x.data());

  LinearPrecision fp32(*ops, ComputeDType::fp32, {64, 64, 64});
  EXPECT_EQ(fp32.input(xv).data, xv.data);
  EXPECT_EQ(fp32.bytes(), 0);

  LinearPrecision bf16(*ops, ComputeDType::bf16, {64, 32, 48});
  EXPECT_EQ(bf16.bytes(), (64 + 32 + 48) * 2);
  const TensorView in = bf16.input(xv);
  EXPECT_EQ(in.dtype, DType::bf16);
  EXPECT_NE(in.data, xv.data);
  std::vector<float> back(37);
  Buffer bb = ops->allocate(37 * 4);
  ops->cast(bb.f32_view({37}), in);
  ops->download(back.data(), bb.f32_view({37}));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], bf16_round(x[i])) << i;
  // An operand larger than its buffer is an error naming it, not an overrun.
  Buffer big = ops->allocate(40 * 4);
  try {
    bf16.grad(big.f32_view({40}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output gradient (40)"), std::string::npos) << e.what();
  }
}

TEST(MixedPrecision, Bf16TrainsCloseToFp32ButNotIdentically) {
  auto ops = make_cpu_ops(1);
  const test::StepTrace f = test::train_steps(*ops, 3);
  const test::StepTrace b =
      test::train_steps(*ops, 3, test::tiny_gpt(), 2, 8, ComputeDType::bf16);
  ASSERT_EQ(b.losses.size(), f.losses.size());
  bool differs = false;
  for (size_t i = 0; i < f.losses.size(); ++i) {
    EXPECT_NEAR(b.losses[i], f.losses[i], 1e-2 * f.losses[i]) << i;
    differs |= b.losses[i] != f.losses[i];
  }
  EXPECT_TRUE(differs) << "bf16 rounding changed nothing: the activations are not bf16";
  for (size_t i = 0; i < f.norms.size(); ++i)
    EXPECT_NEAR(b.norms[i], f.norms[i], 3e-2 * f.norms[i]) << i;
}

TEST(MixedPrecision, Bf16OnDeviceStyleMemoryMatchesTheCpuBitForBit) {
  auto cpu = make_cpu_ops(1);
  test::OffHostOps offhost;
  const auto m = test::tiny_gpt();
  const test::StepTrace want = test::train_steps(*cpu, 2, m, 2, 8, ComputeDType::bf16);
  const test::StepTrace got = test::train_steps(offhost, 2, m, 2, 8, ComputeDType::bf16);
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.norms, want.norms);
  EXPECT_EQ(got.pieces, want.pieces);
}

// The store's bf16 weight copy (written by AdamW, refreshed after loading)
// is exactly the per-GEMM cast it replaces: the same run, bit for bit.
TEST(MixedPrecision, TheStoresBf16WeightCopyTrainsExactlyLikeCastingPerGemm) {
  auto ops = make_cpu_ops(1);
  test::StepOptions o;
  o.dtype = ComputeDType::bf16;
  o.steps = 3;
  const test::StepTrace kept = test::train_steps(*ops, o);
  o.bf16_params = false;
  const test::StepTrace cast = test::train_steps(*ops, o);
  EXPECT_EQ(kept.losses, cast.losses);
  EXPECT_EQ(kept.norms, cast.norms);
  EXPECT_EQ(kept.pieces, cast.pieces);
}

// The copy is the rounded parameter after loading (once begin_forward has
// refreshed it; reading it before is an error, not stale weights) and after
// each AdamW step (written by AdamW itself, no refresh).
TEST(MixedPrecision, TheBf16WeightCopyFollowsLoadingAndEveryStep) {
  auto ops = make_cpu_ops(1);
  const ModelConfig m = test::tiny_gpt();
  const DeviceMesh mesh = DeviceMesh::in_process();
  const ParameterLayout layout(m, 1, 0, 1);
  ShardedParameters params(layout, mesh, FsdpStage::parameters, 25.0, *ops, true);
  ASSERT_TRUE(params.keeps_bf16_params());
  for_each_initial_parameter(
      m, 5, [&](const ParamSpec& s, const float* data) { params.load_global(s.name, data); });
  auto expect_copy_is_rounded = [&](const char* when) {
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const int unit = static_cast<int>(u);
      const float* p = params.unit_params(unit);
      const uint16_t* c = params.unit_params_bf16(unit);
      for (int64_t i = 0; i < layout.units()[u].size(); ++i)
        ASSERT_EQ(c[i], bf16_from_float(p[i])) << when << ": unit " << u << " element " << i;
    }
  };
  EXPECT_NE(test::error_message([&] { params.unit_params_bf16(0); }).find("before begin_forward"),
            std::string::npos);
  params.begin_forward(false);
  expect_copy_is_rounded("after loading");
  GPT model(m, *ops, 2, 8, layout, params, TensorParallelGroup{&mesh.tp(), true}, Recompute::none,
            ComputeDType::bf16);
  std::vector<int32_t> tokens(16), targets(16);
  for (int i = 0; i < 16; ++i) {
    tokens[i] = (3 * i + 1) % m.vocab_size;
    targets[i] = (5 * i + 2) % m.vocab_size;
  }
  TrainConfig tc;
  for (int step = 1; step <= 2; ++step) {
    params.begin_step();
    params.begin_micro_batch(true);
    model.forward(tokens.data(), targets.data(), 2, 8, 1.f / 16);
    model.backward();
    params.finish_gradients();
    params.adamw_step(tc, 1e-2, 1.f, step);
    expect_copy_is_rounded(step == 1 ? "after step 1" : "after step 2");
  }
}

// GPT::logits() hands out the true vocabulary's columns (the padding dropped,
// rows realigned) in either precision: recomputing each position's loss from
// them gives the model's own losses. A vocabulary of 61 is stored as 128.
TEST(MixedPrecision, LogitsAreTheTrueVocabularysInEitherPrecision) {
  auto ops = make_cpu_ops(1);
  ModelConfig m = test::tiny_gpt();
  m.vocab_size = 61;
  for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16}) {
    SCOPED_TRACE(dtype == ComputeDType::bf16 ? "bf16" : "fp32");
    GPT model(m, *ops, 2, 8, Recompute::none, dtype);
    init_gpt2_parameters(model.layout(), m.n_layer, 11, model.params());
    std::vector<int32_t> tokens(16), targets(16);
    for (int i = 0; i < 16; ++i) {
      tokens[i] = (i * 13 + 5) % 61;
      targets[i] = (i * 29 + 60) % 61;  // 60, the last real token, included
    }
    model.forward(tokens.data(), targets.data(), 2, 8, 0.f);
    const float* logits = model.logits();
    for (int r = 0; r < 16; ++r) {
      const float* x = logits + r * 61;
      double mx = x[0], sum = 0.0;
      for (int j = 1; j < 61; ++j) mx = std::max(mx, double(x[j]));
      for (int j = 0; j < 61; ++j) sum += std::exp(x[j] - mx);
      EXPECT_NEAR(std::log(sum) + mx - x[targets[r]], model.losses()[r], 1e-5) << "row " << r;
    }
  }
}

}  // namespace
}  // namespace gt
