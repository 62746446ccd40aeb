// Typed, validated run configuration. YAML (configs/*.yaml) plus
// `key.sub=value` command-line overrides are merged into one YAML tree, then
// converted here into these structs. Conversion rejects unknown keys
// (suggesting the closest valid one), wrong types and impossible values with a
// message naming the key, the file and what was expected. Nothing is allocated
// or written before a Config has been built successfully.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gt {

enum class LrSchedule { constant, cosine };
// model.arch: the model family. gpt2: LayerNorm, learned positions, GELU MLP,
// tied head. llama: RMSNorm, rotary positions, SwiGLU MLP, grouped-query
// attention, an untied head unless model.tie_embeddings. mixtral: llama's
// attention, norms and positions with each block's MLP a sparse mixture of
// SwiGLU experts chosen per token by a router (HF Mixtral).
enum class ModelArch { gpt2, llama, mixtral };
enum class DeviceKind { cpu, cuda, auto_ };
enum class ComputeDType { fp32, bf16 };
// runtime.attention: which CUDA attention kernels. auto = the tensor-core
// (FlashAttention-2 style) ones in bf16 when the head size fits, the SIMT
// (fp32 math) ones otherwise; tensor_cores insists (an error where they do
// not apply); simt always takes the SIMT ones; wgmma runs the forward on the
// sm_90 kernels (TMA + warpgroup MMA, head sizes 64 and 128, an H100/H200
// only) and the backward on the tensor-core ones. auto does not pick wgmma
// until its tests have passed on a GPU. No effect on the CPU backend.
enum class AttentionKernel { auto_, tensor_cores, simt, wgmma };
// parallel.comm: how collectives move data. auto = nccl on CUDA, mpi otherwise.
enum class ParallelComm { auto_, nccl, mpi };
// Activation recomputation (docs/TRAINING.md "Activation recomputation"): which forward
// activations a block keeps for backward and which it recomputes there.
//   none   keep everything;
//   mlp    drop ln_2's output and statistics, c_fc's output and its GELU;
//   block  keep only each block's input and recompute the whole block.
enum class Recompute { none, mlp, block };
// parallel.pp_schedule: how a pipeline's micro-batches flow through its
// stages (trainer/parallelize/pipeline_schedule.hpp).
enum class PipeSchedule { gpipe, one_f_one_b, interleaved_1f1b };
// parallel.cp_comm: how context-parallel ranks share keys and values
// (trainer/parallelize/context_parallel.hpp). allgather: each layer gathers
// them once (forward) and reduce-scatters their gradients (backward); ring:
// key/value blocks pass round the cp ranks point to point, each hop
// overlapped with attention on the block at hand, and their gradients travel
// back the same way. (Megatron's a2a and a2a+p2p modes are not supported.)
enum class CpComm { allgather, ring };
// runtime.fp8: the linear layers' GEMMs in fp8 (docs/TRAINING.md "fp8
// GEMMs"; trainer/parallelize/fp8_linear.hpp). off; tensorwise: one scale
// per tensor, e4m3 activations and weights, e5m2 gradients; rowwise: one
// power-of-two scale per row of each GEMM operand, e4m3 throughout
// (torchao's float8 recipes).
enum class Fp8Recipe { off, tensorwise, rowwise };
// parallel.fp8_allgather: under runtime.fp8=tensorwise and ZeRO-3 (fsdp >
// 1, fsdp_stage 3), the blocks' fp8 weights are quantised on their shards
// and all-gathered as fp8 codes (trainer/sharding/fp8_gathered_weights.hpp).
// auto: wherever that applies; true: required (an error where it cannot
// apply); false: never (weights gathered in fp32 and quantised after).
enum class Fp8AllGather { auto_, on, off };

// parallel.fsdp_stage: what FSDP shards (ZeRO's stages; used at fsdp > 1).
//   optimizer   (1) AdamW state: gradients reduce-scattered once per step
//   gradients   (2) and gradients: reduce-scattered every micro-batch
//   parameters  (3) and parameters: each unit all-gathered before use
enum class FsdpStage { optimizer = 1, gradients = 2, parameters = 3 };
// 1, 2 or 3: the stage's number, as written in configs and logs.
inline int stage_number(FsdpStage s) { return static_cast<int>(s); }
// The stage numbered n, or nothing when n is not 1, 2 or 3: the one rule the
// config's codec, the planner's layouts and fsdp_stage_of ask.
std::optional<FsdpStage> fsdp_stage_numbered(int n);
// The same, throwing gt::Error naming parallel.fsdp_stage when there is none.
FsdpStage fsdp_stage_of(int n);

