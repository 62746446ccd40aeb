// nvcuda::wmma on the emulated device against a naive GEMM, for every
// fragment layout (A and B row- or column-major, the accumulator loaded and
// stored row- or column-major), every emulated shape, and several element
// permutations (GT_EMU_WMMA_LAYOUT); and the CUDA rules it enforces: the
// 32-byte pointer alignment, ldm a multiple of 16 bytes, the whole warp.
#include <gtest/gtest.h>
#include <mma.h>

#include <cstdint>
#include <vector>

#include "config.hpp"  // emulator/src: the layout seed, switched per test
#include "emu_test_util.hpp"
#include "kernels/core/bf16.hpp"
#include "kernels/cuda/device_common.cuh"
#include "test_util.hpp"

namespace gt::emu_test {
namespace {

namespace dev = gt::cuda::dev;
namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

// D (M x N) = A (M x K) B (K x N) + C, one warp, each operand in the layout
// the template says, with leading dimensions lda/ldb/ldc (elements).
template <int M, int N, int K, typename LA, typename LB>
__global__ void mma_kernel(float* d, const bf16* a, const bf16* b, const float* c, unsigned lda,
                           unsigned ldb, unsigned ldc, bool acc_col_major) {
  wmma::fragment<wmma::matrix_a, M, N, K, bf16, LA> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, bf16, LB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, float> fc;
  const wmma::layout_t acc = acc_col_major ? wmma::mem_col_major : wmma::mem_row_major;
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  wmma::load_matrix_sync(fc, c, ldc, acc);
  wmma::mma_sync(fc, fa, fb, fc);
  for (int i = 0; i < fc.num_elements; ++i) fc.x[i] *= 2.f;  // element-wise: any layout
  wmma::store_matrix_sync(d, fc, ldc, acc);
}

float round_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }

template <int M, int N, int K, typename LA, typename LB>
void check_layout(bool acc_col_major, uint64_t seed) {
  constexpr bool a_col = std::is_same_v<LA, wmma::col_major>;
  constexpr bool b_col = std::is_same_v<LB, wmma::col_major>;
  // Padded leading dimensions (multiples of 8 bf16 / 4 floats, 16 bytes).
  const unsigned lda = (a_col ? M : K) + 8, ldb = (b_col ? K : N) + 8;
  const unsigned ldc = (acc_col_major ? M : N) + 4;
  std::vector<float> A(M * K), B(K * N), C(M * N);
  const auto ra = test::random_vector(A.size(), 11 + seed), rb = test::random_vector(B.size(), 12),
             rc = test::random_vector(C.size(), 13);
  for (size_t i = 0; i < A.size(); ++i) A[i] = round_bf16(ra[i]);
  for (size_t i = 0; i < B.size(); ++i) B[i] = round_bf16(rb[i]);
  C = rc;
  // Store in the layouts asked for; padding holds NaN, which must not be read.
  std::vector<uint16_t> a_mem((a_col ? K : M) * lda, 0xffff), b_mem((b_col ? N : K) * ldb, 0xffff);
  std::vector<float> c_mem((acc_col_major ? N : M) * ldc, NAN);
  for (int r = 0; r < M; ++r)
    for (int k = 0; k < K; ++k) a_mem[a_col ? r + k * lda : r * lda + k] = bf16_from_float(A[r * K + k]);
  for (int k = 0; k < K; ++k)
    for (int c = 0; c < N; ++c) b_mem[b_col ? k + c * ldb : k * ldb + c] = bf16_from_float(B[k * N + c]);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) c_mem[acc_col_major ? r + c * ldc : r * ldc + c] = C[r * N + c];

