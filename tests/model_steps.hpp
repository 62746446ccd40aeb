// A few optimizer steps of a tiny GPT-2 on one rank through the real
// ShardedParameters (accumulation 2, clipping, AdamW), on whatever backend is
// given, recording what two backends must agree on: losses, grad norms and
// the final checkpoint pieces (parameters and AdamW moments, on the host).
// Used by the OffHostOps tests (CPU) and the CUDA whole-model tests.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/mesh.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt::test {

inline ModelConfig tiny_gpt() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.vocab_size = 64;
  m.block_size = 8;
  return m;
}

struct StepTrace {
  std::vector<float> losses;
  std::vector<double> norms;
  std::vector<std::vector<float>> pieces;
};

inline std::vector<std::vector<float>> piece_contents(const std::vector<TensorPiece>& pieces) {
  std::vector<std::vector<float>> out;
  for (const auto& p : pieces) out.emplace_back(p.data, p.data + p.box.rows * p.box.cols);
  return out;
}

inline StepTrace train_steps(Ops& ops, int steps, const ModelConfig& m = tiny_gpt(), int B = 2,
                             int T = 8, ComputeDType dtype = ComputeDType::fp32) {
  const DeviceMesh mesh = DeviceMesh::in_process();
  const ParameterLayout layout(m, 1, 0, 1);
  ShardedParameters params(layout, mesh, 3, 25.0, ops);
  for_each_initial_parameter(m, 7, [&](const ParamSpec& s, const float* data) {
    params.load_global(s.name, data);
  });
  GPT model(m, ops, B, T, layout, params, TensorParallel{}, Recompute::none, dtype);
  TrainConfig tc;
  StepTrace t;
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (int step = 0; step < steps; ++step) {
    params.begin_step();
    for (int micro = 0; micro < 2; ++micro) {
      for (int i = 0; i < B * T; ++i) {
        tokens[i] = (i * 7 + step * 3 + micro) % m.vocab_size;
        targets[i] = (tokens[i] * 5 + 1) % m.vocab_size;
      }
      params.begin_micro_batch(micro == 1);
      t.losses.push_back(model.forward(tokens.data(), targets.data(), B, T, 0.5f / (B * T)));
      model.backward();
    }
    params.finish_gradients();
    t.norms.push_back(params.grad_norm());
    params.adamw_step(tc, 1e-2, 1.f, step + 1);
  }
  t.pieces = piece_contents(params.pieces_to_save());
  return t;
}

}  // namespace gt::test
