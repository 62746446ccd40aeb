// The GPU-readiness of everything above the kernels, proven on the CPU: the
// model, ShardedParameters and the checkpoint path train on OffHostOps (a
// backend whose memory the host cannot touch, tests/offhost_ops.hpp) exactly
// as they do on CpuOps, so no code path dereferences backend memory from the
// host, and every view they build is labelled with the backend's device.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "offhost_ops.hpp"
#include "parallel/mesh.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {
namespace {

TEST(OffHostTraining, TrainsExactlyLikeTheCpuBackendWithoutTouchingBackendMemory) {
  auto cpu = make_cpu_ops(1);
  test::OffHostOps offhost;
  const test::StepTrace want = test::train_steps(*cpu, 3);
  const test::StepTrace got = test::train_steps(offhost, 3);
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
  const ModelConfig m = test::tiny_gpt();
  const DeviceMesh mesh = DeviceMesh::in_process();
  const ParameterLayout layout(m, 1, 0, 1);
  std::vector<std::vector<float>> saved;
  {
    ShardedParameters a(layout, mesh, FsdpStage::parameters, 25.0, ops);
    for_each_initial_parameter(m, 11, [&](const ParamSpec& s, const float* data) {
      a.load_global(s.name, data);
    });
    saved = test::piece_contents(a.pieces_to_save());
  }
  ShardedParameters b(layout, mesh, FsdpStage::parameters, 25.0, ops);
  std::vector<TensorPiece> into = b.pieces_to_load();
  ASSERT_EQ(into.size(), saved.size());
  for (size_t i = 0; i < into.size(); ++i)
    std::copy(saved[i].begin(), saved[i].end(), into[i].data);  // host staging: writable
  b.finish_load();
  EXPECT_EQ(test::piece_contents(b.pieces_to_save()), saved);
  bool any_nonzero = false;
  for (const auto& p : saved)
    for (float x : p) any_nonzero |= x != 0.f;
  EXPECT_TRUE(any_nonzero);
}

TEST(OffHostTraining, HostPointersOfADeviceModelAreRefusedAndLogitsAreDownloaded) {
  test::OffHostOps ops;
  const ModelConfig m = test::tiny_gpt();
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
