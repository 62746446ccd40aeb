// The config.json HF transformers reads beside exported weights
// (AutoConfig / *ForCausalLM.from_pretrained on the folder): GPT2LMHeadModel
// or LlamaForCausalLM with this model's dimensions, fp32.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "trainer/config/config.hpp"

namespace gt {

nlohmann::json hf_config_json(const ModelConfig& m);

// Writes hf_config_json(m) to `dir`/config.json atomically; returns the path.
std::string write_hf_config(const std::string& dir, const ModelConfig& m);

}  // namespace gt
