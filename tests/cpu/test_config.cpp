// The typed config: defaults, every key read from YAML, overrides, the
// canonical round trip, and one test per rejected input checking that the
// message names the key, the source and what was expected.
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/core/error.hpp"
#include "test_util.hpp"
#include "trainer/config/config.hpp"

namespace gt {
namespace {

const char* kSource = "configs/x.yaml";
const std::string kMinimal = "data:\n  train: shard.bin\n";

::testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "message \"" << text << "\" lacks \"" << part << "\"";
}

// The gt::Error message of parsing `yaml` with `overrides`, or a test failure.
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(yaml, kSource, overrides);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected gt::Error for:\n" << yaml;
  return "";
}

void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.model.arch, b.model.arch);
  EXPECT_EQ(a.model.n_kv_head, b.model.n_kv_head);
  EXPECT_EQ(a.model.ffn_hidden, b.model.ffn_hidden);
  EXPECT_EQ(a.model.multiple_of, b.model.multiple_of);
  EXPECT_EQ(a.model.ffn_dim_multiplier, b.model.ffn_dim_multiplier);
  EXPECT_EQ(a.model.rope_theta, b.model.rope_theta);
  EXPECT_EQ(a.model.rope_scaling.factor, b.model.rope_scaling.factor);
  EXPECT_EQ(a.model.rope_scaling.low_freq_factor, b.model.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.model.rope_scaling.high_freq_factor, b.model.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.model.rope_scaling.original_max_position, b.model.rope_scaling.original_max_position);
  EXPECT_EQ(a.model.norm_eps, b.model.norm_eps);
  EXPECT_EQ(a.model.tie_embeddings, b.model.tie_embeddings);
  EXPECT_EQ(a.model.n_layer, b.model.n_layer);
  EXPECT_EQ(a.model.n_head, b.model.n_head);
  EXPECT_EQ(a.model.n_embd, b.model.n_embd);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.block_size, b.model.block_size);
  EXPECT_EQ(a.model.init_from, b.model.init_from);
  EXPECT_EQ(a.data.train, b.data.train);
  EXPECT_EQ(a.data.val, b.data.val);
  EXPECT_EQ(a.data.shuffle, b.data.shuffle);
  const TrainConfig& s = a.train;
  const TrainConfig& t = b.train;
  EXPECT_EQ(s.seq_len, t.seq_len);
  EXPECT_EQ(s.micro_batch, t.micro_batch);
  EXPECT_EQ(s.global_batch, t.global_batch);
  EXPECT_EQ(s.steps, t.steps);
  EXPECT_EQ(s.lr, t.lr);  // exact: the writer must print enough digits
  EXPECT_EQ(s.lr_schedule, t.lr_schedule);
  EXPECT_EQ(s.warmup_steps, t.warmup_steps);
  EXPECT_EQ(s.min_lr, t.min_lr);
  EXPECT_EQ(s.weight_decay, t.weight_decay);
  EXPECT_EQ(s.beta1, t.beta1);
  EXPECT_EQ(s.beta2, t.beta2);
  EXPECT_EQ(s.eps, t.eps);
  EXPECT_EQ(s.grad_clip, t.grad_clip);
  EXPECT_EQ(s.seed, t.seed);
  EXPECT_EQ(s.eval_every, t.eval_every);
  EXPECT_EQ(s.eval_batches, t.eval_batches);
  EXPECT_EQ(s.max_skipped, t.max_skipped);
  EXPECT_EQ(s.recompute, t.recompute);
  EXPECT_EQ(a.runtime.device, b.runtime.device);
  EXPECT_EQ(a.runtime.dtype, b.runtime.dtype);
  EXPECT_EQ(a.runtime.attention, b.runtime.attention);
  EXPECT_EQ(a.runtime.threads, b.runtime.threads);
  EXPECT_EQ(a.parallel.dp, b.parallel.dp);
  EXPECT_EQ(a.parallel.fsdp, b.parallel.fsdp);
  EXPECT_EQ(a.parallel.tp, b.parallel.tp);
  EXPECT_EQ(a.parallel.fsdp_stage, b.parallel.fsdp_stage);
  EXPECT_EQ(a.parallel.comm, b.parallel.comm);
  EXPECT_EQ(a.parallel.reduce_dtype, b.parallel.reduce_dtype);
  EXPECT_EQ(a.log.dir, b.log.dir);
  EXPECT_EQ(a.log.every, b.log.every);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.every, b.checkpoint.every);
  EXPECT_EQ(a.checkpoint.keep, b.checkpoint.keep);
  EXPECT_EQ(a.checkpoint.resume, b.checkpoint.resume);
  EXPECT_EQ(a.source, b.source);
}

// ---------------------------------------------------------------- reading

TEST(Config, MissingKeysTakeTheStructDefaults) {
  Config expected;
  expected.data.train = {"shard.bin"};
  expected.source = kSource;
  expect_same(parse_config(kMinimal, kSource, {}), expected);
}

TEST(Config, NullSectionsAndEmptyTextAreDefaults) {
  const Config c = parse_config("model:\nlog:\n", kSource, {"data.train=a.bin"});
  EXPECT_EQ(c.model.n_layer, ModelConfig{}.n_layer);
  EXPECT_EQ(c.log.dir, LogConfig{}.dir);
  EXPECT_EQ(parse_config("", kSource, {"data.train=a.bin"}).data.train,
            std::vector<std::string>{"a.bin"});
}

