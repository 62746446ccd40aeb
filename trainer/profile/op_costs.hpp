// FLOPs and minimum bytes of every op in kernels/ops.hpp, as pure functions
// of its shapes, so the profiler's accounting can be checked on small shapes
// (tests/cpu/test_profile_costs.cpp) and reused by any backend.
//
// Bytes: the minimum traffic the op's contract implies: every input view read
// once, every output view written once, an accumulator (+=) read and written
// once; fp32 and int32 are 4 bytes, bf16 2: an op whose tensors may be bf16
// takes their element sizes (default 4: fp32), the rest are fp32. Workspace (attention scratch) is
// not counted; what a backend chooses to save for backward (attention `saved`) is an output of the
// call and counted at its size.
//
// FLOPs (a multiply-add is 2):
//   matmul       forward 2·R·C·OC; backward 2·R·C·OC for dinp (when asked)
//                + 2·R·C·OC for dweight. The bias add (R·OC) and dbias sum
//                (R·OC) are left out, as in every MFU convention.
//   grouped matmul (the MoE experts) the same over all N dispatch rows (see
//                grouped_matmul_forward below for why N).
//   attention    PaLM/Megatron convention: Q·K^T and P·V over the full T x T
//                (not halved for causality): forward 4·B·NH·T²·hs, backward
//                8·B·NH·T²·hs (dP, dQ, dK, dV). Softmax arithmetic is left out.
//                This is also what the CPU kernel computes for T <= 128 (one
//                row block of 128 covers the whole T x T); for longer T it skips
//                whole blocks above the diagonal and does less.
//   attention over blocks (context parallelism): the (query, key) pairs
//                the causal mask leaves between the block's positions,
//                forward 4·B·NH·hs per pair, backward 10 (twice the
//                forward and the recomputed S); row dot 2 per element.
//   elementwise  the arithmetic of the CPU kernel per element, a transcendental
//                (exp, sqrt, a division) counted as 1 and per-row scalar
//                work (1/sqrt of a variance) ignored: layernorm forward
//                8/element, backward 19 (dinp 14, dweight + dbias 5); GELU
//                forward 9, backward 20; add, accumulate, add_bias 1; zero,
//                copy, cast 0; cross-entropy 4 per logit (max, exp(x - max), sum)
//                + 1 to scale dlogits; vocab-parallel pieces 1 (max), 3 (sum
//                exp), 3 (dlogits); sum_squares 2; AdamW 15 per parameter;
//                embedding 1 add per output element (2 in backward: wte and
//                wpe), a token lookup 0.
// These ops are memory bound, so their FLOPs barely matter: the roofline
// fraction uses whichever of FLOPs and bytes bounds the op.
#pragma once

#include <cstdint>

#include "kernels/op_observer.hpp"  // OpClass

