// The key table: every config key with its section, how its YAML value is
// converted (strictly: integers are decimal integers, bools are exactly
// true/false, enums one of their names, quoted numbers are strings and so
// rejected) and how it is written back. to_yaml and the unknown-key check
// both come from this table, so a key added here is emitted, accepted and
// suggested everywhere at once.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/core/error.hpp"
#include "trainer/config/config_internal.hpp"

namespace gt::config_detail {
namespace {

[[noreturn]] void type_error(const std::string& where, const std::string& dotted,
                             const std::string& expected, const YAML::Node& n) {
  fail(dotted, " (", where, "): expected ", expected, ", got ", describe(n));
}

// A plain (unquoted) scalar's text, or a type error.
const std::string& plain_scalar(const YAML::Node& n, const std::string& where,
                                const std::string& dotted, const std::string& expected) {
  if (!n.IsScalar() || n.Tag() == "!") type_error(where, dotted, expected, n);
  return n.Scalar();
}

bool is_decimal_integer(const std::string& s, bool allow_minus) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || (allow_minus && s[i] == '-'))) ++i;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// Shortest "%.*g" text that reads back as exactly `v`.
std::string format_double(double v) {
  char buf[64];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// Double-quoted YAML string: always quoted, so paths such as "yes", "1e3"
// or "a: b" stay strings.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

template <typename T>
struct Codec;

template <>
struct Codec<int> {
  static int read(const YAML::Node& n, const std::string& where, const std::string& dotted) {
    const std::string& s = plain_scalar(n, where, dotted, "an integer");
    if (!is_decimal_integer(s, true)) type_error(where, dotted, "an integer", n);
    errno = 0;
    const long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == ERANGE || v < std::numeric_limits<int>::min() ||
        v > std::numeric_limits<int>::max())
      fail(dotted, " (", where, "): expected an integer in [", std::numeric_limits<int>::min(),
           ", ", std::numeric_limits<int>::max(), "], got '", s, "'");
    return static_cast<int>(v);
  }
  static std::string write(int v) { return std::to_string(v); }
};

template <>
struct Codec<uint64_t> {
  static uint64_t read(const YAML::Node& n, const std::string& where,
                       const std::string& dotted) {
    const char* expected = "a non-negative integer";
    const std::string& s = plain_scalar(n, where, dotted, expected);
    if (!is_decimal_integer(s, false)) type_error(where, dotted, expected, n);
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
    if (errno == ERANGE)
      fail(dotted, " (", where, "): expected an integer below 2^64, got '", s, "'");
    return static_cast<uint64_t>(v);
  }
  static std::string write(uint64_t v) { return std::to_string(v); }
};

template <>
struct Codec<double> {
  static double read(const YAML::Node& n, const std::string& where,
                     const std::string& dotted) {
    const std::string& s = plain_scalar(n, where, dotted, "a number");
    char* end = nullptr;
    errno = 0;
    const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || s.front() == ' ')
      type_error(where, dotted, "a number", n);
    if (!std::isfinite(v) || errno == ERANGE)
      fail(dotted, " (", where, "): expected a finite number, got '", s, "'");
    return v;
  }
  static std::string write(double v) { return format_double(v); }
};

template <>
struct Codec<bool> {
  static bool read(const YAML::Node& n, const std::string& where, const std::string& dotted) {
    const char* expected = "true or false";
    const std::string& s = plain_scalar(n, where, dotted, expected);
    if (s == "true") return true;
    if (s == "false") return false;
    type_error(where, dotted, expected, n);
  }
  static std::string write(bool v) { return v ? "true" : "false"; }
};

template <>
struct Codec<std::string> {
  // Null ("key:" or "key: ~") is the empty string: optional paths are
  // naturally written that way.
  static std::string read(const YAML::Node& n, const std::string& where,
                          const std::string& dotted) {
    if (n.IsNull()) return "";
    if (!n.IsScalar()) type_error(where, dotted, "a string", n);
    return n.Scalar();
  }
  static std::string write(const std::string& v) { return quote(v); }
};