TEST(Config, ReadsEveryKey) {
  const std::string yaml = R"(
model: {n_layer: 2, n_head: 12, n_embd: 96, vocab_size: 65536, block_size: 64,
        init_from: weights/gpt2.safetensors}
data:
  train: [a.bin, "b*.bin"]
  val: v.bin
  shuffle: true
train:
  seq_len: 64
  micro_batch: 2
  global_batch: 16
  steps: 0
  lr: 3e-4
  lr_schedule: constant
  warmup_steps: 0
  min_lr: 0
  weight_decay: 0.0
  beta1: 0
  beta2: 0.999
  eps: 1e-6
  grad_clip: 0
  seed: 18446744073709551615
  eval_every: 0
  eval_batches: 1
  max_skipped: 1
  recompute: block
runtime: {device: auto, dtype: bf16, threads: 3, collective_timeout_s: 12.5, attention: simt}
parallel: {dp: 2, fsdp: 2, tp: 4, fsdp_stage: 1, tp_overlap: false, bucket_mb: 0.5, comm: mpi,
           reduce_dtype: bf16}
log: {dir: runs/r1, every: 10}
checkpoint: {dir: ckpt, every: 100, keep: 1, resume: auto}
)";
  const Config c = parse_config(yaml, kSource, {});
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_head, 12);
  EXPECT_EQ(c.model.n_embd, 96);
  EXPECT_EQ(c.model.vocab_size, 65536);
  EXPECT_EQ(c.model.block_size, 64);
  EXPECT_EQ(c.model.init_from, "weights/gpt2.safetensors");
  EXPECT_EQ(c.data.train, (std::vector<std::string>{"a.bin", "b*.bin"}));
  EXPECT_EQ(c.data.val, std::vector<std::string>{"v.bin"});
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_EQ(c.train.seq_len, 64);
  EXPECT_EQ(c.train.micro_batch, 2);
  EXPECT_EQ(c.train.global_batch, 16);
  EXPECT_EQ(c.train.steps, 0);
  EXPECT_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.lr_schedule, LrSchedule::constant);
  EXPECT_EQ(c.train.warmup_steps, 0);
  EXPECT_EQ(c.train.min_lr, 0.0);
  EXPECT_EQ(c.train.weight_decay, 0.0);
  EXPECT_EQ(c.train.beta1, 0.0);
  EXPECT_EQ(c.train.beta2, 0.999);
  EXPECT_EQ(c.train.eps, 1e-6);
  EXPECT_EQ(c.train.grad_clip, 0.0);
  EXPECT_EQ(c.train.seed, 18446744073709551615ull);
  EXPECT_EQ(c.train.eval_every, 0);
  EXPECT_EQ(c.train.eval_batches, 1);
  EXPECT_EQ(c.train.max_skipped, 1);
  EXPECT_EQ(c.train.recompute, Recompute::block);
  EXPECT_EQ(c.runtime.device, DeviceKind::auto_);
  EXPECT_EQ(c.runtime.dtype, ComputeDType::bf16);
  EXPECT_EQ(c.runtime.threads, 3);
  EXPECT_EQ(c.runtime.collective_timeout_s, 12.5);
  EXPECT_EQ(c.runtime.attention, AttentionKernel::simt);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.parallel.fsdp, 2);
  EXPECT_EQ(c.parallel.tp, 4);
  EXPECT_EQ(c.parallel.fsdp_stage, FsdpStage::optimizer);
  EXPECT_FALSE(c.parallel.tp_overlap);
  EXPECT_EQ(c.parallel.bucket_mb, 0.5);
  EXPECT_EQ(c.parallel.comm, ParallelComm::mpi);
  EXPECT_EQ(c.parallel.reduce_dtype, ComputeDType::bf16);
  EXPECT_EQ(c.log.dir, "runs/r1");
  EXPECT_EQ(c.log.every, 10);
  EXPECT_EQ(c.checkpoint.dir, "ckpt");
  EXPECT_EQ(c.checkpoint.every, 100);
  EXPECT_EQ(c.checkpoint.keep, 1);
  EXPECT_EQ(c.checkpoint.resume, "auto");
  EXPECT_EQ(c.grad_accum_steps(), 2);  // 16 / (2 * 2 * 2)
  EXPECT_EQ(c.checkpoint_dir(), "ckpt");
}

TEST(Config, NullValuesAreEmptyStringsAndLists) {
  const Config c =
      parse_config(kMinimal + "  val:\nmodel:\n  init_from: ~\ncheckpoint:\n  dir:\n", kSource, {});
  EXPECT_TRUE(c.data.val.empty());
  EXPECT_EQ(c.model.init_from, "");
  EXPECT_EQ(c.checkpoint.dir, "");
}

// ---------------------------------------------------------------- helpers

TEST(Config, GradAccumStepsDividesByMicroBatchAndDataParallelSize) {
  const Config c = parse_config(kMinimal, kSource,
                                {"train.global_batch=48", "train.micro_batch=4", "parallel.dp=3",
                                 "parallel.fsdp=2", "parallel.tp=2"});
  EXPECT_EQ(c.data_parallel_size(), 6);
  EXPECT_EQ(c.grad_accum_steps(), 2);
  EXPECT_EQ(Config{}.grad_accum_steps(), 1);
}

TEST(Config, CheckpointDirDefaultsUnderLogDir) {
  Config c;
  EXPECT_EQ(c.checkpoint_dir(), "runs/default/checkpoints");
  c.log.dir = "runs/x/";
  EXPECT_EQ(c.checkpoint_dir(), "runs/x/checkpoints");
  c.checkpoint.dir = "/ckpt";
  EXPECT_EQ(c.checkpoint_dir(), "/ckpt");
}

TEST(Config, ModelSignatureNamesTheShapeOnly) {
  ModelConfig m;
  m.init_from = "w.safetensors";
  EXPECT_EQ(model_signature(m), "n_layer=4,n_head=4,n_embd=128,vocab_size=256,block_size=256");
}

// Megatron's rule: the vocabulary pads to 128 x tp rows, so any tp that
// divides the heads splits it (256 tokens at tp 3: 384 rows, 128 a rank),
// and the padding is not the model's identity (a checkpoint resumes at any tp).
TEST(Config, VocabularyPadsForTheTensorParallelDegree) {
  const Config one = parse_config(kMinimal, kSource,
                                  {"model.n_head=6", "model.n_embd=132", "train.seq_len=96"});
  EXPECT_EQ(one.model.padded_vocab_size(), 256);
  const Config three = parse_config(kMinimal, kSource,
                                    {"parallel.tp=3", "model.n_head=6", "model.n_embd=132",
                                     "train.seq_len=96"});
  EXPECT_EQ(three.model.vocab_pad_tp, 3);
  EXPECT_EQ(three.model.padded_vocab_size(), 384);
  EXPECT_EQ(model_signature(three.model), model_signature(one.model));
  ModelConfig gpt2;
  gpt2.vocab_size = 50257;
  EXPECT_EQ(padded_for_tp(gpt2, 1).padded_vocab_size(), 50304);
  EXPECT_EQ(padded_for_tp(gpt2, 2).padded_vocab_size(), 50432);
  EXPECT_EQ(padded_for_tp(gpt2, 8).padded_vocab_size(), 51200);
}

TEST(Config, EnumNames) {
  EXPECT_STREQ(to_string(LrSchedule::constant), "constant");
  EXPECT_STREQ(to_string(LrSchedule::cosine), "cosine");
  EXPECT_STREQ(to_string(DeviceKind::cpu), "cpu");
  EXPECT_STREQ(to_string(DeviceKind::cuda), "cuda");
  EXPECT_STREQ(to_string(DeviceKind::auto_), "auto");
  EXPECT_STREQ(to_string(ComputeDType::fp32), "fp32");
  EXPECT_STREQ(to_string(ComputeDType::bf16), "bf16");
  EXPECT_STREQ(to_string(ParallelComm::auto_), "auto");
  EXPECT_STREQ(to_string(ParallelComm::nccl), "nccl");
  EXPECT_STREQ(to_string(ParallelComm::mpi), "mpi");
  EXPECT_STREQ(to_string(Recompute::none), "none");
  EXPECT_STREQ(to_string(Recompute::mlp), "mlp");
  EXPECT_STREQ(to_string(Recompute::block), "block");
}

// ---------------------------------------------------------------- round trip

TEST(Config, ToYamlRoundTripsExactly) {
  Config c;
  c.source = "resolved";
  c.model.init_from = "dir with spaces/\"quoted\": yes.safetensors";
  c.data.train = {"a.bin", "yes", "1e3", "#hash", "b\\c.bin"};
  c.data.val = {};
  c.data.shuffle = true;
  c.train.lr = 1e-3;
  c.train.min_lr = 1.0 / 3.0 * 1e-3;
  c.train.weight_decay = 0.1 + 0.2;  // 0.30000000000000004: needs all 17 digits
  c.train.beta2 = 0.95;
  c.train.eps = 1e-8;
  c.train.grad_clip = 2;
  c.train.seed = 18446744073709551615ull;
  c.train.lr_schedule = LrSchedule::constant;
  c.train.recompute = Recompute::mlp;
  c.runtime.device = DeviceKind::cuda;
  c.runtime.dtype = ComputeDType::bf16;
  c.runtime.attention = AttentionKernel::tensor_cores;
  c.parallel.comm = ParallelComm::nccl;
  c.log.dir = "runs/trip";
  c.checkpoint.dir = "";
  c.checkpoint.resume = "none";
  const std::string yaml = to_yaml(c);
  EXPECT_TRUE(has(yaml, "  weight_decay: 0.30000000000000004\n"));
  EXPECT_TRUE(has(yaml, "  lr: 0.001\n"));  // shortest form when it round-trips
  const Config back = parse_config(yaml, "resolved", {});
  expect_same(back, c);
  EXPECT_EQ(to_yaml(back), yaml);
}