// The vocabulary is stored padded to a multiple of this many rows times the
// tp degree (wte, the LM head's logits), Megatron's
// make_vocab_size_divisible_by x tp: aligned GEMM shapes for the LM head
// (GPT-2's 50257 -> 50304 at tp 1) and, at any tp, a row count tp divides
// into aligned shards, so every tp that divides the heads splits the
// vocabulary too (a 256-token vocabulary at tp 3 pads to 384).
constexpr int kVocabPadMultiple = 128;

// model.rope_scaling (Llama 3.1's frequency-dependent RoPE scaling): null
// (factor 0) leaves the frequencies as rope_theta gives them.
struct RopeScaling {
  double factor = 0;  // 0: no scaling
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_max_position = 8192;
  bool enabled() const { return factor > 0; }
};

struct ModelConfig {
  ModelArch arch = ModelArch::gpt2;
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int vocab_size = 256;  // the true vocabulary: tokens, exports and the loss use this
  int block_size = 256;
  std::string init_from;  // optional safetensors path (HF GPT-2 names)
  // Llama only (model.arch=llama; an error to set them on gpt2):
  int n_kv_head = 0;              // key/value heads (grouped-query attention); 0 = n_head
  int ffn_hidden = 0;             // the MLP width; 0 = Llama's rule (ffn_width())
  int multiple_of = 256;          // the rule rounds the width up to a multiple of this
  double ffn_dim_multiplier = 0;  // the rule's multiplier; 0 = none
  double rope_theta = 500000.0;   // RoPE base
  RopeScaling rope_scaling;       // Llama 3.1 scaling; factor 0 = none
  double norm_eps = 1e-5;         // RMSNorm epsilon
  bool tie_embeddings = false;    // the LM head shares the embedding (always on gpt2)
  // Mixtral only (model.arch=mixtral): the sparse MLP. ffn_hidden is each
  // expert's width.
  int n_experts = 8;                    // experts per block
  int experts_per_token = 2;            // k: experts each token is routed to
  double router_aux_loss_coef = 0.001;  // load-balancing loss weight (HF's); 0 = off
  double router_z_loss_coef = 0;        // router z-loss weight (ST-MoE); 0 = off
  // DeepSeek-V3's aux-loss-free balancing: a per-expert bias added to the
  // scores for selection only, moved by this much per step against the
  // sign of its load error; 0 = off.
  double router_bias_update_rate = 0;
  // Tokens an expert takes per micro-batch: at most ceil(capacity_factor *
  // k * N / E) of its N tokens, the rest dropped; 0 = dropless.
  double capacity_factor = 0;

  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // Llama's blocks (RMSNorm, RoPE, grouped-query attention): llama and mixtral.
  bool llama_family() const { return arch == ModelArch::llama || arch == ModelArch::mixtral; }
  // Each block's MLP is a mixture of experts.
  bool moe() const { return arch == ModelArch::mixtral; }
  int head_size() const { return n_embd / n_head; }
  bool tied_embeddings() const { return arch == ModelArch::gpt2 || tie_embeddings; }
  // The MLP's hidden width: gpt2 4C; llama ffn_hidden, or Meta's rule from
  // 4C: two thirds of it, times ffn_dim_multiplier, rounded up to
  // multiple_of (Llama 3 8B: 4096 -> 14336).
  int ffn_width() const;
  // Not a config key: the tp degree the vocabulary is padded for, set from
  // parallel.tp when a config is read (the planner sets each layout's). The
  // padding depends on it, the model's identity does not: checkpoints and
  // exports hold the vocab_size real rows only, so a run resumes at any tp.
  int vocab_pad_tp = 1;

  // vocab_size rounded up to kVocabPadMultiple x vocab_pad_tp: the rows of
  // wte. The padding rows are zero, masked in the loss (so they stay zero),
  // never saved nor exported.
  int padded_vocab_size() const {
    const int multiple = kVocabPadMultiple * vocab_pad_tp;
    return (vocab_size + multiple - 1) / multiple * multiple;
  }
};

