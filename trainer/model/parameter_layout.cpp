#include "trainer/model/parameter_layout.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/core/error.hpp"

namespace gt {

const char* tp_split_name(TpSplit s) {
  switch (s) {
    case TpSplit::replicated: return "replicated";
    case TpSplit::rows: return "rows";
    case TpSplit::cols: return "cols";
  }
  return "?";
}

ParameterLayout::ParameterLayout(const ModelConfig& m, int tp, int tp_rank, int unit_multiple)
    : tp_(tp), tp_rank_(tp_rank) {
  GT_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp, "tp rank ", tp_rank, " of ", tp);
  GT_CHECK(unit_multiple >= 1, "unit_multiple ", unit_multiple);
  const int64_t C = m.n_embd, V = m.padded_vocab_size(), P = m.block_size;
  if (tp > 1 && (m.n_head % tp != 0 || m.n_embd % tp != 0 || V % tp != 0))
    fail("parallel.tp=", tp, " must divide model.n_head=", m.n_head, ", model.n_embd=", m.n_embd,
         " and the padded vocabulary (model.vocab_size=", m.vocab_size,
         " rounded up to a multiple of ", kVocabPadMultiple, ": ", V, ")");
  const auto R = TpSplit::replicated, ROWS = TpSplit::rows, COLS = TpSplit::cols;
  int64_t begin = total_;
  add("wte.weight", {V, C}, true, false, -1, ROWS, 1);
  specs_.back().pad_rows = V - m.vocab_size;
  add("wpe.weight", {P, C}, true, false, -1, R, 1);
  close_unit("embed", begin, unit_multiple);
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    begin = total_;
    add(h + "ln_1.weight", {C}, false, false, l, R, 1);
    add(h + "ln_1.bias", {C}, false, false, l, R, 1);
    add(h + "attn.c_attn.weight", {3 * C, C}, true, true, l, ROWS, 3);
    add(h + "attn.c_attn.bias", {3 * C}, false, false, l, ROWS, 3);
    add(h + "attn.c_proj.weight", {C, C}, true, true, l, COLS, 1);
    add(h + "attn.c_proj.bias", {C}, false, false, l, R, 1);
    add(h + "ln_2.weight", {C}, false, false, l, R, 1);
    add(h + "ln_2.bias", {C}, false, false, l, R, 1);
    add(h + "mlp.c_fc.weight", {4 * C, C}, true, true, l, ROWS, 1);
    add(h + "mlp.c_fc.bias", {4 * C}, false, false, l, ROWS, 1);
    add(h + "mlp.c_proj.weight", {C, 4 * C}, true, true, l, COLS, 1);
    add(h + "mlp.c_proj.bias", {C}, false, false, l, R, 1);
    close_unit("h." + std::to_string(l), begin, unit_multiple);
  }
  begin = total_;
  add("ln_f.weight", {C}, false, false, -1, R, 1);
  add("ln_f.bias", {C}, false, false, -1, R, 1);
  close_unit("head", begin, unit_multiple);
}

void ParameterLayout::add(const std::string& name, std::vector<int64_t> shape, bool decay,
                          bool hf_transposed, int layer, TpSplit split, int parts) {
  ParamSpec s;
  s.name = name;
  s.global_shape = shape;
  if (split == TpSplit::rows) shape[0] /= tp_;
  if (split == TpSplit::cols) shape[1] /= tp_;
  s.numel = 1;
  for (int64_t d : shape) s.numel *= d;
  s.shape = std::move(shape);
  s.offset = total_;
  s.decay = decay;
  s.hf_transposed = hf_transposed;
  s.layer = layer;
  s.unit = static_cast<int>(units_.size());
  s.split = tp_ > 1 ? split : TpSplit::replicated;
  s.parts = s.split == TpSplit::rows ? parts : 1;
  // Sequence parallelism: replicated parameters applied to this rank's rows
  // only (LayerNorms, wpe) get partial gradients. The row-parallel biases are
  // replicated too, but their gradient is taken from the gathered output
  // gradient of all rows, so it is complete on every rank.
  const bool row_parallel_bias =
      name.find("c_proj.bias") != std::string::npos;
  s.tp_partial_grad = tp_ > 1 && s.split == TpSplit::replicated && !row_parallel_bias;
  // 16-element (64-byte) alignment of every tensor keeps vector loads aligned.
  total_ += (s.numel + 15) / 16 * 16;
  index_[s.name] = specs_.size();
  specs_.push_back(std::move(s));
}

