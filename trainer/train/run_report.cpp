#include "trainer/train/run_report.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "trainer/io/human_bytes.hpp"
#include "trainer/parallelize/pipeline_schedule.hpp"
#include "trainer/parallelize/pipeline_stages.hpp"
#include "trainer/profile/model_flops.hpp"

namespace gt {

namespace {
void log_memory(const MemoryFigures& m, const ParallelConfig& p) {
  // Under context parallelism ZeRO shards over fsdp x cp (data_parallel_groups.hpp).
  const std::string shards = p.cp > 1 ? detail::concat("fsdp x cp=", p.fsdp * p.cp)
                                      : detail::concat("fsdp=", p.fsdp);
  auto line = [](const char* what, int64_t have, int64_t full) {
    spdlog::info("  {:<10} {:>12} ({:.2f}x of {} unsharded)", what,
                 human_bytes(static_cast<double>(have)),
                 full ? static_cast<double>(have) / static_cast<double>(full) : 0.0,
                 human_bytes(static_cast<double>(full)));
  };
  if (p.fsdp > 1)
    spdlog::info("memory per rank ({}, ZeRO stage {}; unsharded = this tp shard on one rank):",
                 shards, stage_number(p.fsdp_stage));
  else
    spdlog::info("memory per rank (no FSDP; unsharded = this tp shard on one rank):");
  line("params", m.params, m.params_unsharded);
  line("grads", m.grads, m.grads_unsharded);
  line("optimizer", m.optimizer, m.optimizer_unsharded);
  line("total", m.params + m.grads + m.optimizer,
       m.params_unsharded + m.grads_unsharded + m.optimizer_unsharded);
}

}  // namespace

std::string mfu_text(const nlohmann::json& rec) {
  auto number = [&](const char* key) {
    const auto it = rec.find(key);
    return it != rec.end() && it->is_number() ? it->get<double>() : -1.0;
  };
  const bool sheet = number("mfu_datasheet") >= 0;
  const double mfu = sheet ? number("mfu_datasheet") : number("mfu");
  const double peak = number(sheet ? "mfu_datasheet_peak_tflops" : "mfu_peak_tflops");
  if (mfu < 0 || peak <= 0) return "";
  const double llmc = number(sheet ? "mfu_llmc_datasheet" : "mfu_llmc");
  char buf[160];
  std::snprintf(buf, sizeof buf, " | MFU %.1f%% (%s, %s %.4g TFLOP/s", 100 * mfu,
                rec.value("mfu_formula", std::string("?")).c_str(),
                sheet ? "datasheet" : "measured", peak);
  std::string out = buf;
  if (llmc >= 0) {
    std::snprintf(buf, sizeof buf, "; %s %.1f%%", mfu_formula_name(MfuFormula::llmc), 100 * llmc);
    out += buf;
  }
  return out + ")";
}

std::string human_count(double x) {
  char buf[32];
  if (x >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", x / 1e9);
  else if (x >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

nlohmann::json comm_bytes(const DeviceMesh& mesh) {
  nlohmann::json j;
  // Each communicator once, under its own name: dp_cp and fsdp_cp only where
  // cp > 1 gives them ranks of their own (at cp = 1 their bytes are dp's and
  // fsdp's).
  for (MeshAxis a : mesh_split_axes(mesh.dims())) j[mesh_axis_name(a)] = mesh.axis(a).bytes_sent();
  j["world"] = mesh.world().bytes_sent();
  return j;
}

void reset_comm_bytes(const DeviceMesh& mesh) {
  for (MeshAxis a : mesh_split_axes(mesh.dims())) mesh.axis(a).reset_bytes();
  mesh.world().reset_bytes();
}

namespace {

// The pipeline's split, schedule and the bubble its formula gives.
void log_pipeline(const Run& run, const Config& cfg) {
  const ParallelConfig& p = cfg.parallel;
  const std::vector<int> split =
      pipeline_layer_split(cfg.model, p.pp, p.pp_virtual_stages, p.pp_layers);
  std::string blocks;
  for (size_t i = 0; i < split.size(); ++i) blocks += (i ? ", " : "") + std::to_string(split[i]);
  const PipeScheduleSpec spec{p.pp_schedule, p.pp, cfg.grad_accum_steps(), p.pp_virtual_stages};
  spdlog::info(
      "pipeline: {} stages x {} chunk(s), blocks per chunk [{}], schedule {}, {} micro-batches "
      "per step; bubble {:.1f}% by the formula (metrics.jsonl bubble_fraction: measured); "
      "{} of activations on rank 0",
      p.pp, p.pp_virtual_stages, blocks, to_string(p.pp_schedule), spec.micro_batches,
      100.0 * pipeline_bubble_fraction(spec),
      human_bytes(static_cast<double>(run.runner->activation_bytes())));
}

}  // namespace

void log_run_banner(const Run& run, const Config& cfg) {
  const auto& tc = cfg.train;
  const int accum = cfg.grad_accum_steps();
  const int B = tc.micro_batch, T = tc.seq_len, D = run.dims.data_parallel();
  const int64_t tokens_per_step = static_cast<int64_t>(tc.global_batch) * T;
  const DeviceMesh& mesh = *run.mesh;
  const ShardedParameters& params = *run.params;
  const std::string ckpt_root = cfg.checkpoint_dir();
  if (!run.resume_dir.empty())
    spdlog::info("resumed from {} at step {}", run.resume_dir, run.start_step);
  else if (!cfg.model.init_from.empty())
    spdlog::info("initial weights from {}", cfg.model.init_from);
  const ModelConfig& mc = cfg.model;
  // Llama: the key/value heads of grouped-query attention and the MLP width too.
  const std::string mlp = mc.moe() ? detail::concat(mc.n_experts, " experts (top ",
                                                    mc.experts_per_token, ") of MLP ")
                                   : std::string("MLP ");
  const std::string heads = mc.llama_family()
                                ? detail::concat(mc.n_head, " heads over ", mc.kv_heads(),
                                                 " kv heads, ", mlp, mc.ffn_width())
                                : detail::concat(mc.n_head, " heads");
  // The padding rows (128 x tp multiple) are the LM head's work, not the model's.
  const std::string vocab =
      mc.padded_vocab_size() == mc.vocab_size
          ? std::to_string(mc.vocab_size)
          : detail::concat(mc.vocab_size, " (", mc.padded_vocab_size(), " rows padded for tp=",
                           mc.vocab_pad_tp, ")");
  spdlog::info("model: {} {} parameters ({} layers, {}, {} embd, vocab {}, block {})",
               to_string(mc.arch),
               human_count(static_cast<double>(ParameterLayout(mc).global_numel())), mc.n_layer,
               heads, mc.n_embd, vocab, mc.block_size);
  if (run.backend.device == Device::cpu && cfg.runtime.dtype == ComputeDType::bf16)
    spdlog::info(
        "runtime.dtype=bf16 on the CPU backend: the bf16 model's function (bf16 "
        "storage, fp32 math), for checking layouts and GPUs against; not faster than "
        "fp32 here");
  const bool bf16_reductions =
      cfg.parallel.reduce_dtype == ComputeDType::bf16 && run.dims.dp * run.dims.fsdp > 1;
  spdlog::info(
      "layout: {} on {}{}{}{}", run.dims.str(), run.backend.describe,
      run.dims.world_size() == 1 ? ""
      : run.backend.comm.comm == ParallelComm::nccl
          ? ", comm nccl"
          : (run.backend.device == Device::cpu ? ", comm mpi" : ", comm mpi (staged through host)"),
      run.dims.tp > 1 ? (cfg.parallel.tp_overlap ? ", tp collective matmuls overlapped"
                                                 : ", tp collectives not overlapped")
                      : "",
      bf16_reductions ? ", gradients summed in bf16 (parallel.reduce_dtype)" : "");
  if (run.dims.world_size() > 1) spdlog::info("{}", mesh.describe());
  if (run.dims.pp > 1) log_pipeline(run, cfg);
  if (run.dims.cp > 1) {
    const ParallelConfig& p = cfg.parallel;
    const SequenceChunks seq(T, p.cp, p.cp_load_balance);
    spdlog::info(
        "context parallel: cp={}, keys and values by {}, each rank {} of every {}-token "
        "sequence ({} chunks of {}{}); gradients summed over {}",
        p.cp, p.cp_comm == CpComm::ring ? "ring" : "all-gather", seq.local_len(), T,
        seq.cp() * seq.chunks_per_rank(), seq.chunk_len(),
        p.cp_load_balance ? ", rank r holding r and 2cp-1-r" : ", rank r holding r",
        p.fsdp > 1 ? "fsdp x cp (ZeRO shards)" : "dp x cp");
  }
  log_memory(params.memory(), cfg.parallel);
  spdlog::info("data: {} train tokens in {} shard(s), {} windows of {}; val: {}",
               human_count(static_cast<double>(run.train_data->num_tokens())),
               run.train_data->num_shards(), run.train_data->num_windows(), T,
               run.val_data
                   ? human_count(static_cast<double>(run.val_data->num_tokens())) + " tokens"
                   : std::string("off"));
  spdlog::info(
      "batch: {} rows x {} tokens = {} tokens/step ({} micro-batches of {} on each "
      "of {} data-parallel ranks)",
      tc.global_batch, T, tokens_per_step, accum, B, D);
  spdlog::info("logging to {}/metrics.jsonl, checkpoints in {}", cfg.log.dir, ckpt_root);
}

}  // namespace gt
