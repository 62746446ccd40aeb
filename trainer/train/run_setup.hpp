// The setup of a training run (the Trainer's first step, trainer.hpp):
// everything a run needs, built and validated on every rank before any output
// exists, and the rows each data rank reads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/collective_context.hpp"
#include "parallel/mesh.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/parallel_dims.hpp"
#include "trainer/config/config.hpp"
#include "trainer/data/data_loader.hpp"
#include "trainer/model/causal_lm.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/profile/profile_session.hpp"
#include "trainer/runtime/compute_backend.hpp"
#include "trainer/runtime/router_bias.hpp"
#include "trainer/runtime/step_runner.hpp"
#include "trainer/sharding/sharded_parameters.hpp"
#include "trainer/train/fault_injection.hpp"

namespace gt {

// Everything a run needs, built and validated before any output exists.
// Members are destroyed in reverse order: the backend (a CUDA stream) outlives
// the mesh's communicators (staged and NCCL ones order their work on it),
// which outlive the profiler observing them and the backend's ops; the
// runner (with the model) and the parameters (backend memory) go first.
struct Run {
  ParallelDims dims;
  ComputeBackend backend;
  std::unique_ptr<DeviceMesh> mesh;
  std::unique_ptr<ProfileSession> profile;
  std::unique_ptr<DataLoader> train_data, val_data;
  // This rank's part of each sequence the loaders read: its context-parallel
  // chunks (the whole window at cp = 1).
  std::vector<DataLoader::Span> sequence_spans;
  std::unique_ptr<ParameterLayout> layout;
  std::unique_ptr<ShardedParameters> params;
  // Aux-loss-free balancing's selection biases (model.router_bias_update_rate
  // > 0; null otherwise), read by the runner's models.
  std::unique_ptr<RouterBias> router_bias;
  // The step's micro-batches over the model (or a pipeline stage's model
  // instances), which it owns (step_runner.hpp).
  std::unique_ptr<StepRunner> runner;
  std::string resume_dir;
  int64_t start_step = 0;
  int64_t optimizer_step = 0;
  FaultInjector faults;  // TRAINER_FAULT (tests); empty otherwise
};

// Rows this data rank reads for micro-batch k of a batch that starts at
// global row `batch_start`: the batch is cut into (micro_batch x data ranks)
// passes, each pass into one micro-batch per data rank, so the global row
// order is the one-rank order whatever the layout.
int64_t first_row(int64_t batch_start, int k, int micro_batch, int data_size, int data_rank);

// Builds `run` from a validated config on every rank of `world` (null: one
// process): the mesh (the one collective of start-up), the backend, data,
// output checks (agreed over the ranks before anything large is allocated),
// the device mesh, the profiler, the layout, sharded parameters and model,
// then the weights: a resumed checkpoint, HF init weights, or the seed's.
// `context` (may be null) is where a pipeline stage names its action in
// progress for collective-deadline messages; it outlives the run.
void build_run(Run& run, const Config& cfg, MpiCommunicator* world,
               CollectiveContext* context = nullptr);

// Mean validation loss over eval_batches global batches of data.val from its
// start (the same rows for every layout and every evaluation), through the
// run's StepRunner (every pipeline stage takes part).
double evaluate(Run& run, const Config& cfg);

// A loss averaged over this rank's positions, averaged over the cp ranks
// (each holds as many positions of the same rows): the mean over the whole
// sequences. Collective over cp; the identity at cp = 1.
double mean_over_sequence(const Run& run, double local_mean);

}  // namespace gt
