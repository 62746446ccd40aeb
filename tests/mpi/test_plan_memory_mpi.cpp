// The planner's memory model (trainer/plan/memory_model.hpp) against the
// real thing on every layout of the running world size (1, 2 and 4 ranks)
// and every FSDP stage: ShardedParameters::memory() byte for byte, and the
// bytes GPT::allocate and Llama::allocate took for their activations, with
// tp_overlap on and off and every train.recompute mode.
#include "kernels/cpu/cpu_ops.hpp"
#include "layout_matrix_models.hpp"
#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"
#include "trainer/model/make_model.hpp"
#include "trainer/plan/memory_model.hpp"
#include "trainer/plan/step_model.hpp"
#include "trainer/runtime/parallelize.hpp"
#include "trainer/sharding/data_parallel_groups.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt::test {
namespace {

std::vector<ModelConfig> models() {
  const ModelConfig a = matrix_model();  // tests/layouts/layout_matrix.py's model
  ModelConfig b;  // odd sizes: padding to 16 floats and to fsdp both matter
  b.n_layer = 2;
  b.n_head = 4;
  b.n_embd = 44;
  b.vocab_size = 100;
  b.block_size = 12;
  ModelConfig c = b;  // one block: the four unit buffers with a single block
  c.n_layer = 1;
  return {a, b, c};
}

// Llamas whose key/value heads and MLP width split over tp = 4: grouped-query
// attention, and odd widths that make padding matter; one with a single
// block and a tied head.
std::vector<ModelConfig> llama_models() {
  const ModelConfig a = matrix_llama();  // tests/layouts/layout_matrix.py's MODELS["llama"]
  ModelConfig b = a;
  b.n_layer = 2;
  b.n_head = 4;
  b.n_embd = 40;  // head size 10: RoPE turns pairs
  b.ffn_hidden = 36;
  b.vocab_size = 100;
  b.block_size = 12;
  ModelConfig c = b;
  c.n_layer = 1;
  c.tie_embeddings = true;
  return {a, b, c};
}

TEST(PlanMemoryMpi, StateBytesEqualShardedParametersOnEveryLayout) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  for (const ParallelDims& d : layouts_for(world->size())) {
    const DeviceMesh mesh(d, *world);
    for (const ModelConfig& m0 : models())
      for (int stage = 1; stage <= 3 && !tp_split_problem(m0, d.tp); ++stage)
        for (bool bf16 : {false, true})  // bf16: the parameters' bf16 copy where whole
          for (ComputeDType reduce : {ComputeDType::fp32, ComputeDType::bf16}) {
            // As a run at this tp reads its config: the vocabulary padded for it.
            const ModelConfig m = padded_for_tp(m0, d.tp);
            const ParameterLayout layout(m, d.tp, mesh.coord().tp, d.fsdp);
            const ShardedParameters params(layout, mesh, fsdp_stage_of(stage), 25.0, *ops, bf16,
                                           reduce);
            EXPECT_EQ(params.keeps_bf16_params(),
                      keeps_bf16_params(d.fsdp, fsdp_stage_of(stage), bf16));
            const MemoryFigures got = params.memory();
            const StateBytes want = predict_state_bytes(m, d.fsdp, d.tp, stage, bf16, d.dp, reduce);
            const std::string at = d.str() + " stage " + std::to_string(stage) +
                                   " C=" + std::to_string(m.n_embd) + (bf16 ? " bf16" : "") +
                                   " reduce_dtype=" + to_string(reduce);
            EXPECT_EQ(got.params, want.params) << at;
            EXPECT_EQ(got.grads, want.grads) << at;
            EXPECT_EQ(got.optimizer, want.optimizer) << at;
          }
  }
}

