#include "trainer/profile/model_flops.hpp"

#include "trainer/model/parameter_layout.hpp"

namespace gt {

BlockMatmuls block_matmuls(const ModelConfig& m) {
  const double C = m.n_embd;
  BlockMatmuls b;
  if (m.arch == ModelArch::gpt2) {
    b.qkv = 3.0 * C * C;
    b.out = C * C;
    b.up = 4.0 * C * C;
    b.down = 4.0 * C * C;
    return b;
  }
  const double hs = m.head_size(), F = m.ffn_width();
  const double Q = m.n_head * hs, K = m.kv_heads() * hs;
  b.qkv = C * (Q + 2.0 * K);
  b.out = Q * C;
  // A mixture's token goes through k experts' SwiGLUs (active weights).
  const double k = m.moe() ? m.experts_per_token : 1.0;
  b.up = k * 2.0 * F * C;  // gate | up (w1 | w3)
  b.down = k * F * C;
  if (m.moe()) b.router = double(m.n_experts) * C;
  return b;
}

ModelFlops model_flops(const ModelConfig& m, int seq_len) {
  const double L = m.n_layer, C = m.n_embd, V = m.vocab_size, T = seq_len;
  ModelFlops f;
  f.matmul_params = L * block_matmuls(m).total() + V * C;
  f.dense_per_token = 6.0 * f.matmul_params;
  f.attention_per_token = 12.0 * L * T * C;
  return f;
}

const char* mfu_formula_name(MfuFormula f) {
  return f == MfuFormula::palm ? "PaLM 6N+12LTC" : "llm.c 6P+6LCT";
}

double mfu_flops_per_token(const ModelConfig& m, int seq_len, MfuFormula f) {
  if (f == MfuFormula::palm) return model_flops(m, seq_len).per_token();
  const double P = static_cast<double>(ParameterLayout(m).global_numel());
  return 6.0 * P + 6.0 * m.n_layer * double(m.n_embd) * seq_len;
}

}  // namespace gt
