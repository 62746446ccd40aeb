// Rules about the attention kernels that layers above the backends ask too,
// here below both so that each is stated once: which head sizes the CUDA
// tensor-core kernels take (kernels/cuda/attention_tc.cu: bf16 m16n8k16
// products over the head, padded to 64 or 128 in shared memory), asked by the
// config's choice of kernel (runtime.attention), the cost table and the
// launchers; and how many floats each backend's attention keeps for backward
// and needs as backward scratch, asked by the backends (Ops::
// attention_saved_elems) and the planner's memory model.
#pragma once

#include <cstdint>

#include "kernels/core/tensor.hpp"

namespace gt {

constexpr bool tensor_core_attention_supported(int head_size) {
  return head_size >= 16 && head_size <= 128 && head_size % 16 == 0;
}
// The sm_90 (wgmma) forward, kernels/cuda/attention_sm90.cu.
constexpr bool wgmma_attention_supported(int head_size) {
  return head_size == 64 || head_size == 128;
}

// Floats attention keeps from forward for backward, for B sequences of T
// rows and n_head heads: the CPU backend keeps the (B, NH, T, T)
// probabilities (recomputing them would cost another Q K^T per head); the
// CUDA kernels (SIMT and tensor-core alike) keep one log-sum-exp per row.
constexpr int64_t attention_saved_elems(Device device, int B, int n_head, int T) {
  const int64_t rows = static_cast<int64_t>(B) * n_head * T;
  return device == Device::cpu ? rows * T : rows;
}
// Floats of backward scratch: the CPU backend's (B, NH, T, T) score
// gradients; the CUDA kernels' D = rowsum(dO * O), one per row.
constexpr int64_t attention_scratch_elems(Device device, int B, int n_head, int T) {
  const int64_t rows = static_cast<int64_t>(B) * n_head * T;
  return device == Device::cpu ? rows * T : rows;
}

// Floats of workspace attention over blocks (Ops::attention_block_forward /
// _backward) needs for a block of Tq queries against Tk keys: the CPU
// backend's scores and probabilities, and in backward their gradients, per
// (batch, query head): 2 (Tq, Tk) matrices each; the CUDA kernels keep
// their tiles on chip and need none.
constexpr int64_t attention_block_scratch_elems(Device device, int B, int n_head, int Tq, int Tk) {
  return device == Device::cpu
             ? 2 * static_cast<int64_t>(B) * n_head * static_cast<int64_t>(Tq) * Tk
             : 0;
}

}  // namespace gt
