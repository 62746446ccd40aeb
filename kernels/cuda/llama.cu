// RMSNorm, rotary embedding and SwiGLU kernels and launchers (see
// llama.cuh). First versions written for correctness and plain coalescing:
// a warp per row for the row reductions, a thread per element elsewhere.
#include <algorithm>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/llama.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / dev::kWarpSize;
// Rows per chunk of the weight-gradient reduction, and the most chunks.
constexpr int64_t kRowsPerChunk = 256;
constexpr int64_t kMaxChunks = 128;

int64_t chunks_for(int64_t R) {
  return std::max<int64_t>(1,
                           std::min<int64_t>(kMaxChunks, (R + kRowsPerChunk - 1) / kRowsPerChunk));
}

// ---- RMSNorm ----------------------------------------------------------------

// With `res` (the fused residual add): res = inp + add_b (rounded to T) is
// written while its squares are summed, then normalised; each lane re-reads
// only the columns it wrote itself (the same ones in both passes), so no
// barrier is needed and the re-read comes from L1.
template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const float* w, int64_t R,
                                       int C, float eps, float* row_amax, T* res, const T* add_b) {
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t r =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / dev::kWarpSize;
  if (r >= R) return;
  const T* x = res ? res + r * C : inp + r * C;
  float ss = 0.f;
  if (res) {
    const T* a = inp + r * C;
    const T* b = add_b + r * C;
    T* sum = res + r * C;
    for (int c = lane; c < C; c += dev::kWarpSize) {
      const T v = dev::from_float<T>(dev::to_float(a[c]) + dev::to_float(b[c]));
      sum[c] = v;
      const float f = dev::to_float(v);
      ss += f * f;
    }
  } else {
    for (int c = lane; c < C; c += dev::kWarpSize) {
      const float v = dev::to_float(x[c]);
      ss += v * v;
    }
  }
  ss = dev::warp_sum(ss);
  const float rs = 1.f / sqrtf(ss / static_cast<float>(C) + eps);
  T* o = out + r * C;
  unsigned amax = 0;  // max |out| as stored (row_amax: the fp8 input's scale)
  for (int c = lane; c < C; c += dev::kWarpSize) {
    const T v = dev::from_float<T>(dev::to_float(x[c]) * rs * w[c]);
    o[c] = v;
    amax = max(amax, dev::abs_bits(dev::to_float(v)));
  }
  if (row_amax) amax = dev::warp_max_bits(amax);  // the whole warp takes this branch
  if (lane == 0) {
    rstd[r] = rs;
    if (row_amax) row_amax[r] = __uint_as_float(amax);
  }
}

// dinp[r] += rstd * (g - n * mean(g * n)), g = dout * w, n = x * rstd;
// dinp_bf16 (if given) = the sum rounded, and the amax is of those values.
template <typename TG, typename TX>
__global__ void rmsnorm_dinp_kernel(float* dinp, __nv_bfloat16* dinp_bf16, const TG* dout,
                                    const TX* inp, const float* w, const float* rstd, int64_t R,
                                    int C, float* row_amax) {
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t r =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / dev::kWarpSize;
  if (r >= R) return;
  const TG* dy = dout + r * C;
  const TX* x = inp + r * C;
  const float rs = rstd[r];
  float sum_gn = 0.f;
  for (int c = lane; c < C; c += dev::kWarpSize)
    sum_gn += dev::to_float(dy[c]) * w[c] * dev::to_float(x[c]) * rs;
  const float mean_gn = dev::warp_sum(sum_gn) / static_cast<float>(C);
  float* dx = dinp + r * C;
  __nv_bfloat16* dx16 = dinp_bf16 ? dinp_bf16 + r * C : nullptr;
  unsigned amax = 0;  // max |dinp| after the add (row_amax: an fp8 output gradient's scale)
  for (int c = lane; c < C; c += dev::kWarpSize) {
    const float v = dx[c] + rs * (dev::to_float(dy[c]) * w[c] - dev::to_float(x[c]) * rs * mean_gn);
    dx[c] = v;
    if (dx16) {
      const __nv_bfloat16 rounded = dev::from_float<__nv_bfloat16>(v);
      dx16[c] = rounded;
      amax = max(amax, dev::abs_bits(dev::to_float(rounded)));
    } else {
      amax = max(amax, dev::abs_bits(v));
    }
  }
  if (row_amax) {  // the whole warp takes this branch
    amax = dev::warp_max_bits(amax);
    if (lane == 0) row_amax[r] = __uint_as_float(amax);
  }
}

