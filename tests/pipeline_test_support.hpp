// What the pipeline-stage tests share: a store filled with the seed's
// initial values (a stage's own tensors), every initial tensor fed to a
// ShardedParameters (other stages' skipped), and the pieces a store saves
// keyed by their box, to compare a split model's with the whole model's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/ops.hpp"
#include "test_util.hpp"
#include "trainer/model/make_model.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt::test {

// The seed's initial value of every tensor `layout` holds into `store`; the
// gradients zeroed.
inline void fill_initial(const ModelConfig& m, const ParameterLayout& layout,
                         LocalParameters& store, Ops& ops, uint64_t seed) {
  for_each_initial_parameter(m, seed, [&](const ParamSpec& s, const float* data) {
    if (const ParamSpec* mine = layout.find(s.name))
      std::copy(data, data + s.numel, store.params() + mine->offset);
  });
  ops.zero(make_view(store.grads(), DType::f32, Device::cpu, {layout.total()}));
}

// Every initial tensor of the model fed to `params`: a stage keeps its own.
inline void load_every_initial(const ModelConfig& m, ShardedParameters& params, uint64_t seed) {
  for_each_initial_parameter(
      m, seed, [&](const ParamSpec& s, const float* data) { params.load_global(s.name, data); });
}

// name -> (box -> values) of the pieces a store saves.
using SavedPieces =
    std::map<std::string,
             std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::vector<float>>>;
inline void collect_pieces(const std::vector<TensorPiece>& pieces, SavedPieces& out,
                           const std::string& at) {
  for (const TensorPiece& p : pieces) {
    const auto key = std::make_tuple(p.box.row0, p.box.rows, p.box.col0, p.box.cols);
    EXPECT_EQ(out[p.name].count(key), 0u) << at << ": " << p.name << " saved twice";
    out[p.name][key] = std::vector<float>(p.data, p.data + p.box.rows * p.box.cols);
  }
}

// The model families the pipeline tests run: GPT-2 (tied), Llama untied
// and tied (model.tie_embeddings).
struct FamilyCase {
  const char* name;
  ModelArch arch;
  bool tie;  // Llama's model.tie_embeddings (GPT-2 is always tied)
};
inline auto pipeline_families() {
  return ::testing::Values(FamilyCase{"gpt2", ModelArch::gpt2, false},
                           FamilyCase{"llama", ModelArch::llama, false},
                           FamilyCase{"llama_tied", ModelArch::llama, true});
}
inline std::string family_name(const ::testing::TestParamInfo<FamilyCase>& info) {
  return info.param.name;
}

// A ShardedParameters on one process (no data axes) fed every initial
// tensor of the model (a stage keeps its own).
struct LoadedParameters {
  ShardedParameters params;
  LoadedParameters(const ModelConfig& m, const ParameterLayout& layout, const DeviceMesh& mesh,
                   Ops& ops)
      : params(layout, mesh, FsdpStage::optimizer, 25.0, ops) {
    load_every_initial(m, params, 5);
  }
};

// One micro-batch of random tokens, the same for a split model and the whole one.
struct MicroBatch {
  static constexpr int B = 2, T = 8;
  float scale = 1.f / (B * T);
  std::vector<int32_t> tokens, targets;
  explicit MicroBatch(const ModelConfig& m)
      : tokens(random_ints(B * T, 1, 0, m.vocab_size)),
        targets(random_ints(B * T, 2, 0, m.vocab_size)) {}
};

// The whole model's loss and gradients on `mb`, from the seed's initial
// values (fill_initial, seed 9): what a split model must reproduce.
struct WholeModelStep {
  ParameterLayout layout;
  LocalParameters store;
  float loss = 0.f;
  WholeModelStep(const ModelConfig& m, Ops& ops, const MicroBatch& mb)
      : layout(m), store(layout, ops) {
    fill_initial(m, layout, store, ops, 9);
    const auto model = make_model(m, ops, mb.B, mb.T, layout, store, TensorParallelGroup{},
                                  Recompute::none, ComputeDType::fp32);
    loss = model->forward(mb.tokens.data(), mb.targets.data(), mb.B, mb.T, mb.scale);
    model->backward();
  }
};

// A part of a split model: a layout of some stages' units and its store.
struct SplitPart {
  const ParameterLayout* layout;
  LocalParameters* store;
};

// A tied model's mirror gradient (the last part's LM-head share of wte's)
// into the first part's embed unit, before the first stage's backward
// accumulates onto it (parameter gradients add): the whole model's order of
// additions, so the sum comes out bit for bit.
inline void fold_mirror_grads(const SplitPart& first, const SplitPart& last) {
  const ParamUnit& mirror = last.layout->units()[static_cast<size_t>(last.layout->embed_unit())];
  const ParamUnit& embed = first.layout->units()[static_cast<size_t>(first.layout->embed_unit())];
  ASSERT_TRUE(mirror.mirror && !embed.mirror);
  ASSERT_EQ(mirror.size(), embed.size());
  std::copy(last.store->grads() + mirror.begin, last.store->grads() + mirror.end,
            first.store->grads() + embed.begin);
}

// Every parameter of the whole model held by exactly one part (mirrors
// aside), with the whole model's gradient bit for bit.
inline void expect_split_grads(WholeModelStep& whole, const std::vector<SplitPart>& parts) {
  for (const ParamSpec& w : whole.layout.specs()) {
    const float* want = whole.store.grads() + w.offset;
    int holders = 0;
    for (const SplitPart& part : parts) {
      const ParamSpec* mine = part.layout->find(w.name);
      if (!mine || mine->mirror) continue;
      ++holders;
      const float* got = part.store->grads() + mine->offset;
      EXPECT_EQ(std::vector<float>(got, got + w.numel), std::vector<float>(want, want + w.numel))
          << w.name;
    }
    EXPECT_EQ(holders, 1) << w.name;
  }
}

}  // namespace gt::test
