// Autoregressive sampling for the byte-level tokenizer: temperature and
// top-k over the last position's logits, deterministic in the seed. The
// context is cropped to the model's block size (no KV cache: each new
// token reruns the forward pass, which is fine for demo-sized output).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/model/causal_lm.hpp"

namespace gt {

struct SampleOptions {
  int new_tokens = 200;
  double temperature = 0.8;  // 0 = greedy
  int top_k = 40;            // 0 = whole vocabulary
  uint64_t seed = 1;
};

std::vector<int32_t> sample_tokens(CausalLM& model, std::vector<int32_t> context,
                                   const SampleOptions& opt);

// Byte-level tokenizer (vocab 256): UTF-8 bytes in, bytes out.
std::vector<int32_t> encode_bytes(const std::string& text);
std::string decode_bytes(const std::vector<int32_t>& tokens);

}  // namespace gt
