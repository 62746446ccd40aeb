// Import and export of a model's weights in HF transformers' safetensors
// layout, so a model trained here opens in PyTorch and the other way round.
//
// Names, per family (model.arch):
//   gpt2   HF GPT2LMHeadModel's without the "transformer." prefix, which is
//          optional on import; Conv1D weights (c_attn, c_proj, c_fc) are
//          stored (in, out) there and (out, in) here; the untied
//          "lm_head.weight" some exports carry must equal wte if present.
//   llama  HF LlamaForCausalLM's: "model." + ours ("model.layers.3.mlp.
//          up_proj.weight"), "lm_head.weight" as is; every Linear (out, in)
//          as here. A tied model's lm_head.weight, if present, must equal
//          embed_tokens.
// The vocabulary is (vocab_size, C) in the file and padded with zero rows
// here (ModelConfig::padded_vocab_size); the padding is never written.
//
// Import reads one .safetensors file, a sharded checkpoint's
// model.safetensors.index.json, or a directory holding either
// (trainer/io/hf_tensor_files.hpp). Every tensor is checked before any is
// read: one error lists each missing, misshapen or unreadable tensor, and a
// file of the other family is named as such.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "trainer/io/progress.hpp"
#include "trainer/model/parameter_layout.hpp"

namespace gt {

// The name HF files of m's family give our parameter `ours`.
std::string hf_tensor_name(const ModelConfig& m, const std::string& ours);

// Reads every parameter of model `m` from `path`, one whole (global) tensor at
// a time in our (out, in) storage order, and hands it to fn(spec, data) with
// `spec` from the tp = 1 layout.
void for_each_hf_tensor(const std::string& path, const ModelConfig& m,
                        const std::function<void(const ParamSpec&, const float*)>& fn);

// HF's default shard size (save_pretrained's max_shard_size "5GB").
constexpr int64_t kHfMaxShardBytes = 5'000'000'000;

// Writes the parameters of `layout` (tp = 1, model `m`) with HF names, F32,
// plus metadata, atomically. Up to max_shard_bytes of tensors: one file at
// `path`. Beyond: HF's sharded layout in path's directory,
// "model-00001-of-0000N.safetensors" ... (tensors in layout order, a new file
// when the next tensor would pass the limit) and
// "model.safetensors.index.json" naming each tensor's file; `path` itself
// is then not written. Returns the files written, index last.
std::vector<std::string> save_hf_weights(const std::string& path, const ModelConfig& m,
                                         const ParameterLayout& layout, const float* params,
                                         const std::map<std::string, std::string>& metadata,
                                         int64_t max_shard_bytes = kHfMaxShardBytes,
                                         const ByteProgress& on_bytes = {});

}  // namespace gt