// A string or a list of strings; null is the empty list.
template <>
struct Codec<std::vector<std::string>> {
  static std::vector<std::string> read(const YAML::Node& n, const std::string& where,
                                       const std::string& dotted) {
    const char* expected = "a string or a list of strings";
    if (n.IsNull()) return {};
    if (n.IsScalar()) return {n.Scalar()};
    if (!n.IsSequence()) type_error(where, dotted, expected, n);
    std::vector<std::string> out;
    for (size_t i = 0; i < n.size(); ++i) {
      const YAML::Node& item = n[i];
      if (!item.IsScalar() || item.Scalar().empty())
        fail(dotted, "[", i, "] (", where, "): expected a non-empty string, got ",
             describe(item));
      out.push_back(item.Scalar());
    }
    return out;
  }
  static std::string write(const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + quote(v[i]);
    return out + "]";
  }
};

// A list of integers ([4, 4, 5]); null is the empty list.
template <>
struct Codec<std::vector<int>> {
  static std::vector<int> read(const YAML::Node& n, const std::string& where,
                               const std::string& dotted) {
    if (n.IsNull()) return {};
    if (!n.IsSequence()) type_error(where, dotted, "a list of integers", n);
    std::vector<int> out;
    for (size_t i = 0; i < n.size(); ++i)
      out.push_back(Codec<int>::read(n[i], where, detail::concat(dotted, "[", i, "]")));
    return out;
  }
  static std::string write(const std::vector<int>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
  }
};

// Enums: names come from gt::to_string, so there is one list of names.
template <typename E, size_t N>
struct EnumCodec {
  static E read(const YAML::Node& n, const std::string& where, const std::string& dotted,
                const E (&values)[N]) {
    std::string allowed;
    for (E v : values) allowed += (allowed.empty() ? "" : "|") + std::string(to_string(v));
    const std::string expected = "one of " + allowed;
    const std::string& s = plain_scalar(n, where, dotted, expected);
    for (E v : values)
      if (s == to_string(v)) return v;
    type_error(where, dotted, expected, n);
  }
};

constexpr LrSchedule kLrSchedules[] = {LrSchedule::constant, LrSchedule::cosine};
constexpr ModelArch kArchs[] = {ModelArch::gpt2, ModelArch::llama, ModelArch::mixtral};
constexpr DeviceKind kDevices[] = {DeviceKind::cpu, DeviceKind::cuda, DeviceKind::auto_};
constexpr ComputeDType kDTypes[] = {ComputeDType::fp32, ComputeDType::bf16};
constexpr AttentionKernel kAttentionKernels[] = {AttentionKernel::auto_,
                                                 AttentionKernel::tensor_cores,
                                                 AttentionKernel::simt, AttentionKernel::wgmma};
constexpr ParallelComm kComms[] = {ParallelComm::auto_, ParallelComm::nccl, ParallelComm::mpi};
constexpr Recompute kRecomputes[] = {Recompute::none, Recompute::mlp, Recompute::block};
constexpr PipeSchedule kPipeSchedules[] = {PipeSchedule::gpipe, PipeSchedule::one_f_one_b,
                                           PipeSchedule::interleaved_1f1b};
constexpr CpComm kCpComms[] = {CpComm::allgather, CpComm::ring};
constexpr Fp8Recipe kFp8Recipes[] = {Fp8Recipe::off, Fp8Recipe::tensorwise, Fp8Recipe::rowwise};
constexpr Fp8AllGather kFp8AllGathers[] = {Fp8AllGather::auto_, Fp8AllGather::on,
                                           Fp8AllGather::off};

template <>
struct Codec<ModelArch> {
  static ModelArch read(const YAML::Node& n, const std::string& w, const std::string& k) {
    return EnumCodec<ModelArch, 3>::read(n, w, k, kArchs);
  }
  static std::string write(ModelArch v) { return to_string(v); }
};

