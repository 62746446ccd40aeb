// The emulated device's warp collectives and barriers: shuffle semantics with
// masks and widths as the CUDA Programming Guide states them (the expected
// lane is computed here from the guide's words, not from the emulator's
// PTX-rule code), ballot/any/all, and every fault the device layer reports:
// a mask without the caller, a bad width, a lane that exited, lanes that do
// not exist, divergent barriers and a deadlock.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "emu_test_util.hpp"
#include "kernels/cuda/device_common.cuh"

namespace gt::emu_test {
namespace {

namespace dev = gt::cuda::dev;

enum class Shfl { idx, up, down, bfly };

// out[t] = the value lane t reads (lanes outside `mask` write -2 and leave).
__global__ void shuffle_kernel(int* out, Shfl kind, int arg, int width, unsigned mask) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (!(mask >> lane & 1u)) {
    out[threadIdx.x] = -2;
    return;
  }
  const int v = 100 + static_cast<int>(threadIdx.x);
  int r = 0;
  switch (kind) {
    case Shfl::idx: r = __shfl_sync(mask, v, arg, width); break;
    case Shfl::up: r = __shfl_up_sync(mask, v, static_cast<unsigned>(arg), width); break;
    case Shfl::down: r = __shfl_down_sync(mask, v, static_cast<unsigned>(arg), width); break;
    case Shfl::bfly: r = __shfl_xor_sync(mask, v, arg, width); break;
  }
  out[threadIdx.x] = r;
}

// The lane whose value `lane` receives, in the Programming Guide's words;
// -1 when the guide calls the result undefined (the source is not in the mask).
int expected_source(Shfl kind, int lane, int arg, int width, unsigned mask) {
  const int base = lane / width * width, pos = lane % width;
  int src = lane;
  switch (kind) {
    case Shfl::idx: src = base + arg % width; break;  // "srcLane modulo width", same subsection
    case Shfl::up: src = pos - arg >= 0 ? lane - arg : lane;  break;   // below 0: unchanged
    case Shfl::down: src = pos + arg < width ? lane + arg : lane; break;  // past width-1: unchanged
    case Shfl::bfly:  // earlier groups may be read; a later group returns the caller's own value
      src = (lane ^ arg) >= base + width ? lane : (lane ^ arg);
      break;
  }
  return (mask >> src & 1u) ? src : -1;
}

std::vector<int> run_shuffle(Shfl kind, int arg, int width, unsigned mask) {
  cuda::CudaStream s;
  test::DeviceArray<int> out(64, s.get());
  dev::launch(shuffle_kernel, {1, 64, 0, s.get()}, out.get(), kind, arg, width, mask);
  CUDA_CHECK(cudaGetLastError());
  return out.download();
}

TEST(EmuWarp, ShufflesFollowTheProgrammingGuideForEveryWidthAndOffset) {
  for (Shfl kind : {Shfl::idx, Shfl::up, Shfl::down, Shfl::bfly})
    for (int width : {1, 2, 4, 8, 16, 32})
      for (int arg : {0, 1, 3, 5, 8, 16, 31}) {
        const std::vector<int> got = run_shuffle(kind, arg, width, ~0u);
        for (int t = 0; t < 64; ++t) {
          const int src = expected_source(kind, t % 32, arg, width, ~0u);
          ASSERT_EQ(got[t], 100 + t / 32 * 32 + src)
              << "kind " << static_cast<int>(kind) << " width " << width << " arg " << arg
              << " thread " << t;
        }
      }
}

TEST(EmuWarp, PartialMasksShuffleAmongTheirLanesAndReadOutsideAsPoison) {
  const unsigned mask = 0x0000ffffu;  // lanes 0-15 of each warp
  for (Shfl kind : {Shfl::idx, Shfl::down, Shfl::bfly})
    for (int arg : {1, 7, 16, 20}) {
      const std::vector<int> got = run_shuffle(kind, arg, 32, mask);
      for (int t = 0; t < 64; ++t) {
        const int lane = t % 32;
        if (!(mask >> lane & 1u)) {
          EXPECT_EQ(got[t], -2);
          continue;
        }
        const int src = expected_source(kind, lane, arg, 32, mask);
        // Undefined on a GPU; the emulator returns all bits set, never a plausible value.
        EXPECT_EQ(got[t], src < 0 ? -1 : 100 + t / 32 * 32 + src)
            << "kind " << static_cast<int>(kind) << " arg " << arg << " thread " << t;
      }
    }
}

__global__ void vote_kernel(unsigned* out, unsigned mask) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (!(mask >> lane & 1u)) return;
  const bool pred = lane % 3 == 0;
  out[3 * threadIdx.x] = __ballot_sync(mask, pred);
  out[3 * threadIdx.x + 1] = static_cast<unsigned>(__any_sync(mask, lane > 29));
  out[3 * threadIdx.x + 2] = static_cast<unsigned>(__all_sync(mask, lane < 40));
}

