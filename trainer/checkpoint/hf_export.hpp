// HF export from a checkpoint of any layout: the whole parameters are read
// back from the checkpoint's pieces (each file only as far as needed) and
// written as one safetensors file with HF GPT-2 names and layouts.
#pragma once

#include <map>
#include <string>

#include "trainer/config/config.hpp"

namespace gt {

void export_hf_weights(const std::string& checkpoint_dir, const ModelConfig& m,
                       const std::string& out_path,
                       const std::map<std::string, std::string>& metadata);

}  // namespace gt
