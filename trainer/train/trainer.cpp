#include "trainer/train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "parallel/collective_context.hpp"
#include "parallel/collective_error.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/mesh.hpp"
#include "parallel/mesh_factory.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/parallel_dims.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/checkpoint/hf_export.hpp"
#include "trainer/data/data_loader.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/hf_weights.hpp"
#include "trainer/profile/profile_session.hpp"
#include "trainer/sharding/sharded_parameters.hpp"
#include "trainer/train/compute_backend.hpp"
#include "trainer/train/fault_injection.hpp"
#include "trainer/train/launch_checks.hpp"
#include "trainer/train/lr_schedule.hpp"
#include "trainer/train/metrics_log.hpp"
#include "trainer/train/run_directory.hpp"
#include "trainer/train/run_environment.hpp"
#include "trainer/train/stop_signal.hpp"

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

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1 << 30) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else if (b >= 1 << 20) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  return buf;
}

// Everything a run needs, built and validated before any output exists.
// Members are destroyed in reverse order: the backend (a CUDA stream) outlives
// the mesh's communicators (staged and NCCL ones order their work on it),
// which outlive the profiler observing them, which outlives its ProfilingOps;
// the model and the parameters (backend memory) go first.
struct Run {
  ParallelDims dims;
  ComputeBackend backend;
  std::unique_ptr<DeviceMesh> mesh;
  std::unique_ptr<ProfileSession> profile;
  std::unique_ptr<Ops> profiling_ops;        // null when not profiling
  Ops* ops = nullptr;                        // what the model calls: profiling_ops or backend.ops
  std::unique_ptr<DataLoader> train_data, val_data;
  std::unique_ptr<ParameterLayout> layout;
  std::unique_ptr<ShardedParameters> params;
  std::unique_ptr<GPT> model;
  std::string resume_dir;
  int64_t start_step = 0;
  int64_t optimizer_step = 0;
  FaultInjector faults;  // TRAINER_FAULT (tests); empty otherwise
};

// Rows this data rank reads for micro-batch k of a batch that starts at
// global row `batch_start`: the batch is cut into (micro_batch x data ranks)
// passes, each pass into one micro-batch per data rank, so the global row
// order is the one-rank order whatever the layout.
int64_t first_row(int64_t batch_start, int k, int micro_batch, int data_size, int data_rank) {
  return batch_start + static_cast<int64_t>(k) * micro_batch * data_size +
         static_cast<int64_t>(data_rank) * micro_batch;
}

