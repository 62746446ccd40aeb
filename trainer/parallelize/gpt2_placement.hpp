// GPT-2's parameters and their placement: the one table to read for "how is
// parameter X split under tp, decayed, initialised, stored by HF".
#pragma once

#include <vector>

#include "trainer/config/config.hpp"
#include "trainer/parallelize/placement.hpp"

namespace gt {

// Units in order: "embed" (wte, wpe), "h.0" .. "h.<n_layer-1>", "head"
// (ln_f). The tied LM head reads wte; it has no parameter of its own.
std::vector<PlacedUnit> gpt2_placement(const ModelConfig& m);

}  // namespace gt
