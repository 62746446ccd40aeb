// The fp8 path's quantising kernels (see fp8.cuh).
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/fp8.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

int64_t amax_blocks(int64_t n) {
  return std::max<int64_t>(1, std::min(kMaxBlocks, (n + kThreads * 16 - 1) / (kThreads * 16)));
}

using dev::abs_bits;       // |x| as ordered bits (device_common.cuh)
using dev::warp_max_bits;

// The max over the block, returned to every thread (every thread calls it).
__device__ unsigned block_max_bits(unsigned v) {
  GT_SHARED(unsigned, partial, [dev::kWarpSize]);
  const int lane = threadIdx.x % dev::kWarpSize, warp = threadIdx.x / dev::kWarpSize;
  v = warp_max_bits(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const unsigned w = lane < static_cast<int>(blockDim.x / dev::kWarpSize) ? partial[lane] : 0u;
  return warp_max_bits(w);
}

// Pass 1: each block's max into partial[block] (as bits in a float slot).
template <typename T>
__global__ void amax_partial_kernel(unsigned* partial, const T* x, int64_t n) {
  unsigned m = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    m = max(m, abs_bits(dev::to_float(x[i])));
  m = block_max_bits(m);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

// Pass 2, one block: the max of the partials, ASSIGNED.
__global__ void amax_final_kernel(float* out, const unsigned* partial, int64_t n_partial) {
  unsigned m = 0;
  for (int64_t i = threadIdx.x; i < n_partial; i += blockDim.x) m = max(m, partial[i]);
  m = block_max_bits(m);
  if (threadIdx.x == 0) out[0] = __uint_as_float(m);
}

// The format's largest value and the power-of-two floor come from
// kernels/core/fp8.hpp's constexpr code (--expt-relaxed-constexpr), the
// functions the CPU twin calls.
__device__ __forceinline__ float scale_of(float amax, Fp8Format f, bool pow2) {
  // As the CPU twin's std::max(amax, 1e-12): a NaN amax stays NaN (a
  // non-finite step), where fmax would drop it.
  const double a = static_cast<double>(amax) < 1e-12 ? 1e-12 : static_cast<double>(amax);
  const float s = static_cast<float>(static_cast<double>(fp8_spec(f).max_finite) / a);
  return pow2 ? __uint_as_float(pow2_floor_bits(__float_as_uint(s))) : s;
}

__global__ void scales_kernel(float* scale, float* inv, const float* amax, int64_t count,
                              Fp8Format f, bool pow2) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float s = scale_of(amax[i], f, pow2);
    scale[i] = s;  // may be amax[i] itself: read above, by this thread
    if (inv) inv[i] = 1.f / s;
  }
}

__device__ __forceinline__ uint8_t to_fp8(float v, Fp8Format f) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(
      v, __NV_SATFINITE, f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2));
}

template <typename T>
__global__ void quantize_kernel(uint8_t* q, const T* x, int64_t n, const float* scale,
                                Fp8Format f) {
  const float s = scale[0];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    q[i] = to_fp8(dev::to_float(x[i]) * s, f);
}

template <typename T>
__global__ void quantize_rows_kernel(uint8_t* q, float* scales, float* inv, const T* x,
                                     int64_t cols, Fp8Format f) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  unsigned m = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = max(m, abs_bits(dev::to_float(xr[c])));
  const float s = scale_of(__uint_as_float(block_max_bits(m)), f, true);
  if (threadIdx.x == 0) {
    scales[row] = s;
    inv[row] = 1.f / s;
  }
  uint8_t* qr = q + row * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) qr[c] = to_fp8(dev::to_float(xr[c]) * s, f);
}

// One block per row: amax[row] = max |x[row][:]|.
template <typename T>
__global__ void amax_rows_kernel(float* amax, const T* x, int64_t cols) {
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  unsigned m = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = max(m, abs_bits(dev::to_float(xr[c])));
  m = block_max_bits(m);
  if (threadIdx.x == 0) amax[blockIdx.x] = __uint_as_float(m);
}

// Columns: block (x, y) takes kThreads consecutive columns (one per thread,
// so a warp reads consecutive addresses) over row slice y, its maxima into
// partial[y][col]; then one thread per column takes the max over slices.
constexpr int64_t kColRowsPerSlice = 256;
constexpr int64_t kMaxColSlices = 64;
int64_t col_slices(int64_t rows) {
  return std::max<int64_t>(1, std::min(kMaxColSlices, (rows + kColRowsPerSlice - 1) / kColRowsPerSlice));
}

template <typename T>
__global__ void amax_cols_partial_kernel(unsigned* partial, const T* x, int64_t rows,
                                         int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t slices = gridDim.y, per = (rows + slices - 1) / slices;
  const int64_t r0 = blockIdx.y * per, r1 = r0 + per < rows ? r0 + per : rows;
  unsigned m = 0;
  for (int64_t r = r0; r < r1; ++r) m = max(m, abs_bits(dev::to_float(x[r * cols + c])));
  partial[blockIdx.y * cols + c] = m;
}

