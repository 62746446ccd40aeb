// ShardedParameters on one pipeline stage's layout (ParameterLayout's
// StageSpan), or on a pipeline rank's layout of two chunks, dp x fsdp x tp
// within the stage, on every layout of the running world: fed every initial
// tensor, each rank's stages save together exactly the pieces the whole
// model's state saves on that rank (a stage's units are the whole model's,
// so each fsdp shard covers the same elements), never the mirror of wte, at
// every fsdp stage; the data axes on a rank holding both ends of a tied
// model in two chunks are refused by name. And
// at fsdp stages 2 and 3 a stage's store driven as a pipeline schedule
// drives it (1f1b, gpipe: the forwards and backwards of different
// micro-batches interleaved, over several model instances sharing the
// store) gives the gradients, grad norms, parameters and moments of the
// plain order at stage 2, bit for bit.
#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"
#include "trainer/parallelize/pipeline_schedule.hpp"
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
      for (const FsdpStage stage :
           {FsdpStage::optimizer, FsdpStage::gradients, FsdpStage::parameters}) {
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
    }
  }
}

// One compute action of a stage's step: the forward or the backward of a
// micro-batch.
struct Pass {
  bool forward = true;
  int micro = 0;
};

// Pipeline rank `rank`'s forwards and backwards in a `kind` schedule of `p`
// stages and `m` micro-batches (build_pipeline_schedule's list without its
// sends and receives); kind null: the plain order F0 B0 F1 B1 ...
std::vector<Pass> stage_passes(const PipeSchedule* kind, int p, int rank, int m) {
  std::vector<Pass> out;
  if (!kind) {
    for (int j = 0; j < m; ++j) out.insert(out.end(), {Pass{true, j}, Pass{false, j}});
    return out;
  }
  const std::vector<std::vector<PipeAction>> lists = build_pipeline_schedule({*kind, p, m});
  for (const PipeAction& a : lists[static_cast<size_t>(rank)])
    if (a.op == PipeOp::forward || a.op == PipeOp::backward)
      out.push_back({a.op == PipeOp::forward, a.micro});
  return out;
}

// The most micro-batches between their forward and their backward at once:
// the model instances (each its own activations) the passes need.
int in_flight(const std::vector<Pass>& passes) {
  int now = 0, most = 0;
  for (const Pass& p : passes) most = std::max(most, now += p.forward ? 1 : -1);
  return most;
}

// What two runs of a stage's store over the same micro-batches must agree on.
struct StageRun {
  std::vector<float> losses;                    // the last stage's, in forward order
  std::vector<std::vector<float>> input_grads;  // a later stage's d(input), in backward order
  std::vector<double> norms;                    // per step
  Saved saved;                                  // pieces_to_save after the last step
  Saved moments;                                // all stored (pieces_to_load's), the mirror's too
};

// Deterministic values for a boundary tensor, distinct per step, micro-batch,
// data shard, tp rank and tensor (`salt`).
std::vector<float> boundary_values(int64_t n, int step, int micro, int data, int tp, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] =
        0.05f * static_cast<float>(
                    (i * 37 + step * 3 + micro * 5 + data * 7 + tp * 13 + salt * 11) % 41 - 20);
  return v;
}

// Two optimizer steps of one stage's store at `stage`, the passes of each
// step in the given order over in_flight(passes) model instances sharing the
// store. The boundaries a pipeline would receive (the input of a later
// stage, the output gradient of an earlier one) are made up, the same in
// every run.
StageRun run_stage(const ModelConfig& m, const DeviceMesh& mesh, StageSpan span, FsdpStage stage,
                   const std::vector<Pass>& passes, Ops& ops) {
  const ParallelDims& d = mesh.dims();
  const int tp_rank = mesh.coord().tp, data = mesh.data().rank();
  const ParameterLayout layout(m, span, d.tp, tp_rank, d.fsdp);
  ShardedParameters params(layout, mesh, stage, 25.0, ops);
  for_each_initial_parameter(
      m, 5, [&](const ParamSpec& s, const float* v) { params.load_global(s.name, v); });
  const int B = 2, T = 8, micro_batches = static_cast<int>(passes.size() / 2);
  std::vector<std::unique_ptr<CausalLM>> models;
  for (int i = 0; i < in_flight(passes); ++i)
    models.push_back(make_model(m, ops, B, T, layout, params, TensorParallelGroup{&mesh.tp(), true},
                                Recompute::none, ComputeDType::fp32));
  StageRun run;
  TrainConfig tc;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int step = 0; step < 2; ++step) {
    params.begin_step();
    std::vector<int> instance_of(static_cast<size_t>(micro_batches), -1);
    std::vector<bool> busy(models.size(), false);
    int backwards = 0;
    for (const Pass& p : passes) {
      if (p.forward) {
        const auto free = std::find(busy.begin(), busy.end(), false);
        GT_CHECK(free != busy.end(), "no model instance free for the forward of micro-batch ",
                 p.micro);
        *free = true;
        instance_of[static_cast<size_t>(p.micro)] = static_cast<int>(free - busy.begin());
      }
      const int instance = instance_of[static_cast<size_t>(p.micro)];
      CausalLM& model = *models[static_cast<size_t>(instance)];
      const CausalLM::StageBoundary b = model.stage_boundary(B, T);
      if (p.forward) {
        for (int i = 0; i < B * T; ++i) {
          tokens[i] = (i * 7 + step * 3 + p.micro * 5 + 11 * data) % m.vocab_size;
          targets[i] = (tokens[i] * 5 + 1) % m.vocab_size;
        }
        if (!b.input.empty())
          ops.upload(b.input,
                     boundary_values(b.input.numel(), step, p.micro, data, tp_rank, 1).data());
        const float loss = model.forward(tokens.data(), targets.data(), B, T, 0.5f / (B * T));
        if (model.heads()) run.losses.push_back(loss);
        continue;
      }
      if (!b.output_grad.empty())
        ops.upload(b.output_grad,
                   boundary_values(b.output_grad.numel(), step, p.micro, data, tp_rank, 2).data());
      params.begin_micro_batch(++backwards == micro_batches);
      model.backward();
      if (!b.input_grad.empty()) {
        std::vector<float> g(static_cast<size_t>(b.input_grad.numel()));
        ops.download(g.data(), b.input_grad);
        run.input_grads.push_back(std::move(g));
      }
      busy[static_cast<size_t>(instance)] = false;
    }
    params.finish_gradients();
    run.norms.push_back(params.grad_norm());
    params.adamw_step(tc, 1e-2, 1.f, step + 1);
  }
  collect(params.pieces_to_save(), run.saved, "saved");
  std::vector<TensorPiece> moments;
  for (const TensorPiece& p : params.pieces_to_load())
    if (p.name.rfind("adam_", 0) == 0) moments.push_back(p);
  collect(moments, run.moments, "moments");
  return run;
}

