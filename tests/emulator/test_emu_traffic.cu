// Per-kernel traffic counting (gt_emu/control.hpp, src/traffic.hpp): a copy
// kernel is charged the source's pages as read and the destination's as
// written; a read-modify-write kernel both; a kernel reading part of a buffer
// only those pages; launches while counting is off nothing. An allocation
// ends within 255 bytes of a page boundary (device_memory.hpp); the sizes
// here are multiples of 256 bytes, so each ends exactly at one and a buffer
// of n bytes spans exactly ceil(n / page) pages, as does any tail of it.
#include <gtest/gtest.h>

#include <vector>

#include "emu_test_util.hpp"
#include "kernels/cuda/device_common.cuh"

namespace gt::emu_test {
namespace {

namespace dev = gt::cuda::dev;

__global__ void copy_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void scale_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= 2.f;
}

// Pages spanned by n bytes that end at a page boundary.
unsigned long long pages(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page;
}

class EmuTraffic : public ::testing::Test {
 protected:
  void SetUp() override { (void)gt::emu::take_traffic(); }
  void TearDown() override { gt::emu::set_traffic_counting(false); }
  cuda::CudaStream s;
};

TEST_F(EmuTraffic, ACopyReadsTheSourcePagesAndWritesTheDestinationPages) {
  const int64_t n = 10048;  // 40192 bytes: 9.8 pages of 4 KiB
  test::DeviceArray<float> src(std::vector<float>(n, 1.f), s.get()), dst(n, s.get());
  gt::emu::set_traffic_counting(true);
  dev::launch(copy_kernel, {8, 128, 0, s.get()}, dst.get(), src.get(), n);
  ASSERT_EQ(cudaStreamSynchronize(s.get()), cudaSuccess);
  const auto t = gt::emu::take_traffic();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_NE(t[0].kernel.find("test_emu_traffic.cu"), std::string::npos) << t[0].kernel;
  EXPECT_EQ(t[0].pages_read, pages(n * sizeof(float)));
  EXPECT_EQ(t[0].pages_written, pages(n * sizeof(float)));
  EXPECT_EQ(t[0].bytes_read(), t[0].pages_read * t[0].page_bytes);
  EXPECT_EQ(dst.download(), std::vector<float>(n, 1.f)) << "the counted kernel computed the same";
}

TEST_F(EmuTraffic, ReadModifyWriteCountsBothAndAPartialReadOnlyItsPages) {
  const int64_t n = 5120;  // 5 pages
  test::DeviceArray<float> x(std::vector<float>(n, 3.f), s.get()), y(n, s.get());
  gt::emu::set_traffic_counting(true);
  dev::launch(scale_kernel, {4, 64, 0, s.get()}, x.get(), n);
  // The last 1000 floats of x into y's last 1000: both end at a page
  // boundary, so that is ceil(4000 / page) = 1 page of each.
  dev::launch(copy_kernel, {4, 64, 0, s.get()}, y.get() + (n - 1000), x.get() + (n - 1000),
              int64_t{1000});
  ASSERT_EQ(cudaStreamSynchronize(s.get()), cudaSuccess);
  const auto t = gt::emu::take_traffic();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].pages_read, pages(n * sizeof(float)));
  EXPECT_EQ(t[0].pages_written, pages(n * sizeof(float)));
  EXPECT_EQ(t[1].pages_read, pages(1000 * sizeof(float)));
  EXPECT_EQ(t[1].pages_written, pages(1000 * sizeof(float)));
  EXPECT_EQ(x.download(), std::vector<float>(n, 6.f));
}

TEST_F(EmuTraffic, NothingIsCountedWhileCountingIsOff) {
  const int64_t n = 2048;
  test::DeviceArray<float> x(std::vector<float>(n, 1.f), s.get());
  dev::launch(scale_kernel, {2, 64, 0, s.get()}, x.get(), n);
  ASSERT_EQ(cudaStreamSynchronize(s.get()), cudaSuccess);
  EXPECT_TRUE(gt::emu::take_traffic().empty());
  // Switched on and off again between launches: still nothing.
  gt::emu::set_traffic_counting(true);
  gt::emu::set_traffic_counting(false);
  dev::launch(scale_kernel, {2, 64, 0, s.get()}, x.get(), n);
  ASSERT_EQ(cudaStreamSynchronize(s.get()), cudaSuccess);
  EXPECT_TRUE(gt::emu::take_traffic().empty());
  EXPECT_EQ(x.download(), std::vector<float>(n, 4.f));
}

}  // namespace
}  // namespace gt::emu_test
