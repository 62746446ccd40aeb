// Casts between fp32 and bf16, elementwise over n contiguous elements: the
// bf16 copies of fp32 master weights and activations, and back; and the same
// over a 2-D view with strided rows (cast_rows: columns of a packed row, say
// one part of a qkv, to or from a tensor of their own).
// CPU twin: CpuOps::cast and cast_rows (kernels/cpu/cast.cpp), bit for bit, on the rule of
// kernels/core/bf16.hpp (torch's .to(torch.bfloat16) except that every NaN
// becomes CUDA's canonical 0x7FFF where torch writes 0x7FC0).
//
// Invariants:
//   * dst ASSIGNED; fp32 -> bf16 rounds to nearest even (__float2bfloat16_rn,
//     NaN stays NaN (0x7FFF), overflow rounds to inf); bf16 -> fp32 is exact.
//   * dst and src must not overlap (different element sizes).
//   * 16-byte loads of the wider side when both pointers allow it, else scalar.
//   * cast_rows: dst (rows, cols) with row stride ld_dst, src (rows, cols)
//     with row stride ld_src, in elements; each row's cols elements are
//     contiguous. The same dtype is a copy of the bits (a bf16 NaN keeps its
//     payload, as the CPU's memcpy). Four elements per access when cols,
//     both strides and both pointers allow it, else one.
//
// Host-only header (launcher declarations); the kernels live in cast.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

void cast(__nv_bfloat16* dst, const float* src, int64_t n, cudaStream_t stream);
void cast(float* dst, const __nv_bfloat16* src, int64_t n, cudaStream_t stream);

void cast_rows(__nv_bfloat16* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows,
               int64_t cols, cudaStream_t stream);
void cast_rows(float* dst, int64_t ld_dst, const __nv_bfloat16* src, int64_t ld_src, int64_t rows,
               int64_t cols, cudaStream_t stream);
void cast_rows(float* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows,
               int64_t cols, cudaStream_t stream);
void cast_rows(__nv_bfloat16* dst, int64_t ld_dst, const __nv_bfloat16* src, int64_t ld_src,
               int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace gt::cuda