__global__ void amax_cols_final_kernel(float* amax, const unsigned* partial, int64_t slices,
                                       int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  unsigned m = 0;
  for (int64_t s = 0; s < slices; ++s) m = max(m, partial[s * cols + c]);
  amax[c] = __uint_as_float(m);
}

__global__ void inverse_scales_kernel(float* inv, const float* scale, int64_t n_scale,
                                      int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    inv[i] = 1.f / scale[n_scale == 1 ? 0 : i];
}

// 32 x 32 tiles, 32 x 8 threads. Not transposed: element (r, c) read and
// written in place. Transposed: op(x)[r][c] = x[c][r]; a tile of x is
// read along its rows into shared memory, then written along q's rows.
// Columns [cols, ldq) of q are zero codes. Grid: (ceil(ldq / 32),
// ceil(rows / 32)).
constexpr int kTile = 32, kTileRows = 8;

template <typename T, bool Transposed>
__global__ void quantize_scaled_kernel(uint8_t* q, int64_t ldq, const T* x, int64_t rows,
                                       int64_t cols, const float* scale, bool per_row,
                                       Fp8Format f) {
  GT_SHARED(float, tile, [kTile][kTile + 1]);  // +1: no bank conflicts on the transposed read
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  if (Transposed) {
    // x is (cols, rows): its row c0 + i, columns r0 + threadIdx.x.
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t xr = c0 + i, xc = r0 + threadIdx.x;
      tile[i][threadIdx.x] = xr < cols && xc < rows ? dev::to_float(x[xr * rows + xc]) : 0.f;
    }
    __syncthreads();
  }
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r >= rows || c >= ldq) continue;
    uint8_t code = 0;
    if (c < cols) {
      const float v = Transposed ? tile[threadIdx.x][i] : dev::to_float(x[r * cols + c]);
      code = to_fp8(v * scale[per_row ? r : 0], f);
    }
    q[r * ldq + c] = code;
  }
}

// quantize_scaled_kernel's tiling for codes already quantised: a copy,
// transposed or not, zero-padded to ldq.
template <bool Transposed>
__global__ void copy_codes_kernel(uint8_t* q, int64_t ldq, const uint8_t* codes, int64_t rows,
                                  int64_t cols) {
  GT_SHARED(uint8_t, tile, [kTile][kTile + 1]);
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  if (Transposed) {
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t xr = c0 + i, xc = r0 + threadIdx.x;
      tile[i][threadIdx.x] = xr < cols && xc < rows ? codes[xr * rows + xc] : uint8_t{0};
    }
    __syncthreads();
  }
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r >= rows || c >= ldq) continue;
    q[r * ldq + c] = c >= cols ? uint8_t{0}
                               : Transposed ? tile[threadIdx.x][i] : codes[r * cols + c];
  }
}

template <typename O, typename B>
__global__ void epilogue_kernel(O* out, const float* tmp, int64_t ldt, const B* bias, int64_t rows,
                                int64_t cols, bool accumulate) {
  const int64_t n = rows * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    float v = tmp[r * ldt + c];
    if (bias) v += dev::to_float(bias[c]);
    if (accumulate) v += dev::to_float(out[i]);
    out[i] = dev::from_float<O>(v);
  }
}

template <typename T>
void amax_rows_impl(float* amax, const T* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  GT_CHECK(rows >= 0 && cols >= 0 && rows <= INT32_MAX, "fp8_amax_rows: (", rows, ", ", cols, ")");
  if (rows == 0) return;
  dev::launch(amax_rows_kernel<T>, {static_cast<unsigned>(rows), kThreads, 0, stream}, amax, x,
              cols);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void amax_cols_impl(float* amax, const T* x, int64_t rows, int64_t cols, float* scratch,
                    cudaStream_t stream) {
  GT_CHECK(rows >= 0 && cols >= 0, "fp8_amax_cols: (", rows, ", ", cols, ")");
  if (cols == 0) return;
  const int64_t slices = col_slices(rows);
  const unsigned col_blocks = static_cast<unsigned>((cols + kThreads - 1) / kThreads);
  auto* partial = reinterpret_cast<unsigned*>(scratch);
  if (rows == 0) {
    // The max of no rows is +0 (zero bits), as the tensor amax of nothing.
    CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float) * static_cast<size_t>(cols), stream));
    return;
  }
  dev::launch(amax_cols_partial_kernel<T>,
              {dim3(col_blocks, static_cast<unsigned>(slices)), kThreads, 0, stream}, partial, x,
              rows, cols);
  CUDA_CHECK_LAUNCH();
  dev::launch(amax_cols_final_kernel, {col_blocks, kThreads, 0, stream}, amax, partial, slices,
              cols);
  CUDA_CHECK_LAUNCH();
}

