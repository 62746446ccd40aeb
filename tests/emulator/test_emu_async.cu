// Hopper's asynchronous tile movement on the emulated device (gt_emu/async.hpp
// through kernels/cuda/async_sm90.cuh): a warp-specialised pipeline (one
// producer thread issuing bulk tensor copies into two shared-memory stages,
// two consumer warps reading them) equals its CPU twin in every thread
// order, with and without the 128-byte swizzle and with a box hanging off
// the tensor's end; each planted misuse of the protocol (a missing wait on
// either barrier, a wrong expected byte count, a missing init fence or
// __syncthreads, a copy never waited for, one arrival too many) is caught
// and named; and the tensor-map encode refuses what the driver refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "emu_test_util.hpp"
#include "kernels/cuda/async_sm90.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/tensor_map.hpp"

namespace gt::emu_test {
namespace {

namespace dev = gt::cuda::dev;
using gt::cuda::TileMapShape;
using gt::cuda::TileSwizzle;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

constexpr int kStages = 2;
constexpr int kConsumers = 64;  // warps 1 and 2

enum class Misuse {
  none,
  no_full_wait,        // consumers read a stage without waiting for its copy
  no_empty_wait,       // the producer refills a stage consumers may still read
  short_expect_tx,     // expect_tx announces 16 bytes fewer than the box
  no_init_fence,       // the init is never made visible to the async proxy
  no_sync_after_init,  // consumers use the barriers before a __syncthreads
  copy_never_waited,   // one more copy, which nobody waits for
};

// Block b streams the column slab [b * box_cols, (b + 1) * box_cols) of the
// (rows x cols) fp32 tensor through two stages, n_tiles boxes of box_rows
// rows; consumers write out = 2 * tile, un-swizzling by the copy engine's
// pattern. out is (n_tiles * box_rows, cols): rows past the tensor's end
// receive 2 * the zero fill.
__global__ void pipeline_kernel(const __grid_constant__ CUtensorMap map, float* out, int cols,
                                int n_tiles, int box_rows, int box_cols, int swizzle_bytes,
                                Misuse misuse) {
  __shared__ uint64_t full[kStages], empty[kStages];
  // Stages at multiples of 1024 bytes of the shared window (the 128-byte
  // swizzle's repeat); the launch reserves the slack.
  unsigned char* smem = dev::align_shared<1024>(dev::dynamic_shared_memory<unsigned char>());
  const int tile_bytes = box_rows * box_cols * 4;
  const int stage_stride = (tile_bytes + 1023) / 1024 * 1024;  // each stage 1024-aligned
  const int t = static_cast<int>(threadIdx.x), c0 = static_cast<int>(blockIdx.x) * box_cols;
  if (t == 0) {
    for (int s = 0; s < kStages; ++s) {
      dev::mbarrier_init(&full[s], 1);
      dev::mbarrier_init(&empty[s], kConsumers);
    }
    if (misuse != Misuse::no_init_fence) dev::fence_barrier_init();
  }
  if (misuse != Misuse::no_sync_after_init) __syncthreads();

  if (t == 0) {  // the producer
    const unsigned expect = misuse == Misuse::short_expect_tx ? tile_bytes - 16 : tile_bytes;
    const int issued = n_tiles + (misuse == Misuse::copy_never_waited ? 1 : 0);
    for (int i = 0; i < issued; ++i) {
      const int s = i % kStages;
      const unsigned phase = static_cast<unsigned>(i / kStages) & 1u;
      if (misuse != Misuse::no_empty_wait) dev::mbarrier_wait(&empty[s], phase ^ 1u);
      dev::mbarrier_arrive_expect_tx(&full[s], expect);
      dev::tma_load_2d(smem + s * stage_stride, &map, c0, i * box_rows, &full[s]);
    }
  } else if (t >= 32 && t < 32 + kConsumers) {
    const int k = t - 32;
    for (int i = 0; i < n_tiles; ++i) {
      const int s = i % kStages;
      const unsigned phase = static_cast<unsigned>(i / kStages) & 1u;
      if (misuse != Misuse::no_full_wait) dev::mbarrier_wait(&full[s], phase);
      const unsigned char* stage = smem + s * stage_stride;
      for (int e = k; e < box_rows * box_cols; e += kConsumers) {
        const int r = e / box_cols, c = e % box_cols;
        uintptr_t off = static_cast<uintptr_t>(r * box_cols + c) * 4;
        // The copy engine's XOR of the 16-byte chunk with the 128-byte row.
        if (swizzle_bytes == 128) off ^= ((off >> 7) & 7u) << 4;
        const float v = *reinterpret_cast<const float*>(stage + off);
        out[static_cast<size_t>(i * box_rows + r) * static_cast<size_t>(cols) + c0 + c] = 2.f * v;
      }
      dev::mbarrier_arrive(&empty[s]);
    }
  }
}

// A row-major fp32 tensor of `rows` x `cols`, in boxes of `box_rows`
// x `box_cols`.
TileMapShape fp32_rows(int rows, int cols, int box_rows, int box_cols) {
  TileMapShape shape;
  shape.dims[0] = static_cast<uint64_t>(cols);
  shape.dims[1] = static_cast<uint64_t>(rows);
  shape.strides[0] = static_cast<uint64_t>(cols) * 4;
  shape.box[0] = static_cast<uint32_t>(box_cols);
  shape.box[1] = static_cast<uint32_t>(box_rows);
  return shape;
}

struct Pipeline {
  int rows, cols, box_rows, box_cols;
  TileSwizzle swizzle;
  int n_tiles() const { return (rows + box_rows - 1) / box_rows; }
};

class EmuAsync : public ::testing::Test {
 protected:
  void TearDown() override { gt::emu::set_thread_order("block"); }