void build(Run& run, const Config& cfg, MpiCommunicator* world) {
  const auto& tc = cfg.train;
  const int world_size = world ? world->size() : 1;
  run.dims =
      ParallelDims::validated(cfg.parallel.dp, cfg.parallel.fsdp, cfg.parallel.tp, world_size,
                              cfg.model.n_head, cfg.model.n_embd, cfg.model.padded_vocab_size());
  // The mesh is the one collective of start-up: every rank reaches it (the
  // check above is the same everywhere) before anything rank-local can fail.
  run.mesh = world ? std::make_unique<DeviceMesh>(run.dims, *world)
                   : std::make_unique<DeviceMesh>(DeviceMesh::in_process());
  // Rank-local checks from here on (the mesh was the one collective): the
  // cheap ones first, agreed before any rank allocates the model (a rank
  // must not fill gigabytes for a run rank 0 has already rejected).
  std::exception_ptr early_error;
  try {
    run.faults = FaultInjector::from_env();
    run.backend = make_compute_backend(cfg, detect_run_environment());
    run.train_data = std::make_unique<DataLoader>(cfg.data.train, "data.train",
                                                  cfg.model.vocab_size, tc.seq_len,
                                                  cfg.data.shuffle, tc.seed);
    check_data_covers_batch(*run.train_data, cfg);
    if (!cfg.data.val.empty() && tc.eval_every > 0)
      run.val_data = std::make_unique<DataLoader>(cfg.data.val, "data.val",
                                                  cfg.model.vocab_size, tc.seq_len, false,
                                                  tc.seed);
    // The outputs: writable, room for a checkpoint, not locked, no
    // checkpoints of another run.
    if (run.mesh->rank() == 0) check_outputs(cfg);
  } catch (const std::exception&) {
    early_error = std::current_exception();
  }
  agree_on_setup(run.mesh->world(), early_error);  // throws CollectiveError on every rank
  if (run.backend.device != Device::cpu) {
    // The device mesh replaces the host one: its communicators take device
    // buffers (NCCL, or MPI staged through pinned memory). Building it is
    // collective and can fail (NCCL init): agreed over the host mesh first.
    std::unique_ptr<DeviceMesh> device_mesh;
    std::exception_ptr mesh_error;
    try {
      device_mesh = std::make_unique<DeviceMesh>(make_run_mesh(run.dims, world, run.backend));
    } catch (const std::exception&) {
      mesh_error = std::current_exception();
    }
    agree_on_setup(run.mesh->world(), mesh_error);
    run.mesh = std::move(device_mesh);
  }
  run.profile =
      std::make_unique<ProfileSession>(cfg, run.mesh->rank(), run.backend.make_op_timer());
  run.profiling_ops = run.profile->wrap(*run.backend.ops);
  run.ops = run.profiling_ops ? run.profiling_ops.get() : run.backend.ops.get();
  if (run.backend.device != Device::cpu) {
    Ops* ops = run.backend.ops.get();  // outlives the session (Run's member order)
    run.profile->set_device_peak_memory([ops] { return ops->device_bytes_peak(); });
  }

  const MeshCoord& me = run.mesh->coord();
  run.layout = std::make_unique<ParameterLayout>(cfg.model, run.dims.tp, me.tp, run.dims.fsdp);
  run.params = std::make_unique<ShardedParameters>(*run.layout, *run.mesh, cfg.parallel.fsdp_stage,
                                                   cfg.parallel.bucket_mb, *run.ops,
                                                   cfg.runtime.dtype == ComputeDType::bf16);
  run.model = std::make_unique<GPT>(cfg.model, *run.ops, tc.micro_batch, tc.seq_len, *run.layout,
                                    *run.params,
                                    TensorParallelGroup{&run.mesh->tp(), cfg.parallel.tp_overlap},
                                    tc.recompute, cfg.runtime.dtype);

  const std::string ckpt_root = cfg.checkpoint_dir();
  if (cfg.checkpoint.resume == "auto") {
    std::vector<std::string> skipped;
    run.resume_dir = find_latest_checkpoint(ckpt_root, &skipped);
    if (me == MeshCoord{})
      for (const auto& s : skipped) spdlog::warn("ignoring checkpoint {}", s);
  } else if (cfg.checkpoint.resume != "none") {
    run.resume_dir = cfg.checkpoint.resume;
  }
  if (!run.resume_dir.empty()) {
    CheckpointMeta meta =
        load_checkpoint(run.resume_dir, model_signature(cfg.model), run.params->pieces_to_load());
    run.params->finish_load();
    run.start_step = meta.step;
    run.optimizer_step = meta.optimizer_step;
    if (meta.sample_position != run.start_step * tc.global_batch)
      fail("checkpoint ", run.resume_dir, ": data position ", meta.sample_position,
           " does not match step ", run.start_step, " x train.global_batch=", tc.global_batch,
           " (was it written with a different global batch?)");
    if (run.start_step > tc.steps)
      fail("checkpoint ", run.resume_dir, " is at step ", run.start_step,
           ", beyond train.steps=", tc.steps);
  } else if (!cfg.model.init_from.empty()) {
    for_each_hf_tensor(cfg.model.init_from, cfg.model,
                       [&](const ParamSpec& s, const float* data) {
                         run.params->load_global(s.name, data);
                       });
  } else {
    for_each_initial_parameter(cfg.model, tc.seed, [&](const ParamSpec& s, const float* data) {
      run.params->load_global(s.name, data);
    });
  }
}

// Mean validation loss over eval_batches global batches of data.val from its
// start (the same rows for every layout and every evaluation).
double evaluate(Run& run, const Config& cfg, std::vector<int32_t>& inputs,
                std::vector<int32_t>& targets) {
  const auto& tc = cfg.train;
  const int B = tc.micro_batch, T = tc.seq_len, D = run.dims.data_parallel();
  const int accum = cfg.grad_accum_steps();
  const int d = run.mesh->data().rank();  // this rank's data shard
  double sum = 0.0;
  for (int e = 0; e < tc.eval_batches; ++e)
    for (int k = 0; k < accum; ++k) {
      run.val_data->fill(first_row(int64_t(e) * tc.global_batch, k, B, D, d), B, inputs.data(),
                         targets.data());
      sum += run.model->forward(inputs.data(), targets.data(), B, T, 0.f);
    }
  sum = run.mesh->data().all_reduce_f64(sum, ReduceOp::sum);
  return sum / (static_cast<double>(tc.eval_batches) * accum * D);
}

