#include "trainer/model/parameter_layout.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/core/error.hpp"
#include "trainer/parallelize/model_placement.hpp"

namespace gt {

ParameterLayout::ParameterLayout(const ModelConfig& m, int tp, int tp_rank, int unit_multiple)
    : ParameterLayout(m, StageSpan{}, tp, tp_rank, unit_multiple) {}

ParameterLayout::ParameterLayout(const ModelConfig& m, StageSpan span, int tp, int tp_rank,
                                 int unit_multiple)
    : ParameterLayout(m, std::vector<StageSpan>{span}, tp, tp_rank, unit_multiple) {}

ParameterLayout::ParameterLayout(const ModelConfig& m, const std::vector<StageSpan>& chunks, int tp,
                                 int tp_rank, int unit_multiple, ExpertShard experts,
                                 LayoutPart part)
    : tp_(tp), tp_rank_(tp_rank), n_experts_(m.moe() ? m.n_experts : 0), experts_(experts),
      part_(part) {
  GT_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp, "tp rank ", tp_rank, " of ", tp);
  GT_CHECK(unit_multiple >= 1, "unit_multiple ", unit_multiple);
  GT_CHECK(experts.ep >= 1 && experts.rank >= 0 && experts.rank < experts.ep, "ep rank ",
           experts.rank, " of ", experts.ep);
  if (experts.ep > 1 && (!m.moe() || m.n_experts % experts.ep != 0))
    fail("parallel.ep=", experts.ep, " must divide model.n_experts=", m.n_experts,
         m.moe() ? "" : " (a model without experts)");
  GT_CHECK(experts.ep > 1 || part == LayoutPart::all,
           "a layout part other than the whole at parallel.ep=1");
  for (const StageSpan& c : chunks)
    chunks_.push_back({c.first_layer, c.end_layer < 0 ? m.n_layer : c.end_layer});
  check_chunks(m);
  const bool first = chunks_.front().first_layer == 0;
  const bool last = chunks_.back().end_layer == m.n_layer;
  whole_ = chunks_.size() == 1 && first && last;
  embed_two_chunks_ = chunks_.size() > 1 && first && last && m.tied_embeddings();
  if (tp_split_problem(m, tp)) {
    const std::string split =
        m.arch == ModelArch::gpt2
            ? detail::concat("model.n_embd=", m.n_embd)
            : m.moe() ? detail::concat("model.n_kv_head=", m.kv_heads())
                      : detail::concat("model.n_kv_head=", m.kv_heads(), ", the MLP width ",
                                       m.ffn_width());
    fail("parallel.tp=", tp, " must divide model.n_head=", m.n_head, ", ", split);
  }
  // The model (its LM head, its loss) and this layout must agree on the
  // padded rows: both read them from m, padded for this tp (padded_for_tp).
  GT_CHECK(m.padded_vocab_size() % tp == 0, "the vocabulary is padded for tp=", m.vocab_pad_tp,
           " (", m.padded_vocab_size(), " rows), not for tp=", tp);
  // The placement lists "embed", the blocks in order, then "head".
  const std::vector<PlacedUnit> placed = model_placement(m);
  GT_CHECK(placed.size() == static_cast<size_t>(m.n_layer) + 2, "placement of ", placed.size(),
           " units for ", m.n_layer, " blocks");
  const PlacedUnit &embed = placed.front(), &head = placed.back();
  block_units_.assign(static_cast<size_t>(m.n_layer), -1);
  expert_units_.assign(static_cast<size_t>(m.n_layer), -1);
  // Block l's local experts as a unit of their own (ep > 1).
  auto add_expert_unit = [&](int l) {
    PlacedUnit u{"layers." + std::to_string(l) + ".block_sparse_moe.experts", {}};
    for (const PlacedParameter& p : placed[static_cast<size_t>(1 + l)].params)
      if (stores(p, true)) u.params.push_back(p);
    return add_unit(u, unit_multiple, false, true);
  };
  if (part == LayoutPart::experts) {
    // The expert units alone, as this part's blocks.
    first_block_unit_ = 0;
    for (const StageSpan& c : chunks_)
      for (int l = c.first_layer; l < c.end_layer; ++l)
        block_units_[static_cast<size_t>(l)] = add_expert_unit(l);
    embed_two_chunks_ = false;
  } else {
    if (first) embed_unit_ = add_unit(embed, unit_multiple, false);
    first_block_unit_ = static_cast<int>(units_.size());
    for (const StageSpan& c : chunks_)
      for (int l = c.first_layer; l < c.end_layer; ++l)
        block_units_[static_cast<size_t>(l)] =
            add_unit(placed[static_cast<size_t>(1 + l)], unit_multiple, false);
    // The mirror sits between the blocks and the head: the last stage's
    // backward finishes the head, then the tied LM head's wte, then the blocks.
    if (last && !first && m.tied_embeddings()) embed_unit_ = add_unit(embed, unit_multiple, true);
    if (last) head_unit_ = add_unit(head, unit_multiple, false);
    // The whole layout's expert units come after every other, so the dense
    // part numbers its units as the whole does.
    if (experts.ep > 1 && part == LayoutPart::all)
      for (const StageSpan& c : chunks_)
        for (int l = c.first_layer; l < c.end_layer; ++l)
          expert_units_[static_cast<size_t>(l)] = add_expert_unit(l);
  }
  for (const PlacedUnit& unit : placed)
    for (const PlacedParameter& p : unit.params)
      if (!find(p.name)) elsewhere_.insert(p.name);
}