TEST(EmuWarp, BallotAnyAllCountOnlyTheLanesOfTheMask) {
  for (unsigned mask : {~0u, 0x00ff00ffu, 0x80000001u}) {
    cuda::CudaStream s;
    test::DeviceArray<unsigned> out(3 * 32, s.get());
    out.poison();
    dev::launch(vote_kernel, {1, 32, 0, s.get()}, out.get(), mask);
    const std::vector<unsigned> got = out.download();
    unsigned ballot = 0;
    for (int l = 0; l < 32; ++l)
      if ((mask >> l & 1u) && l % 3 == 0) ballot |= 1u << l;
    const unsigned any = (mask >> 30) != 0;
    for (int l = 0; l < 32; ++l) {
      if (!(mask >> l & 1u)) continue;
      EXPECT_EQ(got[3 * l], ballot) << "mask " << mask << " lane " << l;
      EXPECT_EQ(got[3 * l + 1], any) << "mask " << mask << " lane " << l;
      EXPECT_EQ(got[3 * l + 2], 1u) << "mask " << mask << " lane " << l;
    }
  }
}

// ---- faults --------------------------------------------------------------------------

__global__ void mask_without_caller_kernel(int* out) {
  out[threadIdx.x] = __shfl_sync(0x2u, 1, 0);
}
__global__ void bad_width_kernel(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(~0u, 1, 1, 3);
}
__global__ void exited_lane_kernel(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(~0u, 1, 1);
}
__global__ void missing_lanes_kernel(int* out) {  // launched with 48 threads
  out[threadIdx.x] = __shfl_xor_sync(~0u, 1, 1);
}
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}
__global__ void barrier_after_exit_kernel(int* out) {
  if (threadIdx.x == 7) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
__global__ void deadlock_kernel(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(~0u, 1, 1);
  else __syncthreads();
}

class EmuWarpFault : public ::testing::Test {
 protected:
  cuda::CudaStream s;
  test::DeviceArray<int> out{64, s.get()};
};

TEST_F(EmuWarpFault, AMaskThatExcludesTheCaller) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(mask_without_caller_kernel, {1, 32, 0, s.get()}, out.get()); },
                          cudaErrorLaunchFailure, {"excludes itself", "test_emu_warp.cu:"}));
}

TEST_F(EmuWarpFault, AWidthThatIsNotAPowerOfTwo) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(bad_width_kernel, {1, 32, 0, s.get()}, out.get()); },
                          cudaErrorLaunchFailure, {"width 3", "power of two"}));
}

TEST_F(EmuWarpFault, ALaneOfTheMaskThatExited) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(exited_lane_kernel, {1, 32, 0, s.get()}, out.get()); },
                          cudaErrorLaunchFailure, {"exited", "__shfl_xor_sync"}));
}

TEST_F(EmuWarpFault, LanesThatDoNotExist) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(missing_lanes_kernel, {1, 48, 0, s.get()}, out.get()); },
                          cudaErrorLaunchFailure, {"lanes 16-31 do not exist", "48 threads"}));
}

TEST_F(EmuWarpFault, BarriersAtTwoCallSites) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(divergent_barrier_kernel, {1, 64, 0, s.get()}, out.get()); },
                          cudaErrorLaunchFailure, {"divergent __syncthreads", "test_emu_warp.cu:"}));
}

TEST_F(EmuWarpFault, ABarrierAThreadExitedBefore) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(barrier_after_exit_kernel, {1, 64, 0, s.get()}, out.get()); },
                          cudaErrorLaunchFailure, {"divergent __syncthreads", "exited"}));
}

TEST_F(EmuWarpFault, ADeadlockNamesWhoWaitsWhereForWhom) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(deadlock_kernel, {1, 32, 0, s.get()}, out.get()); },
                          cudaErrorLaunchFailure,
                          {"deadlock", "wait at __syncthreads()", "lanes 0-15 wait in __shfl_xor_sync",
                           "for lanes 16-31"}));
}

TEST_F(EmuWarpFault, TheDeviceWorksAgainAfterAReset) {
  ASSERT_TRUE(faults_with(s.get(), [&] { dev::launch(deadlock_kernel, {1, 32, 0, s.get()}, out.get()); },
                          cudaErrorLaunchFailure, {"deadlock"}));
  const std::vector<int> got = run_shuffle(Shfl::idx, 3, 32, ~0u);
  EXPECT_EQ(got[0], 103);
}

}  // namespace
}  // namespace gt::emu_test