// Axis name -> bytes this rank sent since the last reset.
nlohmann::json comm_bytes(const DeviceMesh& mesh) {
  nlohmann::json j;
  for (MeshAxis a : kMeshAxes)
    j[mesh_axis_name(a)] = mesh.axis(a).bytes_sent();
  j["world"] = mesh.world().bytes_sent();
  return j;
}

void reset_comm_bytes(const DeviceMesh& mesh) {
  for (MeshAxis a : kMeshAxes)
    mesh.axis(a).reset_bytes();
  mesh.world().reset_bytes();
}

void log_memory(const MemoryFigures& m, const ParallelConfig& p) {
  auto line = [](const char* what, int64_t have, int64_t full) {
    spdlog::info("  {:<10} {:>12} ({:.2f}x of {} unsharded)", what,
                 human_bytes(static_cast<double>(have)),
                 full ? static_cast<double>(have) / static_cast<double>(full) : 0.0,
                 human_bytes(static_cast<double>(full)));
  };
  if (p.fsdp > 1)
    spdlog::info("memory per rank (fsdp={}, ZeRO stage {}; unsharded = this tp shard on one rank):",
                 p.fsdp, p.fsdp_stage);
  else
    spdlog::info("memory per rank (no FSDP; unsharded = this tp shard on one rank):");
  line("params", m.params, m.params_unsharded);
  line("grads", m.grads, m.grads_unsharded);
  line("optimizer", m.optimizer, m.optimizer_unsharded);
  line("total", m.params + m.grads + m.optimizer,
       m.params_unsharded + m.grads_unsharded + m.optimizer_unsharded);
}

}  // namespace