namespace gt {

// GEMM and attention: the classes whose FLOPs make up the 6·N + attention
// model FLOPs (model_flops.hpp).
inline bool is_model_flops_class(OpClass c) {
  return c == OpClass::gemm || c == OpClass::attention;
}

struct OpCost {
  double flops = 0;
  double bytes = 0;
};

namespace op_cost {

// out (R,OC) = inp (R,C) @ weight(OC,C)^T (+ bias). in_bytes: inp and
// weight's element size; out_bytes: out's; the bias is fp32.
OpCost matmul_forward(int64_t R, int64_t C, int64_t OC, bool bias, int64_t in_bytes = 4,
                      int64_t out_bytes = 4);
// dinp (R,C) assigned when `dinp`; dweight (OC,C) and dbias (OC, when `dbias`)
// accumulate in fp32. in_bytes: dout, inp and weight's element size;
// dinp_bytes: dinp's.
OpCost matmul_backward(int64_t R, int64_t C, int64_t OC, bool dinp, bool dbias,
                       int64_t in_bytes = 4, int64_t dinp_bytes = 4);

// The GELU-fused linear layers: FLOPs are the GEMM's (GELU's few per element
// ride in the epilogue; the model FLOPs, 6N, count GEMMs only), bytes add
// what the epilogue moves. matmul_forward writing pre (R,OC) and
// out = gelu(pre) (R,OC), out_bytes each.
OpCost matmul_gelu_forward(int64_t R, int64_t C, int64_t OC, bool bias, int64_t in_bytes = 4,
                           int64_t out_bytes = 4);
// matmul_backward whose dinp is multiplied by gelu'(pre): pre (R,C) read at dinp_bytes.
OpCost matmul_backward_dgelu(int64_t R, int64_t C, int64_t OC, bool dbias, int64_t in_bytes = 4,
                             int64_t dinp_bytes = 4);

// The MoE experts' grouped GEMM: G groups of rows of inp (N,C), each times
// its weight (OC,C)^T into out (N,OC). The true FLOPs are 2·rows_g·C·OC
// summed over the groups, i.e. 2·offsets[G]·C·OC, but offsets lives in the
// backend's memory and an observer cannot read it without a device round
// trip: the cost counts all N rows. That is exact for a dropless plan
// (offsets[G] = N = R·k) and an upper bound when capacity drops leave the
// buffer's tail unused. Bytes likewise: every row of inp and out, every
// group's weight (elem_bytes each: one dtype per call), offsets (G+1) int32.
OpCost grouped_matmul_forward(int64_t N, int64_t C, int64_t OC, int64_t G, int64_t elem_bytes = 4);
// dweight (G,OC,C) fp32 accumulates; dinp (N,C) assigned when `dinp`
// (weight read for it). N rows, as the forward.
OpCost grouped_matmul_backward(int64_t N, int64_t C, int64_t OC, int64_t G, bool dinp,
                               int64_t elem_bytes = 4);

// The fp8 GEMM (Ops::fp8_matmul, runtime.fp8): out (M,N) = or += op(a)
// (M,K) op(b)^T (N,K), each operand quantised to fp8 with its scales
// first. FLOPs 2·M·N·K (the casts' multiplies ride in their passes and are
// not model FLOPs). Bytes as the GPU path moves them, the quantising casts
// as separate passes (cuBLASLt takes fp8 operands in memory): each operand
// read at its element size (a_bytes, b_bytes) and written as fp8 (1 byte),
// then read as fp8 by the GEMM; its scales (scale_elems of a and b, fp32)
// read; out written (accumulate: read and written) at out_bytes, the bias
// (N, bias_bytes, 0 for none) read. What fusing a cast into its producer
// saves is the operand's fp8 write and read. A b given as fp8 codes (b_bytes
// 1: a weight quantised on its shard and gathered in fp8) is read once.
OpCost fp8_matmul(int64_t M, int64_t N, int64_t K, int64_t a_bytes, int64_t b_bytes,
                  int64_t out_bytes, bool accumulate, int64_t bias_bytes,
                  int64_t scale_elems);
// q (n codes) = fp8(x x scale): x read at x_bytes, 1 byte written, the scale
// read; a multiply per element.
OpCost fp8_quantize(int64_t n, int64_t x_bytes);
// amax of x (R,C) at x_bytes over the tensor, rows or columns: x read once,
// `amax_elems` fp32 written; a compare per element.
OpCost fp8_amax(int64_t R, int64_t C, int64_t x_bytes, int64_t amax_elems);
// n scales from n amaxes: n fp32 read, n written, a division each.
OpCost fp8_scale_from_amax(int64_t n);
// dbias (OC) fp32 += the column sums of dout (R,OC) at dout_bytes.
OpCost bias_backward(int64_t R, int64_t OC, int64_t dout_bytes);

// qkv (B,T,(NH + 2·KV)·hs) -> out (B,T,NH·hs) and `saved_elems` floats for
// backward; act_bytes: qkv, out (dout, dqkv) element size. kv_heads: KV, the
// key/value heads grouped-query attention shares (0: NH, multi-head). The
// FLOPs are the NH query heads' whatever KV is.
OpCost attention_forward(int64_t B, int64_t NH, int64_t T, int64_t hs, int64_t saved_elems,
                         int64_t act_bytes = 4, int64_t kv_heads = 0);
// reads dout, qkv, out, saved; writes dqkv.
OpCost attention_backward(int64_t B, int64_t NH, int64_t T, int64_t hs, int64_t saved_elems,
                          int64_t act_bytes = 4, int64_t kv_heads = 0);
// Bytes the CUDA SIMT attention backward's three kernels move beyond that one
// pass (CudaTraffic counts them): q, k, v read twice and dout three times
// (the rowsum D = rowsum(dout * out), dK/dV and dQ kernels), D written once
// and read twice, the log-sum-exp read twice. What a fused backward saves.
double attention_backward_kernel_extra_bytes(int64_t B, int64_t NH, int64_t T, int64_t hs,
                                             int64_t saved_elems, int64_t scratch_elems,
                                             int64_t act_bytes = 4);

// The tensor-core (FlashAttention-2 style) attention kernels move what the
// SIMT ones do (CudaTraffic; the backward is the same three kernels, so
// attention_backward_kernel_extra_bytes). FLOPs they spend beyond the
// formula's products: none in the one-pass forward; the backward's dq kernel
// recomputes S and dP after the dkdv kernel (two T x T x hs products).
double attention_tc_kernel_extra_flops(int64_t B, int64_t NH, int64_t T, int64_t hs, bool backward);

// Attention over blocks (context parallelism, kernels/ops.hpp): Tq queries
// at global positions q_pos.., Tk keys at k_pos.., query i seeing key j iff
// k_pos + j <= q_pos + i. Unlike the whole-sequence ops above, which follow
// the full-square convention, these count the products the causal mask
// leaves: a block is a piece of one sequence, fully visible, partly
// (the diagonal) or not at all, and its cost is what its kernels compute.
// The (query, key) pairs the mask leaves visible in such a block (the
// planner's step model counts a cp rank's causal work with it too).
double causal_pairs(int64_t Tq, int64_t Tk, int64_t q_pos, int64_t k_pos);
// q (B,Tq,NH hs), k and v (B,Tk,KV hs) read at act_bytes; out (B,Tq,NH hs)
// and lse (B,NH,Tq) fp32, written or (accumulate) read and written; the
// scratch is workspace. FLOPs: Q K^T and P V over the visible pairs,
// 4 B NH hs pairs.
OpCost attention_block_forward(int64_t B, int64_t NH, int64_t KV, int64_t hs, int64_t Tq,
                               int64_t Tk, int64_t q_pos, int64_t k_pos, bool accumulate,
                               int64_t act_bytes = 4);
// dout, q (B,Tq,NH hs), k, v read at act_bytes; lse and delta (B,NH,Tq)
// fp32 read; dq (B,Tq,NH hs), dk and dv (B,Tk,KV hs) fp32 accumulated.
// FLOPs: twice the forward's (dP = dO V^T, dQ, dK, dV) plus S = Q K^T
// recomputed (the block keeps no probabilities: P comes from lse), 10 B NH
// hs pairs.
OpCost attention_block_backward(int64_t B, int64_t NH, int64_t KV, int64_t hs, int64_t Tq,
                                int64_t Tk, int64_t q_pos, int64_t k_pos, int64_t act_bytes = 4);
// The tensor-core block backward (kernels/cuda/attention_tc.cu: a dK|dV
// kernel and a dQ kernel, each computing S and dP from lse) repeats two of
// the five products attention_block_backward counts per pair: the share of
// its FLOPs it adds (as attention_tc_kernel_extra_flops does for the
// whole-sequence backward). The forward repeats none.
constexpr double kAttentionBlockTcBackwardExtraShare = 2.0 / 5.0;
// delta (B,NH,T) fp32 = rowsum over each head's hs columns of dout o out:
// a multiply-add per element; dout and out read at their own element sizes.
OpCost attention_row_dot(int64_t B, int64_t T, int64_t NH, int64_t hs, int64_t dout_bytes = 4,
                         int64_t out_bytes = 4);
// cast between row-strided (rows, cols) views: what cast moves, rows x cols
// elements (the strides skip the rest of each row).
OpCost cast_rows(int64_t rows, int64_t cols, int64_t src_bytes, int64_t dst_bytes);

// act_bytes: inp and out's element size; param_bytes: weight and bias's.
OpCost layernorm_forward(int64_t R, int64_t C, int64_t act_bytes = 4, int64_t param_bytes = 4);
// dinp, dweight, dbias accumulate (fp32); inp_bytes, dout_bytes: their element sizes.
// The residual add fused in front of layernorm_forward: reads a, b; writes
// res, out (act_bytes each), mean, rstd; reads weight, bias.
OpCost add_layernorm_forward(int64_t R, int64_t C, int64_t act_bytes = 4, int64_t param_bytes = 4);
// copy_bytes: the element size of the rounded copy of dinp it also writes (0: none).
OpCost layernorm_backward(int64_t R, int64_t C, int64_t inp_bytes = 4, int64_t dout_bytes = 4,
                          int64_t copy_bytes = 0);

// elem_bytes: every tensor's element size (one dtype per call).
OpCost gelu_forward(int64_t n, int64_t elem_bytes = 4);
OpCost gelu_backward(int64_t n, int64_t elem_bytes = 4);

OpCost add(int64_t n, int64_t elem_bytes = 4);  // out = a + b
OpCost accumulate(int64_t n);    // acc += x
OpCost add_bias(int64_t R, int64_t C);
OpCost zero(int64_t n, int64_t elem_bytes);
OpCost copy(int64_t n, int64_t elem_bytes);
// dst = src converted (fp32 <-> bf16): n elements read at src_bytes, written at dst_bytes.
OpCost cast(int64_t n, int64_t src_bytes, int64_t dst_bytes);

// logits (R,V), targets (R) int32 -> losses (R) [+ dlogits (R,V)]; the
// logits and dlogits are logit_bytes each (4 fp32, 2 bf16), the rest fp32.
OpCost softmax_cross_entropy(int64_t R, int64_t V, bool dlogits, int64_t logit_bytes = 4);
OpCost cross_entropy_shard_max(int64_t R, int64_t V, int64_t logit_bytes = 4);
OpCost cross_entropy_shard_sums(int64_t R, int64_t V, int64_t logit_bytes = 4);
OpCost cross_entropy_shard_finish(int64_t R, int64_t V, bool dlogits, int64_t logit_bytes = 4);

OpCost sum_squares(int64_t n);
OpCost clip_scale();  // reads 2 floats, writes 1
// reads param, grad, m, v; writes param, m, v (+ the bf16 copy of param).
OpCost adamw(int64_t n, bool bf16_copy = false);

// Embeddings: a lookup reads at most every table row once (min(rows used,
// table rows)); tokens are int32.
OpCost embedding_forward(int64_t B, int64_t T, int64_t C, int64_t V);
OpCost embedding_backward(int64_t B, int64_t T, int64_t C, int64_t V);
OpCost token_embedding_forward(int64_t N, int64_t C, int64_t V_shard);
OpCost token_embedding_backward(int64_t N, int64_t C, int64_t V_shard);
OpCost position_embedding_forward(int64_t N, int64_t C, int64_t T);
OpCost position_embedding_backward(int64_t N, int64_t C, int64_t T);

}  // namespace op_cost
}  // namespace gt
