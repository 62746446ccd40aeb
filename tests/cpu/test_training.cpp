// End-to-end training in-process: the loss falls on a learnable corpus,
// gradient accumulation matches one big batch, and a resumed run's losses
// and final weights equal the uninterrupted run's bit for bit.
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

std::string tiny_config(const test::TempDir& dir, const std::string& extra_train) {
  std::ostringstream y;
  y << "model: {n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 32}\n"
    << "data: {train: ['" << dir.file("train.bin") << "'], val: ['" << dir.file("val.bin")
    << "'], shuffle: true}\n"
    << "train: {seq_len: 32, micro_batch: 4, global_batch: 8, lr: 0.003, warmup_steps: 5, "
    << "min_lr: 0.0003, eval_every: 0, seed: 3" << extra_train << "}\n"
    << "runtime: {threads: 1}\n";
  return y.str();
}

class Training : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_shard(dir.file("train.bin"), corpus_tokens(200));
    test::write_shard(dir.file("val.bin"), corpus_tokens(20));
  }
  test::TempDir dir;
};

TEST_F(Training, LossFallsWellBelowUniform) {
  Config cfg = parse_config(tiny_config(dir, ", steps: 120"), "test", {"log.dir=" + dir.file("run")});
  TrainSummary s = run_training(cfg);
  auto m = read_metrics(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(m.size(), 120u);
  const double first = m.front()["loss"], last = m.back()["loss"];
  EXPECT_NEAR(first, std::log(256.0), 0.3);  // GPT-2 init starts near uniform
  EXPECT_LT(last, 1.0) << "loss only fell from " << first << " to " << last;
  EXPECT_DOUBLE_EQ(s.final_loss, last);
  EXPECT_TRUE(fs::exists(dir.file("run/model.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("run/config.yaml")));
}

TEST_F(Training, GradientAccumulationMatchesOneBigBatch) {
  Config accum = parse_config(tiny_config(dir, ", steps: 4"), "test",
                              {"log.dir=" + dir.file("a"), "train.micro_batch=2"});
  Config whole = parse_config(tiny_config(dir, ", steps: 4"), "test",
                              {"log.dir=" + dir.file("b"), "train.micro_batch=8"});
  ASSERT_EQ(accum.grad_accum_steps(), 4);
  ASSERT_EQ(whole.grad_accum_steps(), 1);
  run_training(accum);
  run_training(whole);
  auto a = read_metrics(dir.file("a/metrics.jsonl")), b = read_metrics(dir.file("b/metrics.jsonl"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i]["loss"].get<double>(), b[i]["loss"].get<double>(), 1e-5) << "step " << i;
    EXPECT_NEAR(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>(),
                1e-4 * b[i]["grad_norm"].get<double>())
        << "step " << i;
  }
}

TEST_F(Training, ResumedRunEqualsUninterruptedBitForBit) {
  const std::string ckpt = dir.file("ckpt");
  Config full = parse_config(tiny_config(dir, ", steps: 10"), "test",
                             {"train.eval_every=3", "log.dir=" + dir.file("full"), "checkpoint.dir=" + ckpt,
                              "checkpoint.every=5", "checkpoint.keep=5"});
  run_training(full);
  ASSERT_TRUE(fs::exists(ckpt + "/step_00000005/manifest.json"));
  ASSERT_TRUE(fs::exists(ckpt + "/step_00000010/manifest.json"));
  // Pretend the job died after step 5 was committed.
  fs::remove_all(ckpt + "/step_00000010");

  Config resumed = full;
  resumed.log.dir = dir.file("resumed");
  resumed.checkpoint.resume = "auto";
  TrainSummary s = run_training(resumed);
  EXPECT_EQ(s.first_step, 5);
  EXPECT_EQ(s.steps_run, 5);

  auto a = read_metrics(dir.file("full/metrics.jsonl"));
  auto b = read_metrics(dir.file("resumed/metrics.jsonl"));
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_EQ(b[i]["step"], a[i + 5]["step"]);
    EXPECT_EQ(b[i]["loss"].get<double>(), a[i + 5]["loss"].get<double>()) << "step " << i + 5;
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i + 5]["grad_norm"].get<double>());
    EXPECT_EQ(b[i].contains("val_loss"), a[i + 5].contains("val_loss"));
    if (b[i].contains("val_loss")) {
      EXPECT_EQ(b[i]["val_loss"], a[i + 5]["val_loss"]);
    }
  }
  EXPECT_EQ(file_bytes(dir.file("full/model.safetensors")),
            file_bytes(dir.file("resumed/model.safetensors")));
}

TEST_F(Training, ResumeIntoTheSameLogDirKeepsOneConsistentMetricsFile) {
  Config cfg = parse_config(tiny_config(dir, ", steps: 6"), "test",
                            {"log.dir=" + dir.file("run"), "checkpoint.every=3"});
  run_training(cfg);
  fs::remove_all(dir.file("run/checkpoints/step_00000006"));
  cfg.checkpoint.resume = "auto";
  run_training(cfg);
  auto m = read_metrics(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(m.size(), 6u);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i]["step"].get<int>(), static_cast<int>(i));
}

}  // namespace
}  // namespace gt
