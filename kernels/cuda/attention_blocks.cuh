// Attention over blocks of queries and keys at global positions (context
// parallelism: a sequence cut across ranks, each block one pair of chunks),
// flash-attention style as the unsplit kernels (attention.cuh), with the
// same two kernel families: the SIMT fp32-math kernels (fp32 or bf16
// inputs, 1 <= hs <= 128; attention.cu) and the tensor-core mma.sync ones
// (bf16 inputs, hs % 16 == 0 up to 128; attention_tc.cu). CudaOps picks
// between them as it does for the unsplit attention.
// CPU twin: Ops::attention_block_forward / _backward / attention_row_dot
// (kernels/cpu/attention_blocks.cpp); the contract is kernels/ops.hpp's.
//
// Layouts. Every tensor is a strided view whose innermost dimension is
// contiguous; a view names its base pointer and its batch and row strides
// in elements, so q, k, v (and dout, dq, dk, dv) can be column slices of a
// packed qkv row (row stride (NH + 2 KV) hs) or rows of a longer sequence:
//   q, dout  (B, Tq, NH hs)   T (fp32 or bf16, one dtype for q, k, v, dout)
//   k, v     (B, Tk, KV hs)   T; query head h reads key/value head h / (NH / KV)
//   out, dq  (B, Tq, NH hs)   fp32
//   dk, dv   (B, Tk, KV hs)   fp32
//   lse, delta (B, NH, Tq)    fp32, each (b, h) row contiguous
// Scores are scaled by 1/sqrt(hs).
//
// Invariants:
//   * Mask by position: query row i sits at q_pos + i, key row j at
//     k_pos + j, and i sees j iff k_pos + j <= q_pos + i. The kernels keep
//     off = clamp(q_pos - k_pos, -Tq, Tk) (i sees j iff j <= i + off), so a
//     block entirely in the past (off >= Tk) and one entirely in the future
//     (off <= -Tq) need no 64-bit arithmetic. Key tiles that no row of a
//     query tile sees, and query tiles that see none of a key tile, are
//     skipped; a tile whose every (row, key) pair is visible skips the
//     per-element mask (tensor cores).
//   * forward: per query row, the block's max m, sum l and unnormalised
//     O as in the unsplit kernels. A row that sees no key of the block
//     (l = 0) has lse_b = -inf and out_b = 0, with no exp(-inf - -inf):
//     a running max still -inf is replaced by 0 in the exponents.
//     accumulate false: out and lse ASSIGNED (out_b, lse_b). accumulate
//     true: merged into out and lse in fp32 by ops.hpp's stable form, in the
//     epilogue (one thread owns each element, reads it and writes it):
//       m' = max(lse, lse_b), lse' = m' + log(e^(lse-m') + e^(lse_b-m')),
//       out' = out e^(lse-lse') + out_b e^(lse_b-lse');
//     an old lse of -inf means "nothing yet" (out' = out_b, the old out not
//     read), a block row that sees no key leaves both untouched.
//   * backward: dq, dk, dv ACCUMULATE (+=) the block's share, from the
//     GIVEN lse and delta of the queries' global output (never recomputed):
//     P = exp(S - lse) on the keys a row sees, dS = P o (dO V^T - delta),
//     dq += scale dS K, dk += scale dS^T Q, dv += P^T dO. A row whose lse is
//     -inf (it sees no key anywhere) takes lse = +inf, so its P is
//     exp(-inf) = 0 and it adds nothing. Rows and keys that see nothing in
//     the block are not written at all.
//   * Deterministic and atomic-free, as the unsplit kernels: dq by the block
//     that owns a query tile of a query head (over the key tiles in order),
//     dk/dv by the block that owns a key tile of a key/value head (over its
//     group's query heads in order and, for each, the query tiles in order),
//     accumulated in registers and added once, read-modify-write by the
//     thread that owns the element. No scratch: attention_block_scratch_elems
//     is 0 on CUDA (kernels/core/attention_kernels.hpp).
//   * Tiles, threads and shared memory are the unsplit kernels' (64 x 64
//     tiles; SIMT up to 162 KiB at hs_pad = 128, tensor cores up to 69 KiB;
//     both above 48 KiB with the opt-in limit set per launch).
//   * Vector (16-byte) loads when hs, every stride and the base pointers
//     allow them, else scalar loads.
//
// Host-only header (launcher declarations); the kernels live in attention.cu
// (SIMT, row dot) and attention_tc.cu (tensor cores).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