// partial[k, c] = sum over chunk k's rows of dout * x * rstd.
template <typename TG, typename TX>
__global__ void rmsnorm_dweight_partial_kernel(float* partial, const TG* dout, const TX* inp,
                                               const float* rstd, int64_t R, int C,
                                               int64_t rows_per_chunk) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  const int64_t k = blockIdx.y;
  if (c >= C) return;
  const int64_t r0 = k * rows_per_chunk, r1 = std::min<int64_t>(R, r0 + rows_per_chunk);
  float acc = 0.f;
  for (int64_t r = r0; r < r1; ++r)
    acc += dev::to_float(dout[r * C + c]) * dev::to_float(inp[r * C + c]) * rstd[r];
  partial[k * C + c] = acc;
}

__global__ void rmsnorm_dweight_reduce_kernel(float* dweight, const float* partial, int64_t chunks,
                                              int C) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int64_t k = 0; k < chunks; ++k) acc += partial[k * C + c];  // fixed order
  dweight[c] += acc;
}

// ---- rotary embedding -------------------------------------------------------

template <typename T>
__global__ void rope_kernel(T* x, const float* cos_sin, int64_t N, int H, int D, int rot,
                            int64_t first_row, int T_len, float direction) {
  const int half = D / 2;
  const int64_t total = N * rot * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int j = static_cast<int>(i % half);
    const int64_t nh = i / half;
    const int h = static_cast<int>(nh % rot);
    const int64_t n = nh / rot;
    const float* cs = cos_sin + ((first_row + n) % T_len) * D;
    const float c = cs[j], s = direction * cs[half + j];
    T* xh = x + (n * H + h) * D;
    const float a = dev::to_float(xh[j]), b = dev::to_float(xh[j + half]);
    xh[j] = dev::from_float<T>(a * c - b * s);
    xh[j + half] = dev::from_float<T>(b * c + a * s);
  }
}

// ---- SwiGLU -----------------------------------------------------------------

__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gu, int64_t R, int64_t F) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < R * F;
       i += stride) {
    const int64_t r = i / F, f = i % F;
    const float g = dev::to_float(gu[r * 2 * F + f]), u = dev::to_float(gu[r * 2 * F + F + f]);
    out[i] = dev::from_float<T>(g * sigmoid(g) * u);
  }
}

// With row amaxes: a warp per row, each lane over the row's columns, then
// the row's max |out| as stored.
template <typename T>
__global__ void swiglu_forward_rows_kernel(T* out, const T* gu, int64_t R, int64_t F,
                                           float* row_amax) {
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t r =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / dev::kWarpSize;
  if (r >= R) return;  // the whole warp leaves together
  const T* g = gu + r * 2 * F;
  unsigned amax = 0;
  for (int64_t f = lane; f < F; f += dev::kWarpSize) {
    const float gv = dev::to_float(g[f]), uv = dev::to_float(g[F + f]);
    const T v = dev::from_float<T>(gv * sigmoid(gv) * uv);
    out[r * F + f] = v;
    amax = max(amax, dev::abs_bits(dev::to_float(v)));
  }
  amax = dev::warp_max_bits(amax);
  if (lane == 0) row_amax[r] = __uint_as_float(amax);
}

