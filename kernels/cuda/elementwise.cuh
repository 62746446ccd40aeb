// Elementwise helpers between layers, and the bias-gradient column sum.
// CPU twin: Ops::add / accumulate / add_bias (kernels/cpu/elementwise.cpp)
// and the dbias part of Ops::matmul_backward (kernels/cpu/matmul.cpp).
// (zero and copy are cudaMemsetAsync / cudaMemcpyAsync in CudaOps.)
//
// Invariants:
//   * add: out ASSIGNED = a + b; accumulate: acc += x; add_bias: out (R,C)
//     += bias (C) on every row. In place is allowed (out == a or b): every
//     element is read and written by the same thread.
//   * column_sum_accumulate: dst (C) += sum over rows of src (R,C), summed in
//     fp32, deterministic and atomic-free: per-chunk partials of a fixed row
//     chunking (a function of R only) into scratch, then one ordered pass.
//   * dtypes: fp32 or bf16 storage, fp32 math; column_sum_accumulate reads
//     fp32 or bf16 and accumulates into fp32.
//   * 16-byte loads when every pointer is aligned (and, for add_bias, C is a
//     multiple of the pack width), else scalar.
//
// Host-only header (launcher declarations); the kernels live in elementwise.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);
void add(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
         cudaStream_t stream);

void accumulate(float* acc, const float* x, int64_t n, cudaStream_t stream);
void accumulate(__nv_bfloat16* acc, const __nv_bfloat16* x, int64_t n, cudaStream_t stream);

void add_bias(float* out, const float* bias, int64_t R, int64_t C, cudaStream_t stream);
// bf16 storage: the model's fp32 bias added to bf16 rows (rounded once).
void add_bias(__nv_bfloat16* out, const float* bias, int64_t R, int64_t C, cudaStream_t stream);
void add_bias(__nv_bfloat16* out, const __nv_bfloat16* bias, int64_t R, int64_t C,
              cudaStream_t stream);

// Floats of scratch column_sum_accumulate needs for (R, C).
int64_t column_sum_scratch_floats(int64_t R, int64_t C);
void column_sum_accumulate(float* dst, const float* src, int64_t R, int64_t C, float* scratch,
                           cudaStream_t stream);
void column_sum_accumulate(float* dst, const __nv_bfloat16* src, int64_t R, int64_t C,
                           float* scratch, cudaStream_t stream);

}  // namespace gt::cuda
