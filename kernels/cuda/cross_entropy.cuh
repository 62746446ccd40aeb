// Fused softmax + cross-entropy, forward and backward in one kernel: one
// block per row of logits (R,V), an online max/sum pass over the row, then
// (when dlogits is given) one pass writing the gradient.
// CPU twin: Ops::softmax_cross_entropy.
//
// Invariants (as kernels/ops.hpp):
//   * losses (R) ASSIGNED: losses[r] = logsumexp(logits[r,:]) - logits[r, targets[r]].
//   * dlogits (R,V) ASSIGNED when non-null:
//       dlogits[r,j] = (softmax(logits[r,:])[j] - (j == targets[r])) * grad_scale.
//     The caller folds the 1/R of the mean loss and gradient accumulation into
//     grad_scale. dlogits MAY ALIAS logits (in place): each element is read
//     before the same thread overwrites it, and the target logit is read
//     before the block's first barrier.
//   * A target outside [0, V) is never dereferenced: its loss is NaN and its
//     gradient row is softmax * grad_scale (no one-hot term).
//   * Deterministic: the per-row reduction tree is fixed.
//
// Host-only header (launcher declaration); the kernel lives in cross_entropy.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

// losses (R) <- logits (R,V), targets (R) int32; dlogits (R,V) or nullptr.
void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int64_t R, int64_t V, float grad_scale,
                           cudaStream_t stream);

}  // namespace gt::cuda
