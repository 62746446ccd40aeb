// Which head sizes the CUDA tensor-core attention kernels take
// (kernels/cuda/attention_tc.cu: bf16 m16n8k16 products over the head, padded
// to 64 or 128 in shared memory). Here, below both, so that the config's
// choice of kernel (runtime.attention), the cost table and the kernels'
// launchers ask one rule.
#pragma once

namespace gt {

constexpr bool tensor_core_attention_supported(int head_size) {
  return head_size >= 16 && head_size <= 128 && head_size % 16 == 0;
}

}  // namespace gt
