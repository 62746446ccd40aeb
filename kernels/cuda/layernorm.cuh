// Row-wise LayerNorm over (R, C), eps 1e-5, biased variance (PyTorch).
// CPU twin: Ops::layernorm_forward / layernorm_backward.
//
// Invariants (as kernels/ops.hpp):
//   * forward: out (R,C), mean (R), rstd (R) are ASSIGNED.
//     mean / rstd may be nullptr (inference: nothing saved for backward).
//     mean = sum(x)/C; var = sum((x-mean)^2)/C (two-pass, not E[x^2]-E[x]^2);
//     rstd = 1/sqrt(var + 1e-5); out = (x - mean) * rstd * weight + bias.
//   * backward: dinp (R,C) ACCUMULATES (+=, it is the residual stream's
//     gradient); dweight (C) and dbias (C) ACCUMULATE (parameter gradients).
//   * backward is deterministic: dweight/dbias are reduced in a fixed order
//     (per-row-chunk partials into `scratch`, then one ordered pass over the
//     chunks); no atomics. The chunking depends on (R, C) only.
//   * bf16 forward: out, inp bf16; weight, bias bf16 or fp32 (bf16 storage:
//     the model's fp32 parameters); mean, rstd fp32; math fp32.
//   * bf16 backward: inp and dout each fp32 or bf16 (bf16 storage); the
//     outputs and the rest fp32.
// One warp per row for the row passes; 16-byte loads when C is a multiple of
// the pack width and the pointers are aligned, else scalar.
//
// Host-only header (launcher declarations); the kernels live in layernorm.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

// out (R,C), mean (R), rstd (R) <- inp (R,C), weight (C), bias (C); with
// row_amax (R), also ASSIGNED each row's max |out| as stored (Ops: "Row
// amaxes for an fp8 GEMM's input"), taken in the same pass.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t R, int C,
                       cudaStream_t stream, float* row_amax = nullptr);
void layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* inp,
                       const __nv_bfloat16* weight, const __nv_bfloat16* bias, int64_t R, int C,
                       cudaStream_t stream, float* row_amax = nullptr);
void layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* inp,
                       const float* weight, const float* bias, int64_t R, int C,
                       cudaStream_t stream, float* row_amax = nullptr);

// The residual add fused in: res (R,C) = a + b (rounded to the storage type),
// then out, mean, rstd <- LayerNorm(res) as above; one pass over a and b
// instead of the add's write and the LayerNorm's read of res.
void add_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a,
                           const float* b, const float* weight, const float* bias, int64_t R, int C,
                           cudaStream_t stream, float* row_amax = nullptr);
void add_layernorm_forward(__nv_bfloat16* res, __nv_bfloat16* out, float* mean, float* rstd,
                           const __nv_bfloat16* a, const __nv_bfloat16* b,
                           const __nv_bfloat16* weight, const __nv_bfloat16* bias, int64_t R, int C,
                           cudaStream_t stream, float* row_amax = nullptr);
void add_layernorm_forward(__nv_bfloat16* res, __nv_bfloat16* out, float* mean, float* rstd,
                           const __nv_bfloat16* a, const __nv_bfloat16* b, const float* weight,
                           const float* bias, int64_t R, int C, cudaStream_t stream,
                           float* row_amax = nullptr);

// Floats of device scratch layernorm_backward needs for this shape.
int64_t layernorm_backward_scratch_floats(int64_t R, int C);

// dinp (R,C) += ..., dweight (C) += ..., dbias (C) += ...
// from dout (R,C), inp (R,C), weight (C), mean (R), rstd (R) saved by forward.
// scratch: at least layernorm_backward_scratch_floats(R, C) floats, clobbered.
// dinp_bf16: null, or (R,C) ASSIGNED the accumulated dinp rounded to bf16.
// row_amax: null, or (R) ASSIGNED each row's max |dinp| after the add, of
// dinp_bf16's values when given (what the GEMMs then read), in the same pass.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t R, int C, float* scratch, __nv_bfloat16* dinp_bf16,
                        cudaStream_t stream, float* row_amax = nullptr);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const __nv_bfloat16* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t R, int C, float* scratch,
                        __nv_bfloat16* dinp_bf16, cudaStream_t stream, float* row_amax = nullptr);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const __nv_bfloat16* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t R, int C, float* scratch, __nv_bfloat16* dinp_bf16,
                        cudaStream_t stream, float* row_amax = nullptr);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const __nv_bfloat16* dout,
                        const __nv_bfloat16* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t R, int C, float* scratch,
                        __nv_bfloat16* dinp_bf16, cudaStream_t stream, float* row_amax = nullptr);

}  // namespace gt::cuda
