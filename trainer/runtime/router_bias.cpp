#include "trainer/runtime/router_bias.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

RouterBias::RouterBias(Ops& ops, const ModelConfig& cfg, std::vector<int> layers)
    : ops_(ops),
      L_(cfg.n_layer),
      E_(cfg.n_experts),
      rate_(static_cast<float>(cfg.router_bias_update_rate)),
      layers_(std::move(layers)),
      host_(static_cast<size_t>(L_) * static_cast<size_t>(E_), 0.f),
      table_(allocate_floats(ops, int64_t(L_) * E_)),
      counts_(allocate_floats(ops, int64_t(L_) * E_)),
      counts_host_(host_.size(), 0.f) {
  GT_CHECK(cfg.moe() && E_ > 0, "RouterBias on model.arch=", to_string(cfg.arch));
  GT_CHECK(std::is_sorted(layers_.begin(), layers_.end()), "RouterBias: layers out of order");
  for (int l : layers_) GT_CHECK(l >= 0 && l < L_, "RouterBias: block ", l, " of ", L_);
  ops_.upload(table(), host_.data());
}

TensorView RouterBias::table() const { return table_.f32_view({L_, E_}); }

std::string RouterBias::tensor_name(int layer) {
  return "router_bias.model.layers." + std::to_string(layer) + ".block_sparse_moe.gate";
}

void RouterBias::update(const MoeStepStats& stats, Communicator& data) {
  GT_CHECK(stats.experts == E_ || stats.experts == 0, "RouterBias: stats of ", stats.experts,
           " experts for ", E_);
  GT_CHECK(stats.counts.size() == stats.layers.size() * static_cast<size_t>(E_),
           "RouterBias: ", stats.counts.size(), " counts for ", stats.layers.size(), " blocks");
  // Dense (L, E) rows: this rank's blocks filled, the rest zero (the data
  // ranks hold the same blocks, so the sum is each block's global count).
  std::fill(counts_host_.begin(), counts_host_.end(), 0.f);
  for (size_t i = 0; i < stats.layers.size(); ++i) {
    const int l = stats.layers[i];
    GT_CHECK(std::binary_search(layers_.begin(), layers_.end(), l), "RouterBias: counts of block ",
             l, ", which this rank does not run");
    std::copy_n(stats.counts.begin() + static_cast<long>(i * E_), E_,
                counts_host_.begin() + static_cast<long>(l) * E_);
  }
  const TensorView counts = counts_.f32_view({int64_t(L_) * E_});
  ops_.upload(counts, counts_host_.data());
  if (data.size() > 1) data.all_reduce_sum(counts.f32(), counts.numel()).wait();
  ops_.download(counts_host_.data(), counts);
  for (int l : layers_) {
    const float* c = counts_host_.data() + static_cast<size_t>(l) * E_;
    float* b = host_.data() + static_cast<size_t>(l) * E_;
    double sum = 0.0;
    for (int e = 0; e < E_; ++e) sum += c[e];
    const double mean = sum / E_;
    for (int e = 0; e < E_; ++e) {
      const double err = mean - c[e];  // > 0: under-loaded, raise its bias
      b[e] += err > 0 ? rate_ : (err < 0 ? -rate_ : 0.f);
    }
  }
  ops_.upload(table(), host_.data());
}

std::vector<TensorPiece> RouterBias::pieces() {
  std::vector<TensorPiece> out;
  for (int l : layers_) {
    TensorPiece p;
    p.name = tensor_name(l);
    p.global_shape = {E_};
    p.box = whole_box(p.global_shape);
    p.data = host_.data() + static_cast<size_t>(l) * E_;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<TensorPiece> RouterBias::pieces_to_save(const MeshCoord& coord) {
  // One copy of each block's bias: the data, tp and cp replicas hold equal ones.
  if (coord.dp != 0 || coord.fsdp != 0 || coord.tp != 0 || coord.cp != 0) return {};
  return pieces();
}

std::vector<TensorPiece> RouterBias::pieces_to_load() { return pieces(); }

void RouterBias::finish_load() { ops_.upload(table(), host_.data()); }

}  // namespace gt