// Tensor parallelism splits heads, channels and the padded vocabulary rows
// evenly over the tp ranks. The first of them `tp` does not divide, as what
// it is ("model.n_head") and its value, or nothing: the one place that fact
// is checked (config validation, the planner's layouts, ParameterLayout).
// The vocabulary is never the one: it is padded for the tp it runs at
// (padded_for_tp).
struct TpSplitProblem {
  std::string what;
  int64_t value = 0;
};
std::optional<TpSplitProblem> tp_split_problem(const ModelConfig& m, int tp);

// m with its vocabulary padded for `tp` ranks (vocab_pad_tp = tp).
ModelConfig padded_for_tp(ModelConfig m, int tp);

struct DataConfig {
  std::vector<std::string> train;  // paths or globs of llm.c token shards
  std::vector<std::string> val;    // may be empty: no evaluation
  bool shuffle = false;
};

struct TrainConfig {
  int seq_len = 128;
  int micro_batch = 8;
  int global_batch = 8;  // rows (sequences) per optimizer step
  int steps = 100;
  double lr = 1e-3;
  LrSchedule lr_schedule = LrSchedule::cosine;
  int warmup_steps = 10;
  double min_lr = 1e-4;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  uint64_t seed = 1337;
  int eval_every = 50;     // 0 disables evaluation
  int eval_batches = 4;    // batches of train.global_batch rows of data.val per evaluation
  int max_skipped = 5;     // consecutive non-finite steps before the run stops
  Recompute recompute = Recompute::none;  // activation recomputation in backward
};

struct RuntimeConfig {
  DeviceKind device = DeviceKind::cpu;
  ComputeDType dtype = ComputeDType::fp32;
  int threads = 0;  // CPU threads for BLAS/OpenMP; 0 = this rank's share of the host's cores
  double collective_timeout_s = 300.0;  // a collective not done by then aborts the job; 0 = never
  AttentionKernel attention = AttentionKernel::auto_;
  Fp8Recipe fp8 = Fp8Recipe::off;  // needs dtype bf16
  // cuBLASLt's fast accumulation on the forward GEMM only (torchao's
  // default); the backward GEMMs accumulate in fp32 throughout.
  bool fp8_fast_accum = true;
  // A linear layer whose weight has fewer than this many input or output
  // features keeps bf16 GEMMs (0: every linear layer in fp8).
  int fp8_min_dim = 0;
  // A debugging check: every amax an fp8 operand's producer took in its own
  // pass is taken again by a pass of its own and compared, bit for bit; a
  // difference stops the run naming the layer. Slower; off by default.
  bool fp8_check_amax = false;
};

struct ParallelConfig {
  int dp = 1;
  int fsdp = 1;
  int tp = 1;
  FsdpStage fsdp_stage = FsdpStage::parameters;  // 1|2|3
  bool tp_overlap = true;  // ring-pipelined collective matmuls (false: plain collective + matmul)
  double bucket_mb = 25.0;  // data-parallel gradient all-reduce bucket size
  // fp32|bf16: the precision gradients are summed in over dp and fsdp (bf16:
  // half the bytes; each contribution and partial sum rounded to bf16).
  ComputeDType reduce_dtype = ComputeDType::fp32;
  // auto|nccl|mpi. On CUDA, mpi stages device buffers through pinned host
  // memory (several ranks may then share one GPU, which NCCL refuses).
  ParallelComm comm = ParallelComm::auto_;
  // Pipeline parallelism: pp stages, outermost in the mesh (world = pp x dp
  // x fsdp x tp), each running pp_virtual_stages chunks of consecutive
  // blocks (interleaved_1f1b), pp_layers blocks per chunk in stage order
  // (empty: the balanced split of pipeline_layer_split, the LM head
  // counted as the blocks it costs).
  int pp = 1;
  PipeSchedule pp_schedule = PipeSchedule::one_f_one_b;
  int pp_virtual_stages = 1;
  std::vector<int> pp_layers;
  // Context parallelism: each sequence cut over cp ranks (world = pp x dp x
  // fsdp x cp x tp), which hold its chunks: with cp_load_balance each row in
  // 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r (equal causal
  // work), else cp chunks, rank r holding chunk r.
  int cp = 1;
  CpComm cp_comm = CpComm::allgather;
  bool cp_load_balance = true;
  // Expert parallelism (model.arch=mixtral): each block's experts sharded
  // over groups of ep consecutive data ranks (dp x fsdp x cp), folded out of
  // them rather than a factor of the world size.
  int ep = 1;
  Fp8AllGather fp8_allgather = Fp8AllGather::auto_;
};

