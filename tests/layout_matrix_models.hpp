// tests/layouts/layout_matrix.py's models (MODELS) and TRAIN in C++, for the
// tests that check the planner's formulas against the numbers the layout
// matrix logs (CPU and MPI tests alike).
#pragma once

#include "trainer/config/config.hpp"

namespace gt::test {

// layout_matrix.py's MODELS["gpt2"].
inline ModelConfig matrix_model() {
  ModelConfig m;
  m.n_layer = 3;
  m.n_head = 4;
  m.n_embd = 32;
  m.vocab_size = 256;
  m.block_size = 16;
  return m;
}

// layout_matrix.py's MODELS["llama"]: 8 query heads sharing 4 key/value
// heads of 4 features (Q = 32, K = 16), MLP 64, an untied head.
inline ModelConfig matrix_llama() {
  ModelConfig m = matrix_model();
  m.arch = ModelArch::llama;
  m.n_head = 8;
  m.n_kv_head = 4;
  m.ffn_hidden = 64;
  m.rope_theta = 10000.0;
  return m;
}

// Mixtral: matrix_llama's attention with 4 experts of width 32, 2 per token.
inline ModelConfig matrix_mixtral() {
  ModelConfig m = matrix_llama();
  m.arch = ModelArch::mixtral;
  m.ffn_hidden = 32;
  m.n_experts = 4;
  m.experts_per_token = 2;
  return m;
}

// layout_matrix.py's TRAIN at micro-batch `micro`.
inline TrainConfig matrix_train(int micro) {
  TrainConfig t;
  t.seq_len = 16;
  t.global_batch = 8;
  t.micro_batch = micro;
  return t;
}

}  // namespace gt::test
