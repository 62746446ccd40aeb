// HF export from a checkpoint of any layout: the whole parameters are read
// back from the checkpoint's pieces (each file only as far as needed) and
// written as one safetensors file with HF GPT-2 names and layouts.
#pragma once

#include <map>
#include <string>

#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/config/config.hpp"

namespace gt {

// Returns the checkpoint's metadata. `metadata` goes into the file's header,
// plus "step" when it has none.
CheckpointMeta export_hf_weights(const std::string& checkpoint_dir, const ModelConfig& m,
                                 const std::string& out_path,
                                 std::map<std::string, std::string> metadata);

}  // namespace gt