// With row amaxes (of dgu's 2F columns): a warp per row, then its max |dgu|
// as stored.
template <typename T>
__global__ void swiglu_backward_rows_kernel(T* dgu, const T* dout, const T* gu, int64_t R,
                                            int64_t F, float* row_amax) {
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t r =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / dev::kWarpSize;
  if (r >= R) return;  // the whole warp leaves together
  unsigned amax = 0;
  for (int64_t f = lane; f < F; f += dev::kWarpSize) {
    const float g = dev::to_float(gu[r * 2 * F + f]), u = dev::to_float(gu[r * 2 * F + F + f]);
    const float dy = dev::to_float(dout[r * F + f]), s = sigmoid(g);
    const T dg = dev::from_float<T>(dy * u * s * (1.f + g * (1.f - s)));
    const T du = dev::from_float<T>(dy * g * s);
    dgu[r * 2 * F + f] = dg;
    dgu[r * 2 * F + F + f] = du;
    amax = max(amax, max(dev::abs_bits(dev::to_float(dg)), dev::abs_bits(dev::to_float(du))));
  }
  amax = dev::warp_max_bits(amax);
  if (lane == 0) row_amax[r] = __uint_as_float(amax);
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgu, const T* dout, const T* gu, int64_t R, int64_t F) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < R * F;
       i += stride) {
    const int64_t r = i / F, f = i % F;
    const float g = dev::to_float(gu[r * 2 * F + f]), u = dev::to_float(gu[r * 2 * F + F + f]);
    const float dy = dev::to_float(dout[i]), s = sigmoid(g);
    dgu[r * 2 * F + f] = dev::from_float<T>(dy * u * s * (1.f + g * (1.f - s)));
    dgu[r * 2 * F + F + f] = dev::from_float<T>(dy * g * s);
  }
}