struct LogConfig {
  std::string dir = "runs/default";
  int every = 1;  // console line every N steps (metrics.jsonl gets every step)
  // Rank 0 also writes metrics.jsonl's scalars as a TensorBoard event file
  // in dir (trainer/io/tensorboard_writer.hpp).
  bool tensorboard = false;
};

struct CheckpointConfig {
  std::string dir;       // empty = "<log.dir>/checkpoints"
  int every = 0;         // 0 = only at the end of the run
  int keep = 3;          // newest checkpoints kept
  // false: no checkpoint at the end of the run, hence no model.safetensors
  // export either (benchmarks: 124M's is 1.5 GB that no one reads).
  bool final = true;
  std::string resume = "none";  // none | auto | <path to a checkpoint directory>
};

// Profiling (trainer/profile, docs/PERFORMANCE.md "Profiling"). every = 0: off.
struct ProfileConfig {
  int every = 0;         // profile the last `steps` steps of every `every` steps; 0 = never
  int steps = 1;         // consecutive profiled steps per period (1 <= steps <= every)
  bool report = true;    // roofline table on the console and <log.dir>/roofline.json at the end
  bool trace = false;    // <log.dir>/trace_rank{r}.json (Chrome trace events) per rank
  std::string hardware;  // configs/hardware/<name>.yaml datasheet peaks; "" = none
  std::string peaks;     // `trainer bench --out` JSON; "" = quick bench at start when profiling
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  RuntimeConfig runtime;
  ParallelConfig parallel;
  LogConfig log;
  CheckpointConfig checkpoint;
  ProfileConfig profile;

  // Where the config came from, for messages ("configs/x.yaml").
  std::string source;

  // Gradient accumulation steps = global_batch / (micro_batch * data-parallel size).
  int grad_accum_steps() const;
  int data_parallel_size() const { return parallel.dp * parallel.fsdp; }
  std::string checkpoint_dir() const;
};

// Loads `path`, applies `overrides` ("a.b=value", in order), validates.
// Throws gt::Error naming the key (and file/line for YAML syntax errors).
Config load_config(const std::string& path, const std::vector<std::string>& overrides);

// Same from YAML text (tests use this); `source` names it in messages.
Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides);

// Canonical YAML of the resolved config (printed at start, saved as
// <log.dir>/config.yaml); parse_config(to_yaml(c)) == c.
std::string to_yaml(const Config& c);

// Fields that define the model's shape, for checkpoint compatibility checks.
std::string model_signature(const ModelConfig& m);

const char* to_string(LrSchedule s);
const char* to_string(ModelArch a);
const char* to_string(DeviceKind d);
const char* to_string(ComputeDType d);
const char* to_string(AttentionKernel a);
const char* to_string(ParallelComm c);
const char* to_string(PipeSchedule s);  // "gpipe", "1f1b", "interleaved_1f1b"
const char* to_string(CpComm c);        // "allgather", "ring"
const char* to_string(Fp8Recipe r);     // "off", "tensorwise", "rowwise"
const char* to_string(Fp8AllGather g);  // "auto", "true", "false"
// Whether this config gathers the blocks' fp8 weights in fp8 (see
// Fp8AllGather).
bool fp8_allgather_applies(const Config& c);

// parallel.comm is resolved per run by choose_comm (trainer/runtime/comm_choice.hpp).

// runtime.attention resolved for a CUDA run: whether attention runs on the
// tensor-core kernels (bf16, a head size they take; see AttentionKernel).
// validate() has already rejected tensor_cores where they cannot run.
bool uses_tensor_core_attention(const Config& c);
// Whether the forward runs on the sm_90 (wgmma) kernels: runtime.attention
// wgmma, which validate() has checked for bf16 and the head size (the
// device's compute capability is checked when the backend is built).
bool uses_wgmma_attention(const Config& c);
const char* to_string(Recompute r);

}  // namespace gt
