// The whole model on the GPU: optimizer steps through GPT, ShardedParameters
// and AdamW on CudaOps in fp32 match the CPU backend to 1e-4, and a complete
// `run_training` with runtime.device=cuda logs the CPU run's losses. They
// skip without a CUDA device (the CPU suite's OffHostOps tests cover the
// host-access discipline everywhere).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "model_steps.hpp"
#include "test_util.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/plan/memory_model.hpp"
#include "trainer/train/trainer.hpp"

namespace gt {
namespace {

void expect_traces_close(const test::StepTrace& got, const test::StepTrace& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  EXPECT_TRUE(test::all_close(got.losses, want.losses, 1e-4f, 1e-4f));
  for (size_t i = 0; i < want.norms.size(); ++i)
    EXPECT_NEAR(got.norms[i], want.norms[i], 1e-4 * (1 + want.norms[i])) << "step " << i;
  ASSERT_EQ(got.pieces.size(), want.pieces.size());
  for (size_t i = 0; i < want.pieces.size(); ++i)
    EXPECT_TRUE(test::all_close(got.pieces[i], want.pieces[i], 1e-4f, 1e-4f)) << "piece " << i;
}

TEST(CudaTraining, Fp32StepsMatchTheCpuBackendTo1e4) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = make_cpu_ops(1);
  CudaOps cuda;  // fp32 GEMMs without TF32: comparable to 1e-4
  expect_traces_close(test::train_steps(cuda, 3), test::train_steps(*cpu, 3));
  EXPECT_EQ(cuda.device_bytes_in_use(),
            static_cast<int64_t>(cuda.scratch_bytes() + cuda.options().workspace_bytes));
}

TEST(CudaTraining, OddShapesMatchTheCpuBackend) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  ModelConfig m;  // sizes that are not multiples of any tile
  m.n_layer = 3;
  m.n_head = 3;
  m.n_embd = 48;
  m.vocab_size = 101;
  m.block_size = 40;
  auto cpu = make_cpu_ops(1);
  CudaOps cuda;
  expect_traces_close(test::train_steps(cuda, 2, m, 3, 37), test::train_steps(*cpu, 2, m, 3, 37));
}

// The attention key bias has an exactly zero gradient (a constant added to
// every key shifts each softmax row and changes nothing), so what reaches it
// is rounding noise (|m| ~ 1e-8) whose sign differs between backends, and
// AdamW turns any nonzero noise into a step of about lr: its trajectory is
// not determined by the math and is only bounded (at most lr per step from
// the same start). Every other value must agree to bf16 accuracy.
TEST(CudaTraining, Bf16StepsMatchTheCpuBackendsBf16To1e2) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = make_cpu_ops(1);
  CudaOps cuda;
  const auto m = test::tiny_gpt();
  constexpr int kSteps = 3;
  constexpr float kLr = 1e-2f;  // test::train_steps' learning rate
  const test::StepTrace got = test::train_steps(cuda, kSteps, m, 2, 8, ComputeDType::bf16);
  const test::StepTrace want = test::train_steps(*cpu, kSteps, m, 2, 8, ComputeDType::bf16);
  EXPECT_TRUE(test::all_close(got.losses, want.losses, 1e-2f, 1e-2f));
  ASSERT_EQ(got.piece_names, want.piece_names);
  const size_t C = static_cast<size_t>(m.n_embd);
  int key_biases = 0;
  for (size_t i = 0; i < want.pieces.size(); ++i) {
    const std::string& name = want.piece_names[i];
    std::vector<float> g = got.pieces[i], w = want.pieces[i];
    if (name.rfind("param.", 0) == 0 && name.find(".attn.c_attn.bias") != std::string::npos) {
      ASSERT_EQ(w.size(), 3 * C) << name;  // [q | k | v]
      for (size_t j = C; j < 2 * C; ++j)
        EXPECT_LE(std::abs(g[j] - w[j]), 2 * kSteps * kLr * 1.01f) << name << " key " << j - C;
      g.erase(g.begin() + static_cast<long>(C), g.begin() + static_cast<long>(2 * C));
      w.erase(w.begin() + static_cast<long>(C), w.begin() + static_cast<long>(2 * C));
      ++key_biases;
    }
    EXPECT_TRUE(test::all_close(g, w, 1e-2f, 1e-2f)) << name;
  }
  EXPECT_EQ(key_biases, m.n_layer);
}

// The planner's CUDA memory branch is what CudaOps allocates: GPT on the
// device allocates exactly the activation plan the planner sums
// (trainer/model/activation_plan.hpp), with the CUDA kernels' attention sizes,
// for every precision and recomputation mode.
TEST(CudaTraining, ActivationBytesAreThePlannersCudaPrediction) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  CudaOps cuda;
  const auto m = test::tiny_gpt();
  constexpr int B = 2, T = 8;
  for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16})
    for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block}) {
      GPT model(m, cuda, B, T, r, dtype);
      EXPECT_EQ(model.activation_bytes(),
                predict_activation_bytes(m, B, T, 1, true, PlanBackend::cuda, r, dtype, false))
          << to_string(dtype) << " recompute " << to_string(r);
    }
}

std::vector<double> losses_of(const std::string& metrics) {
  std::vector<double> out;
  std::ifstream f(metrics);
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line).at("loss"));
  return out;
}

TEST(CudaTraining, TrainerRunOnCudaLogsTheCpuRunsLosses) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  test::TempDir dir;
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 20000; ++i) tokens.push_back(static_cast<uint16_t>((i * 31 + i / 7) % 256));
  test::write_shard(dir.file("train.bin"), tokens);
  std::ostringstream y;
  y << "model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, block_size: 64}\n"
    << "data: {train: ['" << dir.file("train.bin") << "']}\n"
    << "train: {seq_len: 64, micro_batch: 4, global_batch: 8, steps: 5, eval_every: 0}\n"
    << "runtime: {threads: 1}\n";
  auto run = [&](const std::string& device) {
    const std::string log = dir.file("run_" + device);
    Config cfg = parse_config(y.str(), "test", {"log.dir=" + log, "runtime.device=" + device});
    run_training(cfg);
    return losses_of(log + "/metrics.jsonl");
  };
  const std::vector<double> cpu = run("cpu"), cuda = run("cuda");
  ASSERT_EQ(cuda.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(cuda[i], cpu[i], 1e-4 * cpu[i]) << i;
}

}  // namespace
}  // namespace gt
