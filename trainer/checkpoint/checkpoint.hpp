// Training checkpoints. A checkpoint is a directory <root>/step_<8 digits>/
// holding tensors.safetensors (parameters and optimizer moments, in the
// unsharded global layout, so any parallel layout can load it) and
// manifest.json (format version, step, data position, seed, model
// signature, resolved config, byte size and checksum of every file).
//
// Commit protocol: the directory is written as <root>/.step_<N>.tmp.<pid>/,
// every file fsynced, manifest.json written last, then the directory is
// renamed into place and <root> fsynced. A directory without a valid
// manifest is not a checkpoint. Older checkpoints beyond `keep` are deleted
// only after the new one is committed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gt {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;  // host fp32, numel(shape) elements
};

struct CheckpointMeta {
  int64_t step = 0;             // optimizer steps completed
  int64_t sample_position = 0;  // global rows consumed by the train loader
  uint64_t seed = 0;
  std::string model_signature;  // gt::model_signature(cfg.model)
  std::string config_yaml;      // resolved config, for the record
};

// Writes a committed checkpoint and prunes old ones. Returns its directory.
std::string save_checkpoint(const std::string& root, const CheckpointMeta& meta,
                            const std::vector<NamedTensor>& tensors, int keep);

// Verifies the manifest and checksums, checks the model signature equals
// `expected_signature` (listing every differing field otherwise), and fills
// every tensor in `tensors` by name (shape mismatches name the tensor).
CheckpointMeta load_checkpoint(const std::string& dir, const std::string& expected_signature,
                               const std::vector<NamedTensor>& tensors);

// The newest committed checkpoint under root ("" when there is none).
// Uncommitted or corrupt directories are reported through `skipped`
// ("<dir>: <reason>") and ignored.
std::string find_latest_checkpoint(const std::string& root, std::vector<std::string>* skipped);

}  // namespace gt
