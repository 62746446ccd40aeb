#include "trainer/parallelize/llama_placement.hpp"

#include <string>

#include "kernels/core/error.hpp"

namespace gt {

std::vector<PlacedUnit> llama_placement(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.padded_vocab_size(), F = m.ffn_width();
  const int64_t Q = static_cast<int64_t>(m.n_head) * m.head_size();       // query features
  const int64_t KV = static_cast<int64_t>(m.kv_heads()) * m.head_size();  // key, value features
  // Short names so that the table below reads as a table. q, k and v are
  // separate tensors (grouped-query attention makes k and v narrower than
  // q), each split by heads; HF stores every Linear as we do, (out, in), and
  // initialises every weight N(0, 0.02) with no depth scaling.
  const auto seq = TpRole::sequence_replicated;
  const auto column = TpRole::column, row = TpRole::row, vocab = TpRole::vocab;
  const auto decay = Decay::yes, no_decay = Decay::no;
  const auto ones = Init::ones, normal = Init::normal;
  auto param = [](std::string name, std::vector<int64_t> shape, int layer, TpRole role, Decay d,
                  Init init) {
    return PlacedParameter{std::move(name), std::move(shape), layer,
                           Placement{role, 1, d, init, HfLayout::as_stored}, 0};
  };

  std::vector<PlacedUnit> units;
  // clang-format off
  //        name                                shape     layer role    decay     init
  units.push_back({"embed", {
      param("embed_tokens.weight",              {V, C},   -1, vocab,  decay,    normal)}});
  units.front().params.front().pad_rows = V - m.vocab_size;  // zero, masked, never exported
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    units.push_back({"layers." + std::to_string(l), {
      param(h + "input_layernorm.weight",       {C},      l,  seq,    no_decay, ones),
      param(h + "self_attn.q_proj.weight",      {Q, C},   l,  column, decay,    normal),
      param(h + "self_attn.k_proj.weight",      {KV, C},  l,  column, decay,    normal),
      param(h + "self_attn.v_proj.weight",      {KV, C},  l,  column, decay,    normal),
      param(h + "self_attn.o_proj.weight",      {C, Q},   l,  row,    decay,    normal),
      param(h + "post_attention_layernorm.weight", {C},   l,  seq,    no_decay, ones),
      param(h + "mlp.gate_proj.weight",         {F, C},   l,  column, decay,    normal),
      param(h + "mlp.up_proj.weight",           {F, C},   l,  column, decay,    normal),
      param(h + "mlp.down_proj.weight",         {C, F},   l,  row,    decay,    normal)}});
  }
  units.push_back({"head", {
      param("norm.weight",                      {C},      -1, seq,    no_decay, ones)}});
  if (!m.tied_embeddings()) {
    units.back().params.push_back(
      param("lm_head.weight",                   {V, C},   -1, vocab,  decay,    normal));
    units.back().params.back().pad_rows = V - m.vocab_size;
  }
  // clang-format on
  return units;
}

std::vector<PlacedUnit> mixtral_placement(const ModelConfig& m) {
  std::vector<PlacedUnit> units = llama_placement(m);
  const int64_t C = m.n_embd, F = m.ffn_width(), E = m.n_experts;
  auto whole = [](std::string name, std::vector<int64_t> shape, int layer, int expert) {
    return PlacedParameter{
        std::move(name), std::move(shape), layer,
        Placement{TpRole::sequence_replicated, 1, Decay::yes, Init::normal, HfLayout::as_stored},
        0, expert};
  };
  for (int l = 0; l < m.n_layer; ++l) {
    std::vector<PlacedParameter>& params = units[static_cast<size_t>(1 + l)].params;
    // Llama's block ends with its three mlp.* weights.
    GT_CHECK(params.size() == 9 && params[6].name.find("mlp.gate_proj") != std::string::npos,
             "llama_placement's block layout changed");
    params.resize(6);
    const std::string h = "layers." + std::to_string(l) + ".block_sparse_moe.";
    params.push_back(whole(h + "gate.weight", {E, C}, l, -1));
    for (int e = 0; e < E; ++e) {
      const std::string x = h + "experts." + std::to_string(e) + ".";
      params.push_back(whole(x + "w1.weight", {F, C}, l, e));
      params.push_back(whole(x + "w3.weight", {F, C}, l, e));
    }
    for (int e = 0; e < E; ++e)
      params.push_back(whole(h + "experts." + std::to_string(e) + ".w2.weight", {C, F}, l, e));
  }
  return units;
}

}  // namespace gt
