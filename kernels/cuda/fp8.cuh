// The fp8 path's quantising kernels (issue 31): the amax of a tensor, the
// scales from it, and the saturated cast to e4m3 / e5m2 with them, tensorwise
// (one scale, on the device) and rowwise (one power-of-two scale per row).
// CPU twin: kernels/cpu/fp8_kernels.hpp, bit for bit (the codes, the scales
// and their inverses); the conversion is CUDA's __nv_cvt_float_to_fp8 with
// __NV_SATFINITE, the rule kernels/core/fp8.hpp states.
//
// Invariants:
//   * amax: the largest |x| over n elements (NaN if any is NaN), ASSIGNED to
//     amax[0] in two passes (per-block maxima into scratch, then one block),
//     as every reduction here is: no atomics.
//   * scales: scale[i] = format max / max(amax[i], 1e-12) (the division in
//     double, rounded once to fp32), rounded down to a power of two when
//     pow2; inv_scale[i] = 1 / scale[i] in fp32 (what cuBLASLt's scale
//     pointers take). count values.
//   * quantize: q[i] = fp8(x[i] * scale[0]), scale read on the device.
//   * quantize_rows: x (rows, cols) row-major; each row's power-of-two scale
//     from its own amax, written to scales[row] and inv_scales[row], and its
//     codes to q (rows, cols). One block per row.
//   * amax_rows / amax_cols: x (rows, cols) row-major; amax[r] (rows) or
//     amax[c] (cols) ASSIGNED the largest |x| of that row or column (NaN
//     if any is NaN); cols in two passes through scratch (row slices per
//     block, then their max), no atomics.
//   * scales may be written in place over amax (scale == amax); inv_scale
//     may be null (not written).
//   * inverse_scales: inv[i] = 1 / scale[n_scale == 1 ? 0 : i], count
//     values: a single scale broadcast to a vector where the GEMM needs
//     one per row.
//   * quantize_scaled: q (rows, ldq) row-major, q[r][c] = fp8(op(x)[r][c] x
//     scale[per_row ? r : 0]) for c < cols and 0 for cols <= c < ldq (zero
//     codes pad a row to cuBLASLt's multiple of 16, adding nothing to a
//     dot product); op(x) is x (rows, cols), or x (cols, rows) read
//     transposed when `transposed` (through shared-memory tiles, so both
//     reads and writes stay coalesced).
//   * copy_codes: q (rows, ldq) = op(codes) with the same padding, codes
//     already quantised (u8), (rows, cols) or (cols, rows) read transposed.
//   * epilogue: out (rows, cols) = (accumulate ? out : 0) + tmp + bias[c],
//     summed in fp32 and rounded once to out's type; tmp fp32 with row
//     stride ldt, bias (cols) fp32 or bf16 or null.
//   * x fp32 or bf16 (the activations of bf16 storage); q, scales and x must
//     not overlap.
//
// Host-only header (launcher declarations); the kernels live in fp8.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/fp8.hpp"

namespace gt::cuda {

// Floats of device scratch fp8_amax needs for n elements.
int64_t fp8_amax_scratch_floats(int64_t n);
// scratch: >= fp8_amax_scratch_floats(n) floats, clobbered.
void fp8_amax(float* amax, const float* x, int64_t n, float* scratch, cudaStream_t stream);
void fp8_amax(float* amax, const __nv_bfloat16* x, int64_t n, float* scratch,
              cudaStream_t stream);

void fp8_amax_rows(float* amax, const float* x, int64_t rows, int64_t cols, cudaStream_t stream);
void fp8_amax_rows(float* amax, const __nv_bfloat16* x, int64_t rows, int64_t cols,
                   cudaStream_t stream);
// Floats of device scratch fp8_amax_cols needs for (rows, cols).
int64_t fp8_amax_cols_scratch_floats(int64_t rows, int64_t cols);
void fp8_amax_cols(float* amax, const float* x, int64_t rows, int64_t cols, float* scratch,
                   cudaStream_t stream);
void fp8_amax_cols(float* amax, const __nv_bfloat16* x, int64_t rows, int64_t cols,
                   float* scratch, cudaStream_t stream);

void fp8_scales(float* scale, float* inv_scale, const float* amax, int64_t count, Fp8Format f,
                bool pow2, cudaStream_t stream);
void fp8_inverse_scales(float* inv, const float* scale, int64_t n_scale, int64_t count,
                        cudaStream_t stream);

void fp8_quantize_scaled(uint8_t* q, int64_t ldq, const float* x, int64_t rows, int64_t cols,
                         bool transposed, const float* scale, bool per_row, Fp8Format f,
                         cudaStream_t stream);
void fp8_quantize_scaled(uint8_t* q, int64_t ldq, const __nv_bfloat16* x, int64_t rows,
                         int64_t cols, bool transposed, const float* scale, bool per_row,
                         Fp8Format f, cudaStream_t stream);

void fp8_copy_codes(uint8_t* q, int64_t ldq, const uint8_t* codes, int64_t rows, int64_t cols,
                    bool transposed, cudaStream_t stream);

// out: fp32 or bf16 (out_bf16); bias: fp32, bf16 (bias_bf16) or null.
void fp8_epilogue(void* out, bool out_bf16, const float* tmp, int64_t ldt, const void* bias,
                  bool bias_bf16, int64_t rows, int64_t cols, bool accumulate,
                  cudaStream_t stream);

void fp8_quantize(uint8_t* q, const float* x, int64_t n, const float* scale, Fp8Format f,
                  cudaStream_t stream);
void fp8_quantize(uint8_t* q, const __nv_bfloat16* x, int64_t n, const float* scale, Fp8Format f,
                  cudaStream_t stream);

void fp8_quantize_rows(uint8_t* q, float* scales, float* inv_scales, const float* x, int64_t rows,
                       int64_t cols, Fp8Format f, cudaStream_t stream);
void fp8_quantize_rows(uint8_t* q, float* scales, float* inv_scales, const __nv_bfloat16* x,
                       int64_t rows, int64_t cols, Fp8Format f, cudaStream_t stream);

}  // namespace gt::cuda
