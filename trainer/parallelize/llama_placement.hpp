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

}  // namespace gt
