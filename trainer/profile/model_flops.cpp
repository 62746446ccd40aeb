#include "trainer/profile/model_flops.hpp"

namespace gt {

ModelFlops model_flops(const ModelConfig& m, int seq_len) {
  const double L = m.n_layer, C = m.n_embd, V = m.vocab_size, T = seq_len;
  ModelFlops f;
  f.matmul_params = 12.0 * L * C * C + V * C;
  f.dense_per_token = 6.0 * f.matmul_params;
  f.attention_per_token = 12.0 * L * T * C;
  return f;
}

}  // namespace gt
