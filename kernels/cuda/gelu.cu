// GELU forward/backward kernels and launchers (see gelu.cuh for invariants).
// One grid-stride kernel per direction, templated on the storage type: a
// 16-byte-pack body when aligned, then a scalar tail (or all scalar).
#include "kernels/cuda/gelu.cuh"

#include "kernels/cuda/device_common.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoef = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  const float u = kSqrt2OverPi * (x + kCoef * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}

// d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kSqrt2OverPi * (x + kCoef * x * x * x);
  const float th = tanhf(u);
  const float du = kSqrt2OverPi * (1.f + 3.f * kCoef * x * x);
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * du;
}

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n, int64_t n_packs) {
  constexpr int N = dev::Pack<T>::N;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < n_packs; i += stride) {
    const dev::Pack<T> x = dev::load_pack(inp + i * N);
    dev::Pack<T> y;
#pragma unroll
    for (int k = 0; k < N; ++k) y.v[k] = dev::from_float<T>(gelu(dev::to_float(x.v[k])));
    dev::store_pack(out + i * N, y);
  }
  for (int64_t i = n_packs * N + tid; i < n; i += stride)
    out[i] = dev::from_float<T>(gelu(dev::to_float(inp[i])));
}

template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n,
                                     int64_t n_packs) {
  constexpr int N = dev::Pack<T>::N;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < n_packs; i += stride) {
    const dev::Pack<T> x = dev::load_pack(inp + i * N);
    const dev::Pack<T> g = dev::load_pack(dout + i * N);
    dev::Pack<T> y;
#pragma unroll
    for (int k = 0; k < N; ++k)
      y.v[k] = dev::from_float<T>(dev::to_float(g.v[k]) * gelu_grad(dev::to_float(x.v[k])));
    dev::store_pack(dinp + i * N, y);
  }
  for (int64_t i = n_packs * N + tid; i < n; i += stride)
    dinp[i] = dev::from_float<T>(dev::to_float(dout[i]) * gelu_grad(dev::to_float(inp[i])));
}

// With row amaxes (out (R, C)): a warp per row, in 16-byte packs when every
// row is aligned (vec), then the row's max |out| as stored (Ops: "Row
// amaxes for an fp8 GEMM's input"). Forward: out = gelu(x); backward: out
// (dinp) = g (dout) * gelu'(x). In place is allowed: each element is read,
// then written, by one lane.
constexpr int kWarpsPerBlock = kThreads / dev::kWarpSize;
template <typename T, bool kBackward>
__global__ void gelu_rows_kernel(T* out, const T* x, const T* g, int64_t R, int64_t C, bool vec,
                                 float* row_amax) {
  constexpr int N = dev::Pack<T>::N;
  const int lane = threadIdx.x % dev::kWarpSize;
  const int64_t r =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / dev::kWarpSize;
  if (r >= R) return;  // the whole warp leaves together
  auto f = [](float xv, float gv) { return kBackward ? gv * gelu_grad(xv) : gelu(xv); };
  const int64_t row = r * C;
  unsigned amax = 0;
  if (vec) {
    for (int64_t c = static_cast<int64_t>(lane) * N; c < C; c += dev::kWarpSize * N) {
      const dev::Pack<T> xp = dev::load_pack(x + row + c);
      dev::Pack<T> gp{};
      if (kBackward) gp = dev::load_pack(g + row + c);
      dev::Pack<T> y;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        y.v[k] = dev::from_float<T>(
            f(dev::to_float(xp.v[k]), kBackward ? dev::to_float(gp.v[k]) : 0.f));
        amax = max(amax, dev::abs_bits(dev::to_float(y.v[k])));
      }
      dev::store_pack(out + row + c, y);
    }
  } else {
    for (int64_t c = lane; c < C; c += dev::kWarpSize) {
      const float gv = kBackward ? dev::to_float(g[row + c]) : 0.f;
      const T v = dev::from_float<T>(f(dev::to_float(x[row + c]), gv));
      out[row + c] = v;
      amax = max(amax, dev::abs_bits(dev::to_float(v)));
    }
  }
  amax = dev::warp_max_bits(amax);
  if (lane == 0) row_amax[r] = __uint_as_float(amax);
}

