// Checkpoint commit protocol (one rank), pruning, corruption detection,
// discovery and version-1 compatibility, with whole tensors. Pieces, boxes
// and several ranks are in test_checkpoint_boxes.cpp.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/core/error.hpp"
#include "parallel/in_process_communicator.hpp"
#include "test_util.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/io/safetensors.hpp"

namespace gt {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

const char* kSig = "n_layer=4,n_head=4,n_embd=128,vocab_size=256,block_size=256";

// A small model's worth of tensors with owned storage.
struct Tensors {
  std::vector<std::vector<float>> store;
  std::vector<NamedTensor> named;
  Tensors(uint64_t seed, bool zero = false) {
    add("wte", {256, 128}, seed, zero);
    add("h.0.attn.c_attn.weight", {128, 384}, seed + 1, zero);
    add("h.0.ln_1.bias", {128}, seed + 2, zero);
    add("adam.m.wte", {256, 128}, seed + 3, zero);
    // Pointers taken only after every vector is in place.
    for (size_t i = 0; i < named.size(); ++i) named[i].data = store[i].data();
  }
  void add(const std::string& name, std::vector<int64_t> shape, uint64_t seed, bool zero) {
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    store.push_back(zero ? std::vector<float>(n, 0.f) : test::random_vector(n, seed));
    named.push_back({name, shape, nullptr});
  }
};

CheckpointMeta meta_for(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.sample_position = step * 32 + 5;
  m.seed = 0xFFFFFFFFFFFFFFF1ull;  // > 2^53: must survive the JSON round trip exactly
  m.model_signature = kSig;
  m.config_yaml = "model:\n  n_layer: 4\n";
  m.optimizer_step = step - 1;  // one skipped step
  m.layout = "dp=1 x fsdp=1 x tp=1 (1 rank)";
  return m;
}

// The one-rank save and whole-tensor load the trainer does.
std::string save(const std::string& root, const CheckpointMeta& meta,
                 const std::vector<NamedTensor>& tensors, int keep) {
  InProcessCommunicator world("world");
  return save_checkpoint(root, meta, whole_tensor_pieces(tensors), keep, world);
}

CheckpointMeta load(const std::string& dir, const std::string& sig,
                    const std::vector<NamedTensor>& tensors) {
  return load_checkpoint(dir, sig, whole_tensor_pieces(tensors));
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected gt::Error";
  return "";
}

#define EXPECT_HAS(msg, part) \
  EXPECT_NE(std::string(msg).find(part), std::string::npos) << "message: " << (msg)

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f.good());
}

TEST(Checkpoint, SaveLoadRoundTripIsBitwise) {
  TempDir tmp;
  const std::string root = tmp.file("ckpt");  // created by save
  Tensors src(10);
  const std::string dir = save(root, meta_for(10), src.named, 3);
  EXPECT_EQ(dir, root + "/step_00000010");
  EXPECT_EQ(dir_entries(root), std::vector<std::string>{"step_00000010"});
  EXPECT_EQ(dir_entries(dir),
            (std::vector<std::string>{"manifest.json", "rank_00000.safetensors"}));

  Tensors dst(0, /*zero=*/true);
  const CheckpointMeta got = load(dir, kSig, dst.named);
  EXPECT_EQ(got.step, 10);
  EXPECT_EQ(got.sample_position, 10 * 32 + 5);
  EXPECT_EQ(got.seed, 0xFFFFFFFFFFFFFFF1ull);
  EXPECT_EQ(got.model_signature, kSig);
  EXPECT_EQ(got.config_yaml, "model:\n  n_layer: 4\n");
  EXPECT_EQ(got.optimizer_step, 9);
  EXPECT_EQ(got.layout, "dp=1 x fsdp=1 x tp=1 (1 rank)");
  for (size_t i = 0; i < src.store.size(); ++i)
    EXPECT_EQ(std::memcmp(src.store[i].data(), dst.store[i].data(), src.store[i].size() * 4), 0)
        << src.named[i].name;

  const auto j = read_json(dir + "/manifest.json");
  EXPECT_EQ(j["format_version"], 2);
  EXPECT_EQ(j["seed"], "18446744073709551601");
  EXPECT_EQ(j["optimizer_step"], 9);
  ASSERT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(j["files"][0]["name"], "rank_00000.safetensors");
  EXPECT_EQ(j["files"][0]["bytes"], fs::file_size(dir + "/rank_00000.safetensors"));
  EXPECT_EQ(j["files"][0]["checksum"], format_crc32c(crc32c_file(dir + "/rank_00000.safetensors")));
  // The index: every tensor, its global shape, one whole piece.
  const auto& bias = j["tensors"]["h.0.ln_1.bias"];
  EXPECT_EQ(bias["shape"], nlohmann::json({128}));
  ASSERT_EQ(bias["pieces"].size(), 1u);
  EXPECT_EQ(bias["pieces"][0]["file"], "rank_00000.safetensors");
  EXPECT_EQ(bias["pieces"][0]["entry"], "h.0.ln_1.bias@0,128,0,1");
  EXPECT_EQ(bias["pieces"][0]["box"], nlohmann::json({0, 128, 0, 1}));
  EXPECT_EQ(j["tensors"].size(), 4u);
  // The shard is a plain safetensors file: entries named by tensor and box.
  const SafetensorsReader shard(dir + "/rank_00000.safetensors");
  EXPECT_EQ(shard.info("h.0.attn.c_attn.weight@0,128,0,384").shape,
            (std::vector<int64_t>{128, 384}));
  EXPECT_EQ(shard.info("h.0.ln_1.bias@0,128,0,1").shape, std::vector<int64_t>{128});
}

