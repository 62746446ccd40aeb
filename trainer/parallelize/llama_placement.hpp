// Llama's parameters and their placement (HF LlamaForCausalLM names without
// the "model." prefix): the one table to read for "how is parameter X split
// under tp, decayed, initialised".
#pragma once

#include <vector>

#include "trainer/config/config.hpp"
#include "trainer/parallelize/placement.hpp"

namespace gt {

// Units in order: "embed" (embed_tokens), "layers.0" .. "layers.<n_layer-1>",
// "head" (norm, and lm_head unless model.tie_embeddings: then the head reads
// embed_tokens, as GPT-2's does).
std::vector<PlacedUnit> llama_placement(const ModelConfig& m);

// Mixtral's (HF MixtralForCausalLM names without "model."): Llama's table
// with each block's mlp.* replaced by its sparse mixture,
//   block_sparse_moe.gate.weight          (E, C)  the router
//   block_sparse_moe.experts.M.w1|w3      (F, C)  expert M's gate and up projections
//   block_sparse_moe.experts.M.w2         (C, F)  expert M's down projection
// in the flat order [gate] [e0.w1 e0.w3 e1.w1 e1.w3 ...] [e0.w2 e1.w2 ...],
// so that the grouped GEMMs read every expert's w1|w3 as one (E, 2F, C)
// tensor (out = [gate | up], the SwiGLU op's layout) and the w2s as one
// (E, C, F); at parallel.ep > 1 a rank's layout keeps its El = E/ep experts
// in the same order in an expert unit (parameter_layout.hpp): (El, 2F, C)
// and (El, C, F). Router and experts are whole on every tp rank: each tp rank
// routes its own R/p rows (sequence parallelism) to whole experts, so their
// gradients are tp-partial, as the norms' are.
std::vector<PlacedUnit> mixtral_placement(const ModelConfig& m);

}  // namespace gt