template <typename T, bool kBackward>
void launch_rows(T* out, const T* x, const T* g, int64_t R, int64_t C, float* row_amax,
                 cudaStream_t stream) {
  GT_CHECK(R >= 0 && C >= 0, kBackward ? "gelu_backward" : "gelu_forward", ": (", R, ", ", C,
           ")");
  if (R == 0) return;
  dev::NvtxRange range(kBackward ? "gelu_backward" : "gelu_forward");
  constexpr int N = dev::Pack<T>::N;
  const bool vec =
      C % N == 0 && dev::aligned16(out) && dev::aligned16(x) && (!kBackward || dev::aligned16(g));
  const unsigned grid = static_cast<unsigned>((R + kWarpsPerBlock - 1) / kWarpsPerBlock);
  dev::launch(gelu_rows_kernel<T, kBackward>, {grid, kThreads, 0, stream}, out, x, g, R, C, vec,
              row_amax);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_forward(T* out, const T* inp, int64_t n, cudaStream_t stream) {
  GT_CHECK(n >= 0, "gelu_forward: n = ", n);
  if (n == 0) return;
  dev::NvtxRange range("gelu_forward");
  constexpr int N = dev::Pack<T>::N;
  const int64_t n_packs = dev::aligned16(out) && dev::aligned16(inp) ? n / N : 0;
  const int64_t work = n_packs + (n - n_packs * N);
  dev::launch(gelu_forward_kernel<T>, {dev::grid_for(work, kThreads), kThreads, 0, stream}, out,
              inp, n, n_packs);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream) {
  GT_CHECK(n >= 0, "gelu_backward: n = ", n);
  if (n == 0) return;
  dev::NvtxRange range("gelu_backward");
  constexpr int N = dev::Pack<T>::N;
  const bool vec = dev::aligned16(dinp) && dev::aligned16(inp) && dev::aligned16(dout);
  const int64_t n_packs = vec ? n / N : 0;
  const int64_t work = n_packs + (n - n_packs * N);
  dev::launch(gelu_backward_kernel<T>, {dev::grid_for(work, kThreads), kThreads, 0, stream}, dinp,
              inp, dout, n, n_packs);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_forward(out, inp, n, stream);
}
void gelu_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, int64_t n, cudaStream_t stream) {
  launch_forward(out, inp, n, stream);
}
void gelu_backward_rows(float* dinp, const float* inp, const float* dout, int64_t R, int64_t C,
                        float* row_amax, cudaStream_t stream) {
  launch_rows<float, true>(dinp, inp, dout, R, C, row_amax, stream);
}
void gelu_backward_rows(__nv_bfloat16* dinp, const __nv_bfloat16* inp, const __nv_bfloat16* dout,
                        int64_t R, int64_t C, float* row_amax, cudaStream_t stream) {
  launch_rows<__nv_bfloat16, true>(dinp, inp, dout, R, C, row_amax, stream);
}
void gelu_forward_rows(float* out, const float* inp, int64_t R, int64_t C, float* row_amax,
                       cudaStream_t stream) {
  launch_rows<float, false>(out, inp, nullptr, R, C, row_amax, stream);
}
void gelu_forward_rows(__nv_bfloat16* out, const __nv_bfloat16* inp, int64_t R, int64_t C,
                       float* row_amax, cudaStream_t stream) {
  launch_rows<__nv_bfloat16, false>(out, inp, nullptr, R, C, row_amax, stream);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                   cudaStream_t stream) {
  launch_backward(dinp, inp, dout, n, stream);
}
void gelu_backward(__nv_bfloat16* dinp, const __nv_bfloat16* inp, const __nv_bfloat16* dout,
                   int64_t n, cudaStream_t stream) {
  launch_backward(dinp, inp, dout, n, stream);
}

}  // namespace gt::cuda