TEST(Config, ToYamlOfDefaultsRoundTrips) {
  Config c;
  c.data.train = {"x.bin"};
  expect_same(parse_config(to_yaml(c), "", {}), c);
}

TEST(Config, ToYamlEmitsEveryKey) {
  Config c;
  c.data.train = {"x.bin"};
  const std::string yaml = to_yaml(c);
  for (const char* key :
       {"model:", "  n_layer: 4", "  n_head:", "  n_embd:", "  vocab_size:", "  block_size:",
        "  init_from: \"\"", "data:", "  train: [\"x.bin\"]", "  val: []", "  shuffle: false",
        "train:", "  seq_len:", "  micro_batch:", "  global_batch:", "  steps:", "  lr: 0.001",
        "  lr_schedule: cosine", "  warmup_steps:", "  min_lr: 0.0001", "  weight_decay: 0.1",
        "  beta1: 0.9", "  beta2: 0.95", "  eps: 1e-08", "  grad_clip: 1", "  seed: 1337",
        "  eval_every:", "  eval_batches:", "  max_skipped:", "  recompute: none", "runtime:", "  device: cpu",
        "  dtype: fp32", "  threads: 0", "parallel:", "  dp:", "  fsdp:", "  tp:",
        "  fsdp_stage: 3", "  comm: auto", "log:", "  dir: \"runs/default\"", "  every:", "checkpoint:",
        "  keep:", "  resume: \"none\""})
    EXPECT_TRUE(has(yaml, key));
}

// ---------------------------------------------------------------- overrides

TEST(Config, OverridesReplaceFileValues) {
  const Config c = parse_config(kMinimal + "train:\n  lr: 0.5\n  steps: 7\n", kSource,
                                {"train.lr=2e-4", "runtime.device=cuda"});
  EXPECT_EQ(c.train.lr, 2e-4);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.runtime.device, DeviceKind::cuda);
}

TEST(Config, OverrideTakesAFlowListAndCreatesMissingSections) {
  const Config c = parse_config("", kSource,
                                {"data.train=[a.bin, b.bin]", "data.val=v.bin", "parallel.dp=2",
                                 "train.global_batch=16"});
  EXPECT_EQ(c.data.train, (std::vector<std::string>{"a.bin", "b.bin"}));
  EXPECT_EQ(c.data.val, std::vector<std::string>{"v.bin"});
  EXPECT_EQ(c.parallel.dp, 2);
}

TEST(Config, OverrideNestedFlowMapIsATypeError) {
  const std::string msg = error_of(kMinimal, {"train.lr={a: 1}"});
  EXPECT_TRUE(has(msg, "override 'train.lr={a: 1}'"));
  EXPECT_TRUE(has(msg, "train.lr (override 'train.lr={a: 1}'): expected a number, got a map"));
}

TEST(Config, OverrideValueMayContainEqualsAndBeEmpty) {
  const Config c = parse_config(kMinimal + "checkpoint:\n  dir: x\n", kSource,
                                {"log.dir=runs/a=b", "checkpoint.dir="});
  EXPECT_EQ(c.log.dir, "runs/a=b");
  EXPECT_EQ(c.checkpoint.dir, "");
  EXPECT_EQ(c.checkpoint_dir(), "runs/a=b/checkpoints");
}

TEST(Config, OverridesApplyInOrderAcrossDependentKeys) {
  // seq_len 512 alone exceeds the default block_size; the later block_size
  // override is applied before validation, so the pair is accepted.
  const Config c =
      parse_config(kMinimal, kSource, {"train.seq_len=512", "model.block_size=1024"});
  EXPECT_EQ(c.train.seq_len, 512);
}

TEST(Config, OverrideWithoutEquals) {
  EXPECT_TRUE(has(error_of(kMinimal, {"train.lr"}),
                  "override 'train.lr' (command line): expected section.key=value"));
}

TEST(Config, OverrideWithEmptyKey) {
  EXPECT_TRUE(has(error_of(kMinimal, {"=3"}), "override '=3' (command line): expected section.key=value, got an empty key"));
}

TEST(Config, OverrideWithoutSection) {
  const std::string msg = error_of(kMinimal, {"lr=3"});
  EXPECT_TRUE(has(msg, "override 'lr=3' (command line): expected a key of the form section.key, got 'lr'"));
  EXPECT_TRUE(has(msg, "did you mean 'train.lr'"));
}

TEST(Config, OverrideTooDeep) {
  EXPECT_TRUE(has(error_of(kMinimal, {"train.lr.x=3"}),
                  "override 'train.lr.x=3' (command line): expected a key of the form section.key (one section, one key, both non-empty), got 'train.lr.x'"));
  EXPECT_TRUE(has(error_of(kMinimal, {".lr=3"}), "expected a key of the form section.key"));
  EXPECT_TRUE(has(error_of(kMinimal, {"train.=3"}), "expected a key of the form section.key"));
}

TEST(Config, OverrideUnknownKey) {
  EXPECT_TRUE(has(error_of(kMinimal, {"train.lr_schedul=constant"}),
                  "unknown key 'train.lr_schedul' (override 'train.lr_schedul=constant'); "
                  "did you mean 'train.lr_schedule'?"));
}

// A key that was renamed says what replaced it, in a file and as an override.
TEST(Config, RenamedKeyNamesItsReplacement) {
  EXPECT_TRUE(has(error_of(kMinimal, {"runtime.attention_tensor_cores=true"}),
                  "unknown key 'runtime.attention_tensor_cores' (override "
                  "'runtime.attention_tensor_cores=true'); it is now runtime.attention "
                  "(auto|tensor_cores|simt|wgmma; true was tensor_cores, false simt)"));
  const std::string msg =
      error_of(std::string(kMinimal) + "runtime:\n  attention_tensor_cores: false\n", {});
  EXPECT_TRUE(has(msg, "unknown key 'runtime.attention_tensor_cores'")) << msg;
  EXPECT_TRUE(has(msg, "it is now runtime.attention")) << msg;
}

TEST(Config, OverrideUnknownSection) {
  EXPECT_TRUE(has(error_of(kMinimal, {"trian.steps=3"}),
                  "unknown key 'trian.steps' (override 'trian.steps=3'); did you mean "
                  "'train.steps'?"));
}

TEST(Config, OverrideGivenTwice) {
  const std::string msg = error_of(kMinimal, {"train.lr=1", "train.steps=2", " train.lr=3"});
  EXPECT_TRUE(has(msg, "override ' train.lr=3' (command line): expected each key once, got train.lr again"));
  EXPECT_TRUE(has(msg, "'train.lr=1'"));
}

TEST(Config, OverrideValueNotYaml) {
  EXPECT_TRUE(has(error_of(kMinimal, {"data.train=[a.bin,"}),
                  "override 'data.train=[a.bin,' (command line): expected a YAML value, got '[a.bin,'"));
}

TEST(Config, OverrideTypeErrorNamesTheOverride) {
  EXPECT_TRUE(has(error_of(kMinimal, {"train.steps=ten"}),
                  "train.steps (override 'train.steps=ten'): expected an integer, got 'ten'"));
}

// ---------------------------------------------------------------- YAML shape