  std::vector<float> input(const Pipeline& p) const {
    std::vector<float> x(static_cast<size_t>(p.rows) * p.cols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 997) * 0.25f - 7.f;
    return x;
  }
  // The CPU twin: 2x, and 0 for the rows the last box hangs past the end.
  std::vector<float> expected(const Pipeline& p) const {
    const std::vector<float> x = input(p);
    std::vector<float> y(static_cast<size_t>(p.n_tiles()) * p.box_rows * p.cols, 0.f);
    for (size_t i = 0; i < x.size(); ++i) y[i] = 2.f * x[i];
    return y;
  }
  void launch(const Pipeline& p, const float* in, float* out, Misuse misuse) {
    const CUtensorMap map = gt::cuda::encode_tile_map(
        in, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, fp32_rows(p.rows, p.cols, p.box_rows, p.box_cols),
        p.swizzle);
    const size_t stage = (static_cast<size_t>(p.box_rows) * p.box_cols * 4 + 1023) / 1024 * 1024;
    dev::launch(pipeline_kernel,
                {static_cast<unsigned>(p.cols / p.box_cols), 32 + kConsumers,
                 kStages * stage + 1024, s.get()},
                map, out, p.cols, p.n_tiles(), p.box_rows, p.box_cols,
                static_cast<int>(p.swizzle), misuse);
  }
  std::vector<float> run(const Pipeline& p, Misuse misuse = Misuse::none) {
    test::DeviceArray<float> in(input(p), s.get());
    test::DeviceArray<float> out(static_cast<size_t>(p.n_tiles()) * p.box_rows * p.cols, s.get());
    out.poison();
    launch(p, in.get(), out.get(), misuse);
    return out.download();
  }
  ::testing::AssertionResult misuse_faults(Misuse misuse, std::initializer_list<const char*> words) {
    const Pipeline p{40, 64, 8, 32, TileSwizzle::b128};
    test::DeviceArray<float> in(input(p), s.get());
    test::DeviceArray<float> out(static_cast<size_t>(p.n_tiles()) * p.box_rows * p.cols, s.get());
    EXPECT_TRUE(gt::emu::set_thread_order("forward"));  // the report names who ran ahead
    return faults_with(s.get(), [&] { launch(p, in.get(), out.get(), misuse); },
                       cudaErrorLaunchFailure, words);
  }