// The 32 x 32 tiles covering q (rows, ldq): quantize_scaled_kernel's and
// copy_codes_kernel's grid. Checks the shapes (`what` names the caller);
// false when there is nothing to do.
bool tile_launch(const char* what, int64_t rows, int64_t cols, int64_t ldq, dim3* grid,
                 dim3* block) {
  GT_CHECK(rows >= 0 && cols >= 0 && ldq >= cols, what, ": (", rows, ", ", cols,
           ") with row stride ", ldq);
  if (rows == 0 || ldq == 0) return false;
  *grid = dim3(static_cast<unsigned>((ldq + kTile - 1) / kTile),
               static_cast<unsigned>((rows + kTile - 1) / kTile));
  *block = dim3(kTile, kTileRows);
  return true;
}

template <typename T>
void quantize_scaled_impl(uint8_t* q, int64_t ldq, const T* x, int64_t rows, int64_t cols,
                          bool transposed, const float* scale, bool per_row, Fp8Format f,
                          cudaStream_t stream) {
  dim3 grid, block;
  if (!tile_launch("fp8_quantize_scaled", rows, cols, ldq, &grid, &block)) return;
  if (transposed)
    dev::launch(quantize_scaled_kernel<T, true>, {grid, block, 0, stream}, q, ldq, x, rows, cols,
                scale, per_row, f);
  else
    dev::launch(quantize_scaled_kernel<T, false>, {grid, block, 0, stream}, q, ldq, x, rows, cols,
                scale, per_row, f);
  CUDA_CHECK_LAUNCH();
}

