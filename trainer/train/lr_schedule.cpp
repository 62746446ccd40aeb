#include "trainer/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace gt {

double learning_rate(const TrainConfig& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / t.warmup_steps;
  if (t.lr_schedule == LrSchedule::constant) return t.lr;
  const double span = std::max<int64_t>(1, t.steps - t.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup_steps) / span);
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace gt