// Both families: what the model allocates on every tp rank of every layout
// is the activation plan the planner sums.
TEST(PlanMemoryMpi, ActivationBytesEqualTheModelsAllocationOnEveryLayout) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  std::vector<ModelConfig> all = models();
  for (const ModelConfig& m : llama_models()) all.push_back(m);
  for (const ParallelDims& d : layouts_for(world->size())) {
    const DeviceMesh mesh(d, *world);
    for (const ModelConfig& m0 : all)
      for (bool overlap : {true, false})
        if (const ModelConfig m = padded_for_tp(m0, d.tp); !tp_split_problem(m, d.tp))  // tp = 3 at 3 ranks: a layout the config refuses
          for (Recompute recompute : {Recompute::none, Recompute::mlp, Recompute::block})
            for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16}) {
              const ParameterLayout layout(m, d.tp, mesh.coord().tp, d.fsdp);
              // As the trainer builds it: the bf16 copy asked for in bf16 runs
              // (kept at fsdp = 1; stage 3 with fsdp > 1 casts per GEMM).
              const bool bf16 = dtype == ComputeDType::bf16;
              ShardedParameters params(layout, mesh, FsdpStage::parameters, 25.0, *ops, bf16);
              const int B = 2, T = 8;  // 16 rows split over tp = 1, 2, 4
              const auto model =
                  make_model(m, *ops, B, T, layout, params,
                             TensorParallelGroup{&mesh.tp(), overlap}, recompute, dtype);
              EXPECT_EQ(model->activation_bytes(),
                        predict_activation_bytes(
                            m, B, T, d.tp, overlap, PlanBackend::cpu, recompute, dtype,
                            keeps_bf16_params(d.fsdp, FsdpStage::parameters, bf16)))
                  << to_string(m.arch) << " " << d.str() << " overlap " << overlap
                  << " C=" << m.n_embd << " recompute " << to_string(recompute) << " "
                  << to_string(dtype);
            }
  }
}

// Context parallelism on the CPU: every layout with cp > 1 of the running
// world (cp alone, with tp, with fsdp: ZeRO over fsdp x cp, with dp), each
// cp_comm mode, balanced or not: the activations the model allocates (its
// T / cp rows, the cp attention's scratch and the CPU's block scratch) and
// the sharded state (the gradients' groups folding cp in) are what the
// planner predicts.
TEST(PlanMemoryMpi, ContextParallelLayoutsAllocateWhatThePlannerPredicts) {
  auto world = test_world();
  const int n = world->size();
  std::vector<ParallelDims> layouts;
  for (int cp = 2; cp <= n; cp *= 2)
    if (n % cp == 0)
      for (const ParallelDims& d : layouts_for(n / cp)) layouts.push_back({d.dp, d.fsdp, d.tp, 1, cp});
  if (layouts.empty()) GTEST_SKIP() << "no context-parallel layout of " << n << " rank(s)";
  auto ops = make_cpu_ops(1);
  for (const ParallelDims& d : layouts) {
    const DeviceMesh mesh(d, *world);
    for (const ModelConfig& m0 : {models()[0], llama_models()[0]})
      for (CpComm comm : {CpComm::allgather, CpComm::ring})
        for (bool balance : {true, false})
          for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16}) {
            ModelConfig m = padded_for_tp(m0, d.tp);
            m.block_size = 32;
            const int B = 2, T = 32;
            ParallelPlan plan;
            plan.dtype = dtype;
            plan.cp_comm = comm;
            plan.cp_load_balance = balance;
            const ParallelModel pm = parallelize(m, plan, mesh, *ops, {B, T, Recompute::none});
            const int f = shard_degree(d);
            const bool bf16 = dtype == ComputeDType::bf16;
            const std::string at = std::string(to_string(m.arch)) + " " + d.str() + " " +
                                   to_string(comm) + (balance ? "" : " unbalanced") + " " +
                                   to_string(dtype);
            EXPECT_EQ(pm.runner->activation_bytes(),
                      predict_activation_bytes(m, B, T, d.tp, true, PlanBackend::cpu,
                                               Recompute::none, dtype,
                                               keeps_bf16_params(f, FsdpStage::parameters, bf16),
                                               PlanCp{d.cp, comm, balance}))
                << at;
            const MemoryFigures got = pm.params->memory();
            const StateBytes want =
                predict_state_bytes(m, f, d.tp, 3, bf16, replica_degree(d), ComputeDType::fp32);
            EXPECT_EQ(got.params, want.params) << at;
            EXPECT_EQ(got.grads, want.grads) << at;
            EXPECT_EQ(got.optimizer, want.optimizer) << at;
          }
  }
}

