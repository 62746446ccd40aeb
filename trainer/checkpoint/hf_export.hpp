// HF export from a checkpoint of any layout: the whole parameters are read
// back from the checkpoint's pieces (each file only as far as needed) and
// written with the family's HF names and layouts (model/hf_weights.hpp: one
// safetensors file, or HF's shards and index past 5 GB), with the
// config.json transformers reads beside them (model/hf_config.hpp), so the
// folder opens with from_pretrained.
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
