// The training loop: builds the mesh, backend, data loaders, sharded
// parameters and model from a validated Config, optionally resumes, then runs
// optimizer steps with gradient accumulation, clipping, AdamW, evaluation,
// logging and checkpoints, on one process or on every rank of an MPI job.
//
// The loop is a Trainer (trainer.cpp) in steps: setup (run_setup.hpp builds
// and validates the run; the outputs are opened), then per step train_step,
// evaluation and checkpoints, then finish (final checkpoint, HF export).
//
// Start-up is two-phase: everything that can be wrong with the inputs (the
// layout, data files, init weights, the checkpoint to resume) is checked on
// every rank first and the ranks agree on the verdict (agree_on_setup), so a
// failed start prints one error, exits non-zero on every rank and leaves the
// run directory untouched. After that, an error on one rank aborts the job.
#pragma once

#include <cstdint>
#include <string>

#include "parallel/communicator.hpp"
#include "trainer/config/config.hpp"

namespace gt {

struct TrainSummary {
  int64_t first_step = 0;  // 0, or the step resumed from
  int64_t steps_run = 0;
  double final_loss = 0.0;
  std::string log_dir;
};

class MpiCommunicator;

// world: the job's communicator, or null for a single process without MPI.
TrainSummary run_training(const Config& cfg, MpiCommunicator* world = nullptr);

}  // namespace gt