// A (B, rows, width) tensor with contiguous rows: element (b, t, c) at
// p[b * sb + t * st + c].
template <typename T>
struct RowsView {
  T* p;
  int64_t sb, st;
};

// A (B, NH, rows) fp32 statistic with contiguous (b, h) rows: element
// (b, h, t) at p[b * sb + h * sh + t].
template <typename T>
struct StatsView {
  T* p;
  int64_t sb, sh;
};

// One block: B sequences of Tq queries (at positions q_pos..) against Tk
// keys (at k_pos..), NH query heads and KV key/value heads of hs.
struct AttentionBlock {
  int B, Tq, Tk, NH, KV, hs;
  int64_t q_pos, k_pos;
};

// ---- SIMT (attention.cu): fp32 math, fp32 or bf16 inputs, 1 <= hs <= 128 ----
void attention_block_forward(RowsView<float> out, StatsView<float> lse, RowsView<const float> q,
                             RowsView<const float> k, RowsView<const float> v,
                             const AttentionBlock& blk, bool accumulate, cudaStream_t stream);
void attention_block_forward(RowsView<float> out, StatsView<float> lse,
                             RowsView<const __nv_bfloat16> q, RowsView<const __nv_bfloat16> k,
                             RowsView<const __nv_bfloat16> v, const AttentionBlock& blk,
                             bool accumulate, cudaStream_t stream);
void attention_block_backward(RowsView<float> dq, RowsView<float> dk, RowsView<float> dv,
                              RowsView<const float> dout, RowsView<const float> q,
                              RowsView<const float> k, RowsView<const float> v,
                              StatsView<const float> lse, StatsView<const float> delta,
                              const AttentionBlock& blk, cudaStream_t stream);
void attention_block_backward(RowsView<float> dq, RowsView<float> dk, RowsView<float> dv,
                              RowsView<const __nv_bfloat16> dout, RowsView<const __nv_bfloat16> q,
                              RowsView<const __nv_bfloat16> k, RowsView<const __nv_bfloat16> v,
                              StatsView<const float> lse, StatsView<const float> delta,
                              const AttentionBlock& blk, cudaStream_t stream);

// ---- tensor cores (attention_tc.cu): bf16, hs % 16 == 0, hs <= 128 ----------
// P and dS are rounded to bf16 before their products, as in the unsplit
// tensor-core kernels; statistics, accumulators and the merge are fp32.
void attention_block_forward_tc(RowsView<float> out, StatsView<float> lse,
                                RowsView<const __nv_bfloat16> q, RowsView<const __nv_bfloat16> k,
                                RowsView<const __nv_bfloat16> v, const AttentionBlock& blk,
                                bool accumulate, cudaStream_t stream);
void attention_block_backward_tc(RowsView<float> dq, RowsView<float> dk, RowsView<float> dv,
                                 RowsView<const __nv_bfloat16> dout,
                                 RowsView<const __nv_bfloat16> q, RowsView<const __nv_bfloat16> k,
                                 RowsView<const __nv_bfloat16> v, StatsView<const float> lse,
                                 StatsView<const float> delta, const AttentionBlock& blk,
                                 cudaStream_t stream);

// delta (B, NH, T) ASSIGNED: per query head and row, the sum over its hs
// columns of dout o out (D = rowsum(dO o O)), in fp32; dout and out
// (B, T, NH hs), each fp32 or bf16. One warp per row, lanes over the
// columns: the kernel attention_backward_rowdot runs on contiguous tensors.
void attention_row_dot(StatsView<float> delta, RowsView<const float> dout,
                       RowsView<const float> out, int B, int T, int NH, int hs,
                       cudaStream_t stream);
void attention_row_dot(StatsView<float> delta, RowsView<const float> dout,
                       RowsView<const __nv_bfloat16> out, int B, int T, int NH, int hs,
                       cudaStream_t stream);
void attention_row_dot(StatsView<float> delta, RowsView<const __nv_bfloat16> dout,
                       RowsView<const float> out, int B, int T, int NH, int hs,
                       cudaStream_t stream);
void attention_row_dot(StatsView<float> delta, RowsView<const __nv_bfloat16> dout,
                       RowsView<const __nv_bfloat16> out, int B, int T, int NH, int hs,
                       cudaStream_t stream);

}  // namespace gt::cuda
