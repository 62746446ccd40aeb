// Kernel launches on the emulated device: the limits the runtime reports
// through cudaGetLastError (threads per block, grid size, dynamic shared
// memory with and without cudaFuncSetAttribute), pointer arguments that lie
// in no device allocation, the grid and thread orders (GT_EMU_BLOCK_ORDER),
// and shared memory poisoned with NaN at every block start.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <algorithm>
#include <vector>

#include "emu_test_util.hpp"
#include "kernels/cuda/device_common.cuh"

namespace gt::emu_test {
namespace {

namespace dev = gt::cuda::dev;

__global__ void touch_kernel(int* out) {
  if (out && threadIdx.x == 0) out[0] = 1;
}

__global__ void smem_kernel(float* out) {
  float* smem = dev::dynamic_shared_memory<float>();
  if (threadIdx.x == 0) out[0] = smem[0];
}

class EmuLaunch : public ::testing::Test {
 protected:
  cuda::CudaStream s;
  test::DeviceArray<int> buf{1024, s.get()};
};

TEST_F(EmuLaunch, TooManyThreadsPerBlockIsAConfigurationError) {
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {1, 1025, 0, s.get()}, buf.get()); },
                              cudaErrorInvalidConfiguration));
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {1, dim3(32, 32, 2), 0, s.get()}, buf.get()); },
                              cudaErrorInvalidConfiguration));
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {1, dim3(1, 1, 65), 0, s.get()}, buf.get()); },
                              cudaErrorInvalidConfiguration));
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {1, 1024, 0, s.get()}, buf.get()); },
                              cudaSuccess));
}

TEST_F(EmuLaunch, GridLimitsAndEmptyGridsAreConfigurationErrors) {
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {dim3(1, 65536), 32, 0, s.get()}, buf.get()); },
                              cudaErrorInvalidConfiguration));
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {0u, 32, 0, s.get()}, buf.get()); },
                              cudaErrorInvalidConfiguration));
}

TEST_F(EmuLaunch, DynamicSharedMemoryAbove48KiBNeedsTheOptInAttribute) {
  const size_t big = 64 << 10;
  EXPECT_TRUE(launch_rejected([&] { dev::launch(smem_kernel, {1, 32, big, s.get()}, reinterpret_cast<float*>(buf.get())); },
                              cudaErrorInvalidValue));
  ASSERT_EQ(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(big)),
            cudaSuccess);
  EXPECT_TRUE(launch_rejected([&] { dev::launch(smem_kernel, {1, 32, big, s.get()}, reinterpret_cast<float*>(buf.get())); },
                              cudaSuccess));
  EXPECT_EQ(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 232448 + 1),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_TRUE(launch_rejected([&] { dev::launch(smem_kernel, {1, 32, 232448 + 16, s.get()}, reinterpret_cast<float*>(buf.get())); },
                              cudaErrorInvalidValue));
  EXPECT_EQ(cudaStreamSynchronize(s.get()), cudaSuccess);
}

TEST_F(EmuLaunch, PointerArgumentsMustLieInDeviceAllocations) {
  std::vector<int> host(4);
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {1, 32, 0, s.get()}, host.data()); },
                              cudaErrorInvalidValue));
  int* freed = nullptr;
  {
    test::DeviceArray<int> gone(16, s.get());
    freed = gone.get();
  }
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {1, 32, 0, s.get()}, freed); },
                              cudaErrorInvalidValue));
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {1, 32, 0, s.get()}, static_cast<int*>(nullptr)); },
                              cudaSuccess));
  EXPECT_TRUE(launch_rejected([&] { dev::launch(touch_kernel, {1, 32, 0, s.get()}, buf.get() + 100); },
                              cudaSuccess));
  EXPECT_EQ(cudaStreamSynchronize(s.get()), cudaSuccess);
}

// Thread (0,0,0) of each block appends its block's linear index; every
// thread appends its own index in the first block: the orders the
// emulator runs blocks and schedules threads in.
__global__ void order_kernel(int* blocks, int* threads, int* counters) {
  const int b = static_cast<int>(blockIdx.x + gridDim.x * blockIdx.y);
  if (threadIdx.x == 0) blocks[counters[0]++] = b;
  if (b == 0) threads[counters[1]++] = static_cast<int>(threadIdx.x);
}

std::vector<int> run_order(const char* order, std::vector<int>* threads) {
  EXPECT_TRUE(gt::emu::set_block_order(order));
  cuda::CudaStream s;
  test::DeviceArray<int> blocks(12, s.get()), th(64, s.get()), counters(std::vector<int>{0, 0}, s.get());
  dev::launch(order_kernel, {dim3(4, 3), 64, 0, s.get()}, blocks.get(), th.get(), counters.get());
  CUDA_CHECK(cudaGetLastError());
  *threads = th.download();
  gt::emu::set_block_order("forward");
  return blocks.download();
}

TEST(EmuLaunchOrder, BlocksAndThreadsRunForwardOrReverseAsConfigured) {
  std::vector<int> threads;
  const std::vector<int> fwd = run_order("forward", &threads);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(fwd[i], i);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(threads[i], i);
  const std::vector<int> rev = run_order("reverse", &threads);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(rev[i], 11 - i);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(threads[i], 63 - i);
  EXPECT_FALSE(gt::emu::set_block_order("sideways"));
}

// Every thread appends its index before and after a barrier: the order of
// each of the block's two rounds.
__global__ void round_order_kernel(int* order, int* counters) {
  order[counters[0]++] = static_cast<int>(threadIdx.x);
  __syncthreads();
  order[64 + counters[1]++] = static_cast<int>(threadIdx.x);
}

