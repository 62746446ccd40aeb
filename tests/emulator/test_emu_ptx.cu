// The PTX warp instructions on the emulated device (gt_emu/ptx.hpp, used
// through kernels/cuda/mma_sm80.cuh): mma.sync.m16n8k16 against a naive GEMM
// with fragments built by the ISA's layout from global memory; ldmatrix
// (plain and .trans) feeding it from shared memory in the ways the attention
// kernels do (A row-major, B from a row-major (n x k) tile and from a
// row-major (k x n) tile); an accumulator reused as the next A operand
// (FlashAttention-2's P); and the rules ldmatrix enforces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "emu_test_util.hpp"
#include "kernels/core/bf16.hpp"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "test_util.hpp"

namespace gt::emu_test {
namespace {

namespace dev = gt::cuda::dev;

uint32_t pack(const uint16_t* m, int i0, int i1) { return m[i0] | uint32_t{m[i1]} << 16; }

// d (16 x 8 row-major) = a (16 x 16 row-major) b (16 x 8 row-major) + c,
// every fragment register assembled by hand from the ISA's layout.
__global__ void mma_by_layout_kernel(float* d, const uint16_t* a, const uint16_t* b,
                                     const float* c) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  uint32_t ra[4], rb[2];
  for (int r = 0; r < 4; ++r) {
    const int row = g + (r & 1) * 8, col = 2 * t + (r >> 1) * 8;
    ra[r] = pack(a, row * 16 + col, row * 16 + col + 1);
  }
  for (int r = 0; r < 2; ++r) {
    const int k = 2 * t + r * 8;
    rb[r] = pack(b, k * 8 + g, (k + 1) * 8 + g);
  }
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)];
  dev::mma_bf16_16816(acc, ra, rb);
  for (int i = 0; i < 4; ++i) d[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)] = acc[i];
}

// Random bf16 values (as bits) and their floats.
struct Bf16Matrix {
  std::vector<uint16_t> bits;
  std::vector<float> v;
  Bf16Matrix(size_t n, uint64_t seed) {
    const auto r = test::random_vector(n, seed);
    for (float x : r) {
      bits.push_back(bf16_from_float(x));
      v.push_back(bf16_to_float(bits.back()));
    }
  }
};

TEST(EmuPtx, MmaM16n8k16MatchesANaiveGemmUnderTheIsaLayout) {
  cuda::CudaStream s;
  const Bf16Matrix A(16 * 16, 1), B(16 * 8, 2);
  const std::vector<float> C = test::random_vector(16 * 8, 3);
  test::DeviceArray<uint16_t> da(A.bits, s.get()), db(B.bits, s.get());
  test::DeviceArray<float> dc(C, s.get()), dd(16 * 8, s.get());
  dd.poison();
  dev::launch(mma_by_layout_kernel, {1, 32, 0, s.get()}, dd.get(), da.get(), db.get(), dc.get());
  CUDA_CHECK(cudaGetLastError());
  const auto got = dd.download();
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double want = C[r * 8 + n];
      for (int k = 0; k < 16; ++k) want += double(A.v[r * 16 + k]) * B.v[k * 8 + n];
      ASSERT_NEAR(got[r * 8 + n], want, 1e-5 * (1 + std::abs(want))) << "(" << r << "," << n << ")";
    }
}

// One warp, shared memory rows padded to 24 bf16 (48 bytes, 16-byte aligned):
//   out1 (16 x 16) = A (16 x 16) Bt^T, Bt stored (n x k) row-major: ldmatrix
//   out2 (16 x 16) = A (16 x 16) Bk,   Bk stored (k x n) row-major: ldmatrix.trans
//   out3 (16 x 16) = bf16(out1) Bk, out1's accumulators repacked as the A operand.
constexpr int kLd = 24;
__global__ void ldmatrix_kernel(float* out1, float* out2, float* out3, const uint16_t* a,
                                const uint16_t* bt, const uint16_t* bk) {
  __shared__ __align__(16) uint16_t sa[16 * kLd], sbt[16 * kLd], sbk[16 * kLd];
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  for (int i = l; i < 256; i += 32) {
    sa[i / 16 * kLd + i % 16] = a[i];
    sbt[i / 16 * kLd + i % 16] = bt[i];
    sbk[i / 16 * kLd + i % 16] = bk[i];
  }
  __syncwarp();
  // A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
  uint32_t ra[4];
  dev::ldmatrix_x4<false>(ra, &sa[(l % 16) * kLd + (l / 16) * 8]);
  // Bt (n x k): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
  // are b[0], b[1] of n-tile 0, then of n-tile 1.
  uint32_t rbt[4];
  dev::ldmatrix_x4<false>(rbt, &sbt[((l % 8) + (l / 16) * 8) * kLd + ((l / 8) % 2) * 8]);
  // Bk (k x n), transposed: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n
  // 8-15).
  uint32_t rbk[4];
  dev::ldmatrix_x4<true>(rbk, &sbk[((l % 8) + ((l / 8) % 2) * 8) * kLd + (l / 16) * 8]);
  float acc1[2][4] = {}, acc2[2][4] = {}, acc3[2][4] = {};
  for (int j = 0; j < 2; ++j) {
    const uint32_t b1[2] = {rbt[2 * j], rbt[2 * j + 1]}, b2[2] = {rbk[2 * j], rbk[2 * j + 1]};
    dev::mma_bf16_16816(acc1[j], ra, b1);
    dev::mma_bf16_16816(acc2[j], ra, b2);
  }
  const uint32_t p[4] = {
      dev::pack_bf16(acc1[0][0], acc1[0][1]), dev::pack_bf16(acc1[0][2], acc1[0][3]),
      dev::pack_bf16(acc1[1][0], acc1[1][1]), dev::pack_bf16(acc1[1][2], acc1[1][3])};
  for (int j = 0; j < 2; ++j) {
    const uint32_t b2[2] = {rbk[2 * j], rbk[2 * j + 1]};
    dev::mma_bf16_16816(acc3[j], p, b2);
  }
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 4; ++i) {
      const int at = (g + (i >> 1) * 8) * 16 + j * 8 + 2 * t + (i & 1);
      out1[at] = acc1[j][i];
      out2[at] = acc2[j][i];
      out3[at] = acc3[j][i];
    }
}