  cuda::CudaStream s;
  test::DeviceArray<uint16_t> da(a_mem, s.get()), db(b_mem, s.get());
  test::DeviceArray<float> dc(c_mem, s.get()), dd(c_mem.size(), s.get());
  dd.poison();
  dev::launch(mma_kernel<M, N, K, LA, LB>, {1, 32, 0, s.get()}, dd.get(),
              reinterpret_cast<const bf16*>(da.get()), reinterpret_cast<const bf16*>(db.get()),
              dc.get(), lda, ldb, ldc, acc_col_major);
  CUDA_CHECK(cudaGetLastError());
  const std::vector<float> got = dd.download();
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) {
      double want = C[r * N + c];
      for (int k = 0; k < K; ++k) want += static_cast<double>(A[r * K + k]) * B[k * N + c];
      const float g = got[acc_col_major ? r + c * ldc : r * ldc + c];
      ASSERT_NEAR(g, 2 * want, 1e-4 * (1 + std::abs(want)))
          << M << "x" << N << "x" << K << " a_col " << a_col << " b_col " << b_col << " acc_col "
          << acc_col_major << " seed " << seed << " at (" << r << "," << c << ")";
    }
}

template <int M, int N, int K>
void check_shape(uint64_t seed) {
  for (bool acc_col : {false, true}) {
    check_layout<M, N, K, wmma::row_major, wmma::row_major>(acc_col, seed);
    check_layout<M, N, K, wmma::row_major, wmma::col_major>(acc_col, seed);
    check_layout<M, N, K, wmma::col_major, wmma::row_major>(acc_col, seed);
    check_layout<M, N, K, wmma::col_major, wmma::col_major>(acc_col, seed);
  }
}

TEST(EmuWmma, EveryShapeAndLayoutMatchesANaiveGemmUnderSeveralElementPermutations) {
  const uint64_t saved = gt::emu::config().wmma_layout_seed;
  for (uint64_t seed : {uint64_t{0}, saved, uint64_t{12345}}) {
    gt::emu::config().wmma_layout_seed = seed;
    check_shape<16, 16, 16>(seed);
    check_shape<32, 8, 16>(seed);
    check_shape<8, 32, 16>(seed);
  }
  gt::emu::config().wmma_layout_seed = saved;
}

__global__ void load_kernel(float* out, const bf16* a, unsigned ldm) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, a, ldm);
  out[threadIdx.x] = __bfloat162float(fa.x[0]);
}

__global__ void half_warp_mma_kernel(float* out) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fa, 1.f);
  wmma::fill_fragment(fb, 1.f);
  wmma::fill_fragment(fc, 0.f);
  wmma::mma_sync(fc, fa, fb, fc);
  out[threadIdx.x] = fc.x[0];
}

class EmuWmmaFault : public ::testing::Test {
 protected:
  cuda::CudaStream s;
  test::DeviceArray<uint16_t> a{64 * 64, s.get()};
  test::DeviceArray<float> out{64, s.get()};
  const bf16* at(size_t offset) const { return reinterpret_cast<const bf16*>(a.get() + offset); }
};

TEST_F(EmuWmmaFault, APointerOffThe32ByteRule) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(load_kernel, {1, 32, 0, s.get()}, out.get(), at(8), 16u); },
                          cudaErrorLaunchFailure, {"not 256-bit (32-byte) aligned", "test_emu_wmma.cu:"}));
}

TEST_F(EmuWmmaFault, ALeadingDimensionOffThe16ByteRule) {
  // 20 bf16 = 40 bytes per row: legal in C, garbage on a GPU.
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(load_kernel, {1, 32, 0, s.get()}, out.get(), at(0), 20u); },
                          cudaErrorLaunchFailure, {"ldm = 20", "multiple of 16 bytes"}));
}

TEST_F(EmuWmmaFault, AnMmaWithoutTheWholeWarp) {
  EXPECT_TRUE(faults_with(s.get(), [&] { dev::launch(half_warp_mma_kernel, {1, 16, 0, s.get()}, out.get()); },
                          cudaErrorLaunchFailure, {"wmma::mma_sync", "do not exist"}));
}

TEST_F(EmuWmmaFault, LegalPointersLoadFine) {
  dev::launch(load_kernel, {1, 32, 0, s.get()}, out.get(), at(16), 24u);  // 32 bytes in, 48-byte rows
  EXPECT_EQ(cudaStreamSynchronize(s.get()), cudaSuccess);
}

}  // namespace
}  // namespace gt::emu_test
