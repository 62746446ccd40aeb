// Activation recomputation under every layout of the running world size
// (tensor parallelism with its collective matmuls, FSDP stage 3 with its
// gathers and reduce-scatters, data parallelism): mlp and block train bit for
// bit like none on the same layout. The recomputed c_fc (and, for block,
// c_attn and attn.c_proj) repeat their tp collectives inside the block's
// backward, after ShardedParameters gathered the block in before_backward.
#include <algorithm>

#include "kernels/cpu/cpu_ops.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt::test {
namespace {

struct Trace {
  std::vector<float> losses;
  std::vector<std::vector<float>> pieces;  // this rank's final parameters
};

Trace train(const DeviceMesh& mesh, const ParallelDims& d, Ops& ops, Recompute recompute,
            bool overlap) {
  ModelConfig m;  // tests/layouts/layout_matrix.py's model, smaller
  m.n_layer = 3;
  m.n_head = 4;
  m.n_embd = 32;
  m.vocab_size = 128;
  m.block_size = 8;
  const ParameterLayout layout(m, d.tp, mesh.coord().tp, d.fsdp);
  ShardedParameters params(layout, mesh, 3, 25.0, ops);
  for_each_initial_parameter(m, 3, [&](const ParamSpec& s, const float* data) {
    params.load_global(s.name, data);
  });
  const int B = 2, T = 8;  // 16 rows split over tp = 1, 2, 4
  GPT model(m, ops, B, T, layout, params, TensorParallel{&mesh.tp(), overlap}, recompute);
  TrainConfig tc;
  Trace t;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  const int data_rank = mesh.coord().dp * d.fsdp + mesh.coord().fsdp;
  for (int step = 0; step < 2; ++step) {
    params.begin_step();
    for (int micro = 0; micro < 2; ++micro) {
      for (int i = 0; i < B * T; ++i) {
        tokens[i] = (i * 7 + step * 3 + micro + 5 * data_rank) % m.vocab_size;
        targets[i] = (tokens[i] * 5 + 1) % m.vocab_size;
      }
      params.begin_micro_batch(micro == 1);
      t.losses.push_back(model.forward(tokens.data(), targets.data(), B, T, 0.5f / (B * T)));
      model.backward();
    }
    params.finish_gradients();
    params.adamw_step(tc, 1e-2, 1.f, step + 1);
  }
  for (const auto& p : params.pieces_to_save())
    t.pieces.emplace_back(p.data, p.data + p.box.rows * p.box.cols);
  return t;
}

TEST(RecomputeMpi, MlpAndBlockTrainBitForBitLikeNoneOnEveryLayout) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  for (const ParallelDims& d : layouts_for(world->size())) {
    const DeviceMesh mesh(d, *world);
    for (bool overlap : {true, false}) {
      if (!overlap && d.tp == 1) continue;
      const Trace want = train(mesh, d, *ops, Recompute::none, overlap);
      for (Recompute mode : {Recompute::mlp, Recompute::block}) {
        const Trace got = train(mesh, d, *ops, mode, overlap);
        const std::string what =
            d.str() + " overlap " + std::to_string(overlap) + " " + to_string(mode);
        EXPECT_EQ(got.losses, want.losses) << what;
        EXPECT_EQ(got.pieces.size(), want.pieces.size()) << what;  // no ASSERT: stay collective
        for (size_t i = 0; i < std::min(got.pieces.size(), want.pieces.size()); ++i)
          EXPECT_TRUE(exactly(got.pieces[i], want.pieces[i])) << what << " piece " << i;
      }
    }
  }
}

}  // namespace
}  // namespace gt::test
