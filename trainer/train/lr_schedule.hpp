// Learning rate at optimizer step s (0-based): linear warmup over
// warmup_steps to lr, then constant or cosine decay to min_lr at `steps`.
#pragma once

#include "trainer/config/config.hpp"

namespace gt {

double learning_rate(const TrainConfig& t, int64_t step);

}  // namespace gt
