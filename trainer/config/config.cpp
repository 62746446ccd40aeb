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

#include "kernels/core/attention_kernels.hpp"
#include "kernels/core/error.hpp"
#include "trainer/config/config_internal.hpp"

namespace gt {

int ModelConfig::ffn_width() const {
  if (arch == ModelArch::gpt2) return 4 * n_embd;
  if (ffn_hidden > 0) return ffn_hidden;
  // Meta's rule (llama/model.py): int() truncations as there.
  int64_t hidden = 2 * (4 * static_cast<int64_t>(n_embd)) / 3;
  if (ffn_dim_multiplier > 0) hidden = static_cast<int64_t>(ffn_dim_multiplier * hidden);
  const int64_t m = multiple_of > 0 ? multiple_of : 1;
  return static_cast<int>((hidden + m - 1) / m * m);
}

std::optional<TpSplitProblem> tp_split_problem(const ModelConfig& m, int tp) {
  if (tp <= 1) return std::nullopt;
  std::vector<std::pair<std::string, int64_t>> split = {{"model.n_head", m.n_head}};
  if (m.arch == ModelArch::gpt2) {
    split.push_back({"model.n_embd", m.n_embd});
  } else {
    // Query heads, key/value heads and the MLP's width are split; a
    // mixture's experts are whole on every tp rank (each routes its rows).
    split.push_back({"model.n_kv_head", m.kv_heads()});
    if (!m.moe()) split.push_back({"the MLP width (model.ffn_hidden)", m.ffn_width()});
  }
  for (const auto& [what, v] : split)
    if (v % tp != 0) return TpSplitProblem{what, v};
  return std::nullopt;
}

ModelConfig padded_for_tp(ModelConfig m, int tp) {
  m.vocab_pad_tp = std::max(1, tp);
  return m;
}
namespace {

using config_detail::Field;

// Where each key's value came from: "configs/x.yaml:12:7" or "override
// 'train.lr=-1'"; keys left at their default are the config file's.
using Locations = std::map<std::string, std::string>;

// Value checks, in dependency order (degrees and dims before the relations
// that use them). Each message: "<key> (<where>): expected <X>, got <value>",
// with a hint after a semicolon where one helps.
void validate(const Config& c, const Locations& where) {
  auto at = [&](const std::string& key) {
    const auto it = where.find(key);
    return it != where.end() ? it->second : c.source;
  };
  auto bad = [&](const std::string& key, const auto& got, const std::string& expected,
                 const std::string& hint = "") {
    fail(key, " (", at(key), "): expected ", expected, ", got ", got,
         hint.empty() ? "" : "; " + hint);
  };
  auto at_least = [&](const char* key, long long v, long long lo) {
    if (v < lo) bad(key, v, "an integer >= " + std::to_string(lo));
  };
  auto num = [](double v) { return detail::concat(v); };

  const ModelConfig& m = c.model;
  at_least("model.n_layer", m.n_layer, 1);
  at_least("model.n_head", m.n_head, 1);
  at_least("model.n_embd", m.n_embd, 1);
  at_least("model.block_size", m.block_size, 1);
  if (m.arch == ModelArch::gpt2 && (m.vocab_size < 1 || m.vocab_size > 65536))
    bad("model.vocab_size", m.vocab_size, "a value in [1, 65536]",
        "token ids are stored as uint16");
  // Llama 3's 128256: ids past 65535 need uint32 token shards; the padded
  // row count must stay an int.
  if (m.llama_family() && (m.vocab_size < 1 || m.vocab_size > (1 << 30)))
    bad("model.vocab_size", m.vocab_size, "a value in [1, 1073741824]");
  if (m.n_embd % m.n_head != 0)
    bad("model.n_embd", m.n_embd, "a multiple of model.n_head=" + std::to_string(m.n_head),
        "each head gets n_embd / n_head channels");
  if (m.llama_family()) {
    at_least("model.n_kv_head", m.n_kv_head, 0);
    if (m.n_head % m.kv_heads() != 0)
      bad("model.n_kv_head", m.n_kv_head,
          "a divisor of model.n_head=" + std::to_string(m.n_head) + " (0 = n_head)",
          "grouped-query attention shares each key/value head among n_head / n_kv_head "
          "query heads");
    if (m.head_size() % 2 != 0)
      bad("model.n_embd", m.n_embd,
          detail::concat("an even head size (model.n_embd / model.n_head), got ", m.head_size()),
          "rotary embeddings turn pairs of channels");
    if (m.n_embd % 16 != 0)
      bad("model.n_embd", m.n_embd, "a multiple of 16",
          "the fused q|k|v and gate|up GEMMs read adjacent weights, which the parameter layout "
          "aligns to 16 elements");
    at_least("model.ffn_hidden", m.ffn_hidden, 0);
    at_least("model.multiple_of", m.multiple_of, 1);
    if (m.ffn_dim_multiplier < 0)
      bad("model.ffn_dim_multiplier", num(m.ffn_dim_multiplier), "a value >= 0", "0 = none");
    if (m.ffn_width() < 1)
      bad("model.ffn_hidden", m.ffn_hidden, "an MLP width >= 1",
          detail::concat("Llama's rule gives ", m.ffn_width()));
    if (!(m.rope_theta > 0)) bad("model.rope_theta", num(m.rope_theta), "a value > 0");
    if (!(m.norm_eps > 0)) bad("model.norm_eps", num(m.norm_eps), "a value > 0");
    const RopeScaling& rs = m.rope_scaling;
    if (rs.enabled()) {
      if (!(rs.low_freq_factor > 0))
        bad("model.rope_scaling.low_freq_factor", num(rs.low_freq_factor), "a value > 0");
      if (!(rs.high_freq_factor > rs.low_freq_factor))
        bad("model.rope_scaling.high_freq_factor", num(rs.high_freq_factor),
            "a value > model.rope_scaling.low_freq_factor=" + num(rs.low_freq_factor));
      at_least("model.rope_scaling.original_max_position", rs.original_max_position, 1);
    } else if (rs.factor < 0) {
      bad("model.rope_scaling.factor", num(rs.factor), "a value > 0");
    }
  }
  if (m.moe()) {
    at_least("model.n_experts", m.n_experts, 1);
    if (m.experts_per_token < 1 || m.experts_per_token > m.n_experts)
      bad("model.experts_per_token", m.experts_per_token,
          detail::concat("a value in [1, model.n_experts=", m.n_experts, "]"),
          "each token is routed to that many distinct experts");
    if (!(m.router_aux_loss_coef >= 0))
      bad("model.router_aux_loss_coef", num(m.router_aux_loss_coef), "a value >= 0", "0 = off");
    if (!(m.router_z_loss_coef >= 0))
      bad("model.router_z_loss_coef", num(m.router_z_loss_coef), "a value >= 0", "0 = off");
    if (!(m.router_bias_update_rate >= 0))
      bad("model.router_bias_update_rate", num(m.router_bias_update_rate), "a value >= 0",
          "0 = off");
    if (!(m.capacity_factor >= 0))
      bad("model.capacity_factor", num(m.capacity_factor), "a value >= 0", "0 = dropless");
    if (m.rope_scaling.enabled())
      bad("model.rope_scaling", "a scaling", "none for model.arch=mixtral",
          "HF's MixtralForCausalLM has no Llama 3.1 rope scaling");
  }

  const DataConfig& d = c.data;
  if (d.train.empty())
    bad("data.train", "nothing", "a token shard path or glob, or a list of them");

  const ParallelConfig& p = c.parallel;
  at_least("parallel.dp", p.dp, 1);
  at_least("parallel.fsdp", p.fsdp, 1);
  at_least("parallel.tp", p.tp, 1);
  if (!(p.bucket_mb > 0)) bad("parallel.bucket_mb", num(p.bucket_mb), "a size in MiB > 0");
  if (const auto problem = tp_split_problem(m, p.tp))
    bad("parallel.tp", p.tp, detail::concat("a divisor of ", problem->what, "=", problem->value),
        "tensor parallelism splits heads, channels and vocabulary evenly");
  at_least("parallel.pp", p.pp, 1);
  at_least("parallel.pp_virtual_stages", p.pp_virtual_stages, 1);
  if (p.pp_virtual_stages > 1 && p.pp_schedule != PipeSchedule::interleaved_1f1b)
    bad("parallel.pp_virtual_stages", p.pp_virtual_stages,
        detail::concat("1 with parallel.pp_schedule=", to_string(p.pp_schedule)),
        "only interleaved_1f1b runs several model chunks per pipeline rank");
  // Every chunk of every stage holds at least one block.
  const int chunks = p.pp * p.pp_virtual_stages;
  if (p.pp_layers.empty() && chunks > m.n_layer)
    bad("parallel.pp", p.pp,
        detail::concat("pp x pp_virtual_stages = ", p.pp, " x ", p.pp_virtual_stages, " = ", chunks,
                       " chunks of at least one block each, at most model.n_layer=", m.n_layer));
  if (!p.pp_layers.empty()) {
    int64_t sum = 0;
    bool positive = true;
    for (int n : p.pp_layers) {
      sum += n;
      positive = positive && n >= 1;
    }
    if (static_cast<int>(p.pp_layers.size()) != chunks || !positive || sum != m.n_layer)
      bad("parallel.pp_layers", config_detail::find_field("parallel", "pp_layers")->write(c),
          detail::concat(chunks, " block counts >= 1 (pp x pp_virtual_stages = ", p.pp, " x ",
                         p.pp_virtual_stages, ") adding up to model.n_layer=", m.n_layer),
          detail::concat("its ", p.pp_layers.size(), " entries add up to ", sum));
  }

  const TrainConfig& t = c.train;
  if (t.seq_len < 1 || t.seq_len > m.block_size)
    bad("train.seq_len", t.seq_len,
        "a value in [1, model.block_size=" + std::to_string(m.block_size) + "]",
        t.seq_len > m.block_size ? "raise model.block_size or lower train.seq_len" : "");
  at_least("train.micro_batch", t.micro_batch, 1);
  at_least("train.global_batch", t.global_batch, 1);
  const long long rows_per_pass = 1LL * t.micro_batch * p.dp * p.fsdp;
  if (t.global_batch % rows_per_pass != 0)
    bad("train.global_batch", t.global_batch,
        detail::concat("a multiple of train.micro_batch * parallel.dp * parallel.fsdp = ",
                       t.micro_batch, " * ", p.dp, " * ", p.fsdp, " = ", rows_per_pass));
  // Interleaving sends the micro-batches through each chunk in groups of pp.
  if (p.pp > 1 && p.pp_schedule == PipeSchedule::interleaved_1f1b &&
      (t.global_batch / rows_per_pass) % p.pp != 0)
    bad("train.global_batch", t.global_batch,
        detail::concat("micro-batches per step (global_batch / (micro_batch * dp * fsdp) = ",
                       t.global_batch / rows_per_pass, ") a multiple of parallel.pp=", p.pp,
                       " with parallel.pp_schedule=interleaved_1f1b"));
  at_least("train.steps", t.steps, 0);
  if (!(t.lr > 0)) bad("train.lr", num(t.lr), "a value > 0");
  if (t.min_lr < 0 || t.min_lr > t.lr)
    bad("train.min_lr", num(t.min_lr), "a value in [0, train.lr=" + num(t.lr) + "]");
  at_least("train.warmup_steps", t.warmup_steps, 0);
  if (t.weight_decay < 0) bad("train.weight_decay", num(t.weight_decay), "a value >= 0");
  if (t.beta1 < 0 || t.beta1 >= 1) bad("train.beta1", num(t.beta1), "a value in [0, 1)");
  if (t.beta2 < 0 || t.beta2 >= 1) bad("train.beta2", num(t.beta2), "a value in [0, 1)");
  if (!(t.eps > 0)) bad("train.eps", num(t.eps), "a value > 0");
  if (t.grad_clip < 0)
    bad("train.grad_clip", num(t.grad_clip), "a value >= 0", "0 disables clipping");
  at_least("train.eval_every", t.eval_every, 0);
  at_least("train.eval_batches", t.eval_batches, 1);
  at_least("train.max_skipped", t.max_skipped, 1);
  // Context parallelism cuts every row into chunks of equal length.
  at_least("parallel.cp", p.cp, 1);
  const int cp_chunks = p.cp_load_balance ? 2 * p.cp : p.cp;
  if (p.cp > 1 && t.seq_len % cp_chunks != 0)
    bad("train.seq_len", t.seq_len,
        detail::concat("a multiple of ", p.cp_load_balance ? "2 * parallel.cp = " : "parallel.cp = ",
                       cp_chunks),
        p.cp_load_balance
            ? "each row is cut into 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r "
              "(parallel.cp_load_balance)"
            : "each row is cut into cp chunks, one per rank");
  // Sequence parallelism splits each cp rank's rows of a micro-batch over
  // the tp ranks.
  const long long cp_rows = 1LL * t.micro_batch * t.seq_len / p.cp;
  if (p.tp > 1 && cp_rows % p.tp != 0)
    bad("train.micro_batch",
        p.cp > 1 ? detail::concat(t.micro_batch, " * ", t.seq_len, " / ", p.cp, " = ", cp_rows,
                                  " rows per cp rank")
                 : detail::concat(t.micro_batch, " * ", t.seq_len, " rows"),
        p.cp > 1 ? detail::concat("train.micro_batch * train.seq_len / parallel.cp rows divisible "
                                  "by parallel.tp=",
                                  p.tp)
                 : detail::concat("train.micro_batch * train.seq_len rows divisible by "
                                  "parallel.tp=",
                                  p.tp),
        "sequence parallelism splits a micro-batch's rows over the tp ranks");

  // Expert parallelism splits each block's experts over ep consecutive data
  // ranks (the ranks of dp x fsdp holding different rows; the same cp and tp
  // coordinates).
  at_least("parallel.ep", p.ep, 1);
  if (p.ep > 1) {
    if (!m.moe())
      bad("parallel.ep", p.ep, "1 with model.arch=" + std::string(to_string(m.arch)),
          "only a mixture of experts (model.arch=mixtral) has experts to shard");
    if (m.n_experts % p.ep != 0)
      bad("parallel.ep", p.ep, detail::concat("a divisor of model.n_experts=", m.n_experts),
          "each ep rank holds n_experts / ep whole experts");
    const int data_ranks = p.dp * p.fsdp;
    if (data_ranks % p.ep != 0)
      bad("parallel.ep", p.ep,
          detail::concat("a divisor of the data ranks parallel.dp x parallel.fsdp = ", p.dp,
                         " x ", p.fsdp, " = ", data_ranks),
          "expert parallelism is folded out of the data-parallel ranks, not added to the world");
  }

  const RuntimeConfig& r = c.runtime;
  // bf16 activations cross the tp all-gathers two to an fp32 word.
  if (p.tp > 1 && r.dtype == ComputeDType::bf16 && (cp_rows / p.tp * c.model.n_embd) % 2 != 0)
    bad("model.n_embd", std::to_string(c.model.n_embd),
        detail::concat("an even (train.micro_batch * train.seq_len",
                       p.cp > 1 ? " / parallel.cp" : "",
                       " / parallel.tp) * model.n_embd with runtime.dtype=bf16 and parallel.tp=",
                       p.tp),
        "the tensor-parallel all-gathers move bf16 activations in pairs");
  if (p.comm == ParallelComm::nccl && r.device == DeviceKind::cpu)
    bad("parallel.comm", "nccl", "auto or mpi with runtime.device=cpu",
        "NCCL moves device buffers; it needs runtime.device=cuda");
  if (r.attention == AttentionKernel::tensor_cores || r.attention == AttentionKernel::wgmma) {
    const char* name = to_string(r.attention);
    if (r.dtype != ComputeDType::bf16)
      bad("runtime.attention", name, "auto or simt with runtime.dtype=fp32",
          "the tensor-core attention kernels take bf16 activations (runtime.dtype=bf16)");
    const int hs = c.model.n_head > 0 ? c.model.n_embd / c.model.n_head : 0;
    const bool wgmma = r.attention == AttentionKernel::wgmma;
    if (wgmma ? !wgmma_attention_supported(hs) : !tensor_core_attention_supported(hs))
      bad("runtime.attention", name,
          detail::concat("auto or simt with a head size of ", hs, " (model.n_embd / model.n_head)"),
          wgmma ? "the sm_90 attention kernels take head sizes 64 and 128"
                : "the tensor-core attention kernels take head sizes that are multiples of 16 "
                  "up to 128");
    if (wgmma && c.parallel.cp > 1)
      bad("runtime.attention", name, "auto or tensor_cores with parallel.cp > 1",
          "the sm_90 kernels have no attention over key/value blocks (context parallelism) "
          "yet");
  }
  if (r.fp8 != Fp8Recipe::off && r.dtype != ComputeDType::bf16)
    bad("runtime.fp8", to_string(r.fp8), "off with runtime.dtype=fp32",
        "the fp8 GEMMs read bf16 activations and write bf16 outputs; set runtime.dtype=bf16");
  at_least("runtime.fp8_min_dim", r.fp8_min_dim, 0);
  // fp8 all-gather asked for where it cannot happen: say which part is missing.
  if (c.parallel.fp8_allgather == Fp8AllGather::on && !fp8_allgather_applies(c)) {
    const ParallelConfig& p = c.parallel;
    const std::string why =
        r.fp8 != Fp8Recipe::tensorwise
            ? detail::concat("it needs runtime.fp8=tensorwise (it is ", to_string(r.fp8),
                             r.fp8 == Fp8Recipe::rowwise
                                 ? ": rowwise scales each GEMM's rows by their own amax, so a "
                                   "weight has no one fp8 form to gather"
                                 : "",
                             ")")
        : p.fsdp_stage != FsdpStage::parameters
            ? detail::concat("it needs parallel.fsdp_stage=3 (it is ",
                             static_cast<int>(p.fsdp_stage),
                             ": only ZeRO-3 gathers the weights before each use)")
            : "it needs parallel.fsdp > 1 (with fsdp=1 no weight is sharded or gathered)";
    bad("parallel.fp8_allgather", "true", "auto or false here", why);
  }
  at_least("runtime.threads", r.threads, 0);
  if (!(r.collective_timeout_s >= 0))
    bad("runtime.collective_timeout_s", num(r.collective_timeout_s), "seconds >= 0",
        "0 = wait forever");

  if (c.log.dir.empty()) bad("log.dir", "''", "a non-empty directory");
  at_least("log.every", c.log.every, 1);

  const CheckpointConfig& k = c.checkpoint;
  at_least("checkpoint.every", k.every, 0);
  at_least("checkpoint.keep", k.keep, 1);
  if (k.resume.empty()) bad("checkpoint.resume", "''", "none, auto or a checkpoint directory");

  const ProfileConfig& pr = c.profile;
  at_least("profile.every", pr.every, 0);
  at_least("profile.steps", pr.steps, 1);
  if (pr.every > 0 && pr.steps > pr.every)
    bad("profile.steps", pr.steps, "at most profile.every=" + std::to_string(pr.every),
        "the last profile.steps of every profile.every steps are profiled");
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
  Locations where_of;
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
      where_of[field->dotted] = where;
    }
  }
  // A key of one model family set on the other (known once every key is read).
  for (const Field& f : config_detail::fields()) {
    const auto w = where_of.find(f.dotted);
    if (!f.applies_to(c.model.arch) && w != where_of.end()) {
      std::string archs;
      for (ModelArch a : f.only) archs += (archs.empty() ? "" : " or ") + std::string(to_string(a));
      fail(f.dotted, " (", w->second, "): applies to model.arch=", archs,
           " only, got model.arch=", to_string(c.model.arch));
    }
  }
  validate(c, where_of);
  c.model.vocab_pad_tp = c.parallel.tp;
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("config file (", path, "): expected a readable YAML file, got ", std::strerror(errno));
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed)
    fail("config file (", path, "): expected a readable YAML file, got ", std::strerror(err));
  return parse_config(text, path, overrides);
}

