// fast_exp (kernels/cpu/fast_math.hpp) against double-precision std::exp on
// a dense sweep of its whole useful range, held to the accuracy its header
// promises.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/fast_math.hpp"

namespace gt::cpu {
namespace {

TEST(FastMath, ExpRelativeErrorBelow2e7) {
  double worst = 0.0, worst_x = 0.0;
  for (int64_t i = 0; i <= 2000000; ++i) {
    const float x = static_cast<float>(-87.0 + 175.0 * static_cast<double>(i) / 2000000.0);
    const double ref = std::exp(static_cast<double>(x));
    const double rel = std::fabs(fast_exp(x) - ref) / ref;
    if (rel > worst) worst = rel, worst_x = x;
  }
  EXPECT_LT(worst, 2e-7) << "worst at x=" << worst_x;
  EXPECT_EQ(fast_exp(0.f), 1.f);
  EXPECT_EQ(fast_exp(-200.f), fast_exp(-87.3f));  // clamped, finite, tiny
  EXPECT_GT(fast_exp(-200.f), 0.f);
  EXPECT_TRUE(std::isfinite(fast_exp(1000.f)));
  EXPECT_TRUE(std::isfinite(fast_exp(88.7f)));
}

}  // namespace
}  // namespace gt::cpu
