// sum_squares (kernels/cuda/sum_squares.cu) against the CPU twin: empty,
// tiny, odd and large n, aligned and offset-by-one, the poisoned result
// assigned, and bit-identical repeat runs; its form over runs and clip_scale
// (the device-side clip_grad_norm_) likewise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/sum_squares.cuh"
#include "test_util.hpp"

namespace {

using gt::test::DeviceArray;
using gt::test::random_vector;

struct Case {
  int64_t n, offset;
};
const Case kCases[] = {{0, 0}, {1, 0}, {5, 0}, {1000003, 0}, {1000003, 1}, {(1 << 24) + 3, 2}};

std::string name(const Case& c) {
  return "n=" + std::to_string(c.n) + " offset=" + std::to_string(c.offset);
}

TEST(CudaSumSquares, MatchesCpuAndIsDeterministic) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  auto cpu = gt::make_cpu_ops(1);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    auto x = random_vector(c.n, 5, -3.f, 3.f);
    const double want = cpu->sum_squares(gt::cpu_f32(x.data(), {c.n}));

    std::vector<float> padded(c.offset, 100.f);  // would show if summed
    padded.insert(padded.end(), x.begin(), x.end());
    DeviceArray<float> d_x(padded, stream.get());
    DeviceArray<double> out(1, stream.get());
    DeviceArray<double> scratch(gt::cuda::sum_squares_scratch_doubles(c.n), stream.get());
    out.poison();
    scratch.poison();
    gt::cuda::sum_squares(out.get(), d_x.get() + c.offset, c.n, scratch.get(), stream.get());
    const double got = out.download()[0];
    // 1e-7: covers a twin that squares in fp32 before accumulating in double.
    EXPECT_NEAR(got, want, 1e-7 * std::fabs(want) + 1e-12);

    out.poison();
    gt::cuda::sum_squares(out.get(), d_x.get() + c.offset, c.n, scratch.get(), stream.get());
    const double again = out.download()[0];
    EXPECT_EQ(std::memcmp(&got, &again, sizeof(double)), 0)
        << "not deterministic: " << got << " vs " << again;
  }
}

// The gradient norm's form over runs through CudaOps: several runs (one
// unaligned, one spanning chunks, a gap holding values that would show if
// summed), the fp32 result within a rounding of the CPU twin's, repeat runs
// bit-identical, and no runs giving 0.
TEST(CudaSumSquares, RunsMatchCpuAndAreDeterministic) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  auto cpu = gt::make_cpu_ops(1);
  const int64_t n = 300007;
  auto x = random_vector(n, 6, -3.f, 3.f);
  for (int64_t i = 100000; i < 100100; ++i) x[i] = 1e4f;  // the gap
  const std::vector<gt::AdamWRun> runs = {
      {0, 1, 99999, true}, {0, 100100, 5, false}, {0, 100108, 199899, true}};
  std::vector<float> want{0.f};
  cpu->sum_squares_runs(gt::cpu_f32(want.data(), {1}), gt::cpu_f32(x.data(), {n}), runs);
  DeviceArray<float> d_x(x, ops.stream()), out(1, ops.stream());
  out.poison();
  ops.sum_squares_runs(gt::test::dev_view(out, gt::DType::f32, {1}),
                       gt::test::dev_view(d_x, gt::DType::f32, {n}), runs);
  const float got = out.download()[0];
  EXPECT_NEAR(got, want[0], 2e-7 * want[0]);
  out.poison();
  ops.sum_squares_runs(gt::test::dev_view(out, gt::DType::f32, {1}),
                       gt::test::dev_view(d_x, gt::DType::f32, {n}), runs);
  EXPECT_EQ(out.download()[0], got) << "not deterministic";
  ops.sum_squares_runs(gt::test::dev_view(out, gt::DType::f32, {1}),
                       gt::test::dev_view(d_x, gt::DType::f32, {n}), {});
  EXPECT_EQ(out.download()[0], 0.f);
}

TEST(CudaClipScale, MatchesCpuIncludingTheSkipVerdict) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  auto cpu = gt::make_cpu_ops(1);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const float cases[][3] = {{16.f, 3.f, 1.f},  {0.25f, 3.f, 1.f}, {1e6f, 3.f, 0.f},
                            {7.3f, 1.f, 0.5f}, {inf, 3.f, 1.f},   {nan, 3.f, 1.f},
                            {16.f, inf, 1.f},  {16.f, nan, 0.f}};
  for (const auto& c : cases) {
    SCOPED_TRACE("sq " + std::to_string(c[0]) + " loss " + std::to_string(c[1]) + " max " +
                 std::to_string(c[2]));
    std::vector<float> stats{c[0], c[1]}, want{0.f};
    cpu->clip_scale(gt::cpu_f32(want.data(), {1}), gt::cpu_f32(stats.data(), {2}), c[2]);
    DeviceArray<float> d_stats(stats, ops.stream()), d_scale(1, ops.stream());
    d_scale.poison();
    ops.clip_scale(gt::test::dev_view(d_scale, gt::DType::f32, {1}),
                   gt::test::dev_view(d_stats, gt::DType::f32, {2}), c[2]);
    const float got = d_scale.download()[0];
    if (std::isnan(want[0]))
      EXPECT_TRUE(std::isnan(got)) << got;
    else
      EXPECT_EQ(got, want[0]);
  }
}

}  // namespace
