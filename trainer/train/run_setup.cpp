#include "trainer/train/run_setup.hpp"

#include <spdlog/spdlog.h>

#include <exception>

#include "kernels/core/error.hpp"
#include "parallel/collective_error.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/checkpoint/manifest.hpp"
#include "trainer/io/progress.hpp"
#include "trainer/model/hf_weights.hpp"
#include "trainer/runtime/launch_checks.hpp"
#include "trainer/runtime/parallelize.hpp"
#include "trainer/runtime/run_environment.hpp"
#include "trainer/train/run_directory.hpp"

namespace gt {

// Rows this data rank reads for micro-batch k of a batch that starts at
// global row `batch_start`: the batch is cut into (micro_batch x data ranks)
// passes, each pass into one micro-batch per data rank, so the global row
// order is the one-rank order whatever the layout.
int64_t first_row(int64_t batch_start, int k, int micro_batch, int data_size, int data_rank) {
  return batch_start + static_cast<int64_t>(k) * micro_batch * data_size +
         static_cast<int64_t>(data_rank) * micro_batch;
}

void build_run(Run& run, const Config& cfg, MpiCommunicator* world, CollectiveContext* context) {
  const auto& tc = cfg.train;
  const int world_size = world ? world->size() : 1;
  run.dims = ParallelDims::validated(cfg.parallel.dp, cfg.parallel.fsdp, cfg.parallel.tp,
                                     world_size, cfg.parallel.pp, cfg.parallel.cp)
                 .with_expert_parallel(cfg.parallel.ep);
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
    // A nan fault poisons the loss scale, which only the last pipeline stage
    // applies (it starts the backward): elsewhere it would test nothing.
    const int per_stage = run.dims.world_size() / run.dims.pp;
    for (const Fault& f : run.faults.faults())
      if (f.kind == FaultKind::nan && run.dims.pp > 1 && f.rank / per_stage != run.dims.pp - 1)
        fail("TRAINER_FAULT (environment): nan:rank=", f.rank, " is on pipeline stage ",
             f.rank / per_stage, " of parallel.pp=", run.dims.pp,
             ", which computes no loss; name a rank of the last stage (ranks ",
             (run.dims.pp - 1) * per_stage, "..", run.dims.pp * per_stage - 1, ")");
    run.backend = make_compute_backend(cfg, detect_run_environment());
    run.train_data = std::make_unique<DataLoader>(
        cfg.data.train, "data.train", cfg.model.vocab_size, tc.seq_len, cfg.data.shuffle, tc.seed);
    check_data_covers_batch(*run.train_data, cfg);
    if (!cfg.data.val.empty() && tc.eval_every > 0)
      run.val_data = std::make_unique<DataLoader>(cfg.data.val, "data.val", cfg.model.vocab_size,
                                                  tc.seq_len, false, tc.seed);
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
      std::make_unique<ProfileSession>(cfg, run.mesh->rank(), run.backend.ops->make_op_timer());
  run.profile->observe(*run.backend.ops);
  if (run.backend.device != Device::cpu) {
    Ops* ops = run.backend.ops.get();  // outlives the session (Run's member order)
    run.profile->set_device_peak_memory([ops] { return ops->device_bytes_peak(); });
  }

  const MeshCoord& me = run.mesh->coord();
  const SequenceChunks sequence(tc.seq_len, run.dims.cp, cfg.parallel.cp_load_balance);
  for (int chunk : sequence.chunks(me.cp))
    run.sequence_spans.push_back({chunk * sequence.chunk_len(), sequence.chunk_len()});
  // Placement, data-parallel state, then the model (runtime/parallelize.hpp).
  ParallelModel pm =
      parallelize(cfg.model, parallel_plan(cfg), *run.mesh, *run.backend.ops,
                  {tc.micro_batch, tc.seq_len, tc.recompute, cfg.grad_accum_steps()}, context);
  run.layout = std::move(pm.layout);
  run.params = std::move(pm.params);
  run.router_bias = std::move(pm.router_bias);
  run.runner = std::move(pm.runner);
  Profiler* profiler = &run.profile->profiler();  // outlives the runner (Run's member order)
  run.runner->set_block_hook(
      [profiler](const std::string& name, Profiler::Clock::time_point begin,
                 Profiler::Clock::time_point end) { profiler->record_block(name, begin, end); });

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
    std::vector<TensorPiece> wanted = run.params->pieces_to_load();
    if (run.router_bias) {
      // A run that turns aux-loss-free balancing on at a resume starts its
      // biases at zero, as a new run does (every rank reads the same manifest).
      const ckpt::Manifest saved = ckpt::read_manifest(run.resume_dir);
      if (saved.tensors.count(RouterBias::tensor_name(0))) {
        const std::vector<TensorPiece> biases = run.router_bias->pieces_to_load();
        wanted.insert(wanted.end(), biases.begin(), biases.end());
      } else if (me == MeshCoord{}) {
        spdlog::warn("checkpoint {} holds no router selection biases (it was trained without "
                     "model.router_bias_update_rate): they start at zero",
                     run.resume_dir);
      }
    }
    // Rank 0's reads stand for the load's progress (every rank reads its own
    // boxes at once); a load of under 2 s prints none.
    ByteProgressLine progress("checkpoint load", {"rank 0's pieces"}, me == MeshCoord{});
    CheckpointMeta meta =
        load_checkpoint(run.resume_dir, model_signature(cfg.model), wanted, progress.callback());
    progress.finish();
    run.params->finish_load();
    if (run.router_bias) run.router_bias->finish_load();
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
    for_each_hf_tensor(cfg.model.init_from, cfg.model, [&](const ParamSpec& s, const float* data) {
      run.params->load_global(s.name, data);
    });
  } else {
    for_each_initial_parameter(cfg.model, tc.seed, [&](const ParamSpec& s, const float* data) {
      run.params->load_global(s.name, data);
    });
  }
}

double evaluate(Run& run, const Config& cfg) {
  const auto& tc = cfg.train;
  const int B = tc.micro_batch, D = run.dims.data_parallel();
  const int accum = cfg.grad_accum_steps();
  const int d = run.mesh->data().rank();  // this rank's data shard
  double sum = 0.0;
  for (int e = 0; e < tc.eval_batches; ++e)
    sum += run.runner->eval_loss_sum(accum, [&](int k, int32_t* x, int32_t* y) {
      run.val_data->fill(first_row(int64_t(e) * tc.global_batch, k, B, D, d), B, x, y,
                         run.sequence_spans);
    });
  sum = run.mesh->data().all_reduce_f64(mean_over_sequence(run, sum), ReduceOp::sum);
  return sum / (static_cast<double>(tc.eval_batches) * accum * D);
}

double mean_over_sequence(const Run& run, double local_mean) {
  const int cp = run.dims.cp;
  if (cp == 1) return local_mean;
  return run.mesh->cp().all_reduce_f64(local_mean, ReduceOp::sum) / cp;
}

}  // namespace gt
