// Token + position embedding, fused (one rank) and split into its token and
// position halves (the vocab-parallel embedding of tensor parallelism).
// CPU twin: Ops::embedding_forward / embedding_backward,
// token_embedding_forward / backward, position_embedding_forward / backward.
//
// Invariants (as kernels/ops.hpp):
//   * forward: out (B,T,C) is ASSIGNED, out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
//     A token outside [0, V) is never dereferenced: its row is written NaN so
//     the loss shows it (the data loader is where tokens are validated).
//   * backward: dwte (V,C) and dwpe (maxT,C) ACCUMULATE (parameter gradients):
//       dwte[v,:] += sum over (b,t) with tokens[b,t] == v of dout[b,t,:]
//       dwpe[t,:] += sum over b of dout[b,t,:]
//     Either pointer may be nullptr to skip that gradient. Tokens outside
//     [0, V) contribute nothing.
//   * backward is deterministic and atomic-free: every output element is
//     owned by one thread that adds its contributions in (b,t) order, so the
//     result does not depend on the grid at all.
//     dwte: a block owns (a vocab range) x (a 256-column slice); it scans the
//     tokens in tiles, compacts the positions whose token falls in its range
//     (order kept), then each thread adds those rows of dout to its column.
//
// The split halves (tensor parallelism), rows i of a flattened (B,T) batch:
//   * token_embedding_forward: out (N,C) ASSIGNED = wte[tokens[i] - vocab_start]
//     when that row is in this shard [vocab_start, vocab_start + V_shard),
//     else a zero row (another rank holds it; the tp all-reduce sums them).
//   * token_embedding_backward: dwte (V_shard,C) ACCUMULATES the rows of dout
//     whose token is in the shard; same deterministic scheme as dwte above.
//   * position_embedding_forward: out (N,C) ACCUMULATES (+=) wpe[(first_row + i) % T].
//   * position_embedding_backward: dwpe (>=T, C) ACCUMULATES; a thread owns
//     (position p, column c) and adds the rows i = p - first_row (mod T),
//     p - first_row + T, ... in increasing i: deterministic, no atomics.
//
// Host-only header (launcher declarations); the kernels live in embedding.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

// out (B,T,C) <- tokens (B,T) int32, wte (V,C), wpe (>=T, C).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       int B, int T, int C, int V, cudaStream_t stream);

// dwte (V,C) +=, dwpe (>=T, C) += from dout (B,T,C), tokens (B,T).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int B, int T, int C, int V, cudaStream_t stream);

// out (N,C) <- tokens (N) int32, wte (V_shard,C) rows [vocab_start, vocab_start + V_shard).
void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t N,
                             int C, int V_shard, int64_t vocab_start, cudaStream_t stream);
// dwte (V_shard,C) += rows of dout (N,C) whose token is in the shard.
void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t N,
                              int C, int V_shard, int64_t vocab_start, cudaStream_t stream);
// out (N,C) += wpe[(first_row + i) % T] for row i; wpe has >= T rows.
void position_embedding_forward(float* out, const float* wpe, int64_t N, int C,
                                int64_t first_row, int T, cudaStream_t stream);
// dwpe[(first_row + i) % T] += dout row i, for rows i of dout (N,C).
void position_embedding_backward(float* dwpe, const float* dout, int64_t N, int C,
                                 int64_t first_row, int T, cudaStream_t stream);

}  // namespace gt::cuda
