// The training loop: builds the backend, data loaders and model from a
// validated Config, optionally resumes, then runs optimizer steps with
// gradient accumulation, clipping, AdamW, evaluation, logging and
// checkpoints. Everything that can be wrong with the inputs (data files,
// init weights, checkpoint to resume) is checked before any output is
// created, so a failed start leaves the run directory untouched.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/config/config.hpp"

namespace gt {

struct TrainSummary {
  int64_t first_step = 0;  // 0, or the step resumed from
  int64_t steps_run = 0;
  double final_loss = 0.0;
  std::string log_dir;
};

TrainSummary run_training(const Config& cfg);

}  // namespace gt
