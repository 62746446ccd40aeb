// Device-side helpers shared by the kernels in kernels/cuda/*.cu: the launch
// seam and dynamic shared memory, warp and block reductions, 16-byte packs
// for vectorised loads, fp32/bf16 conversion, grid sizing and the NVTX range
// every launcher opens.
// Contains device code: include it from .cu files only (launcher headers,
// which g++ sees, must not include it). The .cu files are compiled by nvcc,
// or by g++ against the emulated device (TRAINER_CUDA_EMULATOR builds,
// docs/EMULATOR.md); the two constructs nvcc alone understands, `<<<>>>` and
// `extern __shared__`, appear only here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/nvtx.hpp"

#if !defined(__CUDACC__) && !defined(TRAINER_CUDA_EMULATOR)
#error "kernels/cuda/*.cu need nvcc, or the emulated device (cmake -DTRAINER_CUDA_EMULATOR=ON)"
#endif

namespace gt::cuda::dev {

// ---- launches and dynamic shared memory ----------------------------------------
// `dev::launch(kernel, {grid, block, smem_bytes, stream}, args...)` is
// `kernel<<<grid, block, smem_bytes, stream>>>(args...)`; on the emulated
// device it also records the launcher's file:line for reports. Follow it with
// CUDA_CHECK_LAUNCH(), as after <<<>>>.
struct LaunchConfig {
  dim3 grid, block;
  size_t smem_bytes;
  cudaStream_t stream;
#if defined(__CUDACC__)
  LaunchConfig(dim3 g, dim3 b, size_t smem, cudaStream_t s)
      : grid(g), block(b), smem_bytes(smem), stream(s) {}
#else
  ::gt::emu::Site site;
  LaunchConfig(dim3 g, dim3 b, size_t smem, cudaStream_t s, const char* file = __builtin_FILE(),
               int line = __builtin_LINE())
      : grid(g), block(b), smem_bytes(smem), stream(s), site{file, line} {}
#endif
};

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), const LaunchConfig& c, Args&&... args) {
#if defined(__CUDACC__)
  kernel<<<c.grid, c.block, c.smem_bytes, c.stream>>>(std::forward<Args>(args)...);
#else
  (void)::gt::emu::launch_kernel(
      kernel, ::gt::emu::LaunchConfig{c.grid, c.block, c.smem_bytes, c.stream, c.site},
      std::forward<Args>(args)...);
#endif
}

// A static shared array: GT_SHARED(float, s_dw, [kRows][kCols]); is
// `__shared__ float s_dw[kRows][kCols];` (a scalar: GT_SHARED(float, s, );).
// Every static shared declaration in kernels/cuda uses it
// (tests/scripts/test_layering.py holds to that): on the emulated device it
// also hands the array to the scheduler, which NaN-poisons it at its first
// declaration in every block, so a read the block has not written first
// (a missing barrier, a thread reading a slot nobody wrote) sees NaN even
// in a template or inline function, where g++ ignores the section that
// poisons the other statics.
#if defined(__CUDACC__)
#define GT_SHARED(T, name, dims) __shared__ T name dims
#else
#define GT_SHARED(T, name, dims) \
  __shared__ T name dims;        \
  ::gt::emu::detail::shared_array(static_cast<void*>(&name), sizeof(name))
#endif

// The block's dynamic shared memory (the launch's smem_bytes), 128-byte
// aligned: what `extern __shared__ __align__(128) T name[]` gives.
template <typename T>
__device__ __forceinline__ T* dynamic_shared_memory() {
#if defined(__CUDACC__)
  extern __shared__ __align__(128) unsigned char gt_dynamic_smem[];
  return reinterpret_cast<T*>(gt_dynamic_smem);
#else
  return ::gt::emu::dynamic_shared_memory<T>();
#endif
}

// exp on the SFU (__expf: ex2.approx of x * log2(e), ~2 ulp plus the
// product's rounding): for values whose own precision is far coarser.
__device__ __forceinline__ float fast_exp(float x) {
#if defined(__CUDACC__)
  return __expf(x);
#else
  return ::gt::emu::fast_exp(x);
#endif
}

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// ---- conversions (compute is always fp32) ----------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// ---- 16-byte packs ----------------------------------------------------------
// Pack<T>: 16 bytes of T (4 floats or 8 bf16), loaded/stored as one 128-bit access.
template <typename T>
struct alignas(16) Pack {
  static constexpr int N = 16 / static_cast<int>(sizeof(T));
  T v[N];
};
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& x) {
  *reinterpret_cast<Pack<T>*>(p) = x;
}

// Quad<T>: four consecutive T as one access (16 bytes of fp32, 8 of bf16), for
// kernels whose lanes own the same four columns whatever the row's type. The
// address must be aligned to the Quad's size.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};
template <typename T>
__device__ __forceinline__ Quad<T> load_quad(const T* p) {
  return *reinterpret_cast<const Quad<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store_quad(T* p, const Quad<T>& x) {
  *reinterpret_cast<Quad<T>*>(p) = x;
}

__host__ __device__ inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Splits a row of n elements of size `elem` at p into [0, head) scalar,
// [head, body_end) whole 16-byte packs, [body_end, n) scalar tail, so that a
// row that starts unaligned still gets vector loads for its body.
struct RowSplit {
  int64_t head, body_end;
};
__device__ __forceinline__ RowSplit split_row(const void* p, int64_t n, int elem) {
  const int64_t mis = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % 16);
  int64_t head = mis == 0 ? 0 : (16 - mis) / elem;
  if ((16 - mis) % elem != 0) head = n;  // cannot ever align: all scalar
  head = head < n ? head : n;
  const int per = 16 / elem;
  const int64_t body_end = head + (n - head) / per * per;
  return {head, body_end};
}

// ---- reductions -------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// |x| as ordered bits, for amaxes (the fp8 path's scales): for
// non-negative floats the unsigned order is the numeric one, and a NaN (sign
// cleared) lies above +inf, so a max of bits propagates NaN, which fmaxf
// would drop.
__device__ __forceinline__ unsigned abs_bits(float v) { return __float_as_uint(fabsf(v)); }
__device__ __forceinline__ unsigned warp_max_bits(unsigned v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the whole block, returned to every thread. Every thread of the
// block must call it (it syncs); blockDim.x must be a multiple of 32. The
// reduction tree is fixed by blockDim, so the result is deterministic.
template <typename T>
__device__ T block_sum(T v) {
  GT_SHARED(T, partial, [kWarpSize]);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T total = lane < n_warps ? partial[lane] : T(0);
  return warp_sum(total);
}

// ---- launch helpers (host) --------------------------------------------------
// Blocks for a grid-stride loop over `work` items: enough to fill the chip,
// capped so huge tensors loop instead of launching millions of blocks. Depends
// on the shape only, never on the device, so results are reproducible.
inline unsigned grid_for(int64_t work, int threads, int64_t max_blocks = 8192) {
  int64_t b = (work + threads - 1) / threads;
  b = std::max<int64_t>(1, std::min(b, max_blocks));
  return static_cast<unsigned>(b);
}

// NVTX range for the duration of a launcher (visible in Nsight Systems).
using NvtxRange = ::gt::cuda::NvtxRange;

}  // namespace gt::cuda::dev
