// The rotary embedding's (position, [cos | sin]) table a Llama model uploads
// once and its rope ops read (kernels/cpu/llama_kernels.hpp). HF's
// computation, in fp32 as HF does it: inv_freq_i = 1 / theta^(2i/D) for
// i < D/2, with Llama 3.1's frequency-dependent scaling when
// model.rope_scaling is set (rope_type "llama3": wavelengths shorter than
// original_max_position / high_freq_factor kept, longer than
// original_max_position / low_freq_factor divided by factor, smoothly
// interpolated between); angle = position * inv_freq_i.
#pragma once

#include <vector>

#include "trainer/config/config.hpp"

namespace gt {

// inv_freq (D/2) of model m (head size D = n_embd / n_head).
std::vector<float> rope_inv_freq(const ModelConfig& m);

// (max_seq, D) row-major: row p is [cos(p f_0) .. cos(p f_{D/2-1}), sin(p f_0) ..].
std::vector<float> rope_cos_sin(const ModelConfig& m, int max_seq);

}  // namespace gt
