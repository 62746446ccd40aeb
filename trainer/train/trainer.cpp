#include "trainer/train/trainer.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "parallel/collective_context.hpp"
#include "parallel/collective_error.hpp"
#include "parallel/in_process_communicator.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/checkpoint/hf_export.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/io/metrics_log.hpp"
#include "trainer/io/progress.hpp"
#include "trainer/io/tensorboard_writer.hpp"
#include "trainer/train/lr_schedule.hpp"
#include "trainer/train/run_directory.hpp"
#include "trainer/train/run_report.hpp"
#include "trainer/train/run_setup.hpp"
#include "trainer/train/stop_signal.hpp"

namespace gt {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// What one optimizer step did.
struct StepResult {
  double loss = 0.0;       // mean over the global batch (NaN/inf when it was not finite)
  double grad_norm = 0.0;  // before clipping
  double lr = 0.0;
  bool applied = false;  // false: non-finite, the update was skipped
  double step_ms = 0.0;  // the training part of the step (no evaluation)
  // model.arch=mixtral (moe): the routers over the step, every data rank's.
  bool moe = false;
  double aux_loss = 0.0;         // the unscaled load-balancing loss, mean over micro-batches
  double expert_imbalance = 0.0;  // max over (block, data rank) of max / mean tokens per expert
  int64_t dropped_tokens = 0;    // slots the capacity factor dropped, all ranks
};

// The worst block's max / mean tokens per expert (1 = perfectly balanced);
// counts (blocks, E). 0 when nothing was routed.
double worst_imbalance(const MoeStepStats& s) {
  double worst = 0.0;
  const size_t E = static_cast<size_t>(s.experts);
  for (size_t b = 0; E > 0 && b + E <= s.counts.size(); b += E) {
    double sum = 0.0, mx = 0.0;
    for (size_t e = 0; e < E; ++e) {
      sum += s.counts[b + e];
      mx = std::max(mx, static_cast<double>(s.counts[b + e]));
    }
    if (sum > 0) worst = std::max(worst, mx / (sum / static_cast<double>(E)));
  }
  return worst;
}

// A training run in its steps: setup (the constructor: build, validate,
// agree, open the outputs), then per step train_step, evaluate and
// checkpoint, then finish. Member order is destruction order reversed: the
// collective context outlives the run, which outlives its outputs.
class Trainer {
 public:
  Trainer(const Config& cfg, MpiCommunicator* world);
  TrainSummary run();

 private:
  // One optimizer step: gradient accumulation over the micro-batches, the
  // clipped AdamW step on the device, the loss and the verdict read back.
  StepResult train_step(int64_t step);
  // The step's metrics.jsonl line and (every log.every steps) log line.
  void log_step(int64_t step, const StepResult& r, nlohmann::json& rec);
  // Checkpoints as configured, enforces train.max_skipped, and agrees on a
  // stop signal; false ends the loop (stopped after this step).
  bool after_step(int64_t step, const StepResult& r);
  void checkpoint(int64_t step);
  TrainSummary finish();