  // Under AddressSanitizer a copy's destination is poisoned until it lands:
  // the first read of one in flight is reported at the kernel's line.
  void expect_read_in_flight(Misuse misuse) {
    const Pipeline p{40, 64, 8, 32, TileSwizzle::b128};
    EXPECT_DEATH((void)run(p, misuse), "use-after-poison.*pipeline_kernel.*test_emu_async.cu");
  }

  cuda::CudaStream s;
};

TEST_F(EmuAsync, APipelineOfBulkTensorCopiesEqualsItsCpuTwinInEveryThreadOrder) {
  const Pipeline cases[] = {
      {48, 64, 8, 32, TileSwizzle::b128},  // 6 tiles: each stage reused three times
      {44, 64, 8, 32, TileSwizzle::b128},  // the last box hangs 4 rows past the end
      {40, 32, 16, 16, TileSwizzle::none},
  };
  for (const char* order : {"forward", "reverse", "random:7", "warps"}) {
    ASSERT_TRUE(gt::emu::set_thread_order(order));
    for (const Pipeline& p : cases) {
      SCOPED_TRACE(std::string(order) + ", rows " + std::to_string(p.rows) + ", swizzle " +
                   std::to_string(static_cast<int>(p.swizzle)));
      EXPECT_EQ(run(p), expected(p));
    }
  }
}

// Each planted misuse, and what the report says. A side that skips its
// wait lets the producer re-arm a full barrier whose phase nobody waited
// for: its copy still in flight, the arrival is one too many (on a GPU a
// race on whether the copy had landed; two phases later, a parity wait
// that never returns). Consumers that skip theirs read tiles in flight
// first: poison, or under AddressSanitizer a report at the read.
TEST_F(EmuAsync, ConsumersThatNeverWaitForTheirTileLetTheProducerReArmAPendingPhase) {
  if (kAsan) return expect_read_in_flight(Misuse::no_full_wait);
  EXPECT_TRUE(misuse_faults(Misuse::no_full_wait,
                            {"more arrivals in one phase than its count", "1024 tx bytes outstanding",
                             "its copies have not landed", "test_emu_async.cu:"}));
}

TEST_F(EmuAsync, AProducerThatNeverWaitsForAnEmptyStageReArmsAPendingPhase) {
  EXPECT_TRUE(misuse_faults(Misuse::no_empty_wait,
                            {"more arrivals in one phase than its count", "1024 tx bytes outstanding",
                             "its copies have not landed", "test_emu_async.cu:"}));
}

// Without its wait the producer's next arrival would be one too many for
// the phase; the copies it signals land first, as they would have on a GPU.
__global__ void extra_arrival_kernel() {
  __shared__ uint64_t bar;
  if (threadIdx.x != 0) return;
  dev::mbarrier_init(&bar, 2);
  dev::mbarrier_arrive(&bar);
  dev::mbarrier_arrive(&bar);  // phase 0 completes
  dev::mbarrier_arrive(&bar);  // phase 1: 1 of 2
  dev::mbarrier_expect_tx(&bar, 64);
  dev::mbarrier_arrive(&bar);  // phase 1: 2 of 2, 64 bytes outstanding
  dev::mbarrier_arrive(&bar);  // one too many
}

TEST_F(EmuAsync, MoreArrivalsInOnePhaseThanTheCountAreRefused) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(extra_arrival_kernel, {1, 32, 0, s.get()}); },
                          cudaErrorLaunchFailure,
                          {"more arrivals in one phase than its count", "with 64 tx bytes outstanding"}));
}

TEST_F(EmuAsync, AWrongExpectedByteCountDeadlocksWithTheBarriersAccount) {
  EXPECT_TRUE(misuse_faults(Misuse::short_expect_tx,
                            {"deadlock", "tx-count -16 bytes",
                             "the copies landed more bytes than expect_tx announced"}));
}

