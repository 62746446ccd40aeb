// Elementwise kernels and launchers (see elementwise.cuh for invariants).
// Grid-stride loops: a 16-byte-pack body when aligned, then a scalar tail.
#include <type_traits>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;

// out[i] = op(out[i] or a[i], b[i]) in fp32, written back as T.
template <typename T, typename Op>
__global__ void binary_kernel(T* out, const T* a, const T* b, int64_t n, int64_t n_packs, Op op) {
  constexpr int N = dev::Pack<T>::N;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < n_packs; i += stride) {
    const dev::Pack<T> x = dev::load_pack(a + i * N);
    const dev::Pack<T> y = dev::load_pack(b + i * N);
    dev::Pack<T> z;
#pragma unroll
    for (int k = 0; k < N; ++k) z.v[k] = dev::from_float<T>(op(dev::to_float(x.v[k]), dev::to_float(y.v[k])));
    dev::store_pack(out + i * N, z);
  }
  for (int64_t i = n_packs * N + tid; i < n; i += stride)
    out[i] = dev::from_float<T>(op(dev::to_float(a[i]), dev::to_float(b[i])));
}

struct Plus {
  __device__ float operator()(float x, float y) const { return x + y; }
};

template <typename T>
void launch_binary(const char* name, T* out, const T* a, const T* b, int64_t n,
                   cudaStream_t stream) {
  GT_CHECK(n >= 0, name, ": n = ", n);
  if (n == 0) return;
  dev::NvtxRange range(name);
  constexpr int N = dev::Pack<T>::N;
  const bool vec = dev::aligned16(out) && dev::aligned16(a) && dev::aligned16(b);
  const int64_t n_packs = vec ? n / N : 0;
  const int64_t work = n_packs + (n - n_packs * N);
  dev::launch(binary_kernel<T, Plus>, {dev::grid_for(work, kThreads), kThreads, 0, stream}, out, a,
              b, n, n_packs, Plus{});
  CUDA_CHECK_LAUNCH();
}

// out (R,C) += bias (C). With vec, C % N == 0, so a pack never straddles rows.
// B: the bias's type (T, or fp32 under bf16 storage: the model's fp32 bias).
template <typename T, typename B>
__global__ void add_bias_kernel(T* out, const B* bias, int64_t n, int64_t C, bool vec) {
  constexpr int N = dev::Pack<T>::N;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {
    for (int64_t i = tid; i < n / N; i += stride) {
      dev::Pack<T> o = dev::load_pack(out + i * N);
      const int64_t c0 = (i * N) % C;
      float bf[N];
      if constexpr (std::is_same_v<T, B>) {
        const dev::Pack<B> b = dev::load_pack(bias + c0);
#pragma unroll
        for (int k = 0; k < N; ++k) bf[k] = dev::to_float(b.v[k]);
      } else {
#pragma unroll
        for (int k = 0; k < N; ++k) bf[k] = dev::to_float(bias[c0 + k]);
      }
#pragma unroll
      for (int k = 0; k < N; ++k) o.v[k] = dev::from_float<T>(dev::to_float(o.v[k]) + bf[k]);
      dev::store_pack(out + i * N, o);
    }
  } else {
    for (int64_t i = tid; i < n; i += stride)
      out[i] = dev::from_float<T>(dev::to_float(out[i]) + dev::to_float(bias[i % C]));
  }
}

template <typename T, typename B>
void launch_add_bias(T* out, const B* bias, int64_t R, int64_t C, cudaStream_t stream) {
  GT_CHECK(R >= 0 && C > 0, "add_bias: R = ", R, ", C = ", C);
  if (R == 0) return;
  dev::NvtxRange range("add_bias");
  constexpr int N = dev::Pack<T>::N;
  const bool vec = C % N == 0 && dev::aligned16(out) && dev::aligned16(bias);
  const int64_t n = R * C;
  dev::launch(add_bias_kernel<T, B>,
              {dev::grid_for(vec ? n / N : n, kThreads), kThreads, 0, stream}, out, bias, n, C,
              vec);
  CUDA_CHECK_LAUNCH();
}