// model.rope_scaling: null, or a map of exactly its four keys (HF's
// rope_scaling for rope_type "llama3").
template <>
struct Codec<RopeScaling> {
  static RopeScaling read(const YAML::Node& n, const std::string& where,
                          const std::string& dotted) {
    RopeScaling r;
    if (n.IsNull()) return r;
    const char* expected =
        "null or a map {factor, low_freq_factor, high_freq_factor, original_max_position}";
    if (!n.IsMap()) type_error(where, dotted, expected, n);
    bool has_factor = false;
    for (const auto& kv : n) {
      const std::string key = kv.first.Scalar();
      const std::string sub = dotted + "." + key;
      if (key == "factor") {
        r.factor = Codec<double>::read(kv.second, where, sub);
        has_factor = true;
      } else if (key == "low_freq_factor") {
        r.low_freq_factor = Codec<double>::read(kv.second, where, sub);
      } else if (key == "high_freq_factor") {
        r.high_freq_factor = Codec<double>::read(kv.second, where, sub);
      } else if (key == "original_max_position") {
        r.original_max_position = Codec<int>::read(kv.second, where, sub);
      } else {
        fail(sub, " (", where, "): unknown key; expected ", expected);
      }
    }
    if (!has_factor) fail(dotted, " (", where, "): expected ", expected, ", got no factor");
    return r;
  }
  static std::string write(const RopeScaling& r) {
    if (!r.enabled()) return "null";
    return "{factor: " + Codec<double>::write(r.factor) +
           ", low_freq_factor: " + Codec<double>::write(r.low_freq_factor) +
           ", high_freq_factor: " + Codec<double>::write(r.high_freq_factor) +
           ", original_max_position: " + Codec<int>::write(r.original_max_position) + "}";
  }
};

template <>
struct Codec<LrSchedule> {
  static LrSchedule read(const YAML::Node& n, const std::string& w, const std::string& k) {
    return EnumCodec<LrSchedule, 2>::read(n, w, k, kLrSchedules);
  }
  static std::string write(LrSchedule v) { return to_string(v); }
};
template <>
struct Codec<DeviceKind> {
  static DeviceKind read(const YAML::Node& n, const std::string& w, const std::string& k) {
    return EnumCodec<DeviceKind, 3>::read(n, w, k, kDevices);
  }
  static std::string write(DeviceKind v) { return to_string(v); }
};
template <>
struct Codec<ComputeDType> {
  static ComputeDType read(const YAML::Node& n, const std::string& w, const std::string& k) {
    return EnumCodec<ComputeDType, 2>::read(n, w, k, kDTypes);
  }
  static std::string write(ComputeDType v) { return to_string(v); }
};
template <>
struct Codec<AttentionKernel> {
  static AttentionKernel read(const YAML::Node& n, const std::string& w, const std::string& k) {
    return EnumCodec<AttentionKernel, 4>::read(n, w, k, kAttentionKernels);
  }
  static std::string write(AttentionKernel v) { return to_string(v); }
};
template <>
struct Codec<ParallelComm> {
  static ParallelComm read(const YAML::Node& n, const std::string& w, const std::string& k) {
    return EnumCodec<ParallelComm, 3>::read(n, w, k, kComms);
  }
  static std::string write(ParallelComm v) { return to_string(v); }
};
template <>
struct Codec<Fp8AllGather> {
  static Fp8AllGather read(const YAML::Node& n, const std::string& w, const std::string& k) {
    return EnumCodec<Fp8AllGather, 3>::read(n, w, k, kFp8AllGathers);
  }
  static std::string write(Fp8AllGather v) { return to_string(v); }
};
template <>
struct Codec<PipeSchedule> {
  static PipeSchedule read(const YAML::Node& n, const std::string& w, const std::string& k) {
    return EnumCodec<PipeSchedule, 3>::read(n, w, k, kPipeSchedules);
  }
  static std::string write(PipeSchedule v) { return to_string(v); }
};
// parallel.cp_comm: Megatron's other modes are named as not supported
// rather than met with a bare "expected one of".
template <>
struct Codec<CpComm> {
  static CpComm read(const YAML::Node& n, const std::string& w, const std::string& k) {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (s == "a2a" || s == "a2a+p2p" || s == "alltoall")
        fail(k, " (", w, "): ", s,
             " (Megatron's all-to-all / Ulysses mode) is not supported; expected one of "
             "allgather|ring");
      if (s == "p2p")
        fail(k, " (", w, "): p2p is Megatron's name for the ring; write ring (expected one of "
             "allgather|ring)");
    }
    return EnumCodec<CpComm, 2>::read(n, w, k, kCpComms);
  }
  static std::string write(CpComm v) { return to_string(v); }
};
// runtime.fp8: torchao's other recipe names are met with ours.
template <>
struct Codec<Fp8Recipe> {
  static Fp8Recipe read(const YAML::Node& n, const std::string& w, const std::string& k) {
    if (n.IsScalar() && (n.Scalar() == "delayed" || n.Scalar() == "rowwise_with_gw_hp"))
      fail(k, " (", w, "): ", n.Scalar(),
           " scaling is not supported; expected one of off|tensorwise|rowwise (scales from the "
           "current amax)");
    return EnumCodec<Fp8Recipe, 3>::read(n, w, k, kFp8Recipes);
  }
  static std::string write(Fp8Recipe v) { return to_string(v); }
};
template <>
struct Codec<Recompute> {
  static Recompute read(const YAML::Node& n, const std::string& w, const std::string& k) {
    return EnumCodec<Recompute, 3>::read(n, w, k, kRecomputes);
  }
  static std::string write(Recompute v) { return to_string(v); }
};

