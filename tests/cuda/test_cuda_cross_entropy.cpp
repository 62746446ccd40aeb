// softmax_cross_entropy (kernels/cuda/cross_entropy.cu) against the CPU twin:
// V = 1, tiny V (shorter than one 16-byte head), odd V (every row starts at a
// different alignment), GPT-2's V; several grad_scale values; losses only
// (nullptr dlogits), separate dlogits, and in place (dlogits == logits),
// which must agree bit for bit; padded vocabularies (GPT-2's 50257 in 50304
// columns), whose padding gets exactly zero gradient; bf16 logits.
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
  int64_t vocab = 0;  // the vocabulary's columns [0, vocab), the rest padding; 0 = V
  int64_t real() const { return vocab ? vocab : V; }
};
const Case kCases[] = {{1, 1, 1.f},          {7, 3, 1.f},      {5, 771, 0.2f},
                       {64, 1024, 1.f / 64}, {3, 50257, 1.f},  {33, 50257, -0.5f},
                       {5, 896, 0.2f, 771},  {3, 128, 1.f, 1}, {33, 50304, -0.5f, 50257}};

bool small_case(const Case& c) { return c.R * c.V <= 200000; }

std::string name(const Case& c) {
  return "R=" + std::to_string(c.R) + " V=" + std::to_string(c.V) +
         " vocab=" + std::to_string(c.real()) + " grad_scale=" + std::to_string(c.grad_scale);
}

TEST(CudaCrossEntropy, FusedForwardBackwardMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  auto cpu = gt::make_cpu_ops(1);
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    auto logits = random_vector(c.R * c.V, 7, -8.f, 8.f);
    for (int64_t r = 0; r < c.R; ++r)  // padding above every real logit: it must not count
      for (int64_t j = c.real(); j < c.V; ++j) logits[r * c.V + j] = 20.f;
    auto targets = gt::test::random_ints(c.R, 8, 0, static_cast<int32_t>(c.real()));
    std::vector<float> want_loss(c.R), want_dlogits(c.R * c.V), cpu_logits = logits;
    cpu->softmax_cross_entropy(gt::cpu_f32(want_loss.data(), {c.R}),
                               gt::cpu_f32(want_dlogits.data(), {c.R, c.V}),
                               gt::cpu_f32(cpu_logits.data(), {c.R, c.V}),
                               gt::cpu_i32(targets.data(), {c.R}), c.real(), c.grad_scale);

    DeviceArray<float> d_logits(logits, stream.get());
    DeviceArray<int32_t> d_tgt(targets, stream.get());
    DeviceArray<float> loss(c.R, stream.get()), dlogits(c.R * c.V, stream.get());
    const float datol = 1e-6f * std::fabs(c.grad_scale);

    // Separate dlogits.
    loss.poison();
    dlogits.poison();
    gt::cuda::softmax_cross_entropy(loss.get(), dlogits.get(), d_logits.get(), d_tgt.get(), c.R,
                                    c.V, c.real(), c.grad_scale, stream.get());
    const auto got_dlogits = dlogits.download();
    EXPECT_TRUE(all_close(loss.download(), want_loss, 1e-5f, 1e-5f)) << "losses";
    EXPECT_TRUE(all_close(got_dlogits, want_dlogits, datol, 1e-5f)) << "dlogits";
    for (int64_t r = 0; r < c.R; ++r)
      for (int64_t j = c.real(); j < c.V; ++j)
        ASSERT_EQ(got_dlogits[r * c.V + j], 0.f) << "padding row " << r << " col " << j;
    EXPECT_TRUE(gt::test::bitwise_equal(d_logits.download(), logits)) << "logits modified";

    // Losses only.
    loss.poison();
    gt::cuda::softmax_cross_entropy(loss.get(), nullptr, d_logits.get(), d_tgt.get(), c.R, c.V,
                                    c.real(), c.grad_scale, stream.get());
    EXPECT_TRUE(all_close(loss.download(), want_loss, 1e-5f, 1e-5f)) << "losses only";

    // In place: the gradient overwrites the logits.
    loss.poison();
    gt::cuda::softmax_cross_entropy(loss.get(), d_logits.get(), d_logits.get(), d_tgt.get(), c.R,
                                    c.V, c.real(), c.grad_scale, stream.get());
    EXPECT_TRUE(all_close(loss.download(), want_loss, 1e-5f, 1e-5f)) << "losses in place";
    EXPECT_TRUE(gt::test::bitwise_equal(d_logits.download(), got_dlogits))
        << "in-place dlogits differ from out-of-place";
  }
}