// ---- column sums --------------------------------------------------------------
// Same scheme as LayerNorm's parameter gradients: blocks of 32 columns x 8 row
// lanes sum one chunk of rows into scratch[chunk][c] (coalesced over c), then
// one thread per column adds the chunks in order.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
constexpr int64_t kMaxChunks = 1024;
constexpr int64_t kMinRowsPerChunk = 64;

struct Chunking {
  int64_t rows_per_chunk, n_chunks;
};
Chunking chunking(int64_t R) {
  const int64_t rpc = std::max<int64_t>(kMinRowsPerChunk, (R + kMaxChunks - 1) / kMaxChunks);
  return {rpc, std::max<int64_t>(1, (R + rpc - 1) / rpc)};
}

template <typename T>
__global__ void column_partials_kernel(float* scratch, const T* src, int64_t R, int64_t C,
                                       int64_t rows_per_chunk) {
  GT_SHARED(float, s, [kRowLanes][kColTile]);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = std::min<int64_t>(R, r0 + rows_per_chunk);
  float acc = 0.f;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) acc += dev::to_float(src[r * C + c]);
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kRowLanes; ++k) sum += s[k][threadIdx.x];  // fixed order
    scratch[chunk * C + c] = sum;
  }
}

__global__ void column_reduce_kernel(float* dst, const float* scratch, int64_t C,
                                     int64_t n_chunks) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sum = 0.f;
  for (int64_t k = 0; k < n_chunks; ++k) sum += scratch[k * C + c];  // fixed order
  dst[c] += sum;
}

template <typename T>
void launch_column_sum(float* dst, const T* src, int64_t R, int64_t C, float* scratch,
                       cudaStream_t stream) {
  GT_CHECK(R >= 0 && C > 0, "column_sum_accumulate: R = ", R, ", C = ", C);
  if (R == 0) return;
  dev::NvtxRange range("column_sum_accumulate");
  const Chunking ch = chunking(R);
  GT_CHECK(ch.n_chunks <= 65535, "column_sum_accumulate: too many row chunks");
  const dim3 grid(static_cast<unsigned>((C + kColTile - 1) / kColTile),
                  static_cast<unsigned>(ch.n_chunks));
  dev::launch(column_partials_kernel<T>, {grid, dim3(kColTile, kRowLanes), 0, stream}, scratch, src,
              R, C, ch.rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  dev::launch(column_reduce_kernel, {dev::grid_for(C, kThreads), kThreads, 0, stream}, dst, scratch,
              C, ch.n_chunks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  launch_binary("add", out, a, b, n, stream);
}
void add(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
         cudaStream_t stream) {
  launch_binary("add", out, a, b, n, stream);
}
void accumulate(float* acc, const float* x, int64_t n, cudaStream_t stream) {
  launch_binary("accumulate", acc, acc, x, n, stream);
}
void accumulate(__nv_bfloat16* acc, const __nv_bfloat16* x, int64_t n, cudaStream_t stream) {
  launch_binary("accumulate", acc, acc, x, n, stream);
}
void add_bias(float* out, const float* bias, int64_t R, int64_t C, cudaStream_t stream) {
  launch_add_bias(out, bias, R, C, stream);
}
void add_bias(__nv_bfloat16* out, const __nv_bfloat16* bias, int64_t R, int64_t C,
              cudaStream_t stream) {
  launch_add_bias(out, bias, R, C, stream);
}
void add_bias(__nv_bfloat16* out, const float* bias, int64_t R, int64_t C, cudaStream_t stream) {
  launch_add_bias(out, bias, R, C, stream);
}

int64_t column_sum_scratch_floats(int64_t R, int64_t C) { return chunking(R).n_chunks * C; }
void column_sum_accumulate(float* dst, const float* src, int64_t R, int64_t C, float* scratch,
                           cudaStream_t stream) {
  launch_column_sum(dst, src, R, C, scratch, stream);
}
void column_sum_accumulate(float* dst, const __nv_bfloat16* src, int64_t R, int64_t C,
                           float* scratch, cudaStream_t stream) {
  launch_column_sum(dst, src, R, C, scratch, stream);
}

}  // namespace gt::cuda