// parallel.fsdp_stage is written as its number.
template <>
struct Codec<FsdpStage> {
  static FsdpStage read(const YAML::Node& n, const std::string& w, const std::string& k) {
    const int v = Codec<int>::read(n, w, k);
    if (const auto stage = fsdp_stage_numbered(v)) return *stage;
    fail(k, " (", w, "): expected one of 1|2|3, got ", v);
  }
  static std::string write(FsdpStage v) { return std::to_string(stage_number(v)); }
};

// One table entry per (section member, field member). The member pointers
// are template arguments so read/write stay plain function pointers.
template <auto SectionPtr, auto FieldPtr>
Field bind(const char* section, const char* key) {
  using T = std::decay_t<decltype((std::declval<Config&>().*SectionPtr).*FieldPtr)>;
  Field f;
  f.section = section;
  f.key = key;
  f.dotted = std::string(section) + "." + key;
  f.read = [](Config& c, const YAML::Node& value, const std::string& where,
              const std::string& dotted) {
    (c.*SectionPtr).*FieldPtr = Codec<T>::read(value, where, dotted);
  };
  f.write = [](const Config& c) { return Codec<T>::write((c.*SectionPtr).*FieldPtr); };
  return f;
}

// A key of the Llama family (llama and mixtral) only.
Field llama_only(Field f) {
  f.only = {ModelArch::llama, ModelArch::mixtral};
  return f;
}
// A key of the mixture-of-experts family only.
Field mixtral_only(Field f) {
  f.only = {ModelArch::mixtral};
  return f;
}