TEST_F(EmuAsync, ACopyOnABarrierTheAsyncProxyHasNotSeenInitializedIsRefused) {
  EXPECT_TRUE(misuse_faults(Misuse::no_init_fence,
                            {"never made visible to the async proxy", "fence.proxy.async"}));
}

TEST_F(EmuAsync, UsingABarrierBeforeASyncthreadsAfterItsInitIsRefused) {
  EXPECT_TRUE(misuse_faults(Misuse::no_sync_after_init,
                            {"with no __syncthreads() since to make the init visible"}));
}

TEST_F(EmuAsync, ACopyNobodyWaitsForIsInFlightWhenTheBlockExits) {
  EXPECT_TRUE(misuse_faults(Misuse::copy_never_waited,
                            {"exited with bulk tensor copies in flight (1)"}));
}

// A thread that reads the tile before waiting reads what the issue left
// there, poison, never a plausible tile; after the wait, the tile.
__global__ void read_before_wait_kernel(const __grid_constant__ CUtensorMap map, float* out) {
  __shared__ uint64_t bar;
  float* tile = dev::dynamic_shared_memory<float>();
  if (threadIdx.x == 0) {
    dev::mbarrier_init(&bar, 1);
    dev::fence_barrier_init();
    dev::mbarrier_arrive_expect_tx(&bar, 16 * 4);
    dev::tma_load_2d(tile, &map, 0, 0, &bar);
    out[0] = tile[3];  // before the wait
    dev::mbarrier_wait(&bar, 0);
    out[1] = tile[3];  // after it
  }
}

TEST_F(EmuAsync, ATileReadBeforeItsWaitIsPoisonOrReportedAndAfterItTheData) {
  std::vector<float> x(16 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  test::DeviceArray<float> in(x, s.get()), out(2, s.get());
  const CUtensorMap map = gt::cuda::encode_tile_map(in.get(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                                                    fp32_rows(4, 16, 1, 16), TileSwizzle::none);
  if (kAsan) {
    EXPECT_DEATH(
        {
          dev::launch(read_before_wait_kernel, {1, 32, 1024, s.get()}, map, out.get());
          (void)out.download();
        },
        "use-after-poison.*read_before_wait_kernel");
    return;
  }
  dev::launch(read_before_wait_kernel, {1, 32, 1024, s.get()}, map, out.get());
  const std::vector<float> got = out.download();
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(got[1], 3.f);
}

// Rules on the barrier itself.
__global__ void barrier_rules_kernel(int rule) {
  __shared__ uint64_t bars[2];
  if (threadIdx.x != 0) return;
  switch (rule) {
    case 0: dev::mbarrier_init(&bars[0], 0); break;  // count 0
    case 1:
      dev::mbarrier_init(&bars[0], 1);
      dev::mbarrier_init(&bars[0], 1);  // over a live barrier
      break;
    case 2:
      dev::mbarrier_init(&bars[0], 1);
      bars[0] = 0;  // an ordinary store over it
      dev::mbarrier_arrive(&bars[0]);
      break;
    case 3: dev::mbarrier_arrive(&bars[1]); break;  // never initialized
    case 4:
      dev::mbarrier_init(&bars[0], 1);
      dev::mbarrier_wait(&bars[0], 2);
      break;
  }
}

TEST_F(EmuAsync, BarrierRulesAreCheckedAndNamed) {
  const std::initializer_list<const char*> words[] = {
      {"count 0 is outside 1..2^20-1"},
      {"over the live mbarrier", "mbarrier.inval it first"},
      {"were overwritten since"},
      {"is not an initialized mbarrier"},
      {"parity 2 is not 0 or 1"},
  };
  for (int rule = 0; rule < 5; ++rule) {
    SCOPED_TRACE(rule);
    EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(barrier_rules_kernel, {1, 32, 0, s.get()}, rule); },
                            cudaErrorLaunchFailure, words[rule]));
  }
}