std::vector<int> run_rounds(const char* thread_order) {
  EXPECT_TRUE(gt::emu::set_thread_order(thread_order));
  cuda::CudaStream s;
  test::DeviceArray<int> order(128, s.get()), counters(std::vector<int>{0, 0}, s.get());
  dev::launch(round_order_kernel, {1, 64, 0, s.get()}, order.get(), counters.get());
  CUDA_CHECK(cudaGetLastError());
  const std::vector<int> got = order.download();
  gt::emu::set_thread_order("block");
  return got;
}

// GT_EMU_THREAD_ORDER=random: each round between synchronisation points
// runs the block's threads in a new permutation; fixed orders stay fixed.
TEST(EmuLaunchOrder, RandomThreadOrderDrawsANewPermutationEveryRound) {
  const std::vector<int> fwd = run_rounds("forward");
  for (int i = 0; i < 128; ++i) EXPECT_EQ(fwd[i], i % 64);
  const std::vector<int> rev = run_rounds("reverse");
  for (int i = 0; i < 128; ++i) EXPECT_EQ(rev[i], 63 - i % 64);
  for (const char* seed : {"random:1", "random:2"}) {
    const std::vector<int> got = run_rounds(seed);
    std::vector<int> r1(got.begin(), got.begin() + 64), r2(got.begin() + 64, got.end());
    EXPECT_NE(r1, r2) << seed << ": the two rounds ran in the same order";
    EXPECT_NE(r1, std::vector<int>(fwd.begin(), fwd.begin() + 64)) << seed;
    for (std::vector<int>* r : {&r1, &r2}) {
      std::sort(r->begin(), r->end());
      for (int i = 0; i < 64; ++i) EXPECT_EQ((*r)[i], i) << seed << ": not a permutation";
    }
  }
  EXPECT_FALSE(gt::emu::set_thread_order("random"));  // the hook takes an explicit seed
  EXPECT_FALSE(gt::emu::set_thread_order("sideways"));
}

// Each of two warps reads its neighbour's slot, shuffles, then writes its
// own slot, with no barrier between the reads and the writes: the shape of
// a WAR hazard a missing barrier leaves. Only an order that runs one warp
// through its collectives before the other warp reads shows it.
__global__ void warp_ahead_kernel(int* seen) {
  GT_SHARED(int, slot, [2]);  // handed to the scheduler: no load moves across its calls
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (threadIdx.x < 2) slot[threadIdx.x] = 0;
  __syncthreads();
  const int before = slot[warp ^ 1];
  const int v = __shfl_sync(0xffffffffu, before, 0);
  if (lane == 0) slot[warp] = 1;
  __syncthreads();
  if (lane == 0) seen[warp] = v;
}

std::vector<int> run_warp_ahead(const char* thread_order) {
  EXPECT_TRUE(gt::emu::set_thread_order(thread_order));
  cuda::CudaStream s;
  test::DeviceArray<int> seen(std::vector<int>{-1, -1}, s.get());
  dev::launch(warp_ahead_kernel, {1, 64, 0, s.get()}, seen.get());
  CUDA_CHECK(cudaGetLastError());
  const std::vector<int> got = seen.download();  // the launch has run
  gt::emu::set_thread_order("block");
  return got;
}

// GT_EMU_THREAD_ORDER=warps: warp 0 runs through its shuffle to the next
// barrier before warp 1 starts, so warp 1 reads warp 0's write. In the
// forward order every thread reads before either shuffle completes.
TEST(EmuLaunchOrder, WarpsOrderRunsAWarpThroughItsCollectivesBeforeTheNext) {
  EXPECT_EQ(run_warp_ahead("warps"), (std::vector<int>{0, 1}));
  EXPECT_EQ(run_warp_ahead("forward"), (std::vector<int>{0, 0}));
}

// Reads shared memory before anything writes it: every block must see the
// poison (all bits set), not what the previous block left behind.
__global__ void poison_kernel(unsigned* out) {
  __shared__ unsigned tile[64];
  unsigned* dyn = dev::dynamic_shared_memory<unsigned>();
  const unsigned b = blockIdx.x, t = threadIdx.x;
  const unsigned first_static = tile[t], first_dynamic = dyn[t];
  __syncthreads();
  tile[t] = 7;
  dyn[t] = 7;
  __syncthreads();
  if (t == 0) {
    out[4 * b] = first_static;
    out[4 * b + 1] = first_dynamic;
    out[4 * b + 2] = tile[63];
    out[4 * b + 3] = dyn[63];
  }
}

TEST(EmuSharedMemory, StaticAndDynamicSharedMemoryArePoisonedAtEveryBlockStart) {
  cuda::CudaStream s;
  test::DeviceArray<unsigned> out(4 * 3, s.get());
  dev::launch(poison_kernel, {3, 64, 64 * sizeof(unsigned), s.get()}, out.get());
  const std::vector<unsigned> got = out.download();
  for (int b = 0; b < 3; ++b) {
    EXPECT_EQ(got[4 * b], 0xffffffffu) << "static, block " << b;
    EXPECT_EQ(got[4 * b + 1], 0xffffffffu) << "dynamic, block " << b;
    EXPECT_EQ(got[4 * b + 2], 7u);
    EXPECT_EQ(got[4 * b + 3], 7u);
  }
}

}  // namespace
}  // namespace gt::emu_test