TEST(EmuPtx, LdmatrixFeedsMmaAndAnAccumulatorIsTheNextAOperand) {
  cuda::CudaStream s;
  const Bf16Matrix A(256, 4), Bt(256, 5), Bk(256, 6);
  test::DeviceArray<uint16_t> da(A.bits, s.get()), dbt(Bt.bits, s.get()), dbk(Bk.bits, s.get());
  test::DeviceArray<float> o1(256, s.get()), o2(256, s.get()), o3(256, s.get());
  dev::launch(ldmatrix_kernel, {1, 32, 0, s.get()}, o1.get(), o2.get(), o3.get(), da.get(),
              dbt.get(), dbk.get());
  CUDA_CHECK(cudaGetLastError());
  const auto g1 = o1.download(), g2 = o2.download(), g3 = o3.download();
  std::vector<float> p(256);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      double w1 = 0, w2 = 0;
      for (int k = 0; k < 16; ++k) {
        w1 += double(A.v[r * 16 + k]) * Bt.v[n * 16 + k];
        w2 += double(A.v[r * 16 + k]) * Bk.v[k * 16 + n];
      }
      ASSERT_NEAR(g1[r * 16 + n], w1, 1e-5 * (1 + std::abs(w1)))
          << "A Bt^T (" << r << "," << n << ")";
      ASSERT_NEAR(g2[r * 16 + n], w2, 1e-5 * (1 + std::abs(w2)))
          << "A Bk (" << r << "," << n << ")";
      p[r * 16 + n] = bf16_to_float(bf16_from_float(g1[r * 16 + n]));
    }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      double w3 = 0;
      for (int k = 0; k < 16; ++k) w3 += double(p[r * 16 + k]) * Bk.v[k * 16 + n];
      ASSERT_NEAR(g3[r * 16 + n], w3, 1e-5 * (1 + std::abs(w3)))
          << "P Bk (" << r << "," << n << ")";
    }
}

// ldmatrix with a row address `offset` bf16 into shared memory, or into
// global memory.
__global__ void ldmatrix_from_kernel(float* out, const uint16_t* global, int offset,
                                     bool from_global) {
  __shared__ __align__(16) uint16_t tile[16 * 16 + 8];
  for (int i = threadIdx.x; i < 16 * 16 + 8; i += blockDim.x) tile[i] = 0;
  __syncwarp(blockDim.x >= 32 ? 0xffffffffu : (1u << blockDim.x) - 1u);
  const int l = threadIdx.x;
  const uint16_t* base = from_global ? global : tile;
  uint32_t r[4];
  dev::ldmatrix_x4<false>(r, base + offset + (l % 16) * 16 + (l / 16) * 8);
  out[l] = static_cast<float>(r[0]);
}

class EmuPtxFault : public ::testing::Test {
 protected:
  cuda::CudaStream s;
  test::DeviceArray<uint16_t> g{16 * 16 + 8, s.get()};
  test::DeviceArray<float> out{32, s.get()};
};

TEST_F(EmuPtxFault, LdmatrixFromAnUnalignedRow) {
  EXPECT_TRUE(faults_with(
      s.get(),
      [&] {
        dev::launch(ldmatrix_from_kernel, {1, 32, 0, s.get()}, out.get(), g.get(), 4, false);
      },
      cudaErrorMisalignedAddress, {"ldmatrix", "not 16-byte aligned"}));
}

TEST_F(EmuPtxFault, LdmatrixFromGlobalMemory) {
  EXPECT_TRUE(faults_with(
      s.get(),
      [&] {
        dev::launch(ldmatrix_from_kernel, {1, 32, 0, s.get()}, out.get(), g.get(), 0, true);
      },
      cudaErrorIllegalAddress, {"ldmatrix", "not in the block's shared memory"}));
}

TEST_F(EmuPtxFault, LdmatrixWithoutTheWholeWarp) {
  EXPECT_TRUE(faults_with(
      s.get(),
      [&] {
        dev::launch(ldmatrix_from_kernel, {1, 16, 0, s.get()}, out.get(), g.get(), 0, false);
      },
      cudaErrorLaunchFailure, {"ldmatrix.sync", "do not exist"}));
}

TEST_F(EmuPtxFault, LdmatrixFromAlignedSharedRowsLoadsFine) {
  dev::launch(ldmatrix_from_kernel, {1, 32, 0, s.get()}, out.get(), g.get(), 8, false);
  EXPECT_EQ(cudaStreamSynchronize(s.get()), cudaSuccess);
}

}  // namespace
}  // namespace gt::emu_test
