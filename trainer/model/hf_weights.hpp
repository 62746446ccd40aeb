// Import and export of GPT-2 weights in HF transformers' safetensors layout,
// so a model trained here opens in PyTorch and the other way round.
// Conv1D weights (c_attn, c_proj, c_fc) are stored (in, out) there and
// (out, in) here; the "transformer." prefix is optional on import; the
// untied "lm_head.weight" some exports carry must equal wte if present.
// wte is (vocab_size, C) in the file and padded with zero rows here
// (ModelConfig::padded_vocab_size); the padding is never written.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "trainer/model/parameter_layout.hpp"

namespace gt {

// Reads every parameter of model `m` from `path`, one whole (global) tensor at
// a time in our (out, in) storage order, and hands it to fn(spec, data) with
// `spec` from the tp = 1 layout. Missing tensors and shape mismatches are
// errors naming the tensor and both shapes; an untied lm_head.weight that
// differs from wte is an error.
void for_each_hf_tensor(const std::string& path, const ModelConfig& m,
                        const std::function<void(const ParamSpec&, const float*)>& fn);


// Writes `path` atomically with HF names (no prefix), F32, plus metadata.
void save_hf_weights(const std::string& path, const ParameterLayout& layout, const float* params,
                     const std::map<std::string, std::string>& metadata);

}  // namespace gt