std::string to_yaml(const Config& c) {
  std::ostringstream out;
  out << "# Resolved trainer config: every key, canonical order.\n";
  std::string section;
  for (const Field& f : config_detail::fields()) {
    if (!f.applies_to(c.model.arch)) continue;  // another family's keys
    if (f.section != section) {
      section = f.section;
      out << section << ":\n";
    }
    out << "  " << f.key << ": " << f.write(c) << "\n";
  }
  return out.str();
}

std::string model_signature(const ModelConfig& m) {
  // GPT-2's stays what checkpoints written before model.arch carry.
  std::string s = detail::concat("n_layer=", m.n_layer, ",n_head=", m.n_head, ",n_embd=", m.n_embd,
                                 ",vocab_size=", m.vocab_size, ",block_size=", m.block_size);
  if (m.llama_family())
    s = detail::concat("arch=", to_string(m.arch), ",", s, ",n_kv_head=", m.kv_heads(),
                       ",ffn=", m.ffn_width(), ",tied=", m.tied_embeddings() ? 1 : 0);
  if (m.moe()) s = detail::concat(s, ",experts=", m.n_experts, ",top_k=", m.experts_per_token);
  return s;
}

const char* to_string(ModelArch a) {
  switch (a) {
    case ModelArch::gpt2:
      return "gpt2";
    case ModelArch::llama:
      return "llama";
    case ModelArch::mixtral:
      return "mixtral";
  }
  return "?";
}