// Every ep of the running world's data ranks that divides matrix_mixtral's
// experts, over the dp and fsdp layouts of n ranks.
std::vector<ParallelDims> expert_parallel_layouts(int n) {
  std::vector<ParallelDims> layouts;
  for (const ParallelDims& d : layouts_for(n))
    for (int ep = 2; ep <= d.data_parallel(); ++ep)
      if (d.data_parallel() % ep == 0 && matrix_mixtral().n_experts % ep == 0)
        layouts.push_back(d.with_expert_parallel(ep));
  return layouts;
}

// Expert parallelism: every ep of the running world's data ranks (dp and
// fsdp layouts), a Mixtral's activations with the mixture's ep-sized expert
// buffers and the exchange's, in both dtypes, what the planner predicts.
TEST(PlanMemoryMpi, ExpertParallelLayoutsAllocateWhatThePlannerPredicts) {
  auto world = test_world();
  const std::vector<ParallelDims> layouts = expert_parallel_layouts(world->size());
  if (layouts.empty()) GTEST_SKIP() << "no expert-parallel layout of " << world->size() << " rank(s)";
  auto ops = make_cpu_ops(1);
  for (const ParallelDims& d : layouts) {
    const DeviceMesh mesh(d, *world);
    for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16}) {
      const ModelConfig m = matrix_mixtral();
      const int B = 2, T = 8;
      ParallelPlan plan;
      plan.dtype = dtype;
      const ParallelModel pm = parallelize(m, plan, mesh, *ops, {B, T, Recompute::none});
      const bool bf16 = dtype == ComputeDType::bf16;
      EXPECT_EQ(pm.runner->activation_bytes(),
                predict_activation_bytes(m, B, T, d.tp, true, PlanBackend::cpu, Recompute::none,
                                         dtype,
                                         keeps_bf16_params(shard_degree(d), FsdpStage::parameters,
                                                           bf16),
                                         PlanCp{}, d.ep))
          << d.str() << " " << to_string(dtype);
    }
  }
}

// The planner's layout of mesh `d` at ZeRO stage `stage`.
PlanLayout plan_layout(const ParallelDims& d, int stage) {
  PlanLayout l;
  l.dp = d.dp;
  l.fsdp = d.fsdp;
  l.tp = d.tp;
  l.ep = d.ep;
  l.stage = stage;
  return l;
}

// Expert parallelism's storage: each rank holds its E / ep experts, their
// state sharded (fsdp > 1) or replicated over the expert-data-parallel
// group. ShardedParameters::memory() byte for byte what the planner's state
// model (step_model.hpp: state_units) predicts, every stage, both dtypes and
// reductions; and less than the same layout without ep holds.
TEST(PlanMemoryMpi, ExpertParallelStateBytesEqualShardedParameters) {
  auto world = test_world();
  const std::vector<ParallelDims> layouts = expert_parallel_layouts(world->size());
  if (layouts.empty()) GTEST_SKIP() << "no expert-parallel layout of " << world->size() << " rank(s)";
  auto ops = make_cpu_ops(1);
  const ModelConfig m = matrix_mixtral();
  for (const ParallelDims& d : layouts) {
    const DeviceMesh mesh(d, *world);
    for (int stage = 1; stage <= 3; ++stage)
      for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16})
        for (ComputeDType reduce : {ComputeDType::fp32, ComputeDType::bf16}) {
          ParallelPlan plan;
          plan.dtype = dtype;
          plan.fsdp_stage = fsdp_stage_of(stage);
          plan.reduce_dtype = reduce;
          const ParallelModel pm = parallelize(m, plan, mesh, *ops, {2, 8, Recompute::none});
          PlanLayout l = plan_layout(d, stage);
          l.reduce_dtype = reduce;
          const bool bf16 = dtype == ComputeDType::bf16;
          const StateBytes want = predict_state_bytes(state_units(m, l, whole_model(m)), l, bf16);
          const MemoryFigures got = pm.params->memory();
          const std::string at = d.str() + " stage " + std::to_string(stage) + " " +
                                 to_string(dtype) + " reduce_dtype=" + to_string(reduce);
          EXPECT_EQ(got.params, want.params) << at;
          EXPECT_EQ(got.grads, want.grads) << at;
          EXPECT_EQ(got.optimizer, want.optimizer) << at;
          // Without ep every rank holds every expert: all of their state
          // without sharding, a 1 / fsdp share of it with (as much as ep
          // leaves when the ep group is the fsdp group).
          PlanLayout all = l;
          all.ep = 1;
          const StateBytes without =
              predict_state_bytes(state_units(m, all, whole_model(m)), all, bf16);
          if (d.fsdp == 1)
            EXPECT_LT(got.optimizer, without.optimizer) << at;
          else
            EXPECT_LE(got.optimizer, without.optimizer) << at;
        }
  }
}

