// fp32 <-> bf16 cast kernels (see cast.cuh). Four elements per pack: 16 bytes
// of fp32 against 8 bytes of bf16.
#include "kernels/cuda/cast.cuh"

#include <type_traits>

#include "kernels/cuda/device_common.cuh"

namespace gt::cuda {
namespace {

constexpr int kThreads = 256;

struct alignas(8) Bf16x4 {
  __nv_bfloat16 v[4];
};

template <typename To, typename From>
__global__ void cast_kernel(To* dst, const From* src, int64_t n, int64_t n_packs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < n_packs; i += stride) {
    if constexpr (std::is_same_v<From, float>) {
      const dev::Pack<float> x = dev::load_pack(src + 4 * i);
      Bf16x4 y;
#pragma unroll
      for (int k = 0; k < 4; ++k) y.v[k] = __float2bfloat16_rn(x.v[k]);
      *reinterpret_cast<Bf16x4*>(dst + 4 * i) = y;
    } else {
      const Bf16x4 x = *reinterpret_cast<const Bf16x4*>(src + 4 * i);
      dev::Pack<float> y;
#pragma unroll
      for (int k = 0; k < 4; ++k) y.v[k] = __bfloat162float(x.v[k]);
      dev::store_pack(dst + 4 * i, y);
    }
  }
  for (int64_t i = 4 * n_packs + tid; i < n; i += stride)
    dst[i] = dev::from_float<To>(dev::to_float(src[i]));
}

template <typename To, typename From>
void launch(To* dst, const From* src, int64_t n, cudaStream_t stream) {
  GT_CHECK(n >= 0, "cast: n = ", n);
  if (n == 0) return;
  dev::NvtxRange range("cast");
  constexpr bool kFromF32 = std::is_same_v<From, float>;
  const void* f32_side = kFromF32 ? static_cast<const void*>(src) : static_cast<const void*>(dst);
  const void* bf16_side = kFromF32 ? static_cast<const void*>(dst) : static_cast<const void*>(src);
  const bool vec = dev::aligned16(f32_side) && reinterpret_cast<uintptr_t>(bf16_side) % 8 == 0;
  const int64_t n_packs = vec ? n / 4 : 0;
  const int64_t work = n_packs + (n - 4 * n_packs);
  dev::launch(cast_kernel<To, From>, {dev::grid_for(work, kThreads), kThreads, 0, stream}, dst, src,
              n, n_packs);
  CUDA_CHECK_LAUNCH();
}

// One element of cast_rows: a copy of the bits for the same type, else the
// conversion of cast_kernel.
template <typename To, typename From>
__device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<To, From>)
    return x;
  else
    return dev::from_float<To>(dev::to_float(x));
}

// dst (rows, cols; row stride ld_dst) = src (rows, cols; row stride ld_src)
// converted, grid-stride over the flattened (row, column) items: quads of
// four columns when `vec` (cols and both strides multiples of 4, pointers
// aligned to a quad), else single elements.
template <typename To, typename From>
__global__ void cast_rows_kernel(To* dst, int64_t ld_dst, const From* src, int64_t ld_src,
                                 int64_t rows, int64_t cols, bool vec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {
    const int64_t quads = cols / 4;
    for (int64_t i = tid; i < rows * quads; i += stride) {
      const int64_t r = i / quads, c = (i % quads) * 4;
      const dev::Quad<From> x = dev::load_quad(src + r * ld_src + c);
      dev::Quad<To> y;
#pragma unroll
      for (int k = 0; k < 4; ++k) y.v[k] = convert<To>(x.v[k]);
      dev::store_quad(dst + r * ld_dst + c, y);
    }
  } else {
    for (int64_t i = tid; i < rows * cols; i += stride) {
      const int64_t r = i / cols, c = i % cols;
      dst[r * ld_dst + c] = convert<To>(src[r * ld_src + c]);
    }
  }
}

template <typename To, typename From>
void launch_rows(To* dst, int64_t ld_dst, const From* src, int64_t ld_src, int64_t rows,
                 int64_t cols, cudaStream_t stream) {
  GT_CHECK(rows >= 0 && cols >= 0 && (rows <= 1 || (ld_dst >= cols && ld_src >= cols)),
           "cast_rows: rows = ", rows, ", cols = ", cols, ", ld_dst = ", ld_dst,
           ", ld_src = ", ld_src);
  if (rows == 0 || cols == 0) return;
  dev::NvtxRange range("cast_rows");
  const bool vec = cols % 4 == 0 && (rows == 1 || (ld_dst % 4 == 0 && ld_src % 4 == 0)) &&
                   reinterpret_cast<uintptr_t>(dst) % sizeof(dev::Quad<To>) == 0 &&
                   reinterpret_cast<uintptr_t>(src) % sizeof(dev::Quad<From>) == 0;
  const int64_t work = rows * (vec ? cols / 4 : cols);
  dev::launch(cast_rows_kernel<To, From>, {dev::grid_for(work, kThreads), kThreads, 0, stream},
              dst, ld_dst, src, ld_src, rows, cols, vec);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void cast_rows(__nv_bfloat16* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows,
               int64_t cols, cudaStream_t stream) {
  launch_rows(dst, ld_dst, src, ld_src, rows, cols, stream);
}
void cast_rows(float* dst, int64_t ld_dst, const __nv_bfloat16* src, int64_t ld_src, int64_t rows,
               int64_t cols, cudaStream_t stream) {
  launch_rows(dst, ld_dst, src, ld_src, rows, cols, stream);
}
void cast_rows(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows,
               int64_t cols, cudaStream_t stream) {
  launch_rows(dst, ld_dst, src, ld_src, rows, cols, stream);
}
void cast_rows(__nv_bfloat16* dst, int64_t ld_dst, const __nv_bfloat16* src, int64_t ld_src,
               int64_t rows, int64_t cols, cudaStream_t stream) {
  launch_rows(dst, ld_dst, src, ld_src, rows, cols, stream);
}

void cast(__nv_bfloat16* dst, const float* src, int64_t n, cudaStream_t stream) {
  launch(dst, src, n, stream);
}
void cast(float* dst, const __nv_bfloat16* src, int64_t n, cudaStream_t stream) {
  launch(dst, src, n, stream);
}

}  // namespace gt::cuda