void expect_same(const Saved& got, const Saved& want, const std::string& at) {
  ASSERT_EQ(got.size(), want.size()) << at;
  for (const auto& [key, w] : want) {
    const auto g = got.find(key);
    ASSERT_NE(g, got.end()) << at << ": " << std::get<0>(key) << " missing";
    EXPECT_TRUE(exactly(g->second, w)) << at << ": " << std::get<0>(key);
  }
}

void expect_same(const StageRun& got, const StageRun& want, const std::string& at) {
  EXPECT_EQ(got.losses, want.losses) << at;
  EXPECT_EQ(got.norms, want.norms) << at;
  ASSERT_EQ(got.input_grads.size(), want.input_grads.size()) << at;
  for (size_t i = 0; i < want.input_grads.size(); ++i)
    EXPECT_TRUE(exactly(got.input_grads[i], want.input_grads[i])) << at << " backward " << i;
  expect_same(got.saved, want.saved, at + " saved");
  expect_same(got.moments, want.moments, at + " moments");
}

TEST(PipelineStageStateMpi, Stage3StoresFollowAnyScheduleBitForBit) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  struct Family {
    ModelArch arch;
    bool tie;
  };
  int runs = 0;
  for (const Family f : {Family{ModelArch::gpt2, true}, Family{ModelArch::llama, false},
                         Family{ModelArch::llama, true}}) {
    ModelConfig m = f.arch == ModelArch::gpt2 ? tiny_gpt() : tiny_llama();
    m.n_layer = 4;
    m.tie_embeddings = f.tie;
    for (const ParallelDims& d : layouts_for(world->size())) {
      if (d.fsdp == 1 || tp_split_problem(m, d.tp)) continue;
      const DeviceMesh mesh(d, *world);
      // Three stages (first, a middle one of two blocks, last) and two.
      for (const std::vector<StageSpan>& split : {std::vector<StageSpan>{{0, 1}, {1, 3}, {3, 4}},
                                                  std::vector<StageSpan>{{0, 2}, {2, 4}}}) {
        const int p = static_cast<int>(split.size()), micro_batches = 3;
        for (int rank = 0; rank < p; ++rank) {
          const StageSpan span = split[static_cast<size_t>(rank)];
          const std::string at = std::string(to_string(f.arch)) + (f.tie ? " tied " : " ") +
                                 d.str() + " stage " + std::to_string(rank) + " of " +
                                 std::to_string(p);
          const StageRun want = run_stage(m, mesh, span, FsdpStage::gradients,
                                          stage_passes(nullptr, p, rank, micro_batches), *ops);
          for (const FsdpStage stage : {FsdpStage::gradients, FsdpStage::parameters})
            for (const PipeSchedule kind : {PipeSchedule::one_f_one_b, PipeSchedule::gpipe}) {
              const std::vector<Pass> passes = stage_passes(&kind, p, rank, micro_batches);
              const StageRun got = run_stage(m, mesh, span, stage, passes, *ops);
              expect_same(got, want,
                          at + " fsdp_stage " + std::to_string(static_cast<int>(stage)) + " " +
                              (kind == PipeSchedule::gpipe ? "gpipe" : "1f1b") + " on " +
                              std::to_string(in_flight(passes)) + " instances");
              ++runs;
            }
          const StageRun plain = run_stage(m, mesh, span, FsdpStage::parameters,
                                           stage_passes(nullptr, p, rank, micro_batches), *ops);
          expect_same(plain, want, at + " fsdp_stage 3 plain");
        }
      }
    }
  }
  if (runs == 0) GTEST_SKIP() << "no layout with fsdp > 1 at " << world->size() << " ranks";
}

}  // namespace
}  // namespace gt::test
