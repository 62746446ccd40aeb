// ShardedParameters on one pipeline stage's layout (ParameterLayout's
// StageSpan), or on a pipeline rank's layout of two chunks, dp x fsdp x tp
// within the stage, on every layout of the running world: fed every initial
// tensor, each rank's stages save together exactly the pieces the whole
// model's state saves on that rank (a stage's units are the whole model's,
// so each fsdp shard covers the same elements), never the mirror of wte;
// fsdp stage 3 on a stage is refused by name, and so are the data axes on a
// rank holding both ends of a tied model in two chunks.
#include <map>
#include <tuple>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt::test {
namespace {

using Saved =
    std::map<std::tuple<std::string, int64_t, int64_t, int64_t, int64_t>, std::vector<float>>;

void collect(const std::vector<TensorPiece>& pieces, Saved& out, const std::string& at) {
  for (const TensorPiece& p : pieces) {
    const auto key = std::make_tuple(p.name, p.box.row0, p.box.rows, p.box.col0, p.box.cols);
    EXPECT_EQ(out.count(key), 0u) << at << ": " << p.name << " saved twice";
    out[key] = std::vector<float>(p.data, p.data + p.box.rows * p.box.cols);
  }
}

TEST(PipelineStageStateMpi, StagesSaveTheWholeModelsPiecesOnEveryLayout) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  for (const ModelArch arch : {ModelArch::gpt2, ModelArch::llama}) {
    ModelConfig m = arch == ModelArch::gpt2 ? tiny_gpt() : tiny_llama();
    m.n_layer = 3;
    for (const ParallelDims& d : layouts_for(world->size())) {
      if (tp_split_problem(m, d.tp)) continue;
      const DeviceMesh mesh(d, *world);
      const int tp_rank = mesh.coord().tp;
      auto save_all = [&](const ParameterLayout& layout, FsdpStage stage, Saved& out,
                          const std::string& at) {
        ShardedParameters params(layout, mesh, stage, 25.0, *ops);
        for_each_initial_parameter(
            m, 3, [&](const ParamSpec& s, const float* data) { params.load_global(s.name, data); });
        collect(params.pieces_to_save(), out, at);
      };
      for (const FsdpStage stage : {FsdpStage::optimizer, FsdpStage::gradients}) {
        const std::string at = std::string(to_string(arch)) + " " + d.str() + " stage " +
                               std::to_string(static_cast<int>(stage));
        Saved want;
        save_all(ParameterLayout(m, d.tp, tp_rank, d.fsdp), stage, want, at + " whole");
        // Each split: the chunks of each pipeline rank; the last, two chunks
        // on the rank of the last stage (its mirror after both).
        using Split = std::vector<std::vector<StageSpan>>;
        for (const Split& split : {Split{{{0, 1}}, {{1, 2}}, {{2, 3}}}, Split{{{0, 2}}, {{2, 3}}},
                                   Split{{{0, 1}}, {{1, 2}, {2, 3}}}}) {
          Saved got;
          for (const std::vector<StageSpan>& chunks : split)
            save_all(ParameterLayout(m, chunks, d.tp, tp_rank, d.fsdp), stage, got,
                     at + " blocks from " + std::to_string(chunks.front().first_layer));
          EXPECT_EQ(got.size(), want.size()) << at;
          EXPECT_TRUE(got == want) << at;
        }
      }
      if (m.tied_embeddings() && d.dp * d.fsdp > 1) {
        // Both ends of a tied model on one rank: "embed" has two backwards
        // per micro-batch, which no gradient reducer handles yet.
        const ParameterLayout layout(m, std::vector<StageSpan>{{0, 1}, {2, 3}}, d.tp, tp_rank,
                                     d.fsdp);
        const std::string e = error_message(
            [&] { ShardedParameters(layout, mesh, FsdpStage::optimizer, 25.0, *ops); });
        EXPECT_NE(e.find("holding the first and the last of 2 chunks of a tied model"),
                  std::string::npos)
            << e;
      }
      if (d.fsdp > 1) {
        for (const std::vector<StageSpan>& chunks :
             {std::vector<StageSpan>{{1, 3}}, std::vector<StageSpan>{{1, 2}, {2, 3}}}) {
          const ParameterLayout layout(m, chunks, d.tp, tp_rank, d.fsdp);
          const std::string e = error_message(
              [&] { ShardedParameters(layout, mesh, FsdpStage::parameters, 25.0, *ops); });
          EXPECT_NE(e.find("parallel.fsdp_stage=3 is not supported with parallel.pp"),
                    std::string::npos)
              << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace gt::test