template <typename O, typename B>
void epilogue_impl(O* out, const float* tmp, int64_t ldt, const B* bias, int64_t rows,
                   int64_t cols, bool accumulate, cudaStream_t stream) {
  dev::launch(epilogue_kernel<O, B>, {dev::grid_for(rows * cols, kThreads), kThreads, 0, stream},
              out, tmp, ldt, bias, rows, cols, accumulate);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void amax_impl(float* amax, const T* x, int64_t n, float* scratch, cudaStream_t stream) {
  GT_CHECK(n >= 0, "fp8_amax: n = ", n);
  dev::NvtxRange range("fp8_amax");
  // Zero bits are +0: the max of nothing (n = 0 still writes amax).
  const int64_t blocks = amax_blocks(n);
  auto* partial = reinterpret_cast<unsigned*>(scratch);
  dev::launch(amax_partial_kernel<T>, {static_cast<unsigned>(blocks), kThreads, 0, stream},
              partial, x, n);
  CUDA_CHECK_LAUNCH();
  dev::launch(amax_final_kernel, {1, kThreads, 0, stream}, amax, partial, blocks);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void quantize_impl(uint8_t* q, const T* x, int64_t n, const float* scale, Fp8Format f,
                   cudaStream_t stream) {
  GT_CHECK(n >= 0, "fp8_quantize: n = ", n);
  if (n == 0) return;
  dev::launch(quantize_kernel<T>, {dev::grid_for(n, kThreads), kThreads, 0, stream}, q, x, n,
              scale, f);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void quantize_rows_impl(uint8_t* q, float* scales, float* inv, const T* x, int64_t rows,
                        int64_t cols, Fp8Format f, cudaStream_t stream) {
  GT_CHECK(rows >= 0 && cols >= 0 && rows <= INT32_MAX, "fp8_quantize_rows: (", rows, ", ", cols,
           ")");
  if (rows == 0) return;
  dev::launch(quantize_rows_kernel<T>, {static_cast<unsigned>(rows), kThreads, 0, stream}, q,
              scales, inv, x, cols, f);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

int64_t fp8_amax_scratch_floats(int64_t n) { return amax_blocks(n); }

void fp8_amax_rows(float* amax, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  amax_rows_impl(amax, x, rows, cols, stream);
}
void fp8_amax_rows(float* amax, const __nv_bfloat16* x, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  amax_rows_impl(amax, x, rows, cols, stream);
}
int64_t fp8_amax_cols_scratch_floats(int64_t rows, int64_t cols) {
  return col_slices(rows) * cols;
}
void fp8_amax_cols(float* amax, const float* x, int64_t rows, int64_t cols, float* scratch,
                   cudaStream_t stream) {
  amax_cols_impl(amax, x, rows, cols, scratch, stream);
}
void fp8_amax_cols(float* amax, const __nv_bfloat16* x, int64_t rows, int64_t cols,
                   float* scratch, cudaStream_t stream) {
  amax_cols_impl(amax, x, rows, cols, scratch, stream);
}

void fp8_inverse_scales(float* inv, const float* scale, int64_t n_scale, int64_t count,
                        cudaStream_t stream) {
  GT_CHECK(n_scale == 1 || n_scale == count, "fp8_inverse_scales: ", n_scale, " scales for ",
           count, " values");
  if (count == 0) return;
  dev::launch(inverse_scales_kernel, {dev::grid_for(count, kThreads), kThreads, 0, stream}, inv,
              scale, n_scale, count);
  CUDA_CHECK_LAUNCH();
}

void fp8_quantize_scaled(uint8_t* q, int64_t ldq, const float* x, int64_t rows, int64_t cols,
                         bool transposed, const float* scale, bool per_row, Fp8Format f,
                         cudaStream_t stream) {
  quantize_scaled_impl(q, ldq, x, rows, cols, transposed, scale, per_row, f, stream);
}
void fp8_quantize_scaled(uint8_t* q, int64_t ldq, const __nv_bfloat16* x, int64_t rows,
                         int64_t cols, bool transposed, const float* scale, bool per_row,
                         Fp8Format f, cudaStream_t stream) {
  quantize_scaled_impl(q, ldq, x, rows, cols, transposed, scale, per_row, f, stream);
}

void fp8_copy_codes(uint8_t* q, int64_t ldq, const uint8_t* codes, int64_t rows, int64_t cols,
                    bool transposed, cudaStream_t stream) {
  dim3 grid, block;
  if (!tile_launch("fp8_copy_codes", rows, cols, ldq, &grid, &block)) return;
  if (transposed)
    dev::launch(copy_codes_kernel<true>, {grid, block, 0, stream}, q, ldq, codes, rows, cols);
  else
    dev::launch(copy_codes_kernel<false>, {grid, block, 0, stream}, q, ldq, codes, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void fp8_epilogue(void* out, bool out_bf16, const float* tmp, int64_t ldt, const void* bias,
                  bool bias_bf16, int64_t rows, int64_t cols, bool accumulate,
                  cudaStream_t stream) {
  GT_CHECK(rows >= 0 && cols >= 0 && ldt >= cols, "fp8_epilogue: (", rows, ", ", cols,
           ") with row stride ", ldt);
  if (rows == 0 || cols == 0) return;
  using bf16 = __nv_bfloat16;
  const auto* bf = static_cast<const bf16*>(bias);
  const auto* bs = static_cast<const float*>(bias);
  if (out_bf16) {
    auto* o = static_cast<bf16*>(out);
    if (bias_bf16) epilogue_impl(o, tmp, ldt, bf, rows, cols, accumulate, stream);
    else epilogue_impl(o, tmp, ldt, bs, rows, cols, accumulate, stream);
  } else {
    auto* o = static_cast<float*>(out);
    if (bias_bf16) epilogue_impl(o, tmp, ldt, bf, rows, cols, accumulate, stream);
    else epilogue_impl(o, tmp, ldt, bs, rows, cols, accumulate, stream);
  }
}

void fp8_amax(float* amax, const float* x, int64_t n, float* scratch, cudaStream_t stream) {
  amax_impl(amax, x, n, scratch, stream);
}
void fp8_amax(float* amax, const __nv_bfloat16* x, int64_t n, float* scratch,
              cudaStream_t stream) {
  amax_impl(amax, x, n, scratch, stream);
}

void fp8_scales(float* scale, float* inv_scale, const float* amax, int64_t count, Fp8Format f,
                bool pow2, cudaStream_t stream) {
  GT_CHECK(count >= 0, "fp8_scales: count = ", count);
  if (count == 0) return;
  dev::launch(scales_kernel, {dev::grid_for(count, kThreads), kThreads, 0, stream}, scale,
              inv_scale, amax, count, f, pow2);
  CUDA_CHECK_LAUNCH();
}

void fp8_quantize(uint8_t* q, const float* x, int64_t n, const float* scale, Fp8Format f,
                  cudaStream_t stream) {
  quantize_impl(q, x, n, scale, f, stream);
}
void fp8_quantize(uint8_t* q, const __nv_bfloat16* x, int64_t n, const float* scale, Fp8Format f,
                  cudaStream_t stream) {
  quantize_impl(q, x, n, scale, f, stream);
}

void fp8_quantize_rows(uint8_t* q, float* scales, float* inv_scales, const float* x, int64_t rows,
                       int64_t cols, Fp8Format f, cudaStream_t stream) {
  quantize_rows_impl(q, scales, inv_scales, x, rows, cols, f, stream);
}
void fp8_quantize_rows(uint8_t* q, float* scales, float* inv_scales, const __nv_bfloat16* x,
                       int64_t rows, int64_t cols, Fp8Format f, cudaStream_t stream) {
  quantize_rows_impl(q, scales, inv_scales, x, rows, cols, f, stream);
}

}  // namespace gt::cuda
