// The CUDA foundation: check macros, device detection and the RAII owners.
// The macro and detection tests need no device and run everywhere; the
// owner tests skip without one.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <utility>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_resources.hpp"

namespace {

using gt::cuda::CublasLtHandle;
using gt::cuda::CudaEvent;
using gt::cuda::CudaStream;
using gt::cuda::DeviceBuffer;
using gt::cuda::PinnedBuffer;

template <typename T>
constexpr bool kMoveOnly = !std::is_copy_constructible_v<T> && !std::is_copy_assignable_v<T> &&
                           std::is_nothrow_move_constructible_v<T> &&
                           std::is_nothrow_move_assignable_v<T>;
static_assert(kMoveOnly<DeviceBuffer>);
static_assert(kMoveOnly<PinnedBuffer>);
static_assert(kMoveOnly<CudaStream>);
static_assert(kMoveOnly<CudaEvent>);
static_assert(kMoveOnly<CublasLtHandle>);

std::string message_of_cuda_failure() {
  try {
    CUDA_CHECK(cudaErrorInvalidValue);
  } catch (const gt::Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaCheck, ThrowsErrorNamingExpressionStringLocationAndHost) {
  const std::string msg = message_of_cuda_failure();
  ASSERT_FALSE(msg.empty()) << "CUDA_CHECK did not throw gt::Error";
  EXPECT_NE(msg.find("CUDA error"), std::string::npos) << msg;
  EXPECT_NE(msg.find("`cudaErrorInvalidValue`"), std::string::npos) << msg;
  EXPECT_NE(msg.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_cuda_resources.cpp:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("host "), std::string::npos) << msg;
}

TEST(CudaCheck, CublasCheckThrowsWithStatusString) {
  try {
    CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE);
    FAIL() << "CUBLAS_CHECK did not throw";
  } catch (const gt::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuBLAS error"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << msg;
  }
}

TEST(CudaCheck, SuccessEvaluatesOnceAndDoesNotThrow) {
  int calls = 0;
  auto ok = [&] {
    ++calls;
    return cudaSuccess;
  };
  EXPECT_NO_THROW(CUDA_CHECK(ok()));
  EXPECT_EQ(calls, 1);
}

TEST(CudaDevice, CountNeverThrowsAndMatchesAvailable) {
  int n = -1;
  EXPECT_NO_THROW(n = gt::cuda_device_count());
  EXPECT_GE(n, 0);
  EXPECT_EQ(gt::cuda_available(), n > 0);
  EXPECT_EQ(gt::cuda_device_count(), n) << "a second ask must agree (and not throw)";
  // With a working runtime, asking leaves no error behind for the next
  // check. (Without a driver every runtime call, cudaGetLastError included,
  // reports the initialisation failure, so there is nothing to check.)
  if (n > 0) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST(CudaResources, DeviceAndPinnedBuffersAllocateAndMove) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  DeviceBuffer a(1 << 20);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.bytes(), size_t{1} << 20);
  void* p = a.data();
  DeviceBuffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  DeviceBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(DeviceBuffer(0).data(), nullptr);

  PinnedBuffer h(4096);
  ASSERT_NE(h.data(), nullptr);
  h.as<unsigned char>()[4095] = 7;  // host-accessible
  PinnedBuffer h2(std::move(h));
  EXPECT_EQ(h2.as<unsigned char>()[4095], 7);
}

TEST(CudaResources, StreamEventOrderingAndTiming) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  CudaStream s1, s2;
  CudaEvent start(0), stop(0), ready;
  DeviceBuffer buf(1 << 20);
  PinnedBuffer host(1 << 20);
  start.record(s1.get());
  ASSERT_EQ(cudaMemsetAsync(buf.data(), 0x5A, buf.bytes(), s1.get()), cudaSuccess);
  ready.record(s1.get());
  stop.record(s1.get());
  s2.wait(ready.get());  // s2's copy sees s1's memset
  ASSERT_EQ(cudaMemcpyAsync(host.data(), buf.data(), buf.bytes(), cudaMemcpyDeviceToHost,
                            s2.get()),
            cudaSuccess);
  s2.synchronize();
  stop.synchronize();
  EXPECT_EQ(host.as<unsigned char>()[12345], 0x5A);
  EXPECT_GE(stop.elapsed_ms_since(start), 0.f);
}

TEST(CudaResources, CublasLtHandleCreates) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  CublasLtHandle h;
  EXPECT_NE(h.get(), nullptr);
  CublasLtHandle moved(std::move(h));
  EXPECT_NE(moved.get(), nullptr);
}

}  // namespace
