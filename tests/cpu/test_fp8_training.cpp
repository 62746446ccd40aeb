// fp8 training end to end (runtime.fp8): scales come from the current amax,
// so an fp8 run keeps no state outside its bf16/fp32 master weights and
// AdamW moments. Its checkpoints hold exactly the tensors a bf16 run's do, a
// resumed fp8 run equals the uninterrupted one bit for bit, and a checkpoint
// of either precision resumes in the other. The producers' amaxes pass
// runtime.fp8_check_amax on every model and recomputation.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "run_test_util.hpp"
#include "test_util.hpp"
#include "trainer/config/config.hpp"
#include "trainer/train/trainer.hpp"

namespace gt {
namespace {

namespace fs = std::filesystem;
using test::corpus_tokens;
using test::file_bytes;
using test::read_metrics;

// A small Llama whose block linears all run in fp8 (fp8_min_dim 0), 10
// steps, a checkpoint every 5.
std::string fp8_config(const test::TempDir& dir) {
  std::ostringstream y;
  y << "model: {arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, ffn_hidden: 64, "
    << "vocab_size: 256, block_size: 32}\n"
    << "data: {train: ['" << dir.file("train.bin") << "'], val: ['" << dir.file("val.bin")
    << "'], shuffle: true}\n"
    << "train: {seq_len: 32, micro_batch: 4, global_batch: 8, lr: 0.003, warmup_steps: 3, "
    << "min_lr: 0.0003, eval_every: 5, seed: 3, steps: 10}\n"
    << "checkpoint: {every: 5, keep: 5}\n"
    << "runtime: {threads: 1, dtype: bf16, fp8_min_dim: 0}\n";
  return y.str();
}

// Each tensor a checkpoint holds, with its shape.
std::map<std::string, std::string> checkpoint_tensors(const std::string& step_dir) {
  std::ifstream f(step_dir + "/manifest.json");
  nlohmann::json m = nlohmann::json::parse(f);
  std::map<std::string, std::string> out;
  for (auto& [name, t] : m["tensors"].items()) out[name] = t["shape"].dump();
  return out;
}

class Fp8Training : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_shard(dir.file("train.bin"), corpus_tokens(200));
    test::write_shard(dir.file("val.bin"), corpus_tokens(20));
  }
  // A run of fp8_config with runtime.fp8 = `fp8` into `name`, checkpoints
  // in `name`/checkpoints, resuming from `resume` when given.
  TrainSummary train(const std::string& name, const std::string& fp8,
                     const std::string& resume = "") {
    std::vector<std::string> o = {"log.dir=" + dir.file(name), "runtime.fp8=" + fp8};
    if (!resume.empty()) o.push_back("checkpoint.resume=" + resume);
    return run_training(parse_config(fp8_config(dir), "test", o));
  }
  std::string step_dir(const std::string& run, int step) {
    char s[32];
    std::snprintf(s, sizeof s, "step_%08d", step);
    return dir.file(run + "/checkpoints/" + s);
  }
  test::TempDir dir;
};

TEST_F(Fp8Training, AResumedFp8RunEqualsTheUninterruptedOneBitForBit) {
  train("full", "tensorwise");
  ASSERT_TRUE(fs::exists(step_dir("full", 5) + "/manifest.json"));
  TrainSummary s = train("resumed", "tensorwise", step_dir("full", 5));
  EXPECT_EQ(s.first_step, 5);
  auto a = read_metrics(dir.file("full/metrics.jsonl"));
  auto b = read_metrics(dir.file("resumed/metrics.jsonl"));
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i]["loss"].get<double>(), a[i + 5]["loss"].get<double>()) << "step " << i + 5;
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i + 5]["grad_norm"].get<double>());
  }
  EXPECT_EQ(file_bytes(dir.file("full/model.safetensors")),
            file_bytes(dir.file("resumed/model.safetensors")));
}