  const Config& cfg_;
  const TrainConfig& tc_;
  InProcessCommunicator solo_{"world"};
  Communicator& job_;
  bool rank0_;
  // Where the job is, for collective-deadline messages; a missed deadline
  // aborts the job (a peer is hung or dead).
  std::shared_ptr<CollectiveContext> context_;
  ScopedCollectiveContext context_scope_;
  Run run_;
  std::string signature_;  // model_signature(cfg.model), checked on resume
  std::unique_ptr<RunDirectory> run_dir_;
  std::optional<MetricsLog> metrics_;  // rank 0 only
  std::optional<TensorBoardWriter> tensorboard_;  // rank 0, log.tensorboard only
  int accum_ = 1, data_size_ = 1, data_rank_ = 0;
  int64_t tokens_per_step_ = 0;
  float grad_scale_ = 1.f;
  int64_t opt_t_ = 0;                      // AdamW step count t (skipped steps do not count)
  int skipped_in_row_ = 0;
  double last_loss_ = 0.0;
  int64_t last_saved_ = -1;
  // When this process's first step began: the step lines' elapsed time and
  // ETA count from it (a resumed run's steps before it are not its own).
  Clock::time_point loop_start_ = Clock::now();
  std::string last_dir_;
  int64_t stopped_at_ = -1;  // the step a stop signal ended the run after
};

std::shared_ptr<CollectiveContext> deadline_context() {
  auto context = std::make_shared<CollectiveContext>();
  context->abort_on_deadline = true;
  return context;
}

Trainer::Trainer(const Config& cfg, MpiCommunicator* world)
    : cfg_(cfg),
      tc_(cfg.train),
      job_(world ? static_cast<Communicator&>(*world) : solo_),
      rank0_(job_.rank() == 0),
      context_(deadline_context()),
      context_scope_(world, context_) {
  // Validate every input on every rank; agree before any output.
  std::exception_ptr setup_error;
  try {
    build_run(run_, cfg, world, context_.get());
  } catch (const CollectiveError&) {
    throw;  // agreed inside build_run already (every rank has it)
  } catch (const std::exception&) {
    setup_error = std::current_exception();
  }
  agree_on_setup(job_, setup_error);
  run_.profile->start(*run_.mesh, *run_.backend.ops);
  signature_ = model_signature(cfg.model);

  // Outputs (rank 0 writes the logs; every rank writes its checkpoint shard):
  // the lock on log.dir and every rank's pid file first (agreed).
  run_dir_ = open_run_directory(cfg, job_);
  if (rank0_) {
    write_file_atomic(cfg.log.dir + "/config.yaml", to_yaml(cfg));
    metrics_.emplace(cfg.log.dir + "/metrics.jsonl", run_.start_step);
    if (cfg.log.tensorboard) tensorboard_.emplace(cfg.log.dir, run_.start_step);
    log_run_banner(run_, cfg);
  }

  accum_ = cfg.grad_accum_steps();
  data_size_ = run_.dims.data_parallel();
  data_rank_ = run_.mesh->data().rank();
  tokens_per_step_ = static_cast<int64_t>(tc_.global_batch) * tc_.seq_len;
  const int64_t rows = static_cast<int64_t>(tc_.micro_batch) * tc_.seq_len;
  grad_scale_ = 1.f / static_cast<float>(rows * accum_ * data_size_);
  opt_t_ = run_.optimizer_step;
  last_saved_ = run_.resume_dir.empty() ? -1 : run_.start_step;
  last_dir_ = run_.resume_dir;
}

TrainSummary Trainer::run() {
  // From here SIGTERM/SIGINT finish the step, checkpoint and exit 0 (before,
  // during start-up, they end the process: there is nothing to save yet).
  StopSignal stop_signal;
  loop_start_ = Clock::now();
  for (int64_t step = run_.start_step; step < tc_.steps; ++step) {
    context_->step = step;
    context_->phase = "train";
    run_.faults.at_step_start(job_.rank(), step);
    const auto t0 = Clock::now();
    nlohmann::json rec;
    rec["step"] = step;
    if (run_.val_data && (step % tc_.eval_every == 0 || step + 1 == tc_.steps)) {
      context_->phase = "eval";
      const double val_loss = evaluate(run_, cfg_);
      context_->phase = "train";
      rec["val_loss"] = json_number(val_loss);
      if (rank0_) spdlog::info("step {:>5} | val loss {:.4f}", step, val_loss);
    }
    const StepResult r = train_step(step);
    if (!r.applied) rec["skipped"] = true;
    log_step(step, r, rec);
    rec["wall_ms"] = ms_since(t0);
    if (metrics_) metrics_->write(rec);
    if (tensorboard_) tensorboard_->write_record(step, rec);
    if (!after_step(step, r)) break;
  }
  return finish();
}

StepResult Trainer::train_step(int64_t step) {
  const int B = tc_.micro_batch;
  ShardedParameters& params = *run_.params;
  StepRunner& runner = *run_.runner;
  reset_comm_bytes(*run_.mesh);
  const auto t_train = Clock::now();
  run_.profile->begin_step(step);

  // nan fault: an infinite loss scale on this rank makes its gradients
  // inf/NaN, as an overflow in backward would (on a pipeline, a rank of the
  // last stage: the loss scale is where the backward starts).
  const float scale = run_.faults.poison_gradients(job_.rank(), step)
                          ? std::numeric_limits<float>::infinity()
                          : grad_scale_;
  const int64_t batch_start = step * tc_.global_batch;
  runner.train(
      accum_,
      [&](int k, int32_t* tokens, int32_t* targets) {
        run_.train_data->fill(first_row(batch_start, k, B, data_size_, data_rank_), B, tokens,
                              targets, run_.sequence_spans);
      },
      scale);
  // The gradient norm, clip_grad_norm_'s factor (coef = max_norm / (norm +
  // 1e-6), clamped to 1) and the skip decision (a non-finite norm or loss on
  // any rank) are made on the device and read by AdamW there; the host
  // learns the outcome afterwards, with the losses, in one read each per
  // step. Every rank gets the same all-reduced verdict, so all take the same
  // branch.
  StepResult r;
  r.lr = learning_rate(tc_, step);
  params.clipped_adamw_step(tc_, r.lr, opt_t_ + 1, runner.pending_loss_sums());
  // Collectives waited on the device (NCCL) end here, each within its
  // deadline, before the host reads anything of the step.
  run_.mesh->drain();
  r.loss = run_.mesh->data().all_reduce_f64(mean_over_sequence(run_, runner.take_loss()),
                                            ReduceOp::sum) /
           data_size_;
  MoeStepStats s;  // a mixture's routers over the step
  if (cfg_.model.moe()) {
    // Scalar reductions over the data ranks, then the pipeline stages (the
    // tp and cp ranks of a micro-batch pooled its counts already; each
    // stage holds its blocks' counts, the last its aux losses).
    Communicator& data = run_.mesh->data();
    Communicator& pp = run_.mesh->pp();
    auto sum = [&](double x) {
      return pp.all_reduce_f64(data.all_reduce_f64(x, ReduceOp::sum), ReduceOp::sum);
    };
    s = runner.take_moe_stats();
    const double micro_batches = sum(s.micro_batches);
    r.moe = true;
    r.aux_loss = sum(s.aux_sum) / std::max(micro_batches, 1.0);
    r.expert_imbalance = pp.all_reduce_f64(
        data.all_reduce_f64(worst_imbalance(s), ReduceOp::max), ReduceOp::max);
    r.dropped_tokens =
        pp.all_reduce_i64(data.all_reduce_i64(s.dropped, ReduceOp::sum), ReduceOp::sum);
  }
  const ShardedParameters::StepOutcome outcome = params.step_outcome();
  r.grad_norm = outcome.grad_norm;
  r.applied = outcome.applied;
  if (r.applied) {
    // Aux-loss-free balancing: each bias against its expert's load over the
    // global batch (a skipped step leaves them).
    if (run_.router_bias) run_.router_bias->update(s, run_.mesh->data());
    ++opt_t_;
    skipped_in_row_ = 0;
    last_loss_ = r.loss;
  } else {
    ++skipped_in_row_;
    // Every rank says so: the decision came from all-reduced values, and the
    // reliability tests check that each rank skipped the same step.
    spdlog::warn("step {}: non-finite {} ({}), update skipped ({} in a row, limit {})", step,
                 std::isfinite(r.loss) ? "gradient norm" : "loss",
                 std::isfinite(r.loss) ? r.grad_norm : r.loss, skipped_in_row_, tc_.max_skipped);
  }
  run_.backend.ops->synchronize();  // a device backend may still be running the optimizer
  r.step_ms = ms_since(t_train);
  return r;
}

void Trainer::log_step(int64_t step, const StepResult& r, nlohmann::json& rec) {
  const double tokens_per_s = tokens_per_step_ / (r.step_ms / 1000.0);
  rec["loss"] = json_number(r.loss);
  rec["lr"] = r.lr;
  rec["grad_norm"] = json_number(r.grad_norm);
  if (r.moe) {
    rec["aux_loss"] = json_number(r.aux_loss);
    rec["expert_imbalance"] = json_number(r.expert_imbalance);
    rec["dropped_tokens"] = r.dropped_tokens;
  }
  rec["step_ms"] = r.step_ms;
  rec["tokens_per_s"] = tokens_per_s;
  rec["comm_bytes"] = comm_bytes(*run_.mesh);
  if (run_.dims.pp > 1) {
    // The bubble as this rank saw it: its host waiting on a neighbour stage.
    const double wait_ms = run_.runner->last_wait_ms();
    rec["pipeline_wait_ms"] = wait_ms;
    rec["bubble_fraction"] = r.step_ms > 0 ? wait_ms / r.step_ms : 0.0;
  }
  run_.profile->end_step(rec, r.step_ms / 1000.0, tokens_per_step_);
  if (rank0_ && (step % cfg_.log.every == 0 || step + 1 == tc_.steps)) {
    const std::string moe =
        r.moe ? fmt::format(" | aux {:.4f} | imbalance {:.2f}{}", r.aux_loss, r.expert_imbalance,
                            r.dropped_tokens > 0 ? fmt::format(" | dropped {}", r.dropped_tokens)
                                                 : std::string())
              : std::string();
    // Elapsed is wall time since this process's first step (evaluations and
    // checkpoints included); the ETA is the steps left at that pace.
    const double elapsed = ms_since(loop_start_) / 1000.0;
    const double done = static_cast<double>(step + 1 - run_.start_step);
    const int64_t left = tc_.steps - step - 1;
    const std::string eta = left == 0 ? clock_text(0) : clock_text(elapsed / done * left);
    spdlog::info(
        "step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | norm {:.4f} | {:.1f} ms | {} tok/s{} | "
        "elapsed {} | ETA {}",
        step + 1, tc_.steps, r.loss, moe, r.lr, r.grad_norm, r.step_ms, human_count(tokens_per_s),
        mfu_text(rec), clock_text(elapsed), eta);
  }
}

bool Trainer::after_step(int64_t step, const StepResult& r) {
  if (skipped_in_row_ >= tc_.max_skipped) {
    // Parameters still hold the last good state: no update was applied.
    checkpoint(step - skipped_in_row_ + 1);
    throw CollectiveError(detail::concat("stopping: ", skipped_in_row_,
                                         " consecutive steps had a non-finite loss or gradient "
                                         "norm (train.max_skipped=",
                                         tc_.max_skipped, "); the last good state is checkpointed"),
                          rank0_);
  }
  if (r.applied && cfg_.checkpoint.every > 0 && (step + 1) % cfg_.checkpoint.every == 0)
    checkpoint(step + 1);
  // SIGTERM/SIGINT on any rank: all stop here, after the same step (the last
  // step needs no stop: the run ends and exports as usual).
  context_->phase = "stop check";
  if (step + 1 == tc_.steps || !agree_to_stop(job_)) return true;
  if (last_saved_ != step + 1) checkpoint(step + 1);
  stopped_at_ = step + 1;
  if (rank0_)
    spdlog::warn(
        "stopped by a signal (SIGTERM or SIGINT) after step {}: checkpoint {} is "
        "committed; resume with checkpoint.resume=auto",
        stopped_at_, last_dir_);
  return false;
}

void Trainer::checkpoint(int64_t step) {
  const std::string phase = context_->phase;
  context_->phase = "checkpoint";
  CheckpointMeta meta;
  meta.step = step;
  meta.sample_position = step * tc_.global_batch;
  meta.seed = tc_.seed;
  meta.optimizer_step = opt_t_;
  meta.layout = run_.dims.str();
  meta.model_signature = signature_;
  meta.config_yaml = to_yaml(cfg_);
  run_.mesh->drain();  // the post-step gathers (stages 1-2) before the host copies
  std::vector<TensorPiece> pieces = run_.params->pieces_to_save();
  if (run_.router_bias) {
    const std::vector<TensorPiece> biases = run_.router_bias->pieces_to_save(run_.mesh->coord());
    pieces.insert(pieces.end(), biases.begin(), biases.end());
  }
  // Rank 0's shard stands for the save's progress (every rank writes its own
  // at once); a save of under 2 s prints none.
  ByteProgressLine progress("checkpoint save", {"rank 0's shard"}, rank0_);
  last_dir_ = save_checkpoint(
      cfg_.checkpoint_dir(), meta, pieces, cfg_.checkpoint.keep, job_,
      [&](const char* p) { run_.faults.in_save(job_.rank(), step, p); }, progress.callback());
  progress.finish();
  last_saved_ = step;
  context_->phase = phase;
  if (rank0_) spdlog::info("checkpoint step {} -> {}", step, last_dir_);
}

TrainSummary Trainer::finish() {
  context_->step = -1;
  context_->phase = "final checkpoint";
  const bool stopped = stopped_at_ >= 0;
  if (!cfg_.checkpoint.final) {
    if (rank0_ && !stopped)
      spdlog::info("checkpoint.final=false: no final checkpoint and no model.safetensors export");
  } else if (!stopped && last_saved_ != tc_.steps && tc_.steps > run_.start_step) {
    checkpoint(tc_.steps);
  }
  run_.profile->finish(cfg_.log.dir);

  // The HF export is assembled from the final checkpoint, whatever the layout
  // (without one, an earlier periodic checkpoint would pass for the final weights).
  if (rank0_ && cfg_.checkpoint.final && !last_dir_.empty() && !stopped) {
    const std::string export_path = cfg_.log.dir + "/model.safetensors";
    export_hf_weights(last_dir_, cfg_.model, export_path, {{"model", signature_}});
    spdlog::info("exported weights to {}", export_path);
  }

  TrainSummary summary;
  summary.first_step = run_.start_step;
  summary.steps_run = (stopped ? stopped_at_ : tc_.steps) - run_.start_step;
  summary.final_loss = last_loss_;
  summary.log_dir = cfg_.log.dir;
  return summary;
}

}  // namespace

TrainSummary run_training(const Config& cfg, MpiCommunicator* world) {
  return Trainer(cfg, world).run();
}

}  // namespace gt