TEST(Checkpoint, LoadSubsetAndShapeMismatchNamesTensor) {
  TempDir tmp;
  Tensors src(1);
  const std::string dir = save(tmp.path(), meta_for(1), src.named, 0);
  std::vector<float> bias(128);
  // Tensors in the file that were not requested are fine.
  load(dir, kSig, {{"h.0.ln_1.bias", {128}, bias.data()}});
  EXPECT_EQ(std::memcmp(bias.data(), src.store[2].data(), 128 * 4), 0);

  std::vector<float> w(128 * 384);
  const std::string msg = error_of(
      [&] { load(dir, kSig, {{"h.0.attn.c_attn.weight", {384, 128}, w.data()}}); });
  EXPECT_EQ(msg, "tensor h.0.attn.c_attn.weight in checkpoint " + dir +
                     ": expected shape [384, 128], got [128, 384]");
  EXPECT_HAS(error_of([&] { load(dir, kSig, {{"lm_head", {4}, w.data()}}); }),
             "tensor lm_head not found in checkpoint " + dir + " (it has 4 tensors: adam.m.wte, ");
}

TEST(Checkpoint, KeepPrunesOldestAfterCommit) {
  TempDir tmp;
  Tensors src(2);
  for (int64_t step : {1, 2, 3, 4, 5}) save(tmp.path(), meta_for(step), src.named, 2);
  EXPECT_EQ(dir_entries(tmp.path()), (std::vector<std::string>{"step_00000004", "step_00000005"}));
  // keep <= 0 keeps everything.
  save(tmp.path(), meta_for(6), src.named, 0);
  EXPECT_EQ(dir_entries(tmp.path()).size(), 3u);
}

TEST(Checkpoint, SameStepIsReplaced) {
  TempDir tmp;
  Tensors first(3), second(4);
  save(tmp.path(), meta_for(7), first.named, 2);
  const std::string dir = save(tmp.path(), meta_for(7), second.named, 2);
  EXPECT_EQ(dir_entries(tmp.path()), std::vector<std::string>{"step_00000007"});
  Tensors dst(0, true);
  load(dir, kSig, dst.named);
  EXPECT_EQ(std::memcmp(dst.store[0].data(), second.store[0].data(), dst.store[0].size() * 4), 0);
}

TEST(Checkpoint, StaleTmpOfDeadProcessRemovedLiveKept) {
  TempDir tmp;
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);  // reaped: the pid is now dead
  const std::string dead = ".step_00000009.tmp." + std::to_string(child);
  const std::string live = ".step_00000009.tmp." + std::to_string(getppid());
  fs::create_directories(tmp.file(dead) + "/x");
  fs::create_directories(tmp.file(live));
  Tensors src(5);
  save(tmp.path(), meta_for(10), src.named, 2);
  EXPECT_EQ(dir_entries(tmp.path()), (std::vector<std::string>{live, "step_00000010"}));
}

