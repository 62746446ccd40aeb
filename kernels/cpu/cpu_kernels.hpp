// Private to kernels/cpu: the free functions CpuOps forwards to, one family
// per .cpp, plus the argument checks they share. Semantics (accumulate vs
// assign, layouts) are those stated in kernels/ops.hpp; they are not repeated
// here. Every function validates all of its arguments before it enters an
// OpenMP region, because an exception must never escape a parallel region.
#pragma once

#include <cstdint>

#include "kernels/core/tensor.hpp"
#include "kernels/ops.hpp"

namespace gt::cpu {

// Loops smaller than this many elements run on one thread: below it the
// fork/join of an OpenMP region costs more than the work.
constexpr int64_t kParallelMin = 1 << 14;

// Throws unless `t` is a contiguous fp32 CPU tensor of exactly `shape`.
void expect_f32(const TensorView& t, std::initializer_list<int64_t> shape, const char* what);
// Throws unless `t` is a contiguous int32 CPU tensor of exactly `shape`.
void expect_i32(const TensorView& t, std::initializer_list<int64_t> shape, const char* what);
// Throws unless `t` is a contiguous fp32 or bf16 CPU tensor of exactly `shape`.
void expect_f32_or_bf16(const TensorView& t, std::initializer_list<int64_t> shape,
                        const char* what);
// Throws unless `t` is a contiguous fp32 CPU tensor (any shape).
void expect_f32_any(const TensorView& t, const char* what);
// Throws unless `t` is a contiguous CPU tensor (any shape) of `dtype`, which
// must be fp32 or bf16: the activations of bf16 storage (kernels/ops.hpp).
void expect_storage_any(const TensorView& t, DType dtype, const char* what);
// Throws unless a and b have the same shape.
void expect_same_shape(const TensorView& a, const TensorView& b, const char* what_a,
                       const char* what_b);

void embedding_forward(TensorView out, TensorView tokens, TensorView wte, TensorView wpe);
void embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout, TensorView tokens);

void token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                             int64_t vocab_start);
void token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                              int64_t vocab_start);
void position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row, int T);
void position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row, int T);

void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                       TensorView weight, TensorView bias);
// dinp_bf16 may be empty (see Ops::layernorm_backward).
void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                        TensorView inp, TensorView weight, TensorView mean, TensorView rstd,
                        TensorView dinp_bf16);

void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias);
void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                     TensorView inp, TensorView weight);
// The linear layer fused with GELU (linear_gelu.cpp).
void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                         TensorView bias);
void matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                           TensorView inp, TensorView weight, TensorView pre);

// att and scratch: (B,NH,T,T) views (CpuOps reshapes the flat buffers).
// n_kv_head (0 = n_head): grouped-query attention, qkv (B,T,(NH + 2 KV) hs)
// packing q | k | v heads, q head h reading kv head h / (NH / KV).
void attention_forward(TensorView out, TensorView att, TensorView qkv, int n_head,
                       int n_kv_head = 0);
// out is the forward's, checked (dtype, shape) but not read.
void attention_backward(TensorView dqkv, TensorView scratch, TensorView dout, TensorView qkv,
                        TensorView out, TensorView att, int n_head, int n_kv_head = 0);

// Attention over blocks (attention_blocks.cpp; Ops::attention_block_* in
// kernels/ops.hpp states the contract). scratch: at least
// attention_block_scratch_elems(Device::cpu, ...) floats.
void attention_block_forward(TensorView out, TensorView lse, TensorView scratch, TensorView q,
                             TensorView k, TensorView v, int64_t q_pos, int64_t k_pos, int n_head,
                             int n_kv_head, bool accumulate);
void attention_block_backward(TensorView dq, TensorView dk, TensorView dv, TensorView scratch,
                              TensorView dout, TensorView q, TensorView k, TensorView v,
                              TensorView lse, TensorView delta, int64_t q_pos, int64_t k_pos,
                              int n_head, int n_kv_head);
void attention_row_dot(TensorView delta, TensorView dout, TensorView out, int n_head);

void gelu_forward(TensorView out, TensorView inp);
void gelu_backward(TensorView dinp, TensorView inp, TensorView dout);

void add(TensorView out, TensorView a, TensorView b);
void add_bias(TensorView out, TensorView bias);
void accumulate(TensorView acc, TensorView x);
void zero(TensorView t);
void copy(TensorView dst, TensorView src);
void cast(TensorView dst, TensorView src);
// cast between row-strided 2-D views (Ops::cast_rows).
void cast_rows(TensorView dst, TensorView src);
// dst[i] = the fp32 value of the bf16 bits src[i] (exact); n elements.
void widen_bf16(float* dst, const uint16_t* src, int64_t n);
// dst[i] = src[i] rounded to bf16 bits (nearest even, bf16.hpp); n elements.
void narrow_to_bf16(uint16_t* dst, const float* src, int64_t n);

void softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                           TensorView targets, int64_t vocab_size, float grad_scale);

void cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                             int64_t vocab_size);
void cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit, TensorView logits,
                              TensorView targets, TensorView row_max, int64_t vocab_start,
                              int64_t vocab_size);
void cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                TensorView targets, TensorView row_max, TensorView sumexp,
                                TensorView target_logit, int64_t vocab_start, int64_t vocab_size,
                                float grad_scale);

double sum_squares(TensorView t);
void sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs);
void clip_scale(TensorView scale, TensorView stats, float max_norm);
void adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                       TensorView param_bf16, TensorView scale, const std::vector<AdamWRun>& runs,
                       const Ops::AdamWParams& p);

// Sets the BLAS library's thread count (no-op without OpenBLAS).
void set_blas_threads(int n);

}  // namespace gt::cpu
