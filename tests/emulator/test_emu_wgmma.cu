// wgmma on the emulated device (gt_emu/wgmma.hpp through
// kernels/cuda/wgmma_sm90.cuh): one warpgroup computes a 64 x N tile over
// K = 64 in four k16 steps, with the operands the attention kernels will
// use: Q K^T (A and B K-major, 128-byte swizzled by the copy engine), P V
// (B = V MN-major), A from registers, and an unswizzled K-major layout
// written by ordinary stores. Each equals a naive fp32 GEMM; each planted
// misuse (no wgmma.fence, no proxy fence after ordinary stores, the
// accumulators read before the wait, no wait before exit, a copy not
// waited for, a warpgroup of three warps) is caught and named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "emu_test_util.hpp"
#include "kernels/core/bf16.hpp"
#include "kernels/cuda/async_sm90.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/tensor_map.hpp"
#include "kernels/cuda/wgmma_sm90.cuh"
#include "test_util.hpp"

namespace gt::emu_test {
namespace {

namespace dev = gt::cuda::dev;
using gt::cuda::TileMapShape;
using gt::cuda::TileSwizzle;

constexpr int kK = 64;  // four k16 steps

enum class Operands {
  qk,         // A (64 x K) and B (N x K) K-major, 128B swizzle, by TMA
  pv,         // A K-major as above; B (K x N) MN-major, 128B swizzle, by TMA
  registers,  // A from registers (read from global), B as in qk
  stores,     // A and B K-major without swizzle, written by ordinary stores
};
enum class Misuse {
  none,
  no_wgmma_fence,
  no_proxy_fence,
  read_before_wait,
  no_wait,
  no_tma_wait,
  unaligned,  // tiles where dynamic shared memory starts, off the 1024-byte repeat
};

// out (64 x N, row-major) = A (64 x K, row-major) . B, where B is (N x K)
// row-major for every case but pv, where it is (K x N) row-major.
template <int N>
__global__ void wgmma_tile_kernel(const __grid_constant__ CUtensorMap map_a,
                                  const __grid_constant__ CUtensorMap map_b, const uint16_t* a,
                                  const uint16_t* b, float* out, Operands ops, Misuse misuse) {
  GT_SHARED(uint64_t, bar, );  // a template's static: declared through GT_SHARED
  // Tiles at multiples of 1024 bytes of the shared window (the launch
  // reserves the slack): the swizzle's repeat, what base offset 0 says.
  unsigned char* base = dev::dynamic_shared_memory<unsigned char>();
  unsigned char* smem = misuse == Misuse::unaligned ? base : dev::align_shared<1024>(base);
  unsigned char* sa = smem;                // 64 x K bf16: 8 KiB
  unsigned char* sb = smem + 64 * kK * 2;  // N x K (or K x N) bf16
  const int t = static_cast<int>(threadIdx.x);
  const bool tma = ops != Operands::stores;
  if (t == 0) {
    dev::mbarrier_init(&bar, 1);
    dev::fence_barrier_init();
  }
  if (!tma) {
    // 8-row x 16-byte core matrices: row r, k-chunk c at (r / 8) SBO +
    // c LBO + (r % 8) 16, with LBO = 128 and SBO = 1024 (K / 8 chunks).
    auto place = [](unsigned char* s, const uint16_t* src, int i) {
      const int r = i / kK, k = i % kK;
      *reinterpret_cast<uint16_t*>(s + (r / 8) * 1024 + (k / 8) * 128 + (r % 8) * 16 +
                                   (k % 8) * 2) = src[i];
    };
    for (int i = t; i < 64 * kK; i += 128) place(sa, a, i);
    for (int i = t; i < N * kK; i += 128) place(sb, b, i);
    if (misuse != Misuse::no_proxy_fence) dev::fence_proxy_async_shared();
  }
  __syncthreads();
  if (tma && t == 0) {
    dev::mbarrier_arrive_expect_tx(&bar, static_cast<unsigned>((64 + N) * kK * 2));
    dev::tma_load_2d(sa, &map_a, 0, 0, &bar);
    if (ops == Operands::pv)  // boxes of 64 columns (one 128-byte swizzle row) by K rows
      for (int c = 0; c < N; c += 64) dev::tma_load_2d(sb + c * kK * 2, &map_b, c, 0, &bar);
    else
      dev::tma_load_2d(sb, &map_b, 0, 0, &bar);
  }
  if (tma && misuse != Misuse::no_tma_wait) dev::mbarrier_wait(&bar, 0);

  float d[N / 2];
  for (float& x : d) x = 0.f;
  if (misuse != Misuse::no_wgmma_fence) dev::wgmma_fence();
  for (int ks = 0; ks < kK / 16; ++ks) {
    // Swizzled K-major rows are 128 bytes: a k16 step is 32 bytes further,
    // SBO the 1024 bytes of 8 rows (LBO unused). V's rows are k: a step is
    // 16 rows (2048 bytes) down, SBO 8 rows, LBO the next 64 columns.
    const uint64_t da =
        tma ? dev::wgmma_descriptor(sa + ks * 32, dev::WgmmaSwizzle::b128, 16, 1024)
            : dev::wgmma_descriptor(sa + ks * 256, dev::WgmmaSwizzle::none, 128, 1024);
    const uint64_t db =
        ops == Operands::pv
            ? dev::wgmma_descriptor(sb + ks * 2048, dev::WgmmaSwizzle::b128, 64 * kK * 2, 1024)
        : tma ? dev::wgmma_descriptor(sb + ks * 32, dev::WgmmaSwizzle::b128, 16, 1024)
              : dev::wgmma_descriptor(sb + ks * 256, dev::WgmmaSwizzle::none, 128, 1024);
    if (ops == Operands::registers) {
      // mma.sync's A fragment of this warp's 16 rows, read from global
      // memory. The registers must not change before the wait: one k-step
      // per group.
      const int w = t / 32, l = t % 32, g = l / 4, q = l % 4;
      uint32_t ra[4];
      for (int r = 0; r < 4; ++r) {
        const int row = 16 * w + g + (r & 1) * 8, col = ks * 16 + 2 * q + (r >> 1) * 8;
        ra[r] = a[row * kK + col] | uint32_t{a[row * kK + col + 1]} << 16;
      }
      if (ks > 0) dev::wgmma_fence();
      dev::wgmma_rs<N, false>(d, ra, db, ks > 0);
      dev::wgmma_commit_group();
      dev::wgmma_wait_group<0>();
    } else if (ops == Operands::pv) {
      dev::wgmma_ss<N, false, true>(d, da, db, ks > 0);
    } else {
      dev::wgmma_ss<N, false, false>(d, da, db, ks > 0);
    }
  }
  if (ops != Operands::registers) {
    dev::wgmma_commit_group();
    if (misuse == Misuse::no_wait) return;
    if (misuse != Misuse::read_before_wait) dev::wgmma_wait_group<0>();
  }
  const int w = t / 32, l = t % 32;
  for (int i = 0; i < N / 2; ++i) {
    const int row = 16 * w + l / 4 + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * (l % 4) + i % 2;
    out[row * N + col] = d[i];
  }
  if (misuse == Misuse::read_before_wait) dev::wgmma_wait_group<0>();
}

// Random bf16 values (as bits) and their floats.
struct Bf16Matrix {
  std::vector<uint16_t> bits;
  std::vector<float> v;
  Bf16Matrix(size_t n, uint64_t seed) {
    for (float x : test::random_vector(n, seed)) {
      bits.push_back(bf16_from_float(x));
      v.push_back(bf16_to_float(bits.back()));
    }
  }
};

class EmuWgmma : public ::testing::Test {
 protected:
  // out (64 x N) from the kernel, and the naive product in the same k order.
  template <int N>
  void run(Operands ops, Misuse misuse, std::vector<float>* got, std::vector<float>* want) {
    const Bf16Matrix a(64 * kK, 11), b(static_cast<size_t>(N) * kK, 12);
    test::DeviceArray<uint16_t> da(a.bits, s.get()), db(b.bits, s.get());
    test::DeviceArray<float> out(64 * static_cast<size_t>(N), s.get());
    out.poison();
    TileMapShape sa;  // A: (64, K) row-major, one box, 128B swizzle
    sa.dims[0] = kK;
    sa.dims[1] = 64;
    sa.strides[0] = kK * 2;
    sa.box[0] = kK;
    sa.box[1] = 64;
    TileMapShape sb = sa;
    if (ops == Operands::pv) {  // V: (K, N) row-major, boxes of 64 columns
      sb.dims[0] = N;
      sb.dims[1] = kK;
      sb.strides[0] = static_cast<uint64_t>(N) * 2;
      sb.box[0] = 64;
      sb.box[1] = kK;
    } else {  // (N, K) row-major
      sb.dims[1] = N;
      sb.box[1] = N;
    }
    const CUtensorMap ma = gt::cuda::encode_tile_map(da.get(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                                     sa, TileSwizzle::b128);
    const CUtensorMap mb = gt::cuda::encode_tile_map(db.get(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                                     sb, TileSwizzle::b128);
    dev::launch(wgmma_tile_kernel<N>,
                {1, 128, static_cast<size_t>(64 + N) * kK * 2 + 1024, s.get()},
                ma, mb, da.get(), db.get(), out.get(), ops, misuse);
    *got = out.download();
    want->assign(64 * static_cast<size_t>(N), 0.f);
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < N; ++n) {
        float acc = 0.f;
        for (int k = 0; k < kK; ++k)
          acc += a.v[static_cast<size_t>(m * kK + k)] *
                 (ops == Operands::pv ? b.v[static_cast<size_t>(k * N + n)]
                                      : b.v[static_cast<size_t>(n * kK + k)]);
        (*want)[static_cast<size_t>(m * N + n)] = acc;
      }
  }
  template <int N>
  ::testing::AssertionResult faults(Operands ops, Misuse misuse,
                                    std::initializer_list<const char*> words) {
    std::vector<float> got, want;
    return faults_with(s.get(), [&] {
      try {
        run<N>(ops, misuse, &got, &want);
      } catch (const std::exception&) {  // the download reports the sticky fault
      }
    }, cudaErrorLaunchFailure, words);
  }

  cuda::CudaStream s;
};

void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 1e-4f + 1e-5f * std::fabs(want[i]))) ++bad;
  EXPECT_EQ(bad, 0u) << "e.g. element 0: " << got[0] << " vs " << want[0];
}