// Rules on the copy: a destination off the 128-byte grid, and a map whose
// extent outruns its allocation.
__global__ void copy_rules_kernel(const __grid_constant__ CUtensorMap map, int offset) {
  __shared__ uint64_t bar;
  unsigned char* smem = dev::dynamic_shared_memory<unsigned char>();
  if (threadIdx.x != 0) return;
  dev::mbarrier_init(&bar, 1);
  dev::fence_barrier_init();
  dev::mbarrier_arrive_expect_tx(&bar, 64);
  dev::tma_load_2d(smem + offset, &map, 0, 0, &bar);
  dev::mbarrier_wait(&bar, 0);
}

TEST_F(EmuAsync, CopyRulesAreCheckedAndNamed) {
  test::DeviceArray<float> buf(64, s.get());
  TileMapShape shape = fp32_rows(4, 16, 1, 16);
  const CUtensorMap ok =
      gt::cuda::encode_tile_map(buf.get(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, shape, TileSwizzle::none);
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(copy_rules_kernel, {1, 32, 1024, s.get()}, ok, 64); },
                          cudaErrorMisalignedAddress, {"is not 128-byte aligned"}));
  shape.dims[1] = 5;  // one row more than the allocation holds
  const CUtensorMap past =
      gt::cuda::encode_tile_map(buf.get(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, shape, TileSwizzle::none);
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(copy_rules_kernel, {1, 32, 1024, s.get()}, past, 0); },
                          cudaErrorIllegalAddress, {"is not inside one device allocation"}));
}

// The driver's encode rules, through the same entry point a GPU build uses.
TEST(EmuTensorMap, TheEncodeRefusesWhatTheDriverDocumentsAsInvalid) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                             cudaEnableDefault, &found),
            cudaSuccess);
  ASSERT_EQ(found, cudaDriverEntryPointSuccess);
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                              const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                              const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  const auto encode = reinterpret_cast<Encode>(fn);
  cuda::CudaStream s;
  test::DeviceArray<float> buf(4096, s.get());
  struct Case {
    uint64_t offset, stride;
    uint32_t box0, box1;
    CUtensorMapSwizzle swizzle;
    CUresult want;
  };
  const Case cases[] = {
      {0, 256, 32, 8, CU_TENSOR_MAP_SWIZZLE_128B, CUDA_SUCCESS},
      {4, 256, 32, 8, CU_TENSOR_MAP_SWIZZLE_128B, CUDA_ERROR_INVALID_VALUE},  // base off 16 bytes
      {0, 200, 32, 8, CU_TENSOR_MAP_SWIZZLE_128B, CUDA_ERROR_INVALID_VALUE},  // stride not x16
      {0, 256, 64, 8, CU_TENSOR_MAP_SWIZZLE_128B, CUDA_ERROR_INVALID_VALUE},  // row > swizzle span
      {0, 256, 6, 8, CU_TENSOR_MAP_SWIZZLE_NONE, CUDA_ERROR_INVALID_VALUE},   // row 24 bytes
      {0, 256, 32, 257, CU_TENSOR_MAP_SWIZZLE_128B, CUDA_ERROR_INVALID_VALUE},  // box > 256
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.offset) + " " + std::to_string(c.stride) + " " +
                 std::to_string(c.box0));
    alignas(64) CUtensorMap map;
    const cuuint64_t dims[2] = {64, 16};
    const cuuint64_t strides[1] = {c.stride};
    const cuuint32_t box[2] = {c.box0, c.box1}, unit[2] = {1, 1};
    EXPECT_EQ(encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2,
                     reinterpret_cast<unsigned char*>(buf.get()) + c.offset, dims, strides, box,
                     unit, CU_TENSOR_MAP_INTERLEAVE_NONE, c.swizzle,
                     CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
              c.want);
  }
  // The project's wrapper says which rule, in words, before the driver is asked.
  TileMapShape shape = fp32_rows(16, 64, 8, 32);
  shape.strides[0] = 200;
  try {
    gt::cuda::encode_tile_map(buf.get(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, shape, TileSwizzle::b128);
    ADD_FAILURE() << "a 200-byte stride was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is not a multiple of 16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gt::emu_test