void ParameterLayout::close_unit(const std::string& name, int64_t begin, int unit_multiple) {
  total_ = (total_ + unit_multiple - 1) / unit_multiple * unit_multiple;
  units_.push_back(ParamUnit{name, begin, total_});
}

const ParamSpec* ParameterLayout::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &specs_[it->second];
}

const ParamSpec& ParameterLayout::at(const std::string& name) const {
  const ParamSpec* s = find(name);
  if (!s) fail("unknown parameter '", name, "'");
  return *s;
}

int64_t ParameterLayout::global_numel() const {
  int64_t n = 0;
  for (const auto& s : specs_) {
    int64_t k = 1;
    for (int64_t d : s.global_shape) k *= d;
    n += k - s.pad_rows * (k / s.global_shape[0]);
  }
  return n;
}

int64_t ParameterLayout::global_row(const ParamSpec& s, int64_t local_row) const {
  if (s.split != TpSplit::rows) return local_row;
  // Rows come in `parts` groups (q, k, v); this rank holds slice tp_rank of each.
  const int64_t part_rows = s.shape[0] / s.parts;  // local rows per part
  const int64_t part = local_row / part_rows, within = local_row % part_rows;
  return part * (s.global_shape[0] / s.parts) + tp_rank_ * part_rows + within;
}

int64_t ParameterLayout::global_col(const ParamSpec& s, int64_t local_col) const {
  if (s.split != TpSplit::cols) return local_col;
  return tp_rank_ * s.shape[1] + local_col;
}

void for_each_initial_parameter(const ModelConfig& m, uint64_t seed,
                                const std::function<void(const ParamSpec&, const float*)>& fn) {
  const ParameterLayout layout(m);
  std::mt19937_64 rng(seed);
  // Box-Muller on 53-bit uniforms: std::normal_distribution differs between
  // standard libraries, and a seed must mean the same weights everywhere.
  auto uniform = [&rng]() { return ((rng() >> 11) + 0.5) * 0x1.0p-53; };
  auto normal = [&]() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  };
  const double residual_std = 0.02 / std::sqrt(2.0 * m.n_layer);
  std::vector<float> data;
  for (const auto& s : layout.specs()) {
    data.resize(static_cast<size_t>(s.numel));
    const bool is_ln = s.name.find(".ln_") != std::string::npos || s.name.rfind("ln_f.", 0) == 0;
    if (s.shape.size() == 1) {
      const bool ln_weight = is_ln && s.name.size() >= 7 &&
                             s.name.compare(s.name.size() - 7, 7, ".weight") == 0;
      std::fill(data.begin(), data.end(), ln_weight ? 1.f : 0.f);
    } else {
      const bool residual_proj = s.name.find("c_proj.weight") != std::string::npos;
      const double std = residual_proj ? residual_std : 0.02;
      // Padding rows are zero and draw nothing: the other weights are those
      // of the unpadded model with the same seed.
      const size_t real = static_cast<size_t>(s.real_rows() * s.shape[1]);
      for (size_t i = 0; i < data.size(); ++i)
        data[i] = i < real ? static_cast<float>(normal() * std) : 0.f;
    }
    fn(s, data.data());
  }
}

void init_gpt2_parameters(const ParameterLayout& layout, int n_layer, uint64_t seed,
                          float* params) {
  GT_CHECK(layout.tp() == 1, "init_gpt2_parameters fills a tp = 1 layout");
  // The layout's shapes are the model's: recover the ModelConfig they imply.
  ModelConfig m;
  const ParamSpec& wte_spec = layout.at("wte.weight");
  const auto& wte = wte_spec.shape;
  m.vocab_size = static_cast<int>(wte_spec.real_rows());
  m.n_embd = static_cast<int>(wte[1]);
  m.block_size = static_cast<int>(layout.at("wpe.weight").shape[0]);
  m.n_layer = n_layer;
  m.n_head = 1;  // shapes do not depend on it
  for_each_initial_parameter(m, seed, [&](const ParamSpec& s, const float* data) {
    std::copy(data, data + s.numel, params + layout.at(s.name).offset);
  });
}

}  // namespace gt
