#include "trainer/parallelize/gpt2_placement.hpp"

#include <string>

namespace gt {

std::vector<PlacedUnit> gpt2_placement(const ModelConfig& m) {
  const int64_t C = m.n_embd, V = m.padded_vocab_size(), P = m.block_size;
  // Short names so that the table below reads as a table.
  const auto seq = TpRole::sequence_replicated, gathered = TpRole::gathered_replicated;
  const auto column = TpRole::column, row = TpRole::row, vocab = TpRole::vocab;
  const auto decay = Decay::yes, no_decay = Decay::no;
  const auto zeros = Init::zeros, ones = Init::ones, normal = Init::normal,
             residual = Init::residual_normal;
  const auto conv1d = HfLayout::transposed, linear = HfLayout::as_stored;
  auto param = [](std::string name, std::vector<int64_t> shape, int layer, TpRole role, int parts,
                  Decay d, Init init, HfLayout hf) {
    return PlacedParameter{std::move(name), std::move(shape), layer,
                           Placement{role, parts, d, init, hf}, 0};
  };

  std::vector<PlacedUnit> units;
  // clang-format off
  //        name                          shape       layer role   parts decay     init      HF
  units.push_back({"embed", {
      param("wte.weight",                 {V, C},      -1, vocab,    1, decay,    normal,   linear),
      param("wpe.weight",                 {P, C},      -1, seq,      1, decay,    normal,   linear)}});
  units.front().params.front().pad_rows = V - m.vocab_size;  // zero, masked, never exported
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    units.push_back({"h." + std::to_string(l), {
      param(h + "ln_1.weight",            {C},         l,  seq,      1, no_decay, ones,     linear),
      param(h + "ln_1.bias",              {C},         l,  seq,      1, no_decay, zeros,    linear),
      param(h + "attn.c_attn.weight",     {3 * C, C},  l,  column,   3, decay,    normal,   conv1d),
      param(h + "attn.c_attn.bias",       {3 * C},     l,  column,   3, no_decay, zeros,    linear),
      param(h + "attn.c_proj.weight",     {C, C},      l,  row,      1, decay,    residual, conv1d),
      param(h + "attn.c_proj.bias",       {C},         l,  gathered, 1, no_decay, zeros,    linear),
      param(h + "ln_2.weight",            {C},         l,  seq,      1, no_decay, ones,     linear),
      param(h + "ln_2.bias",              {C},         l,  seq,      1, no_decay, zeros,    linear),
      param(h + "mlp.c_fc.weight",        {4 * C, C},  l,  column,   1, decay,    normal,   conv1d),
      param(h + "mlp.c_fc.bias",          {4 * C},     l,  column,   1, no_decay, zeros,    linear),
      param(h + "mlp.c_proj.weight",      {C, 4 * C},  l,  row,      1, decay,    residual, conv1d),
      param(h + "mlp.c_proj.bias",        {C},         l,  gathered, 1, no_decay, zeros,    linear)}});
  }
  units.push_back({"head", {
      param("ln_f.weight",                {C},         -1, seq,      1, no_decay, ones,     linear),
      param("ln_f.bias",                  {C},         -1, seq,      1, no_decay, zeros,    linear)}});
  // clang-format on
  return units;
}

}  // namespace gt
