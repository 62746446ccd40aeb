// Token + position embedding. CPU twin: Ops::embedding_forward / embedding_backward.
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

}  // namespace gt::cuda