TEST(Config, SyntaxErrorNamesFileLineAndColumn) {
  const std::string msg = error_of("data:\n  train: [a.bin,\nmodel:\n  n_layer: 2\n");
  EXPECT_TRUE(has(msg, "YAML syntax error (configs/x.yaml:"));
  const std::string tab = error_of("data:\n\ttrain: a\n");
  EXPECT_TRUE(has(tab, "YAML syntax error (configs/x.yaml:2:7): ")) << tab;
}

TEST(Config, MoreThanOneDocument) {
  EXPECT_TRUE(has(error_of(kMinimal + "---\n" + kMinimal), "config (configs/x.yaml): expected one YAML document, got 2"));
}

TEST(Config, TopLevelMustBeAMap) {
  EXPECT_TRUE(has(error_of("- model\n- data\n"), "expected a map of sections"));
  EXPECT_TRUE(has(error_of("just text\n"), "expected a map of sections"));
}

TEST(Config, SectionMustBeAMap) {
  EXPECT_TRUE(has(error_of(kMinimal + "train: 5\n"),
                  "train (configs/x.yaml:3:8): expected a map of keys"));
  EXPECT_TRUE(has(error_of(kMinimal + "log: [a]\n"), "log (configs/x.yaml:3:6): expected a map of keys"));
}

TEST(Config, UnknownKeyInSectionSuggestsClosest) {
  const std::string msg = error_of(kMinimal + "train:\n  lr_schedul: cosine\n");
  EXPECT_TRUE(has(msg, "unknown key 'train.lr_schedul' (configs/x.yaml:4); did you mean "
                       "'train.lr_schedule'?"));
  
}

TEST(Config, UnknownKeyInTheWrongSectionSuggestsTheRightOne) {
  EXPECT_TRUE(has(error_of(kMinimal + "model:\n  seq_len: 4\n"),
                  "unknown key 'model.seq_len' (configs/x.yaml:4); did you mean 'train.seq_len'?"));
}

TEST(Config, UnknownKeyFarFromAnyListsTheValidKeys) {
  const std::string msg = error_of(kMinimal + "log:\n  zzzzzzzz: 1\n");
  EXPECT_TRUE(has(msg, "unknown key 'log.zzzzzzzz'"));
  EXPECT_TRUE(has(msg, "valid keys in log are dir, every"));
}

TEST(Config, UnknownSection) {
  EXPECT_TRUE(has(error_of(kMinimal + "trian:\n  steps: 3\n"),
                  "unknown key 'trian' (configs/x.yaml:3); did you mean 'train'?"));
  EXPECT_TRUE(has(error_of(kMinimal + "steps: 3\n"), "did you mean 'train.steps'"));
}

TEST(Config, DuplicateKeyInSection) {
  // yaml-cpp keeps both entries of a repeated key; the walk must see both.
  const std::string msg = error_of(kMinimal + "train:\n  lr: 1\n  steps: 3\n  lr: 2\n");
  EXPECT_TRUE(has(msg, "duplicate key 'train.lr' (configs/x.yaml lines 4 and 6): expected each key once"));
}

TEST(Config, DuplicateKeyInFlowMap) {
  EXPECT_TRUE(has(error_of(kMinimal + "log: {every: 1, every: 2}\n"),
                  "duplicate key 'log.every'"));
}

TEST(Config, DuplicateSection) {
  EXPECT_TRUE(has(error_of(kMinimal + "train: {lr: 1}\ntrain: {steps: 1}\n"),
                  "duplicate key 'train' (configs/x.yaml lines 3 and 4)"));
}

TEST(Config, NonScalarKey) {
  EXPECT_TRUE(has(error_of(kMinimal + "train:\n  [a]: 1\n"), "expected a plain name in section train, got a list"));
}

// ---------------------------------------------------------------- types

struct TypeCase {
  const char* name;
  const char* yaml;  // appended to kMinimal
  const char* expected;
};

void PrintTo(const TypeCase& c, std::ostream* os) { *os << c.name; }

class ConfigTypeError : public ::testing::TestWithParam<TypeCase> {};

// "<key> (configs/x.yaml:<line>:<col>): expected X, got Y"
TEST_P(ConfigTypeError, NamesKeyExpectationAndValue) {
  const std::string msg = error_of(kMinimal + GetParam().yaml);
  const std::string expected = GetParam().expected;  // "<key>: expected ..."
  const size_t colon = expected.find(": ");
  EXPECT_TRUE(has(msg, expected.substr(0, colon) + " (configs/x.yaml:"));
  EXPECT_TRUE(has(msg, expected.substr(colon + 2)));
}

INSTANTIATE_TEST_SUITE_P(
    Config, ConfigTypeError,
    ::testing::Values(
        TypeCase{"IntegerFromWord", "train:\n  steps: ten\n",
                 "train.steps: expected an integer, got 'ten'"},
        TypeCase{"IntegerFromFraction", "train:\n  steps: 1.5\n",
                 "train.steps: expected an integer, got '1.5'"},
        TypeCase{"IntegerFromQuoted", "train:\n  steps: \"10\"\n",
                 "train.steps: expected an integer, got the quoted string '10'"},
        TypeCase{"IntegerOverflow", "model:\n  n_layer: 3000000000\n",
                 "model.n_layer: expected an integer in [-2147483648, 2147483647]"},
        TypeCase{"IntegerFromList", "model:\n  n_head: [1]\n",
                 "model.n_head: expected an integer, got a list"},
        TypeCase{"IntegerFromNull", "log:\n  every:\n",
                 "log.every: expected an integer, got nothing (null)"},
        TypeCase{"SeedNegative", "train:\n  seed: -1\n",
                 "train.seed: expected a non-negative integer, got '-1'"},
        TypeCase{"NumberFromWord", "train:\n  lr: fast\n",
                 "train.lr: expected a number, got 'fast'"},
        TypeCase{"NumberInfinite", "train:\n  lr: 1e999\n", "train.lr: expected a finite number"},
        TypeCase{"NumberNan", "train:\n  eps: nan\n", "train.eps: expected a finite number"},
        TypeCase{"BoolYes", "  shuffle: yes\n", "data.shuffle: expected true or false, got 'yes'"},
        TypeCase{"BoolNumber", "  shuffle: 1\n", "data.shuffle: expected true or false, got '1'"},
        TypeCase{"DeviceEnum", "runtime:\n  device: gpu\n",
                 "runtime.device: expected one of cpu|cuda|auto, got 'gpu'"},
        TypeCase{"DTypeEnum", "runtime:\n  dtype: fp16\n",
                 "runtime.dtype: expected one of fp32|bf16, got 'fp16'"},
        TypeCase{"AttentionEnum", "runtime:\n  attention: wmma\n",
                 "runtime.attention: expected one of auto|tensor_cores|simt|wgmma, got 'wmma'"},
        TypeCase{"ScheduleEnum", "train:\n  lr_schedule: linear\n",
                 "train.lr_schedule: expected one of constant|cosine, got 'linear'"},
        TypeCase{"RecomputeEnum", "train:\n  recompute: attention\n",
                 "train.recompute: expected one of none|mlp|block, got 'attention'"},
        TypeCase{"StringFromMap", "log:\n  dir: {a: 1}\n", "log.dir: expected a string, got a map"},
        TypeCase{"PathsFromMap",
                 "model:\n  n_layer: 1\n"
                 "checkpoint:\n  resume: [a]\n",
                 "checkpoint.resume: expected a string, got a list"},
        TypeCase{"PathListItemMap", "  val: [a.bin, {b: 1}]\n",
                 "data.val[1]: expected a non-empty string, got a map"}),
    [](const ::testing::TestParamInfo<TypeCase>& info) { return std::string(info.param.name); });