const char* to_string(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::gpipe:
      return "gpipe";
    case PipeSchedule::one_f_one_b:
      return "1f1b";
    case PipeSchedule::interleaved_1f1b:
      return "interleaved_1f1b";
  }
  return "?";
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

const char* to_string(CpComm c) {
  switch (c) {
    case CpComm::allgather: return "allgather";
    case CpComm::ring: return "ring";
  }
  return "?";
}

const char* to_string(Fp8AllGather g) {
  switch (g) {
    case Fp8AllGather::auto_: return "auto";
    case Fp8AllGather::on: return "true";
    case Fp8AllGather::off: return "false";
  }
  return "?";
}

bool fp8_allgather_applies(const Config& c) {
  const ParallelConfig& p = c.parallel;
  return p.fp8_allgather != Fp8AllGather::off && c.runtime.fp8 == Fp8Recipe::tensorwise &&
         p.fsdp > 1 && p.fsdp_stage == FsdpStage::parameters;
}

const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::off: return "off";
    case Fp8Recipe::tensorwise: return "tensorwise";
    case Fp8Recipe::rowwise: return "rowwise";
  }
  return "?";
}

const char* to_string(ParallelComm c) {
  switch (c) {
    case ParallelComm::auto_: return "auto";
    case ParallelComm::nccl: return "nccl";
    case ParallelComm::mpi: return "mpi";
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

const char* to_string(AttentionKernel a) {
  switch (a) {
    case AttentionKernel::auto_:
      return "auto";
    case AttentionKernel::tensor_cores:
      return "tensor_cores";
    case AttentionKernel::simt:
      return "simt";
    case AttentionKernel::wgmma:
      return "wgmma";
  }
  return "?";
}

bool uses_tensor_core_attention(const Config& c) {
  if (c.runtime.attention == AttentionKernel::simt || c.runtime.dtype != ComputeDType::bf16)
    return false;
  return tensor_core_attention_supported(c.model.n_embd / c.model.n_head);
}

bool uses_wgmma_attention(const Config& c) {
  return c.runtime.attention == AttentionKernel::wgmma && c.runtime.dtype == ComputeDType::bf16 &&
         wgmma_attention_supported(c.model.n_embd / c.model.n_head);
}

std::optional<FsdpStage> fsdp_stage_numbered(int n) {
  if (n < 1 || n > 3) return std::nullopt;
  return static_cast<FsdpStage>(n);
}

FsdpStage fsdp_stage_of(int n) {
  if (const auto stage = fsdp_stage_numbered(n)) return *stage;
  fail("parallel.fsdp_stage: expected one of 1|2|3, got ", n);
}

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::mlp: return "mlp";
    case Recompute::block: return "block";
  }
  return "?";
}

}  // namespace gt