// parallel.fp8_allgather: the units padded to 4 x the shard degree, the
// codes of the shard storage, the amaxes and the bf16 rounding's buffer,
// and the block slots' codes and fp32 sides. ShardedParameters::memory()
// byte for byte what state_units and fp8_gather_bytes predict, on every
// ZeRO-3 layout of the running world (expert-parallel ones included), every
// family, with every linear in fp8 and with runtime.fp8_min_dim leaving
// some or all of them in bf16.
TEST(PlanMemoryMpi, Fp8AllGatherStateBytesEqualShardedParameters) {
  auto world = test_world();
  auto ops = make_cpu_ops(1);
  std::vector<ParallelDims> layouts;
  for (const ParallelDims& d : layouts_for(world->size()))
    if (d.fsdp > 1) layouts.push_back(d);
  for (const ParallelDims& d : expert_parallel_layouts(world->size()))
    if (d.fsdp > 1) layouts.push_back(d);
  if (layouts.empty()) GTEST_SKIP() << "no ZeRO-3 layout of " << world->size() << " rank(s)";
  int checked = 0;
  for (const ParallelDims& d : layouts) {
    const DeviceMesh mesh(d, *world);
    ModelConfig narrow = matrix_llama();  // down_proj (C, F = 16) under fp8_min_dim 20
    narrow.ffn_hidden = 16;
    ModelConfig one_block = matrix_model();  // one block slot in use, not two
    one_block.n_layer = 1;
    for (const ModelConfig& m0 :
         {matrix_model(), matrix_llama(), narrow, one_block, matrix_mixtral()}) {
      if (d.ep > 1 && !m0.moe()) continue;
      if (tp_split_problem(m0, d.tp)) continue;
      const ModelConfig m = padded_for_tp(m0, d.tp);
      // 0: every linear in fp8; 20: all but the narrow Llama's down_proj,
      // which travels in the fp32 side; 1000: none (every dimension is 32
      // or more, C = 32 among them).
      for (int64_t min_dim : {0, 20, 1000}) {
        ParallelPlan plan;
        plan.dtype = ComputeDType::bf16;
        plan.fsdp_stage = FsdpStage::parameters;
        plan.fp8.recipe = Fp8Recipe::tensorwise;
        plan.fp8.min_dim = min_dim;
        plan.fp8_allgather = true;
        const ParallelModel pm = parallelize(m, plan, mesh, *ops, {2, 8, Recompute::none});
        PlanLayout l = plan_layout(d, 3);
        l.fp8 = Fp8Recipe::tensorwise;
        l.fp8_min_dim = min_dim;
        const StateUnits su = state_units(m, l, whole_model(m));
        const StateBytes want = predict_state_bytes(su, l, true);
        const MemoryFigures got = pm.params->memory();
        const std::string at = d.str() + " " + to_string(m.arch) + " fp8_min_dim=" +
                               std::to_string(min_dim);
        EXPECT_EQ(got.params, want.params) << at;
        EXPECT_EQ(got.grads, want.grads) << at;
        EXPECT_EQ(got.optimizer, want.optimizer) << at;
        // What the fp8 gather adds is real, and counted where it is.
        EXPECT_GT(fp8_gather_bytes(su, shard_degree(d)), su.dense.shard_total) << at;
        EXPECT_EQ(su.fp8.weights > 0, min_dim < 1000) << at;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace gt::test
