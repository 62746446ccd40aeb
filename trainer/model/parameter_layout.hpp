// ParameterLayout: every GPT-2 parameter as a named slice of one flat fp32
// buffer. Names are the HF GPT-2 names without the "transformer." prefix
// ("h.3.attn.c_attn.weight"), so checkpoints, safetensors export and error
// messages all speak the name a user finds in transformers.
//
// Storage is (out, in) like torch.nn.Linear; HF stores its Conv1D weights
// (c_attn, c_proj, c_fc) as (in, out), which `hf_transposed` marks for the
// import/export code. Each block's parameters are contiguous, in the order
// listed by build(), so a block can later be sharded or gathered as one range.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainer/config/config.hpp"

namespace gt {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;  // storage shape (out, in) for matrices
  int64_t offset = 0;          // in elements, into the flat buffer
  int64_t numel = 0;
  bool decay = false;          // AdamW weight decay: 2-D weights only
  bool hf_transposed = false;  // HF Conv1D layout is shape reversed
  int layer = -1;              // block index, -1 outside the blocks
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& m);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t total() const { return total_; }
  const ParamSpec& at(const std::string& name) const;  // throws naming the parameter
  const ParamSpec* find(const std::string& name) const;

 private:
  void add(const std::string& name, std::vector<int64_t> shape, bool decay, bool hf_transposed,
           int layer);
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> index_;
  int64_t total_ = 0;
};

// Fills `params` like HF GPT2 _init_weights: weights N(0, 0.02), residual
// projections (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2*n_layer)), biases 0,
// LayerNorm weight 1 and bias 0. Deterministic in `seed` on every platform.
void init_gpt2_parameters(const ParameterLayout& layout, int n_layer, uint64_t seed,
                          float* params);

}  // namespace gt
