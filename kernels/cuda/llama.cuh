// The Llama family's kernels: RMSNorm, the rotary embedding (HF
// rotate_half) and SwiGLU. CPU twins: kernels/cpu/llama_kernels.hpp (the
// semantics, kernels/ops.hpp); tests/cuda/test_cuda_llama.cpp compares them.
//
// Invariants:
//   * fp32 math on fp32 or bf16 storage (T), outputs rounded once;
//   * rmsnorm_backward ACCUMULATES dinp and dweight; the weight gradient is
//     reduced in a fixed order (row chunks, then the chunks in order), so it
//     is deterministic; it needs rmsnorm_backward_scratch_floats(R, C) floats;
//   * rope is in place: each thread owns one (row, head, pair);
//   * swiglu_backward ASSIGNS dgu;
//   * row_amax (R), where a launcher takes one and it is not null: ASSIGNED
//     each row's max |output| as stored (rmsnorm_backward: of dinp after the
//     add), in the same pass (Ops: "Row amaxes for an fp8 GEMM's input").
//
// Host-only header (launcher declarations); the kernels live in llama.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

// row_amax (R), if not null, is ASSIGNED each row's max |out| as stored, in
// the same pass (Ops: "Row amaxes for an fp8 GEMM's input"); so is
// swiglu_forward's.
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const float* weight, int64_t R, int C,
                     float eps, cudaStream_t stream, float* row_amax = nullptr);
// res = a + b (rounded to T, as add), then out, rstd = rmsnorm_forward(res)
// in the same pass; each lane re-reads only the res elements it wrote (from
// cache), so a and b are read once.
template <typename T>
void add_rmsnorm_forward(T* res, T* out, float* rstd, const T* a, const T* b, const float* weight,
                         int64_t R, int C, float eps, cudaStream_t stream,
                         float* row_amax = nullptr);
int64_t rmsnorm_backward_scratch_floats(int64_t R, int C);
// dinp_bf16 (not null): ASSIGNED the accumulated dinp rounded to nearest
// even, in the dinp pass; row_amax is then of those rounded values.
template <typename TG, typename TX>
void rmsnorm_backward(float* dinp, float* dweight, const TG* dout, const TX* inp,
                      const float* weight, const float* rstd, int64_t R, int C, float* scratch,
                      cudaStream_t stream, float* row_amax = nullptr,
                      __nv_bfloat16* dinp_bf16 = nullptr);

// direction +1: forward, -1: backward (the transpose).
template <typename T>
void rope(T* x, const float* cos_sin, int64_t N, int H, int D, int rot_heads, int64_t first_row,
          int T_len, float direction, cudaStream_t stream);

template <typename T>
void swiglu_forward(T* out, const T* gu, int64_t R, int64_t F, cudaStream_t stream,
                    float* row_amax = nullptr);
template <typename T>
void swiglu_backward(T* dgu, const T* dout, const T* gu, int64_t R, int64_t F, cudaStream_t stream,
                     float* row_amax = nullptr);

}  // namespace gt::cuda
