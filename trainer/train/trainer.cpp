#include "trainer/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/parallel_dims.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/data/data_loader.hpp"
#include "trainer/io/safetensors.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/hf_weights.hpp"
#include "trainer/train/adamw.hpp"
#include "trainer/train/lr_schedule.hpp"
#include "trainer/train/metrics_log.hpp"
#include "trainer/train/run_environment.hpp"

namespace gt {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string human_count(double x) {
  char buf[32];
  if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

// Checkpoint tensors: parameters and both AdamW moments, by parameter name,
// in the unsharded layout.
std::vector<NamedTensor> checkpoint_tensors(const ParameterLayout& layout, float* params,
                                            float* m, float* v) {
  std::vector<NamedTensor> out;
  for (const auto& s : layout.specs()) {
    out.push_back({"param." + s.name, s.shape, params + s.offset});
    out.push_back({"adam_m." + s.name, s.shape, m + s.offset});
    out.push_back({"adam_v." + s.name, s.shape, v + s.offset});
  }
  return out;
}

// Mean loss over `eval_batches` micro-batches of the validation stream from
// its start, so every evaluation sees the same tokens.
double evaluate(GPT& model, DataLoader& val, const Config& cfg, std::vector<int32_t>& inputs,
                std::vector<int32_t>& targets) {
  const int B = cfg.train.micro_batch, T = cfg.train.seq_len;
  double sum = 0.0;
  for (int k = 0; k < cfg.train.eval_batches; ++k) {
    val.fill(static_cast<int64_t>(k) * B, B, inputs.data(), targets.data());
    sum += model.forward(inputs.data(), targets.data(), B, T, 0.f);
  }
  return sum / cfg.train.eval_batches;
}

}  // namespace

TrainSummary run_training(const Config& cfg) {
  const auto& tc = cfg.train;
  const RunEnvironment env = detect_run_environment();
  if (env.world_size > 1)
    fail("launched with ", env.world_size, " ranks (", env.launcher,
         "), but multi-rank layouts are not implemented in this build yet; run one process");
  const ParallelDims dims = ParallelDims::validated(cfg.parallel.dp, cfg.parallel.fsdp,
                                                    cfg.parallel.tp, env.world_size,
                                                    cfg.model.n_head, cfg.model.n_embd);
  if (cfg.runtime.device == DeviceKind::cuda)
    fail("runtime.device=cuda: the CUDA training backend is not implemented yet; use "
         "runtime.device=cpu (or auto)");

  // ---- Validate every input before creating any output. -------------------
  std::unique_ptr<Ops> ops = make_cpu_ops(cfg.runtime.threads);
  DataLoader train_data(cfg.data.train, "data.train", cfg.model.vocab_size, tc.seq_len,
                        cfg.data.shuffle, tc.seed);
  std::unique_ptr<DataLoader> val_data;
  if (!cfg.data.val.empty() && tc.eval_every > 0)
    val_data = std::make_unique<DataLoader>(cfg.data.val, "data.val", cfg.model.vocab_size,
                                            tc.seq_len, false, tc.seed);

  GPT model(cfg.model, *ops, tc.micro_batch, tc.seq_len);
  AdamW optimizer(tc, model.layout());
  const std::string signature = model_signature(cfg.model);
  const std::string ckpt_root = cfg.checkpoint_dir();

  std::string resume_dir;
  if (cfg.checkpoint.resume == "auto") {
    std::vector<std::string> skipped;
    resume_dir = find_latest_checkpoint(ckpt_root, &skipped);
    for (const auto& s : skipped) spdlog::warn("ignoring checkpoint {}", s);
  } else if (cfg.checkpoint.resume != "none") {
    resume_dir = cfg.checkpoint.resume;
  }

  int64_t start_step = 0, start_opt_t = 0;
  auto ckpt_tensors = checkpoint_tensors(model.layout(), model.params(), optimizer.m(),
                                         optimizer.v());
  if (!resume_dir.empty()) {
    CheckpointMeta meta =
        load_checkpoint(resume_dir, signature, whole_tensor_pieces(ckpt_tensors));
    start_step = meta.step;
    start_opt_t = meta.optimizer_step;
    if (meta.sample_position != start_step * tc.global_batch)
      fail("checkpoint ", resume_dir, ": data position ", meta.sample_position,
           " does not match step ", start_step, " x train.global_batch=", tc.global_batch,
           " (was it written with a different global batch?)");
    spdlog::info("resumed from {} at step {}", resume_dir, start_step);
  } else if (!cfg.model.init_from.empty()) {
    load_hf_weights(cfg.model.init_from, model.layout(), model.params());
    spdlog::info("initial weights from {}", cfg.model.init_from);
  } else {
    init_gpt2_parameters(model.layout(), cfg.model.n_layer, tc.seed, model.params());
  }
  if (start_step > tc.steps)
    fail("checkpoint ", resume_dir, " is at step ", start_step, ", beyond train.steps=",
         tc.steps);

  // ---- Outputs. ------------------------------------------------------------
  std::error_code ec;
  fs::create_directories(cfg.log.dir, ec);
  if (ec) fail("cannot create log.dir '", cfg.log.dir, "': ", ec.message());
  {
    const std::string path = cfg.log.dir + "/config.yaml";
    const std::string tmp = path + ".tmp";
    std::ofstream f(tmp, std::ios::trunc);
    f << to_yaml(cfg);
    f.close();
    if (!f || std::rename(tmp.c_str(), path.c_str()) != 0)
      fail("cannot write '", path, "'");
  }
  MetricsLog metrics(cfg.log.dir + "/metrics.jsonl", start_step);

  const int accum = cfg.grad_accum_steps();
  const int B = tc.micro_batch, T = tc.seq_len;
  const int64_t tokens_per_step = static_cast<int64_t>(tc.global_batch) * T;
  spdlog::info("model: {} parameters ({} layers, {} heads, {} embd, vocab {}, block {})",
               human_count(static_cast<double>(model.num_parameters())), cfg.model.n_layer,
               cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size, cfg.model.block_size);
  spdlog::info("layout: {} on {}", dims.str(), device_name(ops->device()));
  spdlog::info("data: {} train tokens in {} shard(s), {} windows of {}; val: {}",
               human_count(static_cast<double>(train_data.num_tokens())),
               train_data.num_shards(), train_data.num_windows(), T,
               val_data ? human_count(static_cast<double>(val_data->num_tokens())) + " tokens"
                        : std::string("off"));
  spdlog::info("batch: {} rows x {} tokens = {} tokens/step ({} micro-batches of {})",
               tc.global_batch, T, tokens_per_step, accum, B);
  spdlog::info("logging to {}/metrics.jsonl, checkpoints in {}", cfg.log.dir, ckpt_root);

  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  const float grad_scale = 1.f / static_cast<float>(static_cast<int64_t>(B) * T * accum);
  int64_t opt_t = start_opt_t;  // AdamW step count t (skipped steps do not count)
  int skipped_in_row = 0;
  double last_loss = 0.0;
  int64_t last_saved = resume_dir.empty() ? -1 : start_step;

  auto save = [&](int64_t step) {
    CheckpointMeta meta;
    meta.step = step;
    meta.sample_position = step * tc.global_batch;
    meta.seed = tc.seed;
    meta.model_signature = signature;
    meta.config_yaml = to_yaml(cfg);
    meta.optimizer_step = opt_t;
    meta.layout = dims.str();
    InProcessCommunicator world("world");  // this trainer runs on one rank
    const std::string dir = save_checkpoint(ckpt_root, meta, whole_tensor_pieces(ckpt_tensors),
                                            cfg.checkpoint.keep, world);
    last_saved = step;
    spdlog::info("checkpoint step {} -> {}", step, dir);
  };

  for (int64_t step = start_step; step < tc.steps; ++step) {
    const auto t0 = Clock::now();
    const bool last_step = step + 1 == tc.steps;
    nlohmann::json rec;
    rec["step"] = step;

    if (val_data && (step % tc.eval_every == 0 || last_step)) {
      const double val_loss = evaluate(model, *val_data, cfg, inputs, targets);
      rec["val_loss"] = json_number(val_loss);
      spdlog::info("step {:>5} | val loss {:.4f}", step, val_loss);
    }
    const auto t_train = Clock::now();

    model.zero_grads();
    double loss_sum = 0.0;
    for (int k = 0; k < accum; ++k) {
      train_data.fill(step * tc.global_batch + static_cast<int64_t>(k) * B, B, inputs.data(),
                      targets.data());
      loss_sum += model.forward(inputs.data(), targets.data(), B, T, grad_scale);
      model.backward();
    }
    const double loss = loss_sum / accum;
    const double grad_norm = std::sqrt(ops->sum_squares(model.flat_grads()));
    const double lr = learning_rate(tc, step);
    const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
    if (finite) {
      // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1.
      const float clip = tc.grad_clip > 0
                             ? static_cast<float>(std::min(1.0, tc.grad_clip / (grad_norm + 1e-6)))
                             : 1.f;
      optimizer.step(*ops, model.params(), model.grads(), lr, clip, ++opt_t);
      skipped_in_row = 0;
      last_loss = loss;
    } else {
      ++skipped_in_row;
      rec["skipped"] = true;
      spdlog::warn("step {}: non-finite {} ({}), update skipped ({} in a row, limit {})", step,
                   std::isfinite(loss) ? "gradient norm" : "loss",
                   std::isfinite(loss) ? grad_norm : loss, skipped_in_row, tc.max_skipped);
    }
    const double step_ms = ms_since(t_train);
    const double tokens_per_s = tokens_per_step / (step_ms / 1000.0);
    rec["loss"] = json_number(loss);
    rec["lr"] = lr;
    rec["grad_norm"] = json_number(grad_norm);
    rec["step_ms"] = step_ms;
    rec["tokens_per_s"] = tokens_per_s;
    rec["wall_ms"] = ms_since(t0);
    metrics.write(rec);
    if (step % cfg.log.every == 0 || last_step)
      spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | norm {:.4f} | {:.1f} ms | {} tok/s",
                   step + 1, tc.steps, loss, lr, grad_norm, step_ms, human_count(tokens_per_s));

    if (skipped_in_row >= tc.max_skipped) {
      // Parameters still hold the last good state: no update was applied.
      save(step - skipped_in_row + 1);
      fail("stopping: ", skipped_in_row, " consecutive steps had a non-finite loss or gradient "
           "norm (train.max_skipped=", tc.max_skipped, "); the last good state is checkpointed");
    }
    if (finite && cfg.checkpoint.every > 0 && (step + 1) % cfg.checkpoint.every == 0)
      save(step + 1);
  }
  if (last_saved != tc.steps && tc.steps > start_step) save(tc.steps);

  const std::string export_path = cfg.log.dir + "/model.safetensors";
  save_hf_weights(export_path, model.layout(), model.params(),
                  {{"step", std::to_string(tc.steps)}, {"model", signature}});
  spdlog::info("exported weights to {}", export_path);

  TrainSummary summary;
  summary.first_step = start_step;
  summary.steps_run = tc.steps - start_step;
  summary.final_loss = last_loss;
  summary.log_dir = cfg.log.dir;
  return summary;
}

}  // namespace gt
