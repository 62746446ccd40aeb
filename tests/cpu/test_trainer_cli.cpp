// build/trainer on bad input: every case exits non-zero with a message that
// names the problem, and leaves the run directory exactly as it was (no
// partial file). Runs the real executable, as a user would.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "test_util.hpp"

namespace gt {
namespace {

namespace fs = std::filesystem;

// Every path under `root` with its size: "unchanged" means this map is equal.
std::map<std::string, uintmax_t> snapshot(const std::string& root) {
  std::map<std::string, uintmax_t> out;
  if (!fs::exists(root)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    out[e.path().string()] = e.is_regular_file() ? e.file_size() : 0;
  return out;
}

class TrainerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<uint16_t> toks;
    for (int i = 0; i < 5000; ++i) toks.push_back(static_cast<uint16_t>("abcdefgh "[i % 9]));
    test::write_shard(dir.file("train.bin"), toks);
    std::ofstream(dir.file("cfg.yaml"))
        << "model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, block_size: 16}\n"
        << "data: {train: ['" << dir.file("train.bin") << "']}\n"
        << "train: {seq_len: 16, micro_batch: 2, global_batch: 4, steps: 3, eval_every: 0}\n"
        << "runtime: {threads: 1}\n"
        << "log: {dir: '" << dir.file("run") << "'}\n";
  }

  // Runs the trainer; returns (exit code, output).
  std::pair<int, std::string> trainer(const std::string& args) {
    std::string out;
    int rc = test::run_command(std::string(GT_TRAINER_BIN) + " " + args, &out);
    return {rc, out};
  }

  void expect_rejected(const std::string& args, const std::string& message) {
    auto before = snapshot(dir.file("run"));
    auto [rc, out] = trainer(args);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("error: "), std::string::npos) << out;
    EXPECT_NE(out.find(message), std::string::npos) << "expected '" << message << "' in:\n" << out;
    EXPECT_EQ(snapshot(dir.file("run")), before) << "the run directory changed";
  }

  test::TempDir dir;
};

TEST_F(TrainerCli, TrainsAndWritesItsOutputs) {
  auto [rc, out] = trainer("--config " + dir.file("cfg.yaml"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(fs::exists(dir.file("run/metrics.jsonl")));
  EXPECT_TRUE(fs::exists(dir.file("run/model.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("run/checkpoints/step_00000003/manifest.json")));
  EXPECT_NE(out.find("step     3/3"), std::string::npos) << out;
}

// checkpoint.final=false (gpu_check's 124M runs): the periodic checkpoint of
// step 2 is written, nothing at the end, and no export, which would otherwise
// pass step 2's weights off as the final ones.
TEST_F(TrainerCli, NoFinalCheckpointMeansNoExport) {
  auto [rc, out] =
      trainer("--config " + dir.file("cfg.yaml") + " checkpoint.final=false checkpoint.every=2");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(fs::exists(dir.file("run/metrics.jsonl")));
  EXPECT_TRUE(fs::exists(dir.file("run/checkpoints/step_00000002/manifest.json")));
  EXPECT_FALSE(fs::exists(dir.file("run/checkpoints/step_00000003")));
  EXPECT_FALSE(fs::exists(dir.file("run/model.safetensors")));
  EXPECT_NE(out.find("checkpoint.final=false: no final checkpoint"), std::string::npos) << out;
}

// Asking for kernels that cannot run in this precision is an error naming
// the key, not a silent fallback; bf16 on the CPU says what it is for.
TEST_F(TrainerCli, TensorCoreAttentionInFp32IsAnErrorAndBf16OnCpuTrains) {
  auto [rc, out] = trainer("--config " + dir.file("cfg.yaml") + " runtime.attention=tensor_cores");
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("runtime.attention"), std::string::npos) << out;
  EXPECT_NE(out.find("runtime.dtype=bf16"), std::string::npos) << out;
  auto [rc16, out16] =
      trainer("--config " + dir.file("cfg.yaml") +
              " runtime.dtype=bf16 runtime.device=cpu log.dir=" + dir.file("run16"));
  ASSERT_EQ(rc16, 0) << out16;
  EXPECT_NE(out16.find("runtime.dtype=bf16 on the CPU backend"), std::string::npos) << out16;
  EXPECT_TRUE(fs::exists(dir.file("run16/metrics.jsonl")));
}

TEST_F(TrainerCli, MissingDataFile) {
  expect_rejected("--config " + dir.file("cfg.yaml") + " data.train=" + dir.file("nope.bin"),
                  "data.train (" + dir.file("nope.bin") + "): expected a file or a glob matching one");
}

TEST_F(TrainerCli, UnknownKey) {
  expect_rejected("--config " + dir.file("cfg.yaml") + " train.stepz=3", "train.stepz");
}

TEST_F(TrainerCli, GlobalBatchNotDivisible) {
  expect_rejected("--config " + dir.file("cfg.yaml") + " train.global_batch=5",
                  "train.global_batch");
}

TEST_F(TrainerCli, TruncatedCheckpoint) {
  auto [rc, out] = trainer("--config " + dir.file("cfg.yaml"));
  ASSERT_EQ(rc, 0) << out;
  const std::string ck = dir.file("run/checkpoints/step_00000003");
  const std::string shard = ck + "/rank_00000.safetensors";
  fs::resize_file(shard, fs::file_size(shard) / 2);
  expect_rejected("--config " + dir.file("cfg.yaml") + " train.steps=5 checkpoint.resume=" + ck,
                  "rank_00000.safetensors");
}

TEST_F(TrainerCli, SafetensorsOfTheWrongShape) {
  auto [rc, out] = trainer("--config " + dir.file("cfg.yaml"));
  ASSERT_EQ(rc, 0) << out;
  fs::rename(dir.file("run/model.safetensors"), dir.file("small.safetensors"));
  // A new log.dir: "run" holds checkpoints of the n_embd=16 model, itself an error.
  expect_rejected("--config " + dir.file("cfg.yaml") + " model.n_embd=32 model.init_from=" +
                      dir.file("small.safetensors") + " log.dir=" + dir.file("run2"),
                  "wte.weight");
  EXPECT_FALSE(fs::exists(dir.file("run2")));
}

TEST_F(TrainerCli, MissingConfigAndUsage) {
  expect_rejected("--config " + dir.file("absent.yaml"), "absent.yaml");
  auto [rc, out] = trainer("--bogus 1");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("unknown flag --bogus"), std::string::npos) << out;
}

TEST_F(TrainerCli, SampleAndExportFromACheckpoint) {
  auto [rc, out] = trainer("--config " + dir.file("cfg.yaml"));
  ASSERT_EQ(rc, 0) << out;
  const std::string ck = dir.file("run/checkpoints/step_00000003");
  auto [rc2, text] = trainer("sample --checkpoint " + ck + " --prompt abc --tokens 20 --seed 4");
  EXPECT_EQ(rc2, 0) << text;
  EXPECT_EQ(text.rfind("abc", 0), 0u) << text;
  auto [rc3, out3] = trainer("export --checkpoint " + ck + " --out " + dir.file("e.safetensors"));
  EXPECT_EQ(rc3, 0) << out3;
  std::ifstream a(dir.file("e.safetensors"), std::ios::binary);
  std::ifstream b(dir.file("run/model.safetensors"), std::ios::binary);
  std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(sa, sb) << "export of the final checkpoint differs from the end-of-run export";
}

}  // namespace
}  // namespace gt
