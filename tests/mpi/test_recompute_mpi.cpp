// Activation recomputation under every layout of the running world size
// (tensor parallelism with its collective matmuls, FSDP stage 3 with its
// gathers and reduce-scatters, data parallelism): mlp and block train bit for
// bit like none on the same layout. The recomputed c_fc (and, for block,
// c_attn and attn.c_proj) repeat their tp collectives inside the block's
// backward, after ShardedParameters gathered the block in before_backward.
#include <algorithm>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt::test {
namespace {

StepTrace train(const DeviceMesh& mesh, Ops& ops, Recompute recompute, bool overlap) {
  StepOptions o;  // tests/layouts/layout_matrix.py's model, smaller
  o.model.n_layer = 3;
  o.model.n_head = 4;
  o.model.n_embd = 32;
  o.model.vocab_size = 128;
  o.model.block_size = 8;
  o.mesh = &mesh;
  o.tp_overlap = overlap;
  o.recompute = recompute;
  o.steps = 2;
  o.init_seed = 3;
  return train_steps(ops, o);  // B = 2, T = 8: 16 rows split over tp = 1, 2, 4
}

TEST(RecomputeMpi, MlpAndBlockTrainBitForBitLikeNoneOnEveryLayout) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  for (const ParallelDims& d : layouts_for(world->size())) {
    if (4 % d.tp != 0) continue;  // the model's 4 heads: tp = 3 at 3 ranks is refused
    const DeviceMesh mesh(d, *world);
    for (bool overlap : {true, false}) {
      if (!overlap && d.tp == 1) continue;
      const StepTrace want = train(mesh, *ops, Recompute::none, overlap);
      for (Recompute mode : {Recompute::mlp, Recompute::block}) {
        const StepTrace got = train(mesh, *ops, mode, overlap);
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
