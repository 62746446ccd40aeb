// GELU, tanh approximation (torch.nn.GELU(approximate="tanh")), elementwise
// over n contiguous elements. CPU twin: Ops::gelu_forward / gelu_backward.
//
// Invariants (as kernels/ops.hpp):
//   * forward: out is ASSIGNED, out[i] = gelu(inp[i]).
//   * backward: dinp is ASSIGNED (not accumulated), dinp[i] = dout[i] * gelu'(inp[i]).
//   * In place is allowed (out == inp, dinp == dout): each element is read and
//     written by the same thread.
//   * bf16 variants load/store bf16 and compute in fp32.
// Vector path: 16-byte loads when every pointer is 16-byte aligned, else scalar.
//
// Host-only header (launcher declarations); the kernels live in gelu.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void gelu_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, int64_t n, cudaStream_t stream);
// The same over out (R, C), also ASSIGNING row_amax (R) each row's max |out|
// as stored, in the same pass (a warp per row).
void gelu_forward_rows(float* out, const float* inp, int64_t R, int64_t C, float* row_amax,
                       cudaStream_t stream);
void gelu_forward_rows(__nv_bfloat16* out, const __nv_bfloat16* inp, int64_t R, int64_t C,
                       float* row_amax, cudaStream_t stream);

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                   cudaStream_t stream);
void gelu_backward(__nv_bfloat16* dinp, const __nv_bfloat16* inp, const __nv_bfloat16* dout,
                   int64_t n, cudaStream_t stream);
// The same over dinp (R, C), also ASSIGNING row_amax (R) each row's max
// |dinp| as stored, in the same pass (a warp per row; in place allowed).
void gelu_backward_rows(float* dinp, const float* inp, const float* dout, int64_t R, int64_t C,
                        float* row_amax, cudaStream_t stream);
void gelu_backward_rows(__nv_bfloat16* dinp, const __nv_bfloat16* inp, const __nv_bfloat16* dout,
                        int64_t R, int64_t C, float* row_amax, cudaStream_t stream);

}  // namespace gt::cuda