unsigned row_blocks(int64_t R) {
  return static_cast<unsigned>((R + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const float* weight, int64_t R, int C,
                     float eps, cudaStream_t stream, float* row_amax) {
  if (R == 0) return;
  dev::NvtxRange range("rmsnorm_forward");
  dev::launch(rmsnorm_forward_kernel<T>, {row_blocks(R), kThreads, 0, stream}, out, rstd, inp,
              weight, R, C, eps, row_amax, static_cast<T*>(nullptr),
              static_cast<const T*>(nullptr));
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void add_rmsnorm_forward(T* res, T* out, float* rstd, const T* a, const T* b, const float* weight,
                         int64_t R, int C, float eps, cudaStream_t stream, float* row_amax) {
  if (R == 0) return;
  dev::NvtxRange range("add_rmsnorm_forward");
  dev::launch(rmsnorm_forward_kernel<T>, {row_blocks(R), kThreads, 0, stream}, out, rstd, a,
              weight, R, C, eps, row_amax, res, b);
  CUDA_CHECK_LAUNCH();
}

int64_t rmsnorm_backward_scratch_floats(int64_t R, int C) { return chunks_for(R) * C; }

template <typename TG, typename TX>
void rmsnorm_backward(float* dinp, float* dweight, const TG* dout, const TX* inp,
                      const float* weight, const float* rstd, int64_t R, int C, float* scratch,
                      cudaStream_t stream, float* row_amax, __nv_bfloat16* dinp_bf16) {
  if (R == 0) return;
  dev::NvtxRange range("rmsnorm_backward");
  dev::launch(rmsnorm_dinp_kernel<TG, TX>, {row_blocks(R), kThreads, 0, stream}, dinp, dinp_bf16,
              dout, inp, weight, rstd, R, C, row_amax);
  CUDA_CHECK_LAUNCH();
  const int64_t chunks = chunks_for(R);
  const int64_t rows_per_chunk = (R + chunks - 1) / chunks;
  const unsigned col_blocks = static_cast<unsigned>((C + kThreads - 1) / kThreads);
  dev::launch(rmsnorm_dweight_partial_kernel<TG, TX>,
              {dim3(col_blocks, static_cast<unsigned>(chunks)), kThreads, 0, stream}, scratch, dout,
              inp, rstd, R, C, rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  dev::launch(rmsnorm_dweight_reduce_kernel, {col_blocks, kThreads, 0, stream}, dweight, scratch,
              chunks, C);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void rope(T* x, const float* cos_sin, int64_t N, int H, int D, int rot_heads, int64_t first_row,
          int T_len, float direction, cudaStream_t stream) {
  const int64_t work = N * rot_heads * (D / 2);
  if (work == 0) return;
  dev::NvtxRange range(direction > 0 ? "rope_forward" : "rope_backward");
  dev::launch(rope_kernel<T>, {dev::grid_for(work, kThreads), kThreads, 0, stream}, x, cos_sin, N,
              H, D, rot_heads, first_row, T_len, direction);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void swiglu_forward(T* out, const T* gu, int64_t R, int64_t F, cudaStream_t stream,
                    float* row_amax) {
  if (R == 0 || (F == 0 && !row_amax)) return;  // (R, 0) still writes R zero amaxes
  dev::NvtxRange range("swiglu_forward");
  if (row_amax) {
    dev::launch(swiglu_forward_rows_kernel<T>, {row_blocks(R), kThreads, 0, stream}, out, gu, R, F,
                row_amax);
    CUDA_CHECK_LAUNCH();
    return;
  }
  dev::launch(swiglu_forward_kernel<T>, {dev::grid_for(R * F, kThreads), kThreads, 0, stream}, out,
              gu, R, F);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void swiglu_backward(T* dgu, const T* dout, const T* gu, int64_t R, int64_t F,
                     cudaStream_t stream, float* row_amax) {
  if (R == 0 || (F == 0 && !row_amax)) return;  // (R, 0) still writes R zero amaxes
  dev::NvtxRange range("swiglu_backward");
  if (row_amax) {
    dev::launch(swiglu_backward_rows_kernel<T>, {row_blocks(R), kThreads, 0, stream}, dgu, dout, gu,
                R, F, row_amax);
    CUDA_CHECK_LAUNCH();
    return;
  }
  dev::launch(swiglu_backward_kernel<T>, {dev::grid_for(R * F, kThreads), kThreads, 0, stream}, dgu,
              dout, gu, R, F);
  CUDA_CHECK_LAUNCH();
}

#define GT_LLAMA_STORAGE(T)                                                                 \
  template void rmsnorm_forward<T>(T*, float*, const T*, const float*, int64_t, int, float, \
                                   cudaStream_t, float*);                                   \
  template void add_rmsnorm_forward<T>(T*, T*, float*, const T*, const T*, const float*,    \
                                       int64_t, int, float, cudaStream_t, float*);          \
  template void rope<T>(T*, const float*, int64_t, int, int, int, int64_t, int, float,      \
                        cudaStream_t);                                                      \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t, cudaStream_t, float*);    \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t, cudaStream_t, \
                                   float*);
GT_LLAMA_STORAGE(float)
GT_LLAMA_STORAGE(__nv_bfloat16)
#undef GT_LLAMA_STORAGE

#define GT_LLAMA_RMS_BWD(TG, TX)                                                             \
  template void rmsnorm_backward<TG, TX>(float*, float*, const TG*, const TX*, const float*, \
                                         const float*, int64_t, int, float*, cudaStream_t,  \
                                         float*, __nv_bfloat16*);
GT_LLAMA_RMS_BWD(float, float)
GT_LLAMA_RMS_BWD(float, __nv_bfloat16)
GT_LLAMA_RMS_BWD(__nv_bfloat16, float)
GT_LLAMA_RMS_BWD(__nv_bfloat16, __nv_bfloat16)
#undef GT_LLAMA_RMS_BWD

}  // namespace gt::cuda
