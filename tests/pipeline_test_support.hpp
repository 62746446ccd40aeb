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

// The whole model's loss and gradients on one micro-batch, from the seed's
// initial values: what a split model must reproduce.
struct WholeModelStep {
  ParameterLayout layout;
  LocalParameters store;
  float loss = 0.f;
  WholeModelStep(const ModelConfig& m, Ops& ops, int B, int T, const int32_t* tokens,
                 const int32_t* targets, float scale, uint64_t seed)
      : layout(m), store(layout, ops) {
    fill_initial(m, layout, store, ops, seed);
    const auto model = make_model(m, ops, B, T, layout, store, TensorParallelGroup{},
                                  Recompute::none, ComputeDType::fp32);
    loss = model->forward(tokens, targets, B, T, scale);
    model->backward();
  }
};

}  // namespace gt::test
