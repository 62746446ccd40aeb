// Causal self-attention, flash-attention style: tiled, online softmax, and
// the (T x T) score matrix never exists in device memory. Multi-head (KV =
// NH) and grouped-query (KV < NH key/value heads, Llama) alike.
// CPU twin: Ops::attention_forward / attention_backward (kernels/cpu/attention.cpp).
//
// Layouts (as kernels/ops.hpp): qkv (B,T,(NH + 2 KV) hs) = [q | k | v] along
// the last dim: NH query heads, then KV key heads, then KV value heads, head
// j of a part at columns [j*hs, (j+1)*hs) of that part. Query head h reads
// key/value head h / (NH / KV) (HF's repeat_kv); KV divides NH. Multi-head
// attention is KV = NH: qkv (B,T,3C). out (B,T,C) query heads concatenated;
// C = NH * hs; scores scaled by 1/sqrt(hs).
//
// Invariants:
//   * forward: out (B,T,C) ASSIGNED; lse (B,NH,T) ASSIGNED with the row's
//     log-sum-exp of the scaled, masked scores (natural log), per query head.
//     Only lse is saved for backward (B*NH*T floats: kernels/core/
//     attention_kernels.hpp's attention_saved_elems).
//   * backward: dqkv (qkv's shape) ASSIGNED, every element (dq of every query
//     head, dk and dv of every key/value head: the sums over its group of
//     NH / KV query heads). P is recomputed per tile from qkv and lse.
//     scratch (B*NH*T floats) is clobbered: it holds D = rowsum(dout * out)
//     per (b,h,t), h a query head.
//   * Deterministic and atomic-free: dK/dV are accumulated by the block that
//     owns a key tile of a key/value head, looping over the query heads of
//     its group and, for each, over the query tiles, in that fixed order; dQ
//     by the block that owns a query tile of a query head (looping over key
//     tiles); each in registers. With KV = NH the group is one head and the
//     order, hence every bit, is multi-head attention's. The price is
//     recomputing the scores and dP in both passes; with KV < NH also a dkdv
//     grid of B*KV (not B*NH) x key tiles, each block NH/KV times longer (its
//     K/V tiles loaded once for the group). Tiling is unchanged by KV.
//   * dtypes: qkv, out, dout, dqkv all fp32 or all bf16 (converted to fp32 on
//     load, rounded on store); lse and scratch fp32; all math fp32.
//   * Shapes: 1 <= hs <= 128 (the head is zero-padded to 32, 64 or 128 in
//     shared memory), any T >= 1 (tiles of 64 rows, the last one partial).
//   * Tiles: 64 queries x 64 keys per block of 256 threads, each thread a 4x4
//     piece of the score tile and a 4 x (hs_pad/16) piece of the output; the
//     block's tiles live in shared memory (fp32, rows padded by one float so
//     the column walks are bank-conflict free): up to 166 KB at hs_pad = 128,
//     which needs the opt-in shared-memory limit of sm_80+ (set per launch).
//   * 16-byte global loads when hs and the base pointers allow (every row
//     stride and head offset is a multiple of hs), else scalar.
//
// Host-only header (launcher declarations); the kernels live in attention.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

// out (B,T,C), lse (B,NH,T) <- qkv (B,T,(NH + 2 KV) hs). KV = NH: multi-head.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int KV,
                       int hs, cudaStream_t stream);
void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                       int NH, int KV, int hs, cudaStream_t stream);

// dqkv (B,T,(NH + 2 KV) hs) <- dout (B,T,C), qkv, out, lse of the forward;
// scratch (B*NH*T) clobbered.
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* lse, int B, int T, int NH, int KV, int hs,
                        cudaStream_t stream);
void attention_backward(__nv_bfloat16* dqkv, float* scratch, const __nv_bfloat16* dout,
                        const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse, int B,
                        int T, int NH, int KV, int hs, cudaStream_t stream);

// D (B,NH,T) = rowsum(dout * out) per (b, h, t), h a query head: the first
// step of both backwards, ASSIGNED into `D` (the scratch). One warp per row.
void attention_backward_rowdot(float* D, const float* dout, const float* out, int B, int T,
                               int NH, int hs, cudaStream_t stream);
void attention_backward_rowdot(float* D, const __nv_bfloat16* dout, const __nv_bfloat16* out,
                               int B, int T, int NH, int hs, cudaStream_t stream);

// ---- tensor-core variant (attention_tc.cu): bf16 only, hs % 16 == 0, hs <= 128 ----
// Same contract as above (layouts, grouped-query heads, outputs, saved lse,
// scratch, the dK/dV loop over a group's query heads); FlashAttention-2's
// structure: the products run on mma.sync bf16 tensor cores with fp32
// accumulation, one pass over the keys with an online softmax, S and P in
// registers (P's accumulators reused as the next product's A operand), causal
// tiles skipped, and the backward as two deterministic kernels (dK/dV per key
// tile, dQ per query tile). P and dS are rounded to bf16 before their
// products, so results differ from the fp32-math kernels above by bf16
// rounding (~1e-2 relative). The forward's P is exp(S - running max), not yet
// normalised: O is divided by the row sum at the end. CudaOps uses it for
// bf16 when CudaContextOptions::attention_tensor_cores is set (the trainer's
// runtime.attention, on by default). Registers and occupancy: docs/PERFORMANCE.md
// ("The kernels' resources").
bool attention_tc_supported(int hs);
void attention_forward_tc(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T,
                          int NH, int KV, int hs, cudaStream_t stream);
void attention_backward_tc(__nv_bfloat16* dqkv, float* scratch, const __nv_bfloat16* dout,
                           const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                           int B, int T, int NH, int KV, int hs, cudaStream_t stream);

// ---- Hopper variant (attention_sm90.cu): bf16, hs 64 or 128, sm_90a only ----
// The forward of the same contract on TMA copies and warpgroup MMAs
// (FlashAttention-3's structure; the file's header says what it does and does
// not do yet). The caller checks the device is sm_90 (CudaOps, through
// runtime.attention: wgmma); the emulated device runs it against the CPU twin.
bool attention_sm90_supported(int hs);
void attention_forward_sm90(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B,
                            int T, int NH, int KV, int hs, cudaStream_t stream);

}  // namespace gt::cuda
