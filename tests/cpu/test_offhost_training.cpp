// The GPU-readiness of everything above the kernels, proven on the CPU: the
// model, ShardedParameters and the checkpoint path train on OffHostOps (a
// backend whose memory the host cannot touch, tests/offhost_ops.hpp) exactly
// as they do on CpuOps, so no code path dereferences backend memory from the
// host, and every view they build is labelled with the backend's device.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "offhost_ops.hpp"
#include "parallel/mesh.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {
namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 64;
  m.block_size = 8;
  return m;
}

// One rank training a few steps with accumulation 2: its losses, grad norms
// and final checkpoint pieces.
struct Trace {
  std::vector<float> losses;
  std::vector<double> norms;
  std::vector<std::vector<float>> pieces;
};

std::vector<std::vector<float>> piece_contents(const std::vector<TensorPiece>& pieces) {
  std::vector<std::vector<float>> out;
  for (const auto& p : pieces) out.emplace_back(p.data, p.data + p.box.rows * p.box.cols);
  return out;
}

Trace train(Ops& ops, int steps) {
  const ModelConfig m = tiny_model();
  const DeviceMesh mesh = DeviceMesh::in_process();
  const ParameterLayout layout(m, 1, 0, 1);
  ShardedParameters params(layout, mesh, 3, 25.0, ops);
  for_each_initial_parameter(m, 7, [&](const ParamSpec& s, const float* data) {
    params.load_global(s.name, data);
  });
  const int B = 2, T = 8;
  GPT model(m, ops, B, T, layout, params, TensorParallel{});
  TrainConfig tc;
  Trace t;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int step = 0; step < steps; ++step) {
    params.begin_step();
    for (int micro = 0; micro < 2; ++micro) {
      for (int i = 0; i < B * T; ++i) {
        tokens[i] = (i * 7 + step * 3 + micro) % m.vocab_size;
        targets[i] = (tokens[i] * 5 + 1) % m.vocab_size;
      }
      params.begin_micro_batch(micro == 1);
      t.losses.push_back(model.forward(tokens.data(), targets.data(), B, T, 0.5f / (B * T)));
      model.backward();
    }
    params.finish_gradients();
    t.norms.push_back(params.grad_norm());
    params.adamw_step(tc, 1e-2, 1.f, step + 1);
  }
  t.pieces = piece_contents(params.pieces_to_save());
  return t;
}

TEST(OffHostTraining, TrainsExactlyLikeTheCpuBackendWithoutTouchingBackendMemory) {
  auto cpu = make_cpu_ops(1);
  test::OffHostOps offhost;
  const Trace want = train(*cpu, 3);
  const Trace got = train(offhost, 3);
  // Same kernels in the same order: bit for bit, not merely close.
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.norms, want.norms);
  ASSERT_EQ(got.pieces.size(), want.pieces.size());
  for (size_t i = 0; i < want.pieces.size(); ++i) EXPECT_EQ(got.pieces[i], want.pieces[i]) << i;
  // The guard was live: ops opened the memory, transfers went through the API.
  EXPECT_GT(offhost.open_calls(), 100);
  EXPECT_GT(offhost.transfers(), 0);
  EXPECT_EQ(offhost.device_bytes_in_use(), 0);  // every Buffer released
  EXPECT_GT(offhost.device_bytes_peak(), 0);
}

TEST(OffHostTraining, CheckpointPiecesRoundTripThroughHostStaging) {
  test::OffHostOps ops;
  const ModelConfig m = tiny_model();
  const DeviceMesh mesh = DeviceMesh::in_process();
  const ParameterLayout layout(m, 1, 0, 1);
  std::vector<std::vector<float>> saved;
  {
    ShardedParameters a(layout, mesh, 3, 25.0, ops);
    for_each_initial_parameter(m, 11, [&](const ParamSpec& s, const float* data) {
      a.load_global(s.name, data);
    });
    saved = piece_contents(a.pieces_to_save());
  }
  ShardedParameters b(layout, mesh, 3, 25.0, ops);
  std::vector<TensorPiece> into = b.pieces_to_load();
  ASSERT_EQ(into.size(), saved.size());
  for (size_t i = 0; i < into.size(); ++i)
    std::copy(saved[i].begin(), saved[i].end(), into[i].data);  // host staging: writable
  b.finish_load();
  EXPECT_EQ(piece_contents(b.pieces_to_save()), saved);
  bool any_nonzero = false;
  for (const auto& p : saved)
    for (float x : p) any_nonzero |= x != 0.f;
  EXPECT_TRUE(any_nonzero);
}

TEST(OffHostTraining, HostPointersOfADeviceModelAreRefusedAndLogitsAreDownloaded) {
  test::OffHostOps ops;
  const ModelConfig m = tiny_model();
  GPT model(m, ops, 1, 4);
  EXPECT_THROW(model.params(), Error);
  EXPECT_THROW(model.grads(), Error);
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  model.forward(tokens.data(), nullptr, 1, 4, 0.f);
  const float* logits = model.logits();  // a host copy: readable here
  float sum = 0.f;
  for (int i = 0; i < 4 * m.vocab_size; ++i) sum += logits[i] * logits[i];
  EXPECT_EQ(sum, 0.f);  // parameters were never initialised: all zero
}

// The guard itself: a host write to backend memory must crash, or the tests
// above would prove nothing.
TEST(OffHostTrainingDeathTest, AHostWriteToBackendMemoryCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        test::OffHostOps ops;
        Buffer b = ops.allocate(64);
        b.f32()[3] = 1.f;
      },
      "");
}

}  // namespace
}  // namespace gt
