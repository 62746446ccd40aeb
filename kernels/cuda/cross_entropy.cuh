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
//   * Padded vocabulary: columns [vocab_size, V) are padding, left out of the
//     max and the sum, and their dlogits are 0 (ops.hpp).
//   * A target outside [0, vocab_size) is never dereferenced: its loss is NaN
//     and its gradient row is softmax * grad_scale (no one-hot term).
//   * bf16 logits (the bf16 LM head's output) are widened exactly, the math
//     is fp32, and bf16 dlogits are the fp32 gradient rounded to nearest
//     even: no fp32 (R, V) tensor exists in the bf16 model.
//   * Deterministic: the per-row reduction tree is fixed.
//
// Vocab-parallel cross-entropy (tensor parallelism), the three per-shard
// passes of Ops (the caller all-reduces between them). logits (R, V_shard)
// hold vocabulary rows [vocab_start, vocab_start + V_shard); one block per row:
//   * shard_max: row_max (R) ASSIGNED = max over the shard's row.
//   * shard_sums: sumexp (R) ASSIGNED = sum exp(logits - row_max) (row_max is
//     the all-reduced one); target_logit (R) ASSIGNED = the target's logit
//     when it is in the shard, else 0.
//   * shard_finish: losses (R) ASSIGNED = log(sumexp) + row_max - target_logit;
//     dlogits (R, V_shard) ASSIGNED when non-null (it MAY ALIAS logits) =
//     (exp(logits - row_max) / sumexp - onehot) * grad_scale.
//   * Columns whose vocabulary row vocab_start + j is at or past vocab_size
//     are padding as above; a shard of padding only has row_max -inf.
//   * Sums in fp32 over a fixed tree (the CPU twin sums in double): deterministic.
//
// Host-only header (launcher declarations); the kernels live in cross_entropy.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

// losses (R) <- logits (R,V), targets (R) int32; dlogits (R,V) or nullptr;
// vocab_size <= V. Each function has an fp32 and a bf16 overload for the
// logits' (and dlogits') storage; losses and the statistics are fp32.
void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int64_t R, int64_t V, int64_t vocab_size,
                           float grad_scale, cudaStream_t stream);
void softmax_cross_entropy(float* losses, __nv_bfloat16* dlogits, const __nv_bfloat16* logits,
                           const int32_t* targets, int64_t R, int64_t V, int64_t vocab_size,
                           float grad_scale, cudaStream_t stream);

void cross_entropy_shard_max(float* row_max, const float* logits, int64_t R, int64_t V_shard,
                             int64_t vocab_start, int64_t vocab_size, cudaStream_t stream);
void cross_entropy_shard_max(float* row_max, const __nv_bfloat16* logits, int64_t R,
                             int64_t V_shard, int64_t vocab_start, int64_t vocab_size,
                             cudaStream_t stream);
void cross_entropy_shard_sums(float* sumexp, float* target_logit, const float* logits,
                              const int32_t* targets, const float* row_max, int64_t R,
                              int64_t V_shard, int64_t vocab_start, int64_t vocab_size,
                              cudaStream_t stream);
void cross_entropy_shard_sums(float* sumexp, float* target_logit, const __nv_bfloat16* logits,
                              const int32_t* targets, const float* row_max, int64_t R,
                              int64_t V_shard, int64_t vocab_start, int64_t vocab_size,
                              cudaStream_t stream);
void cross_entropy_shard_finish(float* losses, float* dlogits, const float* logits,
                                const int32_t* targets, const float* row_max, const float* sumexp,
                                const float* target_logit, int64_t R, int64_t V_shard,
                                int64_t vocab_start, int64_t vocab_size, float grad_scale,
                                cudaStream_t stream);
void cross_entropy_shard_finish(float* losses, __nv_bfloat16* dlogits, const __nv_bfloat16* logits,
                                const int32_t* targets, const float* row_max, const float* sumexp,
                                const float* target_logit, int64_t R, int64_t V_shard,
                                int64_t vocab_start, int64_t vocab_size, float grad_scale,
                                cudaStream_t stream);

}  // namespace gt::cuda
