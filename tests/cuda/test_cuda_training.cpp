// The whole model on the GPU: optimizer steps through GPT, ShardedParameters
// and AdamW on CudaOps in fp32 match the CPU backend to 1e-4, and a complete
// `run_training` with runtime.device=cuda logs the CPU run's losses. They
// skip without a CUDA device (the CPU suite's OffHostOps tests cover the
// host-access discipline everywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "model_steps.hpp"
#include "run_test_util.hpp"
#include "test_util.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/plan/memory_model.hpp"
#include "trainer/train/trainer.hpp"
#if defined(TRAINER_CUDA_EMULATOR)
#include "gt_emu/control.hpp"
#endif

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

// Llama (grouped-query attention, RoPE, RMSNorm, SwiGLU, untied head) in
// fp32 on CudaOps: the CPU backend's steps to 1e-4, with recomputation too.
TEST(CudaTraining, LlamaFp32StepsMatchTheCpuBackendTo1e4) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = make_cpu_ops(1);
  CudaOps cuda;
  test::StepOptions o;
  o.model = test::tiny_llama();
  expect_traces_close(test::train_steps(cuda, o), test::train_steps(*cpu, o));
  o.recompute = Recompute::block;
  o.model.n_kv_head = 1;  // every query head on one key/value head
  expect_traces_close(test::train_steps(cuda, o), test::train_steps(*cpu, o));
}

// Llama in bf16 on the tensor-core attention (head size 16): the CPU
// backend's bf16 losses to bf16 accuracy, and no weight further than AdamW's
// bound (2 lr per step) from the CPU's (the reasoning of the GPT-2 test below).
TEST(CudaTraining, LlamaBf16TensorCoreStepsMatchTheCpuBackendsBf16) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = make_cpu_ops(1);
  CudaContextOptions options;
  options.attention_tensor_cores = true;
  CudaOps cuda(options);
  test::StepOptions o;
  o.model = test::tiny_llama();
  o.model.n_embd = 64;  // 4 query heads, 2 key/value heads of 16 channels
  o.dtype = ComputeDType::bf16;
  constexpr float kLr = 1e-2f;  // test::train_steps' learning rate
  const test::StepTrace got = test::train_steps(cuda, o), want = test::train_steps(*cpu, o);
  EXPECT_TRUE(test::all_close(got.losses, want.losses, 1e-2f, 1e-2f));
  for (size_t i = 0; i < want.pieces.size(); ++i) {
    if (want.piece_names[i].rfind("param.", 0) != 0) continue;
    EXPECT_TRUE(test::all_close(got.pieces[i], want.pieces[i], 2 * o.steps * kLr * 1.01f, 0.f))
        << want.piece_names[i];
  }
}