TEST_F(EmuWgmma, EveryOperandLayoutEqualsANaiveGemm) {
  std::vector<float> got, want;
  for (const Operands ops : {Operands::qk, Operands::pv, Operands::registers, Operands::stores}) {
    SCOPED_TRACE(static_cast<int>(ops));
    run<64>(ops, Misuse::none, &got, &want);
    expect_close(got, want);
    run<128>(ops, Misuse::none, &got, &want);
    expect_close(got, want);
  }
}

TEST_F(EmuWgmma, AnMmaWithoutAWgmmaFenceIsRefused) {
  EXPECT_TRUE(faults<64>(Operands::qk, Misuse::no_wgmma_fence, {"without a wgmma.fence"}));
}

TEST_F(EmuWgmma, OperandsWrittenByOrdinaryStoresNeedTheProxyFence) {
  EXPECT_TRUE(faults<64>(Operands::stores, Misuse::no_proxy_fence,
                         {"changed since the last fence.proxy.async"}));
}

TEST_F(EmuWgmma, OperandsOfACopyNotWaitedForAreRefused) {
  EXPECT_TRUE(faults<64>(Operands::qk, Misuse::no_tma_wait, {"still in flight"}));
}

TEST_F(EmuWgmma, ExitingWithAnMmaInFlightIsRefused) {
  EXPECT_TRUE(faults<64>(Operands::qk, Misuse::no_wait, {"exited with wgmma.mma_async in flight"}));
}

TEST_F(EmuWgmma, ATileOffTheSwizzleRepeatIsRefused) {
  EXPECT_TRUE(faults<64>(Operands::qk, Misuse::unaligned,
                         {"row 1 of a 1024-byte swizzle repeat", "align the tile to 1024 bytes"}));
}

TEST_F(EmuWgmma, AccumulatorsReadBeforeTheWaitAreNaN) {
  std::vector<float> got, want;
  run<64>(Operands::qk, Misuse::read_before_wait, &got, &want);
  size_t nan = 0;
  for (float x : got) nan += std::isnan(x) ? 1 : 0;
  EXPECT_EQ(nan, got.size());
}

__global__ void three_warps_kernel() {
  dev::wgmma_fence();
}

TEST_F(EmuWgmma, AWarpgroupNeedsFourWholeWarps) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(three_warps_kernel, {1, 96, 0, s.get()}); },
                          cudaErrorLaunchFailure, {"is not 4 whole warps"}));
}

}  // namespace
}  // namespace gt::emu_test
