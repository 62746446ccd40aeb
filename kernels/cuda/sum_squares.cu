// Two-pass deterministic sum of squares (see sum_squares.cuh).
#include "kernels/cuda/sum_squares.cuh"

#include "kernels/cuda/device_common.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;
constexpr int64_t kElemsPerThread = 16;  // aim: each thread loops over >= 16 elements

int64_t n_blocks(int64_t n) {
  const int64_t per_block = kThreads * kElemsPerThread;
  return std::max<int64_t>(1, std::min(kMaxBlocks, (n + per_block - 1) / per_block));
}

__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n,
                                           int64_t n_packs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double acc = 0.0;
  for (int64_t i = tid; i < n_packs; i += stride) {
    const float4 v = *reinterpret_cast<const float4*>(x + 4 * i);
    acc += static_cast<double>(v.x) * v.x;
    acc += static_cast<double>(v.y) * v.y;
    acc += static_cast<double>(v.z) * v.z;
    acc += static_cast<double>(v.w) * v.w;
  }
  for (int64_t i = 4 * n_packs + tid; i < n; i += stride) {
    const double v = x[i];
    acc += v * v;
  }
  acc = dev::block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_squares_final_kernel(double* out, const double* partial, int64_t n_partial) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n_partial; i += blockDim.x) acc += partial[i];
  acc = dev::block_sum(acc);
  if (threadIdx.x == 0) out[0] = acc;
}

}  // namespace

int64_t sum_squares_scratch_doubles(int64_t n) { return n_blocks(n); }

void sum_squares(double* out, const float* x, int64_t n, double* scratch, cudaStream_t stream) {
  GT_CHECK(n >= 0, "sum_squares: n = ", n);
  dev::NvtxRange range("sum_squares");
  const int64_t blocks = n_blocks(n);
  const int64_t n_packs = dev::aligned16(x) ? n / 4 : 0;
  dev::launch(sum_squares_partial_kernel, {static_cast<unsigned>(blocks), kThreads, 0, stream},
              scratch, x, n, n_packs);
  CUDA_CHECK_LAUNCH();
  dev::launch(sum_squares_final_kernel, {1, kThreads, 0, stream}, out, scratch, blocks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gt::cuda
