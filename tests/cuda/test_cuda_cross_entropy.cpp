// softmax_cross_entropy (kernels/cuda/cross_entropy.cu) against the CPU twin:
// V = 1, tiny V (shorter than one 16-byte head), odd V (every row starts at a
// different alignment), GPT-2's V; several grad_scale values; losses only
// (nullptr dlogits), separate dlogits, and in place (dlogits == logits),
// which must agree bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cross_entropy.cuh"
#include "test_util.hpp"

namespace {

using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

struct Case {
  int64_t R, V;
  float grad_scale;
};
const Case kCases[] = {{1, 1, 1.f},       {7, 3, 1.f},     {5, 771, 0.2f},
                       {64, 1024, 1.f / 64}, {3, 50257, 1.f}, {33, 50257, -0.5f}};

bool small_case(const Case& c) { return c.R * c.V <= 200000; }

std::string name(const Case& c) {
  return "R=" + std::to_string(c.R) + " V=" + std::to_string(c.V) +
         " grad_scale=" + std::to_string(c.grad_scale);
}

TEST(CudaCrossEntropy, FusedForwardBackwardMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  auto cpu = gt::make_cpu_ops(1);
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    const auto logits = random_vector(c.R * c.V, 7, -8.f, 8.f);
    auto targets = gt::test::random_ints(c.R, 8, 0, static_cast<int32_t>(c.V));
    std::vector<float> want_loss(c.R), want_dlogits(c.R * c.V), cpu_logits = logits;
    cpu->softmax_cross_entropy(gt::cpu_f32(want_loss.data(), {c.R}),
                               gt::cpu_f32(want_dlogits.data(), {c.R, c.V}),
                               gt::cpu_f32(cpu_logits.data(), {c.R, c.V}),
                               gt::cpu_i32(targets.data(), {c.R}), c.grad_scale);

    DeviceArray<float> d_logits(logits, stream.get());
    DeviceArray<int32_t> d_tgt(targets, stream.get());
    DeviceArray<float> loss(c.R, stream.get()), dlogits(c.R * c.V, stream.get());
    const float datol = 1e-6f * std::fabs(c.grad_scale);

    // Separate dlogits.
    loss.poison();
    dlogits.poison();
    gt::cuda::softmax_cross_entropy(loss.get(), dlogits.get(), d_logits.get(), d_tgt.get(), c.R,
                                    c.V, c.grad_scale, stream.get());
    const auto got_dlogits = dlogits.download();
    EXPECT_TRUE(all_close(loss.download(), want_loss, 1e-5f, 1e-5f)) << "losses";
    EXPECT_TRUE(all_close(got_dlogits, want_dlogits, datol, 1e-5f)) << "dlogits";
    EXPECT_TRUE(gt::test::bitwise_equal(d_logits.download(), logits)) << "logits modified";

    // Losses only.
    loss.poison();
    gt::cuda::softmax_cross_entropy(loss.get(), nullptr, d_logits.get(), d_tgt.get(), c.R, c.V,
                                    c.grad_scale, stream.get());
    EXPECT_TRUE(all_close(loss.download(), want_loss, 1e-5f, 1e-5f)) << "losses only";

    // In place: the gradient overwrites the logits.
    loss.poison();
    gt::cuda::softmax_cross_entropy(loss.get(), d_logits.get(), d_logits.get(), d_tgt.get(), c.R,
                                    c.V, c.grad_scale, stream.get());
    EXPECT_TRUE(all_close(loss.download(), want_loss, 1e-5f, 1e-5f)) << "losses in place";
    EXPECT_TRUE(gt::test::bitwise_equal(d_logits.download(), got_dlogits))
        << "in-place dlogits differ from out-of-place";
  }
}

TEST(CudaCrossEntropy, OutOfRangeTargetGivesNanLossAndSoftmaxGradient) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const int64_t R = 2, V = 37;
  DeviceArray<float> logits(random_vector(R * V, 3, -4.f, 4.f), stream.get());
  DeviceArray<int32_t> tgt(std::vector<int32_t>{-1, static_cast<int32_t>(V)}, stream.get());
  DeviceArray<float> loss(R, stream.get()), dlogits(R * V, stream.get());
  loss.poison();
  dlogits.poison();
  gt::cuda::softmax_cross_entropy(loss.get(), dlogits.get(), logits.get(), tgt.get(), R, V, 1.f,
                                  stream.get());
  const auto l = loss.download(), d = dlogits.download();
  for (int64_t r = 0; r < R; ++r) {
    EXPECT_TRUE(std::isnan(l[r])) << "row " << r;
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) {
      ASSERT_TRUE(std::isfinite(d[r * V + j])) << "row " << r << " col " << j;
      sum += d[r * V + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "softmax row " << r << " (no one-hot term)";
  }
}

}  // namespace