TrainSummary run_training(const Config& cfg, MpiCommunicator* world) {
  const auto& tc = cfg.train;
  InProcessCommunicator solo("world");
  Communicator& job = world ? static_cast<Communicator&>(*world) : solo;
  const bool rank0 = job.rank() == 0;
  // Where the job is, for collective-deadline messages; a missed deadline
  // aborts the job (a peer is hung or dead).
  auto context = std::make_shared<CollectiveContext>();
  context->abort_on_deadline = true;
  ScopedCollectiveContext context_scope(world, context);

  // ---- Validate every input on every rank; agree before any output. --------
  Run run;
  std::exception_ptr setup_error;
  try {
    build(run, cfg, world);
  } catch (const CollectiveError&) {
    throw;  // agreed inside build already (every rank has it)
  } catch (const std::exception&) {
    setup_error = std::current_exception();
  }
  agree_on_setup(job, setup_error);
  run.profile->start(*run.mesh, *run.ops);
  DeviceMesh& mesh = *run.mesh;
  ShardedParameters& params = *run.params;
  GPT& model = *run.model;
  const std::string signature = model_signature(cfg.model);
  const std::string ckpt_root = cfg.checkpoint_dir();

  // ---- Outputs (rank 0 writes the logs; every rank writes its checkpoint shard).
  // The lock on log.dir and every rank's pid file first (agreed).
  const std::unique_ptr<RunDirectory> run_dir = open_run_directory(cfg, job);
  std::optional<MetricsLog> metrics;
  if (rank0) {
    write_file_atomic(cfg.log.dir + "/config.yaml", to_yaml(cfg));
    metrics.emplace(cfg.log.dir + "/metrics.jsonl", run.start_step);
  }

  const int accum = cfg.grad_accum_steps();
  const int B = tc.micro_batch, T = tc.seq_len, D = run.dims.data_parallel();
  const int data_rank = mesh.data().rank();  // this rank's data shard
  const int64_t tokens_per_step = static_cast<int64_t>(tc.global_batch) * T;
  if (rank0) {
    if (!run.resume_dir.empty())
      spdlog::info("resumed from {} at step {}", run.resume_dir, run.start_step);
    else if (!cfg.model.init_from.empty())
      spdlog::info("initial weights from {}", cfg.model.init_from);
    spdlog::info("model: {} parameters ({} layers, {} heads, {} embd, vocab {}, block {})",
                 human_count(static_cast<double>(model.num_parameters())), cfg.model.n_layer,
                 cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab_size, cfg.model.block_size);
    if (run.backend.device == Device::cpu && cfg.runtime.dtype == ComputeDType::bf16)
      spdlog::info(
          "runtime.dtype=bf16 on the CPU backend: the bf16 model's function (bf16 "
          "storage, fp32 math), for checking layouts and GPUs against; not faster than "
          "fp32 here");
    spdlog::info("layout: {} on {}{}{}", run.dims.str(), run.backend.describe,
                 run.dims.world_size() == 1 ? ""
                 : run.backend.comm.comm == ParallelComm::nccl
                     ? ", comm nccl"
                     : (run.backend.device == Device::cpu ? ", comm mpi"
                                                          : ", comm mpi (staged through host)"),
                 run.dims.tp > 1 ? (cfg.parallel.tp_overlap ? ", tp collective matmuls overlapped"
                                                            : ", tp collectives not overlapped")
                                 : "");
    if (run.dims.world_size() > 1) spdlog::info("{}", mesh.describe());
    log_memory(params.memory(), cfg.parallel);
    spdlog::info("data: {} train tokens in {} shard(s), {} windows of {}; val: {}",
                 human_count(static_cast<double>(run.train_data->num_tokens())),
                 run.train_data->num_shards(), run.train_data->num_windows(), T,
                 run.val_data ? human_count(static_cast<double>(run.val_data->num_tokens())) +
                                    " tokens"
                              : std::string("off"));
    spdlog::info("batch: {} rows x {} tokens = {} tokens/step ({} micro-batches of {} on each "
                 "of {} data-parallel ranks)",
                 tc.global_batch, T, tokens_per_step, accum, B, D);
    spdlog::info("logging to {}/metrics.jsonl, checkpoints in {}", cfg.log.dir, ckpt_root);
  }

  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  const float grad_scale = 1.f / static_cast<float>(static_cast<int64_t>(B) * T * accum * D);
  int64_t opt_t = run.optimizer_step;  // AdamW step count t (skipped steps do not count)
  int skipped_in_row = 0;
  double last_loss = 0.0;
  int64_t last_saved = run.resume_dir.empty() ? -1 : run.start_step;
  std::string last_dir = run.resume_dir;

  auto save = [&](int64_t step) {
    const std::string phase = context->phase;
    context->phase = "checkpoint";
    CheckpointMeta meta;
    meta.step = step;
    meta.sample_position = step * tc.global_batch;
    meta.seed = tc.seed;
    meta.optimizer_step = opt_t;
    meta.layout = run.dims.str();
    meta.model_signature = signature;
    meta.config_yaml = to_yaml(cfg);
    last_dir = save_checkpoint(ckpt_root, meta, params.pieces_to_save(), cfg.checkpoint.keep, job,
                               [&](const char* p) { run.faults.in_save(job.rank(), step, p); });
    last_saved = step;
    context->phase = phase;
    if (rank0) spdlog::info("checkpoint step {} -> {}", step, last_dir);
  };

  // From here SIGTERM/SIGINT finish the step, checkpoint and exit 0 (before,
  // during start-up, they end the process: there is nothing to save yet).
  StopSignal stop_signal;
  int64_t stopped_at = -1;  // the step a stop signal ended the run after
  for (int64_t step = run.start_step; step < tc.steps; ++step) {
    context->step = step;
    context->phase = "train";
    run.faults.at_step_start(job.rank(), step);
    const auto t0 = Clock::now();
    const bool last_step = step + 1 == tc.steps;
    nlohmann::json rec;
    rec["step"] = step;

    if (run.val_data && (step % tc.eval_every == 0 || last_step)) {
      context->phase = "eval";
      const double val_loss = evaluate(run, cfg, inputs, targets);
      context->phase = "train";
      rec["val_loss"] = json_number(val_loss);
      if (rank0) spdlog::info("step {:>5} | val loss {:.4f}", step, val_loss);
    }
    reset_comm_bytes(mesh);
    const auto t_train = Clock::now();
    run.profile->begin_step(step);

    params.begin_step();
    for (int k = 0; k < accum; ++k) {
      params.begin_micro_batch(k + 1 == accum);
      run.train_data->fill(first_row(step * tc.global_batch, k, B, D, data_rank), B,
                           inputs.data(), targets.data());
      // nan fault: an infinite loss scale on this rank makes its gradients
      // inf/NaN, as an overflow in backward would.
      const float scale = run.faults.poison_gradients(job.rank(), step)
                              ? std::numeric_limits<float>::infinity()
                              : grad_scale;
      model.forward_train(inputs.data(), targets.data(), B, T, scale);
      model.backward();
    }
    params.finish_gradients();
    // The gradient norm, clip_grad_norm_'s factor (coef = max_norm / (norm +
    // 1e-6), clamped to 1) and the skip decision (a non-finite norm or loss
    // on any rank) are made on the device and read by AdamW there; the host
    // learns the outcome afterwards, with the losses, in one read each per
    // step. Every rank gets the same all-reduced verdict, so all take the
    // same branch.
    const double lr = learning_rate(tc, step);
    params.clipped_adamw_step(tc, lr, opt_t + 1, model.pending_loss_sums());
    const double loss = mesh.data().all_reduce_f64(model.take_loss(), ReduceOp::sum) / D;
    const ShardedParameters::StepOutcome outcome = params.step_outcome();
    const double grad_norm = outcome.grad_norm;
    const bool finite = outcome.applied;
    if (finite) {
      ++opt_t;
      skipped_in_row = 0;
      last_loss = loss;
    } else {
      ++skipped_in_row;
      rec["skipped"] = true;
      // Every rank says so: the decision came from all-reduced values, and the
      // reliability tests check that each rank skipped the same step.
      spdlog::warn("step {}: non-finite {} ({}), update skipped ({} in a row, limit {})", step,
                   std::isfinite(loss) ? "gradient norm" : "loss",
                   std::isfinite(loss) ? grad_norm : loss, skipped_in_row, tc.max_skipped);
    }
    run.ops->synchronize();  // a device backend may still be running the optimizer
    const double step_ms = ms_since(t_train);
    const double tokens_per_s = tokens_per_step / (step_ms / 1000.0);
    rec["loss"] = json_number(loss);
    rec["lr"] = lr;
    rec["grad_norm"] = json_number(grad_norm);
    rec["step_ms"] = step_ms;
    rec["tokens_per_s"] = tokens_per_s;
    rec["comm_bytes"] = comm_bytes(mesh);
    run.profile->end_step(rec, step_ms / 1000.0, tokens_per_step);
    rec["wall_ms"] = ms_since(t0);
    if (metrics) metrics->write(rec);
    if (rank0 && (step % cfg.log.every == 0 || last_step))
      spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | norm {:.4f} | {:.1f} ms | {} tok/s",
                   step + 1, tc.steps, loss, lr, grad_norm, step_ms, human_count(tokens_per_s));

    if (skipped_in_row >= tc.max_skipped) {
      // Parameters still hold the last good state: no update was applied.
      save(step - skipped_in_row + 1);
      throw CollectiveError(
          detail::concat("stopping: ", skipped_in_row,
                         " consecutive steps had a non-finite loss or gradient norm "
                         "(train.max_skipped=", tc.max_skipped,
                         "); the last good state is checkpointed"),
          rank0);
    }
    if (finite && cfg.checkpoint.every > 0 && (step + 1) % cfg.checkpoint.every == 0)
      save(step + 1);
    // SIGTERM/SIGINT on any rank: all stop here, after the same step (the
    // last step needs no stop: the run ends and exports as usual).
    context->phase = "stop check";
    if (!last_step && agree_to_stop(job)) {
      if (last_saved != step + 1) save(step + 1);
      stopped_at = step + 1;
      if (rank0)
        spdlog::warn("stopped by a signal (SIGTERM or SIGINT) after step {}: checkpoint {} is "
                     "committed; resume with checkpoint.resume=auto", stopped_at, last_dir);
      break;
    }
  }
  context->step = -1;
  context->phase = "final checkpoint";
  if (!cfg.checkpoint.final) {
    if (rank0 && stopped_at < 0)
      spdlog::info("checkpoint.final=false: no final checkpoint and no model.safetensors export");
  } else if (stopped_at < 0 && last_saved != tc.steps && tc.steps > run.start_step) {
    save(tc.steps);
  }
  run.profile->finish(cfg.log.dir);

  // The HF export is assembled from the final checkpoint, whatever the layout
  // (without one, an earlier periodic checkpoint would pass for the final weights).
  if (rank0 && cfg.checkpoint.final && !last_dir.empty() && stopped_at < 0) {
    const std::string export_path = cfg.log.dir + "/model.safetensors";
    export_hf_weights(last_dir, cfg.model, export_path, {{"model", signature}});
    spdlog::info("exported weights to {}", export_path);
  }

  TrainSummary summary;
  summary.first_step = run.start_step;
  summary.steps_run = (stopped_at >= 0 ? stopped_at : tc.steps) - run.start_step;
  summary.final_loss = last_loss;
  summary.log_dir = cfg.log.dir;
  return summary;
}

}  // namespace gt