// bf16 logits and dlogits (the bf16 model's LM head), separate and in place,
// padded vocabularies included, against the CPU twin on the same bits: the
// losses to 1e-5, the dlogits to a bf16 rounding step (the fp32 gradients
// differ in their last bits, which can round either way).
TEST(CudaCrossEntropy, Bf16LogitsMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  auto cpu = gt::make_cpu_ops(1);
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    auto logits = random_vector(c.R * c.V, 9, -8.f, 8.f);
    for (int64_t r = 0; r < c.R; ++r)
      for (int64_t j = c.real(); j < c.V; ++j) logits[r * c.V + j] = 20.f;
    auto bits = gt::test::to_bf16(logits);
    auto targets = gt::test::random_ints(c.R, 10, 0, static_cast<int32_t>(c.real()));
    std::vector<float> want_loss(c.R);
    std::vector<uint16_t> want_d(bits.size());
    cpu->softmax_cross_entropy(
        gt::cpu_f32(want_loss.data(), {c.R}),
        gt::make_view(want_d.data(), gt::DType::bf16, gt::Device::cpu, {c.R, c.V}),
        gt::make_view(bits.data(), gt::DType::bf16, gt::Device::cpu, {c.R, c.V}),
        gt::cpu_i32(targets.data(), {c.R}), c.real(), c.grad_scale);

    DeviceArray<uint16_t> d_logits(bits, stream.get()), dlogits(c.R * c.V, stream.get());
    DeviceArray<int32_t> d_tgt(targets, stream.get());
    DeviceArray<float> loss(c.R, stream.get());
    auto bf = [](DeviceArray<uint16_t>& a) { return reinterpret_cast<__nv_bfloat16*>(a.get()); };
    const float datol = 1e-6f * std::fabs(c.grad_scale);
    loss.poison();
    dlogits.poison();
    gt::cuda::softmax_cross_entropy(loss.get(), bf(dlogits), bf(d_logits), d_tgt.get(), c.R, c.V,
                                    c.real(), c.grad_scale, stream.get());
    const auto got_bits = dlogits.download();
    EXPECT_TRUE(all_close(loss.download(), want_loss, 1e-5f, 1e-5f)) << "losses";
    EXPECT_TRUE(all_close(gt::test::from_bf16(got_bits), gt::test::from_bf16(want_d), datol, 8e-3f))
        << "dlogits";
    for (int64_t r = 0; r < c.R; ++r)
      for (int64_t j = c.real(); j < c.V; ++j)
        ASSERT_EQ(got_bits[r * c.V + j], 0) << "padding row " << r << " col " << j;
    EXPECT_TRUE(d_logits.download() == bits) << "logits modified";
    // In place: the same bits as out of place.
    gt::cuda::softmax_cross_entropy(loss.get(), bf(d_logits), bf(d_logits), d_tgt.get(), c.R, c.V,
                                    c.real(), c.grad_scale, stream.get());
    EXPECT_TRUE(d_logits.download() == got_bits) << "in-place dlogits differ from out-of-place";
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
  gt::cuda::softmax_cross_entropy(loss.get(), dlogits.get(), logits.get(), tgt.get(), R, V, V, 1.f,
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