TEST(Checkpoint, TruncatedRankFileDetected) {
  TempDir tmp;
  Tensors src(6);
  const std::string old_dir = save(tmp.path(), meta_for(1), src.named, 5);
  const std::string dir = save(tmp.path(), meta_for(2), src.named, 5);
  const std::string file = dir + "/rank_00000.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);

  std::vector<std::string> skipped;
  EXPECT_EQ(find_latest_checkpoint(tmp.path(), &skipped), old_dir);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_HAS(skipped[0], dir + ": ");
  EXPECT_HAS(skipped[0], "corrupt or truncated");

  Tensors dst(0, true);
  const std::string msg = error_of([&] { load(dir, kSig, dst.named); });
  EXPECT_HAS(msg, file);
  EXPECT_HAS(msg, "as the manifest says");
  EXPECT_HAS(msg, "corrupt or truncated");
}

TEST(Checkpoint, MissingRankFileDetected) {
  TempDir tmp;
  Tensors src(13);
  const std::string old_dir = save(tmp.path(), meta_for(1), src.named, 5);
  const std::string dir = save(tmp.path(), meta_for(2), src.named, 5);
  fs::remove(dir + "/rank_00000.safetensors");
  std::vector<std::string> skipped;
  EXPECT_EQ(find_latest_checkpoint(tmp.path(), &skipped), old_dir);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_HAS(skipped[0], "checkpoint file missing (" + dir + "/rank_00000.safetensors)");
  Tensors dst(0, true);
  EXPECT_HAS(error_of([&] { load(dir, kSig, dst.named); }),
             "checkpoint file missing (" + dir + "/rank_00000.safetensors)");
}

TEST(Checkpoint, FlippedByteDetectedByChecksum) {
  TempDir tmp;
  Tensors src(7);
  const std::string dir = save(tmp.path(), meta_for(3), src.named, 5);
  const std::string file = dir + "/rank_00000.safetensors";
  flip_byte(file, fs::file_size(file) - 1000);  // inside the data section
  // Sizes still match, so discovery accepts it; load's checksum does not.
  EXPECT_EQ(find_latest_checkpoint(tmp.path(), nullptr), dir);
  Tensors dst(0, true);
  EXPECT_HAS(error_of([&] { load(dir, kSig, dst.named); }),
             "checksum mismatch (" + file + "): expected crc32c:");
}

TEST(Checkpoint, MissingManifestSkippedAndLoadFails) {
  TempDir tmp;
  Tensors src(8);
  const std::string old_dir = save(tmp.path(), meta_for(4), src.named, 5);
  const std::string dir = save(tmp.path(), meta_for(5), src.named, 5);
  fs::remove(dir + "/manifest.json");
  std::vector<std::string> skipped;
  EXPECT_EQ(find_latest_checkpoint(tmp.path(), &skipped), old_dir);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_HAS(skipped[0], "was not committed");
  Tensors dst(0, true);
  EXPECT_EQ(error_of([&] { load(dir, kSig, dst.named); }),
            "checkpoint (" + dir + "): expected a committed checkpoint, got no manifest.json: it "
            "was not committed (a save that did not finish, or not a checkpoint directory)");
}

TEST(Checkpoint, UnknownFormatVersionRejected) {
  TempDir tmp;
  Tensors src(9);
  const std::string dir = save(tmp.path(), meta_for(1), src.named, 5);
  std::ifstream in(dir + "/manifest.json");
  auto j = nlohmann::json::parse(in);
  in.close();
  j["format_version"] = 3;
  std::ofstream(dir + "/manifest.json") << j.dump();
  Tensors dst(0, true);
  EXPECT_HAS(error_of([&] { load(dir, kSig, dst.named); }),
             "expected format_version 1 or 2 (what this build reads), got format_version 3");
  std::vector<std::string> skipped;
  EXPECT_EQ(find_latest_checkpoint(tmp.path(), &skipped), "");
  EXPECT_EQ(skipped.size(), 1u);
}