TEST(Config, DataTrainListItemMustBeAString) {
  EXPECT_TRUE(has(error_of("data:\n  train: [[a]]\n"),
                  "data.train[0] (configs/x.yaml:2:10): expected a non-empty string, got a list"));
  EXPECT_TRUE(has(error_of("data:\n  train: {a: 1}\n"),
                  "data.train (configs/x.yaml:2:10): expected a string or a list of strings, "
                  "got a map"));
}

// ---------------------------------------------------------------- values

struct ValueCase {
  const char* name;
  std::vector<std::string> overrides;  // applied to kMinimal
  const char* key;       // named first, with the override it came from
  const char* expected;  // "expected ..., got ..."
};

void PrintTo(const ValueCase& c, std::ostream* os) { *os << c.name; }

class ConfigValueError : public ::testing::TestWithParam<ValueCase> {};

// "<key> (override '<key>=...'): expected X, got Y"
TEST_P(ConfigValueError, NamesKeyAndRange) {
  const std::string msg = error_of(kMinimal, GetParam().overrides);
  EXPECT_TRUE(has(msg, std::string(GetParam().key) + " (override '")) << msg;
  EXPECT_TRUE(has(msg, GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Config, ConfigValueError,
    ::testing::Values(
        ValueCase{
            "NLayer", {"model.n_layer=0"}, "model.n_layer", "expected an integer >= 1, got 0"},
        ValueCase{"NHead", {"model.n_head=-2"}, "model.n_head", "expected an integer >= 1, got -2"},
        ValueCase{"NEmbd", {"model.n_embd=0"}, "model.n_embd", "expected an integer >= 1, got 0"},
        ValueCase{"EmbdNotDivisible",
                  {"model.n_embd=130"},
                  "model.n_embd",
                  "expected a multiple of model.n_head=4, got 130"},
        ValueCase{"VocabZero",
                  {"model.vocab_size=0"},
                  "model.vocab_size",
                  "expected a value in [1, 65536], got 0"},
        ValueCase{"VocabOverUint16",
                  {"model.vocab_size=65537"},
                  "model.vocab_size",
                  "expected a value in [1, 65536], got 65537"},
        ValueCase{"BlockSize",
                  {"model.block_size=0"},
                  "model.block_size",
                  "expected an integer >= 1, got 0"},
        ValueCase{"SeqLenOverBlock",
                  {"train.seq_len=512"},
                  "train.seq_len",
                  "expected a value in [1, model.block_size=256], got 512"},
        ValueCase{"SeqLenZero",
                  {"train.seq_len=0"},
                  "train.seq_len",
                  "expected a value in [1, model.block_size=256], got 0"},
        ValueCase{"MicroBatch",
                  {"train.micro_batch=0"},
                  "train.micro_batch",
                  "expected an integer >= 1, got 0"},
        ValueCase{"GlobalBatch",
                  {"train.global_batch=0"},
                  "train.global_batch",
                  "expected an integer >= 1, got 0"},
        ValueCase{"GlobalBatchNotMultiple",
                  {"train.micro_batch=4", "parallel.dp=2", "train.global_batch=12"},
                  "train.global_batch",
                  "expected a multiple of train.micro_batch * parallel.dp * parallel.fsdp = 4 * 2 "
                  "* 1 = 8, got 12"},
        ValueCase{"Steps", {"train.steps=-1"}, "train.steps", "expected an integer >= 0, got -1"},
        ValueCase{"LrZero", {"train.lr=0"}, "train.lr", "expected a value > 0, got 0"},
        ValueCase{"LrNegative", {"train.lr=-1e-3"}, "train.lr", "expected a value > 0, got -0.001"},
        ValueCase{"MinLrOverLr",
                  {"train.min_lr=0.01"},
                  "train.min_lr",
                  "expected a value in [0, train.lr=0.001], got 0.01"},
        ValueCase{"MinLrNegative",
                  {"train.min_lr=-1"},
                  "train.min_lr",
                  "expected a value in [0, train.lr=0.001], got -1"},
        ValueCase{"Warmup",
                  {"train.warmup_steps=-1"},
                  "train.warmup_steps",
                  "expected an integer >= 0, got -1"},
        ValueCase{"WeightDecay",
                  {"train.weight_decay=-0.1"},
                  "train.weight_decay",
                  "expected a value >= 0, got -0.1"},
        ValueCase{
            "Beta1One", {"train.beta1=1"}, "train.beta1", "expected a value in [0, 1), got 1"},
        ValueCase{"Beta2Negative",
                  {"train.beta2=-0.5"},
                  "train.beta2",
                  "expected a value in [0, 1), got -0.5"},
        ValueCase{"Eps", {"train.eps=0"}, "train.eps", "expected a value > 0, got 0"},
        ValueCase{
            "GradClip", {"train.grad_clip=-1"}, "train.grad_clip", "expected a value >= 0, got -1"},
        ValueCase{"EvalEvery",
                  {"train.eval_every=-1"},
                  "train.eval_every",
                  "expected an integer >= 0, got -1"},
        ValueCase{"EvalBatches",
                  {"train.eval_batches=0"},
                  "train.eval_batches",
                  "expected an integer >= 1, got 0"},
        ValueCase{"MaxSkipped",
                  {"train.max_skipped=0"},
                  "train.max_skipped",
                  "expected an integer >= 1, got 0"},
        ValueCase{"Bf16TensorParallelOddGather",
                  {"runtime.dtype=bf16", "parallel.tp=3", "model.n_head=3", "model.n_embd=33",
                   "model.vocab_size=384", "train.micro_batch=1", "train.seq_len=3"},
                  "model.n_embd",
                  "expected an even (train.micro_batch * train.seq_len / parallel.tp) * "
                  "model.n_embd with runtime.dtype=bf16 and parallel.tp=3, got 33"},
        ValueCase{"CpZero", {"parallel.cp=0"}, "parallel.cp", "expected an integer >= 1, got 0"},
        ValueCase{"CpSeqLenNotDivisible",
                  {"parallel.cp=3", "train.seq_len=10"},
                  "train.seq_len",
                  "expected a multiple of 2 * parallel.cp = 6, got 10; each row is cut into 2 cp "
                  "chunks"},
        ValueCase{"CpSeqLenNotDivisibleUnbalanced",
                  {"parallel.cp=3", "parallel.cp_load_balance=false", "train.seq_len=10"},
                  "train.seq_len",
                  "expected a multiple of parallel.cp = 3, got 10"},
        ValueCase{"CpRowsNotDivisibleByTp",
                  {"parallel.tp=3", "model.n_head=3", "model.n_embd=48", "model.vocab_size=384",
                   "parallel.cp=2", "train.micro_batch=1", "train.seq_len=8"},
                  "train.micro_batch",
                  "expected train.micro_batch * train.seq_len / parallel.cp rows divisible by "
                  "parallel.tp=3, got 1 * 8 / 2 = 4 rows per cp rank"},
        ValueCase{"NcclOnCpu",
                  {"parallel.comm=nccl"},
                  "parallel.comm",
                  "expected auto or mpi with runtime.device=cpu, got nccl; NCCL moves device "
                  "buffers; it needs runtime.device=cuda"},
        ValueCase{"TensorCoreAttentionInFp32",
                  {"runtime.attention=tensor_cores"},
                  "runtime.attention",
                  "expected auto or simt with runtime.dtype=fp32, got tensor_cores"},
        ValueCase{"TensorCoreAttentionHeadSize",
                  {"runtime.attention=tensor_cores", "runtime.dtype=bf16", "model.n_embd=132"},
                  "runtime.attention",
                  "expected auto or simt with a head size of 33 (model.n_embd / model.n_head), "
                  "got tensor_cores"},
        ValueCase{"WgmmaAttentionInFp32",
                  {"runtime.attention=wgmma"},
                  "runtime.attention",
                  "expected auto or simt with runtime.dtype=fp32, got wgmma"},
        ValueCase{"WgmmaAttentionHeadSize",
                  {"runtime.attention=wgmma", "runtime.dtype=bf16", "model.n_embd=96",
                   "model.n_head=3"},
                  "runtime.attention",
                  "expected auto or simt with a head size of 32 (model.n_embd / model.n_head), "
                  "got wgmma; the sm_90 attention kernels take head sizes 64 and 128"},
        ValueCase{"WgmmaAttentionWithContextParallelism",
                  {"runtime.attention=wgmma", "runtime.dtype=bf16", "model.n_embd=128",
                   "model.n_head=2", "parallel.cp=2", "train.seq_len=8"},
                  "runtime.attention",
                  "expected auto or tensor_cores with parallel.cp > 1, got wgmma; the sm_90 "
                  "kernels have no attention over key/value blocks (context parallelism) yet"},
        ValueCase{"Threads",
                  {"runtime.threads=-1"},
                  "runtime.threads",
                  "expected an integer >= 0, got -1"},
        ValueCase{"Dp", {"parallel.dp=0"}, "parallel.dp", "expected an integer >= 1, got 0"},
        ValueCase{"Fsdp", {"parallel.fsdp=0"}, "parallel.fsdp", "expected an integer >= 1, got 0"},
        ValueCase{"Tp", {"parallel.tp=0"}, "parallel.tp", "expected an integer >= 1, got 0"},
        ValueCase{"FsdpStageHigh",
                  {"parallel.fsdp_stage=4"},
                  "parallel.fsdp_stage",
                  "expected one of 1|2|3, got 4"},
        ValueCase{"FsdpStageZero",
                  {"parallel.fsdp_stage=0"},
                  "parallel.fsdp_stage",
                  "expected one of 1|2|3, got 0"},
        ValueCase{"BucketMb",
                  {"parallel.bucket_mb=0"},
                  "parallel.bucket_mb",
                  "expected a size in MiB > 0, got 0"},
        ValueCase{"TpNotDividingHeads",
                  {"parallel.tp=3", "model.n_embd=132"},
                  "parallel.tp",
                  "expected a divisor of model.n_head=4, got 3"},
        ValueCase{"TpNotDividingRows",
                  {"parallel.tp=4", "train.micro_batch=1", "train.seq_len=6"},
                  "train.micro_batch",
                  "expected train.micro_batch * train.seq_len rows divisible by parallel.tp=4, got "
                  "1 * 6 rows"},
        ValueCase{"CollectiveTimeout",
                  {"runtime.collective_timeout_s=-1"},
                  "runtime.collective_timeout_s",
                  "expected seconds >= 0, got -1"},
        ValueCase{"LogDirEmpty", {"log.dir="}, "log.dir", "expected a non-empty directory, got ''"},
        ValueCase{"LogEvery", {"log.every=0"}, "log.every", "expected an integer >= 1, got 0"},
        ValueCase{"CheckpointEvery",
                  {"checkpoint.every=-1"},
                  "checkpoint.every",
                  "expected an integer >= 0, got -1"},
        ValueCase{"CheckpointKeep",
                  {"checkpoint.keep=0"},
                  "checkpoint.keep",
                  "expected an integer >= 1, got 0"},
        ValueCase{"ResumeEmpty",
                  {"checkpoint.resume=''"},
                  "checkpoint.resume",
                  "expected none, auto or a checkpoint directory, got ''"},
        ValueCase{"DataTrainEmptyList",
                  {"data.train=[]"},
                  "data.train",
                  "expected a token shard path or glob, or a list of them, got nothing"}),
    [](const ::testing::TestParamInfo<ValueCase>& info) { return std::string(info.param.name); });

TEST(Config, DataTrainMissing) {
  EXPECT_TRUE(has(error_of("train: {steps: 1}\n"),
                  "data.train (configs/x.yaml): expected a token shard path or glob"));
}

TEST(Config, BoundaryValuesAreAccepted) {
  const Config c = parse_config(
      kMinimal, kSource,
      {"model.vocab_size=65536", "model.n_layer=1", "model.n_head=1", "model.n_embd=1",
       "model.block_size=1", "train.seq_len=1", "train.steps=0", "train.min_lr=1e-3",
       "train.beta1=0", "train.weight_decay=0", "train.grad_clip=0", "train.eval_every=0",
       "checkpoint.every=0", "parallel.fsdp_stage=1"});
  EXPECT_EQ(c.model.vocab_size, 65536);
  EXPECT_EQ(c.train.steps, 0);
  EXPECT_EQ(c.train.min_lr, c.train.lr);
}

// parallel.comm parses to its three values (choose_comm resolves it per run:
// tests/cpu/test_comm_choice.cpp); an unknown one names the key.
TEST(Config, ParallelCommParses) {
  EXPECT_EQ(parse_config(kMinimal, kSource, {}).parallel.comm, ParallelComm::auto_);
  EXPECT_EQ(parse_config(kMinimal, kSource, {"parallel.comm=mpi"}).parallel.comm,
            ParallelComm::mpi);
  // runtime.device=auto passes validation with nccl; the run's device decides.
  EXPECT_EQ(
      parse_config(kMinimal, kSource, {"runtime.device=auto", "parallel.comm=nccl"}).parallel.comm,
      ParallelComm::nccl);
  EXPECT_TRUE(has(error_of(kMinimal, {"parallel.comm=gloo"}),
                  "parallel.comm (override 'parallel.comm=gloo'): expected one of auto|nccl|mpi, "
                  "got 'gloo'"));
}

// parallel.reduce_dtype: fp32 unless asked; bf16 with either runtime.dtype
// (fp32 compute may still sum its gradients in bf16); anything else names
// the key and the choices.
TEST(Config, ReduceDtypeParses) {
  EXPECT_EQ(parse_config(kMinimal, kSource, {}).parallel.reduce_dtype, ComputeDType::fp32);
  for (const char* dtype : {"fp32", "bf16"})
    EXPECT_EQ(parse_config(kMinimal, kSource,
                           {"parallel.reduce_dtype=bf16", std::string("runtime.dtype=") + dtype})
                  .parallel.reduce_dtype,
              ComputeDType::bf16);
  EXPECT_TRUE(has(error_of(kMinimal, {"parallel.reduce_dtype=fp16"}),
                  "parallel.reduce_dtype (override 'parallel.reduce_dtype=fp16'): expected one of "
                  "fp32|bf16, got 'fp16'"));
}

// ---------------------------------------------------------------- model.arch

// Llama 3 8B's dimensions (HF config.json), with Llama 3.1's rope scaling.
const std::string kLlama8b = kMinimal + R"(model:
  arch: llama
  n_layer: 32
  n_head: 32
  n_kv_head: 8
  n_embd: 4096
  multiple_of: 1024
  ffn_dim_multiplier: 1.3
  vocab_size: 128256
  block_size: 8192
  rope_theta: 500000
  rope_scaling: {factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position: 8192}
  norm_eps: 1e-5
)";

TEST(Config, LlamaKeysAndTheMlpWidthRule) {
  const Config c = parse_config(kLlama8b, kSource, {});
  EXPECT_EQ(c.model.arch, ModelArch::llama);
  EXPECT_EQ(c.model.kv_heads(), 8);
  EXPECT_EQ(c.model.head_size(), 128);
  EXPECT_EQ(c.model.ffn_width(), 14336);  // Meta's rule: 4096 * 4 * 2/3 * 1.3 -> 1024s
  EXPECT_FALSE(c.model.tied_embeddings());
  EXPECT_EQ(c.model.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.model.rope_scaling.original_max_position, 8192);
  // 70B: 8192 channels, multiplier 1.3, multiple_of 4096 -> 28672; an
  // explicit ffn_hidden wins; n_kv_head 0 is n_head.
  const Config big = parse_config(
      kLlama8b, kSource, {"model.n_embd=8192", "model.n_head=64", "model.multiple_of=4096"});
  EXPECT_EQ(big.model.ffn_width(), 28672);
  EXPECT_EQ(parse_config(kLlama8b, kSource, {"model.ffn_hidden=1000"}).model.ffn_width(), 1000);
  EXPECT_EQ(parse_config(kLlama8b, kSource, {"model.n_kv_head=0"}).model.kv_heads(), 32);
  // GPT-2 keeps its 4C MLP and its tied head.
  const Config gpt = parse_config(kMinimal, kSource, {});
  EXPECT_EQ(gpt.model.arch, ModelArch::gpt2);
  EXPECT_EQ(gpt.model.ffn_width(), 4 * gpt.model.n_embd);
  EXPECT_TRUE(gpt.model.tied_embeddings());
}

TEST(Config, ToYamlWritesEachFamilysKeysAndRoundTrips) {
  const Config llama = parse_config(kLlama8b, kSource, {});
  const std::string yaml = to_yaml(llama);
  EXPECT_TRUE(has(yaml, "  arch: llama"));
  EXPECT_TRUE(has(yaml, "  n_kv_head: 8"));
  EXPECT_TRUE(has(yaml,
                  "  rope_scaling: {factor: 8, low_freq_factor: 1, high_freq_factor: 4, "
                  "original_max_position: 8192}"));
  EXPECT_TRUE(has(yaml, "  tie_embeddings: false"));
  expect_same(parse_config(yaml, kSource, {}), llama);
  EXPECT_EQ(to_yaml(parse_config(yaml, "", {})), yaml);
  // GPT-2's resolved config has no Llama keys, so it reads back as GPT-2.
  const std::string gpt = to_yaml(parse_config(kMinimal, kSource, {}));
  EXPECT_TRUE(has(gpt, "  arch: gpt2"));
  for (const char* key : {"n_kv_head", "rope_theta", "rope_scaling", "norm_eps", "tie_embeddings"})
    EXPECT_EQ(gpt.find(key), std::string::npos) << key;
  EXPECT_EQ(parse_config(kLlama8b, kSource, {"model.rope_scaling=null"}).model.rope_scaling.factor,
            0.0);
}

TEST(Config, LlamaKeyOnGpt2AndBadLlamaValuesNameTheKey) {
  EXPECT_TRUE(has(error_of(kMinimal, {"model.rope_theta=10000"}),
                  "model.rope_theta (override 'model.rope_theta=10000'): applies to "
                  "model.arch=llama or mixtral only, got model.arch=gpt2"));
  EXPECT_TRUE(has(error_of(kMinimal + "model:\n  tie_embeddings: true\n"),
                  "model.tie_embeddings (configs/x.yaml:4:"));
  EXPECT_TRUE(has(error_of(kLlama8b, {"model.n_kv_head=5"}),
                  "model.n_kv_head (override 'model.n_kv_head=5'): expected a divisor of "
                  "model.n_head=32 (0 = n_head), got 5"));
  EXPECT_TRUE(
      has(error_of(kLlama8b, {"parallel.tp=16", "train.micro_batch=16", "train.global_batch=16"}),
          "parallel.tp (override 'parallel.tp=16'): expected a divisor of "
          "model.n_kv_head=8, got 16"));
  EXPECT_TRUE(has(error_of(kLlama8b, {"model.n_embd=4080", "model.n_head=48", "model.n_kv_head=8"}),
                  "model.n_embd (override 'model.n_embd=4080'): expected an even head size"));
  EXPECT_TRUE(has(error_of(kLlama8b, {"model.rope_scaling={factor: 8, beta: 2}"}),
                  "model.rope_scaling.beta (override 'model.rope_scaling={factor: 8, beta: 2}'): "
                  "unknown key"));
  EXPECT_TRUE(
      has(error_of(kLlama8b, {"model.rope_scaling={low_freq_factor: 2}"}), "got no factor"));
  EXPECT_TRUE(has(error_of(kLlama8b, {"model.rope_scaling={factor: 8, high_freq_factor: 0.5}"}),
                  "model.rope_scaling.high_freq_factor"));
  EXPECT_TRUE(has(error_of(kLlama8b, {"model.norm_eps=0"}), "model.norm_eps"));
  EXPECT_TRUE(has(error_of(kLlama8b, {"model.arch=mamba"}),
                  "model.arch (override 'model.arch=mamba'): expected one of gpt2|llama|mixtral"));
}

// Mixtral: Llama's keys and the mixture's, read, written back and checked,
// and what is not implemented yet refused by key.
TEST(Config, MixtralKeysAreReadCheckedAndRefusedWhereNotBuilt) {
  const Config c = parse_config(kLlama8b, kSource,
                                {"model.arch=mixtral", "model.n_experts=8",
                                 "model.experts_per_token=2", "model.rope_scaling=null",
                                 "model.router_aux_loss_coef=0.02"});
  EXPECT_EQ(c.model.arch, ModelArch::mixtral);
  EXPECT_TRUE(c.model.llama_family() && c.model.moe());
  EXPECT_EQ(c.model.n_experts, 8);
  EXPECT_EQ(c.model.experts_per_token, 2);
  EXPECT_DOUBLE_EQ(c.model.router_aux_loss_coef, 0.02);
  const std::string yaml = to_yaml(c);
  EXPECT_TRUE(has(yaml, "  arch: mixtral"));
  EXPECT_TRUE(has(yaml, "  n_experts: 8"));
  expect_same(parse_config(yaml, kSource, {}), c);
  // A llama config has none of the mixture's keys, and refuses them.
  EXPECT_EQ(to_yaml(parse_config(kLlama8b, kSource, {})).find("n_experts"), std::string::npos);
  EXPECT_TRUE(has(error_of(kLlama8b, {"model.n_experts=8"}),
                  "model.n_experts (override 'model.n_experts=8'): applies to model.arch=mixtral "
                  "only, got model.arch=llama"));
  const std::vector<std::string> base = {"model.arch=mixtral", "model.rope_scaling=null"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return error_of(kLlama8b, extra);
  };
  EXPECT_TRUE(has(with({"model.experts_per_token=9"}),
                  "model.experts_per_token (override 'model.experts_per_token=9'): expected a "
                  "value in [1, model.n_experts=8], got 9"));
  EXPECT_TRUE(has(with({"model.router_aux_loss_coef=-1"}), "model.router_aux_loss_coef"));
  EXPECT_TRUE(has(with({"model.capacity_factor=-0.5"}), "0 = dropless"));
  EXPECT_TRUE(has(error_of(kLlama8b, {"model.arch=mixtral"}),
                  "model.rope_scaling (configs/x.yaml"));
  EXPECT_TRUE(has(error_of(kLlama8b, {"parallel.ep=2"}),
                  "parallel.ep (override 'parallel.ep=2'): expected 1 with model.arch=llama"));
  EXPECT_TRUE(has(with({"parallel.ep=3"}), "expected a divisor of model.n_experts=8, got 3"));
  // ep is folded out of dp x fsdp: it must divide them (cp ranks share rows).
  EXPECT_TRUE(has(with({"parallel.ep=2"}),
                  "expected a divisor of the data ranks parallel.dp x parallel.fsdp = 1 x 1 = 1"));
  EXPECT_TRUE(has(with({"parallel.ep=2", "parallel.cp=2"}), "parallel.dp x parallel.fsdp = 1"));
  const Config ep = parse_config(kLlama8b, kSource,
                                 {"model.arch=mixtral", "model.rope_scaling=null",
                                  "parallel.ep=2", "parallel.dp=2", "train.global_batch=16",
                                  "runtime.device=cpu"});
  EXPECT_EQ(ep.parallel.ep, 2);
  EXPECT_TRUE(has(to_yaml(ep), "  ep: 2"));
  // Pipeline stages pass the router statistics along (no refusal).
  EXPECT_NO_THROW(parse_config(kLlama8b, kSource,
                               {"model.arch=mixtral", "model.rope_scaling=null", "parallel.pp=2",
                                "train.global_batch=16", "runtime.device=cpu"}));
  // A capacity over a micro-batch split across tp ranks (the drops pooled).
  EXPECT_NO_THROW(parse_config(kLlama8b, kSource,
                               {"model.arch=mixtral", "model.rope_scaling=null",
                                "model.capacity_factor=1.25", "parallel.tp=2"}));
  EXPECT_TRUE(has(with({"model.router_bias_update_rate=-0.001"}),
                  "model.router_bias_update_rate"));
  EXPECT_NO_THROW(parse_config(kLlama8b, kSource,
                               {"model.arch=mixtral", "model.rope_scaling=null",
                                "model.router_bias_update_rate=0.001"}));
  // The experts are not split by tp: only the heads and the vocabulary are.
  EXPECT_NO_THROW(parse_config(kLlama8b, kSource,
                               {"model.arch=mixtral", "model.rope_scaling=null",
                                "model.ffn_hidden=100", "parallel.tp=8", "train.micro_batch=8",
                                "train.global_batch=8"}));
}

TEST(Config, LlamaWidthMustBeAMultipleOf16ForTheFusedGemms) {
  EXPECT_TRUE(has(error_of(kLlama8b, {"model.n_embd=4072", "model.n_head=4", "model.n_kv_head=4"}),
                  "model.n_embd (override 'model.n_embd=4072'): expected a multiple of 16"));
}

// parallel.pp and its keys: read, written back, and every impossible
// combination named with its numbers.
TEST(Config, PipelineKeysAreReadAndChecked) {
  const std::string model = kMinimal + "model:\n  n_layer: 4\n";
  const Config c = parse_config(model, kSource,
                                {"parallel.pp=2", "parallel.pp_schedule=interleaved_1f1b",
                                 "parallel.pp_virtual_stages=2", "parallel.pp_layers=[1, 1, 1, 1]",
                                 "train.micro_batch=1", "train.global_batch=4"});
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(c.parallel.pp_schedule, PipeSchedule::interleaved_1f1b);
  EXPECT_EQ(c.parallel.pp_virtual_stages, 2);
  EXPECT_EQ(c.parallel.pp_layers, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_TRUE(has(to_yaml(c), "  pp_layers: [1, 1, 1, 1]"));
  EXPECT_EQ(parse_config(to_yaml(c), kSource, {}).parallel.pp_layers, c.parallel.pp_layers);

  EXPECT_TRUE(has(error_of(model, {"parallel.pp=0"}), "parallel.pp"));
  EXPECT_TRUE(has(error_of(model, {"parallel.pp_virtual_stages=2"}),
                  "parallel.pp_virtual_stages (override 'parallel.pp_virtual_stages=2'): "
                  "expected 1 with parallel.pp_schedule=1f1b"));
  EXPECT_TRUE(has(error_of(model, {"parallel.pp=8"}),
                  "parallel.pp (override 'parallel.pp=8'): expected pp x pp_virtual_stages = 8 x "
                  "1 = 8 chunks of at least one block each, at most model.n_layer=4"));
  EXPECT_TRUE(has(error_of(model, {"parallel.pp=2", "parallel.pp_layers=[3, 2]"}),
                  "parallel.pp_layers (override 'parallel.pp_layers=[3, 2]'): expected 2 block "
                  "counts >= 1 (pp x pp_virtual_stages = 2 x 1) adding up to model.n_layer=4, got "
                  "[3, 2]; its 2 entries add up to 5"));
  EXPECT_TRUE(has(error_of(model, {"parallel.pp=2", "parallel.pp_layers=[4, 0]"}),
                  "its 2 entries add up to 4"));
  EXPECT_TRUE(has(error_of(model, {"parallel.pp=2", "parallel.pp_layers=[4]"}),
                  "its 1 entries add up to 4"));
  EXPECT_TRUE(has(error_of(model, {"parallel.pp_schedule=zero_bubble"}),
                  "expected one of gpipe|1f1b|interleaved_1f1b"));
  EXPECT_TRUE(has(error_of(model, {"parallel.pp=2", "parallel.pp_schedule=interleaved_1f1b",
                                   "train.micro_batch=1", "train.global_batch=3"}),
                  "train.global_batch (override 'train.global_batch=3'): expected micro-batches "
                  "per step (global_batch / (micro_batch * dp * fsdp) = 3) a multiple of "
                  "parallel.pp=2 with parallel.pp_schedule=interleaved_1f1b"));
}

TEST(Config, Bf16IsAcceptedOnEveryDevice) {
  for (const char* device : {"cuda", "auto", "cpu"}) {
    const Config c = parse_config(kMinimal, kSource,
                                  {"runtime.dtype=bf16", std::string("runtime.device=") + device});
    EXPECT_EQ(c.runtime.dtype, ComputeDType::bf16);
  }
}

// ---------------------------------------------------------------- files

TEST(Config, LoadConfigReadsTheFileAndNamesItInMessages) {
  test::TempDir dir;
  const std::string path = dir.file("run.yaml");
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("data:\n  train: a.bin\ntrain:\n  steps: 3\n", f);
  std::fclose(f);
  const Config c = load_config(path, {"train.lr=1e-2"});
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(c.train.steps, 3);
  EXPECT_EQ(c.train.lr, 1e-2);
  try {
    load_config(path, {"train.stepz=1"});
    FAIL() << "expected gt::Error";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "did you mean 'train.steps'"));
  }
  try {
    load_config(path, {"train.steps=x"});
    FAIL() << "expected gt::Error";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "override 'train.steps=x'"));
  }
}

TEST(Config, LoadConfigMissingFile) {
  try {
    load_config("/nonexistent/x.yaml", {});
    FAIL() << "expected gt::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "config file (/nonexistent/x.yaml): expected a readable YAML file, got No such "
              "file or directory");
  }
}

TEST(Config, LoadConfigDirectory) {
  test::TempDir dir;
  try {
    load_config(dir.path(), {});
    FAIL() << "expected gt::Error";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "config file (" + dir.path() + "): expected a readable YAML file"));
  }
}

}  // namespace
}  // namespace gt
