// Public entry points of the config: load/parse (YAML tree → overrides →
// typed structs → value validation), the canonical YAML writer and the small
// helpers on Config. The key table lives in schema.cpp, the tree handling in
// yaml_tree.cpp. Validation runs on the finished Config so every message can
// name the keys involved with their final values.
#include "trainer/config/config.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "trainer/config/config_internal.hpp"

namespace gt {
namespace {

using config_detail::Field;

// Value checks, in dependency order (degrees and dims before the relations
// that use them). Each message: "<source>: <key>=<value> ...expected...".
void validate(const Config& c) {
  const std::string& src = c.source;
  auto at_least = [&](const char* key, long long v, long long lo) {
    if (v < lo) fail(src, ": ", key, "=", v, ": expected an integer >= ", lo);
  };

  const ModelConfig& m = c.model;
  at_least("model.n_layer", m.n_layer, 1);
  at_least("model.n_head", m.n_head, 1);
  at_least("model.n_embd", m.n_embd, 1);
  at_least("model.block_size", m.block_size, 1);
  if (m.vocab_size < 1 || m.vocab_size > 65536)
    fail(src, ": model.vocab_size=", m.vocab_size,
         ": expected a value in [1, 65536] (token ids are stored as uint16)");
  if (m.n_embd % m.n_head != 0)
    fail(src, ": model.n_embd=", m.n_embd, " is not divisible by model.n_head=", m.n_head,
         " (each head gets n_embd / n_head channels)");

  const DataConfig& d = c.data;
  if (d.train.empty())
    fail(src, ": data.train is empty: expected a token shard path or glob, or a list of them");

  const ParallelConfig& p = c.parallel;
  at_least("parallel.dp", p.dp, 1);
  at_least("parallel.fsdp", p.fsdp, 1);
  at_least("parallel.tp", p.tp, 1);
  if (p.fsdp_stage < 1 || p.fsdp_stage > 3)
    fail(src, ": parallel.fsdp_stage=", p.fsdp_stage, ": expected one of 1|2|3");
  if (!(p.bucket_mb > 0))
    fail(src, ": parallel.bucket_mb=", p.bucket_mb, ": expected a size in MiB > 0");
  if (p.tp > 1) {
    // Heads, channels and vocabulary rows are split evenly over the tp ranks.
    for (const auto& [key, v] : {std::pair<const char*, int>{"model.n_head", m.n_head},
                                 {"model.n_embd", m.n_embd},
                                 {"model.vocab_size", m.vocab_size}})
      if (v % p.tp != 0)
        fail(src, ": parallel.tp=", p.tp, " does not divide ", key, "=", v,
             " (tensor parallelism splits heads, channels and vocabulary evenly)");
  }

  const TrainConfig& t = c.train;
  if (t.seq_len < 1)
    fail(src, ": train.seq_len=", t.seq_len, ": expected a value in [1, model.block_size=",
         m.block_size, "]");
  if (t.seq_len > m.block_size)
    fail(src, ": train.seq_len=", t.seq_len, " exceeds model.block_size=", m.block_size);
  at_least("train.micro_batch", t.micro_batch, 1);
  at_least("train.global_batch", t.global_batch, 1);
  const long long rows_per_pass = 1LL * t.micro_batch * p.dp * p.fsdp;
  if (t.global_batch % rows_per_pass != 0)
    fail(src, ": train.global_batch=", t.global_batch,
         " must be a multiple of train.micro_batch * parallel.dp * parallel.fsdp = ",
         t.micro_batch, " * ", p.dp, " * ", p.fsdp, " = ", rows_per_pass);
  at_least("train.steps", t.steps, 0);
  if (!(t.lr > 0)) fail(src, ": train.lr=", t.lr, ": expected a value > 0");
  if (t.min_lr < 0 || t.min_lr > t.lr)
    fail(src, ": train.min_lr=", t.min_lr, ": expected a value in [0, train.lr=", t.lr, "]");
  at_least("train.warmup_steps", t.warmup_steps, 0);
  if (t.weight_decay < 0)
    fail(src, ": train.weight_decay=", t.weight_decay, ": expected a value >= 0");
  if (t.beta1 < 0 || t.beta1 >= 1)
    fail(src, ": train.beta1=", t.beta1, ": expected a value in [0, 1)");
  if (t.beta2 < 0 || t.beta2 >= 1)
    fail(src, ": train.beta2=", t.beta2, ": expected a value in [0, 1)");
  if (!(t.eps > 0)) fail(src, ": train.eps=", t.eps, ": expected a value > 0");
  if (t.grad_clip < 0)
    fail(src, ": train.grad_clip=", t.grad_clip, ": expected a value >= 0 (0 disables clipping)");
  at_least("train.eval_every", t.eval_every, 0);
  at_least("train.eval_batches", t.eval_batches, 1);
  at_least("train.max_skipped", t.max_skipped, 1);
  // Sequence parallelism splits each micro-batch's rows over the tp ranks.
  if (p.tp > 1 && (1LL * t.micro_batch * t.seq_len) % p.tp != 0)
    fail(src, ": train.micro_batch * train.seq_len = ", t.micro_batch, " * ", t.seq_len,
         " rows must be divisible by parallel.tp=", p.tp,
         " (sequence parallelism splits a micro-batch's rows over the tp ranks)");

  const RuntimeConfig& r = c.runtime;
  if (r.dtype == ComputeDType::bf16 && r.device == DeviceKind::cpu)
    fail(src, ": runtime.dtype=bf16 needs runtime.device=cuda; the CPU backend is fp32 only");
  at_least("runtime.threads", r.threads, 0);
  if (!(r.collective_timeout_s >= 0))
    fail(src, ": runtime.collective_timeout_s=", r.collective_timeout_s,
         ": expected seconds >= 0 (0 = wait forever)");

  if (c.log.dir.empty()) fail(src, ": log.dir: expected a non-empty directory");
  at_least("log.every", c.log.every, 1);

  const CheckpointConfig& k = c.checkpoint;
  at_least("checkpoint.every", k.every, 0);
  at_least("checkpoint.keep", k.keep, 1);
  if (k.resume.empty())
    fail(src, ": checkpoint.resume: expected none, auto or a checkpoint directory, got ''");

  const ProfileConfig& pr = c.profile;
  at_least("profile.every", pr.every, 0);
  at_least("profile.steps", pr.steps, 1);
  if (pr.every > 0 && pr.steps > pr.every)
    fail(src, ": profile.steps=", pr.steps, " exceeds profile.every=", pr.every,
         ": expected 1 <= profile.steps <= profile.every (the last profile.steps of every "
         "profile.every steps are profiled)");
}

}  // namespace

int Config::grad_accum_steps() const {
  const int rows_per_pass = train.micro_batch * data_parallel_size();
  GT_CHECK(rows_per_pass > 0 && train.global_batch % rows_per_pass == 0,
           "config not validated");
  return train.global_batch / rows_per_pass;
}

std::string Config::checkpoint_dir() const {
  if (!checkpoint.dir.empty()) return checkpoint.dir;
  std::string base = log.dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base == "/" ? "/checkpoints" : base + "/checkpoints";
}

Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides) {
  YAML::Node root = config_detail::load_tree(yaml_text, source);
  config_detail::check_tree(root, source);
  const std::map<std::string, std::string> origin =
      config_detail::apply_overrides(root, overrides);

  Config c;
  c.source = source;
  // Range-for keeps each (key, value) pair alive; yaml-cpp's iterator->
  // returns a proxy whose members dangle after the expression.
  for (const auto& entry : root) {
    const std::string section = entry.first.Scalar();
    const YAML::Node body = entry.second;
    if (body.IsNull()) continue;
    for (const auto& kv : body) {
      const std::string key = kv.first.Scalar();
      const Field* field = config_detail::find_field(section, key);
      GT_CHECK(field != nullptr, "key escaped check_tree: ", section, ".", key);
      const auto o = origin.find(field->dotted);
      const std::string where = o != origin.end()
                                    ? "override '" + o->second + "'"
                                    : config_detail::file_position(source, kv.second);
      field->read(c, kv.second, where, field->dotted);
    }
  }
  validate(c);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot read config file '", path, "': ", std::strerror(errno));
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) fail("cannot read config file '", path, "': ", std::strerror(err));
  return parse_config(text, path, overrides);
}

std::string to_yaml(const Config& c) {
  std::ostringstream out;
  out << "# Resolved trainer config: every key, canonical order.\n";
  std::string section;
  for (const Field& f : config_detail::fields()) {
    if (f.section != section) {
      section = f.section;
      out << section << ":\n";
    }
    out << "  " << f.key << ": " << f.write(c) << "\n";
  }
  return out.str();
}

std::string model_signature(const ModelConfig& m) {
  return detail::concat("n_layer=", m.n_layer, ",n_head=", m.n_head, ",n_embd=", m.n_embd,
                        ",vocab_size=", m.vocab_size, ",block_size=", m.block_size);
}

const char* to_string(LrSchedule s) {
  switch (s) {
    case LrSchedule::constant: return "constant";
    case LrSchedule::cosine: return "cosine";
  }
  return "?";
}

const char* to_string(DeviceKind d) {
  switch (d) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return "cuda";
    case DeviceKind::auto_: return "auto";
  }
  return "?";
}

const char* to_string(ComputeDType d) {
  switch (d) {
    case ComputeDType::fp32: return "fp32";
    case ComputeDType::bf16: return "bf16";
  }
  return "?";
}

}  // namespace gt