// What bf16 can promise. AdamW's first step moves a weight by about
// lr * sign(g), so wherever a gradient is rounding noise its step is decided
// by the noise: the attention key bias (its gradient is exactly zero: a
// constant added to every key changes no softmax row), and in bf16 any element
// whose gradient is smaller than the backends' rounding difference. A GPU and
// a CPU that sum in different orders then disagree there by up to 2 lr, both
// correct (seen on an H200: 1-2 weights of 1024 in c_fc, c_proj and c_attn
// after 3 steps). Hence, after one step, where the first moment
// m = (1 - beta1) g tells which gradients are noise:
//   - the gradients (m) agree to bf16 accuracy relative to their tensor's
//     scale, which is what the kernels compute;
//   - a weight leaves bf16 accuracy only where |m| is below the noise floor
//     (kNoiseFloor of its tensor's largest |m|), and by at most 2 lr;
// and over three steps the losses agree to bf16 accuracy and no weight is
// further than AdamW's bound (2 lr per step) from the CPU's.
TEST(CudaTraining, Bf16StepsMatchTheCpuBackendsBf16To1e2) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  auto cpu = make_cpu_ops(1);
  CudaOps cuda;
  const auto m = test::tiny_gpt();
  constexpr float kLr = 1e-2f;         // test::train_steps' learning rate
  constexpr float kMomentTol = 2e-2f;  // of the tensor's largest |m|
  constexpr float kNoiseFloor = 2e-2f;
  auto run = [&](Ops& ops, int steps) {
    return test::train_steps(ops, steps, m, 2, 8, ComputeDType::bf16);
  };
  const test::StepTrace got = run(cuda, 1), want = run(*cpu, 1);
  ASSERT_EQ(got.piece_names, want.piece_names);
  auto index_of = [&](const std::string& name) {
    const auto it = std::find(want.piece_names.begin(), want.piece_names.end(), name);
    EXPECT_NE(it, want.piece_names.end()) << name;
    return static_cast<size_t>(it - want.piece_names.begin());
  };
  int params = 0;
  for (size_t i = 0; i < want.pieces.size(); ++i) {
    const std::string& name = want.piece_names[i];
    if (name.rfind("param.", 0) != 0) continue;
    ++params;
    const size_t mi = index_of("adam_m." + name.substr(6));
    const std::vector<float>&mg = got.pieces[mi], &mw = want.pieces[mi];
    float scale = 0.f, worst_m = 0.f;
    for (size_t j = 0; j < mw.size(); ++j) {
      scale = std::max(scale, std::abs(mw[j]));
      worst_m = std::max(worst_m, std::abs(mg[j] - mw[j]));
    }
    EXPECT_LE(worst_m, kMomentTol * scale) << name << ": gradients differ beyond bf16 accuracy";
    const std::vector<float>&g = got.pieces[i], &w = want.pieces[i];
    int noise = 0;
    for (size_t j = 0; j < w.size(); ++j) {
      const float diff = std::abs(g[j] - w[j]);
      if (diff <= 1e-2f + 1e-2f * std::abs(w[j])) continue;
      const bool is_noise = std::abs(mw[j]) <= kNoiseFloor * scale;
      noise += is_noise;
      EXPECT_TRUE(is_noise) << name << "[" << j << "]: got " << g[j] << ", want " << w[j]
                            << ", and its gradient is not noise: m " << mw[j] << " (GPU " << mg[j]
                            << "), largest |m| " << scale;
      EXPECT_LE(diff, 2 * kLr * 1.01f) << name << "[" << j << "]";
    }
    if (noise > 0)
      std::printf("[   info   ] %s: %d weight(s) whose gradient is noise took the other sign\n",
                  name.c_str(), noise);
  }
  EXPECT_EQ(params, 2 + 12 * m.n_layer + 2);  // wte, wpe, 12 per block, ln_f

  constexpr int kSteps = 3;
  const test::StepTrace got3 = run(cuda, kSteps), want3 = run(*cpu, kSteps);
  EXPECT_TRUE(test::all_close(got3.losses, want3.losses, 1e-2f, 1e-2f));
  for (size_t i = 0; i < want3.pieces.size(); ++i) {
    if (want3.piece_names[i].rfind("param.", 0) != 0) continue;
    EXPECT_TRUE(test::all_close(got3.pieces[i], want3.pieces[i], 2 * kSteps * kLr * 1.01f, 0.f))
        << want3.piece_names[i];
  }
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

TEST(CudaTraining, TrainerRunOnCudaLogsTheCpuRunsLosses) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  test::TempDir dir;
  test::write_shard(dir.file("train.bin"), test::pattern_tokens(20000));
  std::ostringstream y;
  y << "model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, block_size: 64}\n"
    << "data: {train: ['" << dir.file("train.bin") << "']}\n"
    << "train: {seq_len: 64, micro_batch: 4, global_batch: 8, steps: 5, eval_every: 0}\n"
    << "runtime: {threads: 1}\n";
  auto run = [&](const std::string& device) {
    const std::string log = dir.file("run_" + device);
    Config cfg = parse_config(y.str(), "test", {"log.dir=" + log, "runtime.device=" + device});
    run_training(cfg);
    return test::losses_of(log + "/metrics.jsonl");
  };
  const std::vector<double> cpu = run("cpu"), cuda = run("cuda");
  ASSERT_EQ(cuda.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(cuda[i], cpu[i], 1e-4 * cpu[i]) << i;
}

