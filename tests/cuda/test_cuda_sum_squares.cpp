// sum_squares (kernels/cuda/sum_squares.cu) against the CPU twin: empty,
// tiny, odd and large n, aligned and offset-by-one, the poisoned result
// assigned, and bit-identical repeat runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
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

}  // namespace
