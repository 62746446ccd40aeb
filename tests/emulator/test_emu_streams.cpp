// Streams, events and memory on the emulated device: work is deferred and
// runs in an order that respects only the declared dependencies, so a
// consumer that forgot its cudaStreamWaitEvent reads stale data in some
// legal order (GT_EMU_STREAM_ORDER), while the same code with the wait is
// right in every order. Also: event timing, the copy-kind and range checks,
// and host code touching device memory, which dies with a report.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu_test_util.hpp"

namespace gt::emu_test {
namespace {

// Producer on stream a fills `dev` with `value`; consumer on stream b copies
// it to pinned host memory. Returns what the consumer saw.
uint32_t produce_then_consume(uint32_t value, bool declare_wait) {
  cuda::CudaStream a, b;
  cuda::CudaEvent produced;
  cuda::DeviceBuffer dev(sizeof(uint32_t));
  cuda::PinnedBuffer host(sizeof(uint32_t));
  CUDA_CHECK(cudaMemset(dev.data(), 0, sizeof(uint32_t)));
  CUDA_CHECK(cudaMemsetAsync(dev.data(), static_cast<int>(value & 0xff), sizeof(uint32_t), a.get()));
  produced.record(a.get());
  if (declare_wait) b.wait(produced.get());
  CUDA_CHECK(cudaMemcpyAsync(host.data(), dev.data(), sizeof(uint32_t), cudaMemcpyDeviceToHost,
                             b.get()));
  b.synchronize();
  const uint32_t seen = *host.as<uint32_t>();
  a.synchronize();
  return seen;
}

class EmuStreams : public ::testing::Test {
 protected:
  void TearDown() override { gt::emu::set_stream_order("issue"); }
};

TEST_F(EmuStreams, ADeclaredWaitIsRightInEveryOrder) {
  for (const char* order : {"issue", "reverse", "random"}) {
    ASSERT_TRUE(gt::emu::set_stream_order(order));
    for (int i = 0; i < 8; ++i) EXPECT_EQ(produce_then_consume(0x11, true), 0x11111111u) << order;
  }
}

TEST_F(EmuStreams, AMissingWaitReadsUnfinishedDataInSomeLegalOrder) {
  ASSERT_TRUE(gt::emu::set_stream_order("reverse"));
  EXPECT_EQ(produce_then_consume(0x11, false), 0u)
      << "the consumer ran after the producer although nothing ordered it so";
  // Random orders: over a few draws both outcomes appear.
  ASSERT_TRUE(gt::emu::set_stream_order("random"));
  bool stale = false, fresh = false;
  for (int i = 0; i < 64 && !(stale && fresh); ++i) {
    const uint32_t v = produce_then_consume(0x22, false);
    stale = stale || v == 0;
    fresh = fresh || v == 0x22222222u;
  }
  EXPECT_TRUE(stale && fresh);
}

TEST_F(EmuStreams, WorkNothingWaitedForStaysQueued) {
  cuda::CudaStream a;
  cuda::DeviceBuffer dev(4);
  cuda::PinnedBuffer host(4);
  *host.as<uint32_t>() = 5;
  CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), 4, cudaMemcpyHostToDevice, a.get()));
  // The copy has not run: the pinned source is read when it does.
  *host.as<uint32_t>() = 9;
  EXPECT_EQ(cudaStreamQuery(a.get()), cudaSuccess);  // a query runs what it can
  CUDA_CHECK(cudaMemcpy(host.data(), dev.data(), 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(*host.as<uint32_t>(), 9u);
}

TEST_F(EmuStreams, EventsOrderStreamsAndTimeThem) {
  cuda::CudaStream a;
  cuda::CudaEvent start(0), stop(0), untimed;
  start.record(a.get());
  cuda::DeviceBuffer dev(1 << 20);
  CUDA_CHECK(cudaMemsetAsync(dev.data(), 1, 1 << 20, a.get()));
  stop.record(a.get());
  untimed.record(a.get());
  float ms = -1.f;
  EXPECT_EQ(cudaEventQuery(stop.get()), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start.get(), stop.get()), cudaSuccess);
  EXPECT_GE(ms, 0.f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start.get(), untimed.get()), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
}

TEST_F(EmuStreams, CopiesCheckTheirKindAndTheirRange) {
  cuda::DeviceBuffer dev(64);
  std::vector<unsigned char> host(128);
  EXPECT_EQ(cudaMemcpy(host.data(), dev.data(), 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(dev.data(), host.data(), 128, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(dev.data(), host.data(), 64, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(dev.data(), host.data(), 64, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), dev.data(), 64, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

// A pitched copy reads a column of a row-major matrix (how the sampled GEMM
// check fetches a column of the logits); its span must fit the allocation.
TEST_F(EmuStreams, PitchedCopiesGatherAColumnAndCheckTheirSpan) {
  const int rows = 5, cols = 7;
  std::vector<float> m(rows * cols);
  for (int i = 0; i < rows * cols; ++i) m[i] = static_cast<float>(i);
  cuda::DeviceBuffer dev(m.size() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(dev.data(), m.data(), dev.bytes(), cudaMemcpyHostToDevice));
  std::vector<float> col(rows, -1.f);
  CUDA_CHECK(cudaMemcpy2D(col.data(), sizeof(float), dev.as<float>() + 3, cols * sizeof(float),
                          sizeof(float), rows, cudaMemcpyDeviceToHost));
  for (int r = 0; r < rows; ++r) EXPECT_EQ(col[r], static_cast<float>(r * cols + 3)) << r;
  // Column 7 of 7 would run one element past the allocation on its last row.
  EXPECT_EQ(cudaMemcpy2D(col.data(), sizeof(float), dev.as<float>() + 7, cols * sizeof(float),
                         sizeof(float), rows, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy2D(col.data(), 2, dev.data(), 4, sizeof(float), rows, cudaMemcpyDeviceToHost),
            cudaErrorInvalidPitchValue);
  (void)cudaGetLastError();
}

#if !defined(__SANITIZE_THREAD__)  // death tests fork; TSan does not follow
TEST(EmuStreamsDeathTest, HostCodeTouchingDeviceMemoryDiesWithAReport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        cuda::DeviceBuffer dev(256);
        volatile float* p = dev.as<float>();
        p[3] = 1.f;
      },
      "host code touched device memory: byte 12 of device allocation");
}
#endif

}  // namespace
}  // namespace gt::emu_test