// runtime.fp8 on the CUDA backend (the quantising kernels and cuBLASLt's
// fp8 matmul behind CudaOps' fp8 ops) against the CPU backend's fp8: a small
// Llama whose every block linear runs in fp8, 3 steps, each recipe. The two
// backends quantise the same bf16 values wherever their bf16 activations
// agree; a summation order that moves one across a rounding boundary moves
// its code by one e4m3 step (~6%) in that element. Measured on the emulated
// device: 3.4e-5 (tensorwise) and 2.7e-5 (rowwise) relative; held to 1e-3.
// That alone cannot tell fp8 from bf16 at this size (the CPU's fp8 and bf16
// losses differ by about as little), so the CUDA run's profiled step must
// show the fp8 GEMMs and amaxes and no bf16 GEMM besides the LM head's.
// (The emulated fp8 layouts, tests/emulator/emulated_training.py --fp8, run
// with runtime.fp8_check_amax: the device kernels' fused amaxes against a
// pass of their own; this profile stays the path a run takes.)
TEST(CudaTraining, Fp8RunsLogTheCpuFp8RunsLosses) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  test::TempDir dir;
  test::write_shard(dir.file("train.bin"), test::pattern_tokens(20000));
  std::ostringstream y;
  y << "model: {arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 64, ffn_hidden: 96, "
    << "vocab_size: 256, block_size: 32}\n"
    << "data: {train: ['" << dir.file("train.bin") << "']}\n"
    << "train: {seq_len: 32, micro_batch: 4, global_batch: 8, steps: 3, eval_every: 0}\n"
    << "runtime: {threads: 1, dtype: bf16, fp8_min_dim: 0}\n";
  // A peaks file, so that profiling runs no bench on the emulated device.
  std::ofstream(dir.file("peaks.json")) << R"({"peaks": {"gemm_tflops": 1, "mem_gbps": 1}})";
  auto run = [&](const std::string& device, const std::string& fp8) {
    const std::string log = dir.file("run_" + device + "_" + fp8);
    Config cfg = parse_config(y.str(), "test",
                              {"log.dir=" + log, "runtime.device=" + device, "runtime.fp8=" + fp8,
                               "profile.every=3", "profile.peaks=" + dir.file("peaks.json")});
    run_training(cfg);
    return test::losses_of(log + "/metrics.jsonl");
  };
  for (const char* recipe : {"tensorwise", "rowwise"}) {
    SCOPED_TRACE(recipe);
    const std::vector<double> cpu = run("cpu", recipe), cuda = run("cuda", recipe);
    ASSERT_EQ(cuda.size(), cpu.size());
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_NEAR(cuda[i], cpu[i], 1e-3 * cpu[i]) << i;
      worst = std::max(worst, std::abs(cuda[i] - cpu[i]) / cpu[i]);
    }
    std::printf("fp8 %s: CUDA vs CPU losses differ by at most %.2e relative\n", recipe, worst);
    // The profiled step's ops: the block linears' GEMMs are fp8 (8 linears x
    // 3 GEMMs x 2 micro-batches), the LM head's two bf16.
    std::ifstream f(dir.file(std::string("run_cuda_") + recipe + "/roofline.json"));
    ASSERT_TRUE(f) << "no roofline.json";
    const nlohmann::json r = nlohmann::json::parse(f);
    double fp8_calls = 0, bf16_gemm_calls = 0, amax_calls = 0;
    for (const auto& op : r.at("ops")) {
      if (op.at("subtotal")) continue;
      const std::string name = op.at("name");
      const double calls = op.at("calls_per_step");
      if (name.rfind("fp8_matmul", 0) == 0) fp8_calls += calls;
      else if (name.rfind("fp8_amax", 0) == 0) amax_calls += calls;
      else if (name.rfind("matmul_", 0) == 0) bf16_gemm_calls += calls;
    }
    EXPECT_EQ(fp8_calls, 2 * 4 * 3 * 2) << r.dump();
    EXPECT_GT(amax_calls, 0);
    EXPECT_EQ(bf16_gemm_calls, 2 * 2);
  }
}

// runtime.fp8 on a GPU older than sm_89 (no fp8 tensor cores) is refused
// by name before any model is built. The emulated device is told to report
// sm_80 (an A100); a real GPU of sm_89 or newer has nothing to refuse.
TEST(CudaTraining, Fp8OnAGpuOlderThanSm89IsRefusedByName) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
#if defined(TRAINER_CUDA_EMULATOR)
  emu::set_compute_capability(80);
  struct Restore {
    ~Restore() { emu::set_compute_capability(90); }
  } restore;
#else
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major * 10 + prop.minor >= 89) GTEST_SKIP() << "this GPU has fp8 tensor cores";
#endif
  test::TempDir dir;
  test::write_shard(dir.file("train.bin"), std::vector<uint16_t>(4096, 7));
  const std::string y = "model: {n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 32}\n"
                        "data: {train: ['" + dir.file("train.bin") + "']}\n"
                        "train: {seq_len: 32, micro_batch: 2, global_batch: 2, steps: 1}\n";
  Config cfg = parse_config(y, "test.yaml",
                            {"log.dir=" + dir.file("run"), "runtime.device=cuda",
                             "runtime.dtype=bf16", "runtime.fp8=rowwise"});
  const std::string msg = test::error_message([&] { run_training(cfg); });
  EXPECT_NE(msg.find("runtime.fp8=rowwise (test.yaml): cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fp8 GEMMs need sm_89 or newer"), std::string::npos) << msg;
}

}  // namespace
}  // namespace gt
