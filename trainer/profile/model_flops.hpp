// The model FLOPs of a GPT-2 training step, the numerator of MFU, counted
// independently of the profiler (from the config alone) so the two can be
// checked against each other.
//
//   FLOPs per token = 6·N + 12·L·T·C
//
// N counts the weights of every matmul: per block c_attn 3C², attn.c_proj C²,
// mlp.c_fc 4C², mlp.c_proj 4C² (12·L·C² in all), plus the LM head's V·C (the
// head reuses wte's storage but is a full matmul of its own). Each such weight
// costs 2 FLOPs per token forward and 4 backward (dinp and dweight): 6·N.
// Biases, LayerNorms and the position embedding are not matmuls and are left
// out (about 13·L·C + 2·C parameters, well under 1% of N), as is the token
// lookup.
// Attention (PaLM appendix B, Megatron): Q·K^T and P·V cost 2·T·C each per
// token per layer forward over the full T x T, and twice that backward: 12·L·T·C
// per token. Not halved for causality: the convention every published MFU uses,
// and what op_costs.hpp counts per op.
#pragma once

#include <cstdint>

#include "trainer/config/config.hpp"

namespace gt {

struct ModelFlops {
  double matmul_params = 0;        // N
  double dense_per_token = 0;      // 6·N
  double attention_per_token = 0;  // 12·L·T·C
  double per_token() const { return dense_per_token + attention_per_token; }
};

ModelFlops model_flops(const ModelConfig& m, int seq_len);

}  // namespace gt