TEST_F(Fp8Training, CheckpointsHoldOnlyTheMasterWeightsAndResumeAcrossPrecisions) {
  train("fp8", "rowwise");
  train("bf16", "off");
  // The fp8 run is not the bf16 one (its first forward, on the same initial
  // weights, already differs).
  EXPECT_NE(read_metrics(dir.file("fp8/metrics.jsonl"))[0]["loss"].get<double>(),
            read_metrics(dir.file("bf16/metrics.jsonl"))[0]["loss"].get<double>());
  // The same tensors, shapes and nothing fp8-specific, whichever precision
  // wrote them.
  auto fp8_tensors = checkpoint_tensors(step_dir("fp8", 5));
  EXPECT_EQ(fp8_tensors, checkpoint_tensors(step_dir("bf16", 5)));
  for (auto& [name, shape] : fp8_tensors) {
    EXPECT_EQ(name.find("fp8"), std::string::npos) << name;
    EXPECT_EQ(name.find("scale"), std::string::npos) << name;
    EXPECT_EQ(name.find("amax"), std::string::npos) << name;
  }

  // fp8 -> bf16 and bf16 -> fp8. Step 5's loss is the first forward on the
  // checkpoint's weights: the resumed run's differs from the writer's only
  // by the GEMMs' precision (a few e4m3 steps averaged over the tokens), and
  // both resumed runs go on training.
  struct Case {
    const char* from;
    const char* to;
  };
  for (Case c : {Case{"fp8", "off"}, Case{"bf16", "rowwise"}, Case{"fp8", "tensorwise"}}) {
    const std::string name = std::string(c.from) + "_to_" + c.to;
    SCOPED_TRACE(name);
    TrainSummary s = train(name, c.to, step_dir(c.from, 5));
    EXPECT_EQ(s.first_step, 5);
    EXPECT_EQ(s.steps_run, 5);
    auto writer = read_metrics(dir.file(std::string(c.from) + "/metrics.jsonl"));
    auto resumed = read_metrics(dir.file(name + "/metrics.jsonl"));
    ASSERT_EQ(resumed.size(), 5u);
    ASSERT_EQ(resumed[0]["step"], 5);
    const double w = writer[5]["loss"], r = resumed[0]["loss"];
    EXPECT_NEAR(r, w, 0.02 * w) << "the resumed run did not start from the checkpoint's weights";
    EXPECT_LT(resumed.back()["loss"].get<double>(), r);
  }
}

// runtime.fp8_check_amax on the paths the layout tests do not take: every
// amax a producer took in its own pass (the norms, SwiGLU or GELU and their
// backward; kernels/ops.hpp) equals a pass of its own over the operand the
// fp8 GEMM reads, for GPT-2, Llama and Mixtral (whose experts stay bf16),
// with and without recomputation, both recipes. A mismatch throws naming
// the layer, which fails the run.
TEST_F(Fp8Training, EveryProducerAmaxIsTheOperandsOwnOnEveryModelAndRecompute) {
  const char* models[] = {
      "model: {arch: gpt2, n_layer: 2, n_head: 4, n_embd: 32, vocab_size: 256, block_size: 32}",
      "model: {arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, ffn_hidden: 64, "
      "vocab_size: 256, block_size: 32}",
      "model: {arch: mixtral, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, ffn_hidden: 32, "
      "n_experts: 4, experts_per_token: 2, vocab_size: 256, block_size: 32}"};
  int run = 0;
  for (const char* model : models)
    for (const char* recompute : {"none", "block"})
      for (const char* recipe : {"tensorwise", "rowwise"}) {
        SCOPED_TRACE(std::string(model) + " recompute " + recompute + " " + recipe);
        std::ostringstream y;
        y << model << "\n"
          << "data: {train: ['" << dir.file("train.bin") << "']}\n"
          << "train: {seq_len: 32, micro_batch: 4, global_batch: 8, steps: 2, eval_every: 0, "
          << "recompute: " << recompute << "}\n"
          << "runtime: {threads: 1, dtype: bf16, fp8_min_dim: 0, fp8_check_amax: true}\n";
        const std::string log = dir.file("check_" + std::to_string(run++));
        TrainSummary s;
        const std::vector<std::string> o = {"log.dir=" + log, "runtime.fp8=" + std::string(recipe)};
        EXPECT_NO_THROW(s = run_training(parse_config(y.str(), "test", o)));
        EXPECT_EQ(s.steps_run, 2);
      }
}

}  // namespace
}  // namespace gt
