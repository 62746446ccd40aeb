#include "trainer/sharding/fp8_gather_plan.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

std::vector<std::vector<Fp8GatheredWeight>> fp8_gathered_weights(const ParameterLayout& layout,
                                                                 int64_t min_dim) {
  std::vector<std::vector<Fp8GatheredWeight>> out(layout.units().size());
  const std::vector<ParamSpec>& specs = layout.specs();
  auto matrix = [](const ParamSpec& s, TpRole role) {
    return s.layer >= 0 && !s.mirror && s.shape.size() == 2 && s.role == role;
  };
  int index = 0;
  auto add = [&](const ParamSpec& first, int64_t end, int64_t out_rows, int64_t in_cols) {
    if (std::min(out_rows, in_cols) < min_dim) return;  // Fp8Linear::applies
    const int64_t unit_begin = layout.units()[static_cast<size_t>(first.unit)].begin;
    out[static_cast<size_t>(first.unit)].push_back(
        {first.offset - unit_begin, end - first.offset, index++});
  };
  for (size_t i = 0; i < specs.size();) {
    const ParamSpec& s = specs[i];
    if (matrix(s, TpRole::row)) {
      add(s, s.offset + s.numel, s.global_shape[0], s.global_shape[1]);
      ++i;
    } else if (matrix(s, TpRole::column)) {
      // A run of adjacent column-parallel weights of one block: one fused GEMM.
      int64_t rows = s.global_shape[0], end = s.offset + s.numel;
      size_t j = i + 1;
      while (j < specs.size() && matrix(specs[j], TpRole::column) && specs[j].unit == s.unit &&
             specs[j].offset == end && specs[j].shape[1] == s.shape[1]) {
        rows += specs[j].global_shape[0];
        end += specs[j].numel;
        ++j;
      }
      add(s, end, rows, s.global_shape[1]);
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

Fp8GatherPlan plan_fp8_gather(const ParameterLayout& layout, int shards, int64_t min_dim) {
  Fp8GatherPlan p;
  std::vector<std::vector<Fp8GatheredWeight>> weights = fp8_gathered_weights(layout, min_dim);
  p.units.resize(weights.size());
  for (size_t u = 0; u < weights.size(); ++u) {
    Fp8UnitGather& g = p.units[u];
    g.weights = std::move(weights[u]);
    if (g.weights.empty()) continue;
    const ParamUnit& unit = layout.units()[u];
    const int64_t S = unit.size() / shards;
    GT_CHECK(unit.size() % shards == 0 && S % 4 == 0, "fp8 all-gather: unit ", unit.name,
             "'s shard of ", S, " elements is not a multiple of 4 (units must be padded to 4 x "
             "the shard degree)");
    int64_t at = 0;
    for (const Fp8GatheredWeight& w : g.weights) {
      if (w.begin > at) g.side_runs.push_back({at, w.begin});
      at = w.begin + w.size;
      p.weights = std::max(p.weights, w.index + 1);
      for (int r = 0; r < shards; ++r) {
        const auto [lo, hi] = within_shard(S, r, w.begin, w.begin + w.size);
        g.widest = std::max(g.widest, hi - lo);
      }
    }
    if (at < unit.size()) g.side_runs.push_back({at, unit.size()});
    for (int r = 0; r < shards; ++r) {
      int64_t n = 0;
      for (const auto& [b, e] : g.side_runs) {
        const auto [lo, hi] = within_shard(S, r, b, e);
        n += hi - lo;
      }
      g.side_floats = std::max(g.side_floats, n);
    }
    p.widest = std::max(p.widest, g.widest);
    const auto slot = static_cast<size_t>(unit_slot(layout, static_cast<int>(u)));
    p.slot_side[slot] = std::max(p.slot_side[slot], g.side_floats);
    p.slot_codes[slot] = true;
  }
  return p;
}

}  // namespace gt
