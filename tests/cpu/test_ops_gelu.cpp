// CPU tanh-GELU forward/backward against a double reference of
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and finite differences.
#include <cmath>

#include "test_ops_common.hpp"

namespace gt::test {
namespace {

double gelu_ref(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

TEST(CpuGelu, ForwardMatchesReference) {
  auto ops = cpu_ops();
  for (int64_t n : {int64_t{37}, int64_t{40001}}) {  // serial and parallel loop
    SCOPED_TRACE(testing::Message() << "n=" << n);
    std::vector<float> x = random_vector(n, 500, -6.f, 6.f), y(n);
    ops->gelu_forward(f32(y, {n}), f32(x, {n}));
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = gelu_ref(x[i]);
    EXPECT_TRUE(all_close(y, to_float(ref), 1e-6f, 1e-5f));
  }
}

TEST(CpuGelu, BackwardMatchesFiniteDifferencesAndAssigns) {
  auto ops = cpu_ops();
  const int64_t R = 5, C = 12;
  std::vector<float> x = random_vector(R * C, 510, -4.f, 4.f), w = random_vector(R * C, 511);
  std::vector<float> dinp(R * C, 9.f);  // assigned: the pre-fill must vanish
  ops->gelu_backward(f32(dinp, {R, C}), f32(x, {R, C}), f32(w, {R, C}));
  auto loss = [&] {
    std::vector<float> y(R * C);
    ops->gelu_forward(f32(y, {R, C}), f32(x, {R, C}));
    return weighted_sum(y, w);
  };
  EXPECT_TRUE(grad_close(dinp, numeric_grad(x, loss)));
}

TEST(CpuGelu, BackwardMatchesAnalyticReferenceOnLargeInput) {
  auto ops = cpu_ops();
  const int64_t n = 40001;
  std::vector<float> x = random_vector(n, 520, -6.f, 6.f), dy = random_vector(n, 521), dx(n);
  ops->gelu_backward(f32(dx, {n}), f32(x, {n}), f32(dy, {n}));
  std::vector<double> ref(n);
  const double s = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    const double xi = x[i], u = s * (xi + 0.044715 * xi * xi * xi), th = std::tanh(u);
    ref[i] = dy[i] * (0.5 * (1 + th) + 0.5 * xi * (1 - th * th) * s * (1 + 3 * 0.044715 * xi * xi));
  }
  EXPECT_TRUE(all_close(dx, to_float(ref), 1e-6f, 1e-5f));
}

// Pre-activations far in either tail (a large GEMM's sums reach +-30): the
// derivative goes to 0 and 1, and nothing on the way may overflow.
TEST(CpuGelu, BothTailsStayFiniteAndExact) {
  auto ops = cpu_ops();
  std::vector<float> x;
  for (float v = -60.f; v <= 60.f; v += 0.37f) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> dy(n, 1.f), dx(n), y(n);
  ops->gelu_forward(f32(y, {n}), f32(x, {n}));
  ops->gelu_backward(f32(dx, {n}), f32(x, {n}), f32(dy, {n}));
  const double s = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    const double xi = x[i], u = s * (xi + 0.044715 * xi * xi * xi), th = std::tanh(u);
    const double fwd = 0.5 * xi * (1 + th);
    const double bwd = 0.5 * (1 + th) + 0.5 * xi * (1 - th * th) * s * (1 + 3 * 0.044715 * xi * xi);
    ASSERT_NEAR(y[i], fwd, 1e-5 + 1e-6 * std::fabs(fwd)) << "x = " << xi;
    ASSERT_NEAR(dx[i], bwd, 1e-5) << "x = " << xi;
  }
}

TEST(CpuGelu, RejectsMismatchedShapes) {
  auto ops = cpu_ops();
  std::vector<float> x(12), y(12);
  EXPECT_THROW(ops->gelu_forward(f32(y, {3, 4}), f32(x, {4, 3})), Error);
}

}  // namespace
}  // namespace gt::test
