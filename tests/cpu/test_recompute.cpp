// Activation recomputation (train.recompute, GPT): mlp and block train bit
// for bit like none, on CpuOps and on OffHostOps (so recomputation touches
// backend memory only through ops), with gradient accumulation; and each mode
// allocates less than the one before, as the planner predicts. The tp = 2 and
// FSDP cases are in tests/mpi/test_recompute_mpi.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "offhost_ops.hpp"
#include "parallel/mesh.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/plan/memory_model.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {
namespace {

constexpr Recompute kModes[] = {Recompute::none, Recompute::mlp, Recompute::block};

ModelConfig tiny_model() {
  ModelConfig m;
  m.n_layer = 3;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 64;
  m.block_size = 8;
  return m;
}

using Trace = test::StepTrace;

// Three optimizer steps of two micro-batches each on one rank; the second
// micro-batch is shorter (T = 6), so the shared slots also serve smaller views.
Trace train(Ops& ops, Recompute recompute) {
  test::StepOptions o;
  o.model = tiny_model();
  o.recompute = recompute;
  o.second_micro_T = 6;
  o.init_seed = 5;
  return test::train_steps(ops, o);
}

void expect_identical(const Trace& got, const Trace& want, Recompute mode) {
  EXPECT_EQ(got.losses, want.losses) << to_string(mode);
  EXPECT_EQ(got.norms, want.norms) << to_string(mode);
  ASSERT_EQ(got.pieces.size(), want.pieces.size());
  for (size_t i = 0; i < want.pieces.size(); ++i)
    EXPECT_EQ(got.pieces[i], want.pieces[i]) << to_string(mode) << " piece " << i;
}

TEST(Recompute, EveryModeTrainsBitForBitLikeNoneOnTheCpuBackend) {
  auto ops = make_cpu_ops(1);
  const Trace want = train(*ops, Recompute::none);
  ASSERT_EQ(want.losses.size(), 6u);
  EXPECT_NE(want.losses.front(), want.losses.back());  // it trained
  for (Recompute mode : {Recompute::mlp, Recompute::block})
    expect_identical(train(*ops, mode), want, mode);
}

TEST(Recompute, EveryModeTrainsBitForBitLikeNoneWithoutTouchingBackendMemory) {
  auto cpu = make_cpu_ops(1);
  const Trace want = train(*cpu, Recompute::none);
  for (Recompute mode : kModes) {
    test::OffHostOps offhost;
    expect_identical(train(offhost, mode), want, mode);
    EXPECT_EQ(offhost.device_bytes_in_use(), 0);
  }
}

TEST(Recompute, ActivationBytesShrinkModeByModeAsPlanned) {
  auto ops = make_cpu_ops(1);
  ModelConfig m = tiny_model();
  m.n_layer = 4;
  const int B = 2, T = 8;
  int64_t previous = 0;
  for (Recompute mode : kModes) {
    GPT model(m, *ops, B, T, mode);
    const int64_t bytes = model.activation_bytes();
    EXPECT_EQ(bytes, predict_activation_bytes(m, B, T, 1, true, PlanBackend::cpu, mode))
        << to_string(mode);
    if (mode != Recompute::none) {
      EXPECT_LT(bytes, previous) << to_string(mode);
    }
    previous = bytes;
  }
  // One layer: recomputation keeps the same single slots, nothing to save.
  m.n_layer = 1;
  const int64_t one = predict_activation_bytes(m, B, T, 1, true, PlanBackend::cpu);
  for (Recompute mode : kModes) {
    GPT model(m, *ops, B, T, mode);
    EXPECT_EQ(model.activation_bytes(), one) << to_string(mode);
  }
}

TEST(Recompute, PlannerSavingsAreTheDroppedLayersOfEachBuffer) {
  // Per dropped layer, at tp = 1, fp32 (cpu): mlp drops ln2 (R*C), its two
  // statistics (2R), fch and fch_gelu (2 * 4RC); block also ln1 (RC) and its
  // statistics (2R), qkv (3RC), atty (RC), attention's saved state (the
  // B*NH*T*T probabilities on cpu) and res2 (RC).
  ModelConfig m = tiny_model();
  m.n_layer = 5;
  const int B = 3, T = 8;
  const int64_t R = B * T, C = m.n_embd, dropped = m.n_layer - 1;
  auto bytes = [&](Recompute r) {
    return predict_activation_bytes(m, B, T, 1, true, PlanBackend::cpu, r);
  };
  const int64_t mlp = dropped * (R * C + 2 * R + 8 * R * C) * 4;
  const int64_t attn =
      dropped * (R * C + 2 * R + 3 * R * C + R * C + int64_t(B) * m.n_head * T * T + R * C) * 4;
  EXPECT_EQ(bytes(Recompute::none) - bytes(Recompute::mlp), mlp);
  EXPECT_EQ(bytes(Recompute::mlp) - bytes(Recompute::block), attn);
}

}  // namespace
}  // namespace gt
