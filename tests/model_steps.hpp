// A few optimizer steps of a small model (GPT-2, or Llama: tiny_llama()) through the real
// ShardedParameters (accumulation 2, clipping, AdamW), on whatever backend and layout is given,
// recording what two runs that should agree must agree on: losses, grad norms
// and the final checkpoint pieces (parameters and AdamW moments, on the host).
// Used by the OffHostOps, mixed-precision and recompute tests (CPU and MPI)
// and the CUDA whole-model tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/mesh.hpp"
#include "trainer/model/make_model.hpp"
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

// A Llama small enough for finite differences and quick layouts: grouped-query
// attention (4 query heads over 2 key/value heads, hs 4), an untied head, an
// MLP width tp = 2 splits, RMSNorm and RoPE at their HF defaults.
inline ModelConfig tiny_llama() {
  ModelConfig m;
  m.arch = ModelArch::llama;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 16;
  m.ffn_hidden = 24;
  m.vocab_size = 64;
  m.block_size = 8;
  m.rope_theta = 10000.0;
  return m;
}

struct StepOptions {
  ModelConfig model = tiny_gpt();
  const DeviceMesh* mesh = nullptr;  // null: one rank, in-process communicators
  FsdpStage fsdp_stage = FsdpStage::parameters;
  double bucket_mb = 25.0;
  bool tp_overlap = true;
  Recompute recompute = Recompute::none;
  ComputeDType dtype = ComputeDType::fp32;
  // bf16 runs: ask the store for the parameters' bf16 copy, as the trainer
  // does (false: the model casts each weight per GEMM instead).
  bool bf16_params = true;
  int steps = 3;
  int B = 2, T = 8;
  int second_micro_T = 0;  // > 0: the second micro-batch is this short (smaller views)
  uint64_t init_seed = 7;
  // Context parallelism (the mesh's cp > 1): each rank holds its chunks of
  // every sequence of T tokens.
  CpComm cp_mode = CpComm::allgather;
  bool cp_load_balance = true;
};

struct StepTrace {
  std::vector<float> losses;
  std::vector<double> norms;
  std::vector<std::vector<float>> pieces;
  std::vector<std::string> piece_names;  // "param.h.0.attn.c_attn.bias", "adam_m.wte.weight", ...
  std::vector<TensorBox> piece_boxes;    // where each piece lies in its global tensor
  // The parameter values of the vocabulary's padding rows this rank holds
  // (checkpoint pieces leave them out); with fsdp = 1 only.
  std::vector<float> vocab_padding;
};

inline std::vector<std::vector<float>> piece_contents(const std::vector<TensorPiece>& pieces) {
  std::vector<std::vector<float>> out;
  for (const auto& p : pieces) out.emplace_back(p.data, p.data + p.box.rows * p.box.cols);
  return out;
}

inline StepTrace train_steps(Ops& ops, const StepOptions& o) {
  const DeviceMesh solo = DeviceMesh::in_process();
  const DeviceMesh& mesh = o.mesh ? *o.mesh : solo;
  const ModelConfig& m = o.model;
  const ParallelDims& d = mesh.dims();
  const ParameterLayout layout(m, d.tp, mesh.coord().tp, shard_degree(d));
  ShardedParameters params(layout, mesh, o.fsdp_stage, o.bucket_mb, ops,
                           o.bf16_params && o.dtype == ComputeDType::bf16);
  for_each_initial_parameter(m, o.init_seed, [&](const ParamSpec& s, const float* data) {
    params.load_global(s.name, data);
  });
  const int B = o.B;
  const SequenceChunks chunks(o.T, d.cp, o.cp_load_balance);
  GT_CHECK(d.cp == 1 || o.second_micro_T == 0, "train_steps: a short micro-batch under cp");
  const auto built =
      make_model(m, ops, B, chunks.local_len(), layout, params,
                 TensorParallelGroup{&mesh.tp(), o.tp_overlap}, o.recompute, o.dtype, std::nullopt,
                 ContextParallelGroup{&mesh.cp(), o.cp_mode, o.cp_load_balance});
  CausalLM& model = *built;
  TrainConfig tc;
  StepTrace t;
  std::vector<int32_t> tokens(static_cast<size_t>(B * o.T)), targets(tokens.size());
  const int shard = mesh.data().rank();  // each data rank its own rows
  const std::vector<int32_t> mine = chunks.positions(mesh.coord().cp);  // each cp rank its chunks
  for (int step = 0; step < o.steps; ++step) {
    params.begin_step();
    for (int micro = 0; micro < 2; ++micro) {
      const int T = micro == 1 && o.second_micro_T > 0 ? o.second_micro_T : o.T;
      const int Tl = d.cp > 1 ? chunks.local_len() : T;
      for (int b = 0; b < B; ++b)
        for (int j = 0; j < Tl; ++j) {
          const int i = b * T + (d.cp > 1 ? mine[static_cast<size_t>(j)] : j);
          tokens[b * Tl + j] = (i * 7 + step * 3 + micro + 11 * shard) % m.vocab_size;
          targets[b * Tl + j] = (tokens[b * Tl + j] * 5 + 1) % m.vocab_size;
        }
      params.begin_micro_batch(micro == 1);
      t.losses.push_back(
          model.forward(tokens.data(), targets.data(), B, Tl, 0.5f / (B * T)));
      model.backward();
    }
    params.finish_gradients();
    t.norms.push_back(params.grad_norm());
    params.adamw_step(tc, 1e-2, 1.f, step + 1);
  }
  if (shard_degree(d) == 1 && o.dtype == ComputeDType::fp32 && ops.device() == Device::cpu)
    for (const ParamSpec& s : layout.specs()) {
      if (s.pad_rows == 0) continue;
      const int64_t local_rows = s.shape[0], cols = s.numel / local_rows;
      const int64_t first = s.split == TpSplit::rows ? mesh.coord().tp * local_rows : 0;
      const float* p = params.unit_params(s.unit) + (s.offset - layout.units()[s.unit].begin);
      for (int64_t r = std::max<int64_t>(first, s.real_rows()); r < first + local_rows; ++r)
        t.vocab_padding.insert(t.vocab_padding.end(), p + (r - first) * cols,
                               p + (r - first + 1) * cols);
    }
  const std::vector<TensorPiece> saved = params.pieces_to_save();
  t.pieces = piece_contents(saved);
  for (const TensorPiece& p : saved) {
    t.piece_names.push_back(p.name);
    t.piece_boxes.push_back(p.box);
  }
  return t;
}

// One rank, `steps` steps of model `m` at (B, T) in `dtype`.
inline StepTrace train_steps(Ops& ops, int steps, const ModelConfig& m = tiny_gpt(), int B = 2,
                             int T = 8, ComputeDType dtype = ComputeDType::fp32) {
  StepOptions o;
  o.model = m;
  o.steps = steps;
  o.B = B;
  o.T = T;
  o.dtype = dtype;
  return train_steps(ops, o);
}

}  // namespace gt::test