TEST(Checkpoint, SignatureMismatchListsEveryField) {
  TempDir tmp;
  Tensors src(11);
  const std::string dir = save(tmp.path(), meta_for(1), src.named, 5);
  Tensors dst(0, true);
  const std::string msg = error_of([&] {
    load(dir, "n_layer=6,n_head=4,n_embd=256,vocab_size=256,block_size=256",
                    dst.named);
  });
  EXPECT_HAS(msg, "checkpoint of a different model (" + dir + ")");
  EXPECT_HAS(msg, "n_layer: checkpoint 4, config 6");
  EXPECT_HAS(msg, "n_embd: checkpoint 128, config 256");
  EXPECT_EQ(msg.find("n_head"), std::string::npos) << msg;
}

TEST(Checkpoint, FindLatestPicksNewestValidByNumber) {
  TempDir tmp;
  std::vector<std::string> skipped;
  EXPECT_EQ(find_latest_checkpoint(tmp.file("missing"), &skipped), "");
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(find_latest_checkpoint(tmp.path(), &skipped), "");

  Tensors src(12);
  for (int64_t step : {9, 100, 10}) save(tmp.path(), meta_for(step), src.named, 0);
  // Noise that is not a checkpoint: a staging dir, a file, a manifest-less step dir.
  fs::create_directories(tmp.file(".step_00000200.tmp.12345"));
  std::ofstream(tmp.file("step_00000300")) << "not a dir";
  fs::create_directories(tmp.file("step_00000150"));
  EXPECT_EQ(find_latest_checkpoint(tmp.path(), &skipped), tmp.file("step_00000100"));
  // The staging dir is reported as an unfinished save, the step dir as uncommitted.
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_HAS(skipped[0], tmp.file(".step_00000200.tmp.12345") + ": uncommitted");
  EXPECT_HAS(skipped[1], tmp.file("step_00000150") + ": checkpoint (");
  EXPECT_HAS(skipped[1], "got no manifest.json");
}

// A version-1 checkpoint (one tensors.safetensors of whole tensors, what
// earlier builds wrote) still loads, whole or by box, and its corruption is
// still detected. Its optimizer step reads as its step (what those builds
// resumed AdamW at).
TEST(Checkpoint, VersionOneCheckpointStillLoads) {
  TempDir tmp;
  Tensors src(14);
  const std::string dir = tmp.file("step_00000004");
  fs::create_directories(dir);
  SafetensorsWriter w;
  for (const NamedTensor& t : src.named) w.add_f32(t.name, t.shape, t.data);
  const WrittenFile f = w.write_atomic(dir + "/tensors.safetensors");
  const nlohmann::json manifest = {
      {"format_version", 1}, {"step", 4}, {"sample_position", 133}, {"seed", "7"},
      {"model_signature", kSig}, {"config_yaml", "model: {}\n"},
      {"files", {{{"name", "tensors.safetensors"}, {"bytes", f.bytes},
                  {"checksum", format_crc32c(f.crc32c)}}}}};
  std::ofstream(dir + "/manifest.json") << manifest.dump(2);

  EXPECT_EQ(find_latest_checkpoint(tmp.path(), nullptr), dir);
  Tensors dst(0, true);
  const CheckpointMeta got = load(dir, kSig, dst.named);
  EXPECT_EQ(got.step, 4);
  EXPECT_EQ(got.optimizer_step, 4);
  EXPECT_EQ(got.seed, 7u);
  EXPECT_EQ(got.layout, "");
  for (size_t i = 0; i < src.store.size(); ++i)
    EXPECT_EQ(std::memcmp(src.store[i].data(), dst.store[i].data(), src.store[i].size() * 4), 0)
        << src.named[i].name;

  // rows [100, 200) x cols [64, 128) of wte.
  std::vector<float> part(100 * 64);
  load_checkpoint(dir, kSig, {{"wte", {256, 128}, {100, 100, 64, 64}, part.data()}});
  for (int r = 0; r < 100; ++r)
    for (int c = 0; c < 64; ++c)
      ASSERT_EQ(part[r * 64 + c], src.store[0][(100 + r) * 128 + 64 + c]) << r << "," << c;

  flip_byte(dir + "/tensors.safetensors", f.bytes - 10);
  EXPECT_HAS(error_of([&] { load(dir, kSig, dst.named); }),
             "checksum mismatch (" + dir + "/tensors.safetensors)");
}

}  // namespace
}  // namespace gt