// Each chunk a non-empty span of the blocks, after the one before it. The
// whole model as one chunk is always valid (a model of no blocks included).
void ParameterLayout::check_chunks(const ModelConfig& m) const {
  if (chunks_.empty()) fail("a parameter layout of no pipeline chunks");
  const bool whole =
      chunks_.size() == 1 && chunks_[0].first_layer == 0 && chunks_[0].end_layer == m.n_layer;
  if (whole) return;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    const StageSpan& c = chunks_[k];
    const std::string which = chunks_.size() == 1
                                  ? std::string("pipeline stage")
                                  : detail::concat("pipeline chunk ", k, " of ", chunks_.size());
    if (c.first_layer < 0 || c.end_layer > m.n_layer || c.first_layer >= c.end_layer)
      fail(which, " of blocks [", c.first_layer, ", ", c.end_layer,
           ") is not a non-empty span of the model's ", m.n_layer, " blocks");
    if (k > 0 && c.first_layer < chunks_[k - 1].end_layer)
      fail(which, " of blocks [", c.first_layer, ", ", c.end_layer, ") does not come after chunk ",
           k - 1, " of blocks [", chunks_[k - 1].first_layer, ", ", chunks_[k - 1].end_layer,
           "): chunks are given in increasing block order, apart");
  }
}

const StageSpan& ParameterLayout::one_chunk() const {
  GT_CHECK(chunks_.size() == 1, "first_layer()/end_layer() of a layout of ", chunks_.size(),
           " pipeline chunks: its blocks are no one span (use chunks())");
  return chunks_.front();
}

bool ParameterLayout::stores(const PlacedParameter& p, bool expert_unit) const {
  if (experts_.ep == 1) return !expert_unit;  // every expert in its block's unit
  if (p.expert < 0) return !expert_unit;
  // Rank r holds experts [r * E/ep, (r + 1) * E/ep).
  return expert_unit && p.expert / (n_experts_ / experts_.ep) == experts_.rank;
}

int ParameterLayout::add_unit(const PlacedUnit& unit, int unit_multiple, bool mirror,
                              bool experts) {
  const int64_t begin = total_;
  for (const PlacedParameter& p : unit.params)
    if (experts || stores(p, false)) add(p, mirror);
  total_ = (total_ + unit_multiple - 1) / unit_multiple * unit_multiple;
  units_.push_back(ParamUnit{unit.name, begin, total_, mirror, experts});
  return static_cast<int>(units_.size()) - 1;
}

void ParameterLayout::add(const PlacedParameter& p, bool mirror) {
  ParamSpec s;
  s.name = p.name;
  s.mirror = mirror;
  s.global_shape = p.shape;
  s.split = tp_ > 1 ? p.placement.split() : TpSplit::replicated;
  s.role = p.placement.role;
  std::vector<int64_t> shape = p.shape;
  if (s.split == TpSplit::rows) shape[0] /= tp_;
  if (s.split == TpSplit::cols) shape[1] /= tp_;
  s.numel = 1;
  for (int64_t d : shape) s.numel *= d;
  s.shape = std::move(shape);
  s.offset = total_;
  s.decay = p.placement.decay == Decay::yes;
  s.hf_transposed = p.placement.hf == HfLayout::transposed;
  s.layer = p.layer;
  s.unit = static_cast<int>(units_.size());
  s.parts = s.split == TpSplit::rows ? p.placement.parts : 1;
  s.tp_partial_grad = tp_ > 1 && p.placement.tp_partial_grad();
  s.init = p.placement.init;
  s.pad_rows = p.pad_rows;
  // 16-element (64-byte) alignment of every tensor keeps vector loads aligned.
  total_ += (s.numel + 15) / 16 * 16;
  index_[s.name] = specs_.size();
  specs_.push_back(std::move(s));
}

void ParameterLayout::check_built_for(int size, int rank) const {
  GT_CHECK(tp_ == size && tp_rank_ == rank, "layout for tp rank ", tp_rank_, " of ", tp_,
           " used on tp rank ", rank, " of ", size);
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
    if (s.mirror) continue;  // the first stage's tensor
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
    if (s.init == Init::zeros || s.init == Init::ones) {
      std::fill(data.begin(), data.end(), s.init == Init::ones ? 1.f : 0.f);
    } else {
      const double std = s.init == Init::residual_normal ? residual_std : 0.02;
      // Padding rows are zero and draw nothing: the other weights are those
      // of the unpadded model with the same seed.
      const size_t real = static_cast<size_t>(s.real_rows() * (s.numel / s.shape[0]));
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