std::vector<Field> make_fields() {
  using C = Config;
  return {
      bind<&C::model, &ModelConfig::arch>("model", "arch"),
      bind<&C::model, &ModelConfig::n_layer>("model", "n_layer"),
      bind<&C::model, &ModelConfig::n_head>("model", "n_head"),
      bind<&C::model, &ModelConfig::n_embd>("model", "n_embd"),
      bind<&C::model, &ModelConfig::vocab_size>("model", "vocab_size"),
      bind<&C::model, &ModelConfig::block_size>("model", "block_size"),
      bind<&C::model, &ModelConfig::init_from>("model", "init_from"),
      llama_only(bind<&C::model, &ModelConfig::n_kv_head>("model", "n_kv_head")),
      llama_only(bind<&C::model, &ModelConfig::ffn_hidden>("model", "ffn_hidden")),
      llama_only(bind<&C::model, &ModelConfig::multiple_of>("model", "multiple_of")),
      llama_only(bind<&C::model, &ModelConfig::ffn_dim_multiplier>("model", "ffn_dim_multiplier")),
      llama_only(bind<&C::model, &ModelConfig::rope_theta>("model", "rope_theta")),
      llama_only(bind<&C::model, &ModelConfig::rope_scaling>("model", "rope_scaling")),
      llama_only(bind<&C::model, &ModelConfig::norm_eps>("model", "norm_eps")),
      llama_only(bind<&C::model, &ModelConfig::tie_embeddings>("model", "tie_embeddings")),
      mixtral_only(bind<&C::model, &ModelConfig::n_experts>("model", "n_experts")),
      mixtral_only(bind<&C::model, &ModelConfig::experts_per_token>("model", "experts_per_token")),
      mixtral_only(
          bind<&C::model, &ModelConfig::router_aux_loss_coef>("model", "router_aux_loss_coef")),
      mixtral_only(
          bind<&C::model, &ModelConfig::router_z_loss_coef>("model", "router_z_loss_coef")),
      mixtral_only(bind<&C::model, &ModelConfig::router_bias_update_rate>(
          "model", "router_bias_update_rate")),
      mixtral_only(bind<&C::model, &ModelConfig::capacity_factor>("model", "capacity_factor")),

      bind<&C::data, &DataConfig::train>("data", "train"),
      bind<&C::data, &DataConfig::val>("data", "val"),
      bind<&C::data, &DataConfig::shuffle>("data", "shuffle"),

      bind<&C::train, &TrainConfig::seq_len>("train", "seq_len"),
      bind<&C::train, &TrainConfig::micro_batch>("train", "micro_batch"),
      bind<&C::train, &TrainConfig::global_batch>("train", "global_batch"),
      bind<&C::train, &TrainConfig::steps>("train", "steps"),
      bind<&C::train, &TrainConfig::lr>("train", "lr"),
      bind<&C::train, &TrainConfig::lr_schedule>("train", "lr_schedule"),
      bind<&C::train, &TrainConfig::warmup_steps>("train", "warmup_steps"),
      bind<&C::train, &TrainConfig::min_lr>("train", "min_lr"),
      bind<&C::train, &TrainConfig::weight_decay>("train", "weight_decay"),
      bind<&C::train, &TrainConfig::beta1>("train", "beta1"),
      bind<&C::train, &TrainConfig::beta2>("train", "beta2"),
      bind<&C::train, &TrainConfig::eps>("train", "eps"),
      bind<&C::train, &TrainConfig::grad_clip>("train", "grad_clip"),
      bind<&C::train, &TrainConfig::seed>("train", "seed"),
      bind<&C::train, &TrainConfig::eval_every>("train", "eval_every"),
      bind<&C::train, &TrainConfig::eval_batches>("train", "eval_batches"),
      bind<&C::train, &TrainConfig::max_skipped>("train", "max_skipped"),
      bind<&C::train, &TrainConfig::recompute>("train", "recompute"),

      bind<&C::runtime, &RuntimeConfig::device>("runtime", "device"),
      bind<&C::runtime, &RuntimeConfig::dtype>("runtime", "dtype"),
      bind<&C::runtime, &RuntimeConfig::threads>("runtime", "threads"),
      bind<&C::runtime, &RuntimeConfig::collective_timeout_s>("runtime", "collective_timeout_s"),
      bind<&C::runtime, &RuntimeConfig::attention>("runtime", "attention"),
      bind<&C::runtime, &RuntimeConfig::fp8>("runtime", "fp8"),
      bind<&C::runtime, &RuntimeConfig::fp8_fast_accum>("runtime", "fp8_fast_accum"),
      bind<&C::runtime, &RuntimeConfig::fp8_min_dim>("runtime", "fp8_min_dim"),
      bind<&C::runtime, &RuntimeConfig::fp8_check_amax>("runtime", "fp8_check_amax"),

      bind<&C::parallel, &ParallelConfig::dp>("parallel", "dp"),
      bind<&C::parallel, &ParallelConfig::fsdp>("parallel", "fsdp"),
      bind<&C::parallel, &ParallelConfig::tp>("parallel", "tp"),
      bind<&C::parallel, &ParallelConfig::fsdp_stage>("parallel", "fsdp_stage"),
      bind<&C::parallel, &ParallelConfig::tp_overlap>("parallel", "tp_overlap"),
      bind<&C::parallel, &ParallelConfig::bucket_mb>("parallel", "bucket_mb"),
      bind<&C::parallel, &ParallelConfig::reduce_dtype>("parallel", "reduce_dtype"),
      bind<&C::parallel, &ParallelConfig::comm>("parallel", "comm"),
      bind<&C::parallel, &ParallelConfig::pp>("parallel", "pp"),
      bind<&C::parallel, &ParallelConfig::pp_schedule>("parallel", "pp_schedule"),
      bind<&C::parallel, &ParallelConfig::pp_virtual_stages>("parallel", "pp_virtual_stages"),
      bind<&C::parallel, &ParallelConfig::pp_layers>("parallel", "pp_layers"),
      bind<&C::parallel, &ParallelConfig::cp>("parallel", "cp"),
      bind<&C::parallel, &ParallelConfig::cp_comm>("parallel", "cp_comm"),
      bind<&C::parallel, &ParallelConfig::cp_load_balance>("parallel", "cp_load_balance"),
      bind<&C::parallel, &ParallelConfig::ep>("parallel", "ep"),
      bind<&C::parallel, &ParallelConfig::fp8_allgather>("parallel", "fp8_allgather"),

      bind<&C::log, &LogConfig::dir>("log", "dir"),
      bind<&C::log, &LogConfig::every>("log", "every"),
      bind<&C::log, &LogConfig::tensorboard>("log", "tensorboard"),

      bind<&C::checkpoint, &CheckpointConfig::dir>("checkpoint", "dir"),
      bind<&C::checkpoint, &CheckpointConfig::every>("checkpoint", "every"),
      bind<&C::checkpoint, &CheckpointConfig::keep>("checkpoint", "keep"),
      bind<&C::checkpoint, &CheckpointConfig::final>("checkpoint", "final"),
      bind<&C::checkpoint, &CheckpointConfig::resume>("checkpoint", "resume"),

      bind<&C::profile, &ProfileConfig::every>("profile", "every"),
      bind<&C::profile, &ProfileConfig::steps>("profile", "steps"),
      bind<&C::profile, &ProfileConfig::report>("profile", "report"),
      bind<&C::profile, &ProfileConfig::trace>("profile", "trace"),
      bind<&C::profile, &ProfileConfig::hardware>("profile", "hardware"),
      bind<&C::profile, &ProfileConfig::peaks>("profile", "peaks"),
  };
}

}  // namespace

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Scalar:
      if (n.Tag() == "!") return "the quoted string '" + n.Scalar() + "'";
      return "'" + n.Scalar() + "'";
    default: return "an undefined value";
  }
}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = make_fields();
  return table;
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Field& f : fields())
      if (out.empty() || out.back() != f.section) out.push_back(f.section);
    return out;
  }();
  return names;
}

const Field* find_field(const std::string& section, const std::string& key) {
  for (const Field& f : fields())
    if (f.section == section && f.key == key) return &f;
  return nullptr;
}

bool is_section(const std::string& name) {
  for (const std::string& s : sections())
    if (s == name) return true;
  return false;
}

}  // namespace gt::config_detail
