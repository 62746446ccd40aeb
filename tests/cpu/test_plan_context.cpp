// The planner's context parallelism (parallel.cp; trainer/plan/): the bytes
// on the cp axis and the gradients' folded groups against the numbers
// derived by hand and the layout matrix's formulas (tests/layouts/
// cp_layouts.py cp_bytes, which the trainer's logged bytes are held to), a
// cp rank's attention FLOPs (balanced and not), its activations against
// what the model allocates (the dry-run CUDA model on a mesh whose other
// ranks are not there; the CPU model over MPI in tests/mpi), where the cp
// group's traffic goes and what of it hides, the layouts the config rules
// out, and the plan of Llama 3 8B at 128K tokens on 64 and 512 H100s.
#include <gtest/gtest.h>

#include <string>

#include "plan_test_models.hpp"
#include "trainer/model/llama_activation_plan.hpp"
#include "trainer/plan/dry_run_mesh.hpp"
#include "trainer/plan/dry_run_ops.hpp"
#include "trainer/plan/planner.hpp"
#include "trainer/profile/op_costs.hpp"
#include "trainer/runtime/parallelize.hpp"
#include "trainer/sharding/data_parallel_groups.hpp"

namespace gt {
namespace {

using test::config;
using test::hardware;
using test::matrix_llama;
using test::matrix_model;
using test::matrix_train;

PlanLayout cp_layout(int cp, CpComm comm, int dp = 1, int fsdp = 1, int tp = 1, int micro = 8,
                     bool balance = true) {
  PlanLayout l;
  l.dp = dp;
  l.fsdp = fsdp;
  l.tp = tp;
  l.cp = cp;
  l.cp_comm = comm;
  l.cp_load_balance = balance;
  l.micro_batch = micro;
  return l;
}

// The matrix's GPT-2 (L 3, 4 heads of 8, C 32; seq 16, global batch 8) at
// cp = 2, one micro-batch of 8 rows per step: a rank holds R = 8 x 16 / 2 =
// 64 rows, its packed K|V n = R x 2 x 4 heads x 8 = 4096 fp32 elements.
TEST(PlanContext, CpBytesByHand) {
  const ModelConfig m = matrix_model();
  const double L = 3, n = 64 * 2 * 4 * 8, loss = 2 * (2 - 1) / 2.0 * 8;
  // allgather: 2L - 1 gathers (the last block's backward reuses its
  // forward's) of (cp - 1) n, one fp32 reduce-scatter of dK|dV per block.
  const CommBytes ag =
      comm_bytes_per_step(m, matrix_train(8), cp_layout(2, CpComm::allgather), PlanBackend::cpu);
  EXPECT_DOUBLE_EQ(ag.cp, (2 * L - 1) * n * 4 + L * n * 4 + loss);
  EXPECT_DOUBLE_EQ(ag.cp, 131080.0);
  // ring: L forward hops of n; backward L hops of n beside cp = 2 hops of
  // the fp32 dK|dV partial sums.
  const CommBytes ring =
      comm_bytes_per_step(m, matrix_train(8), cp_layout(2, CpComm::ring), PlanBackend::cpu);
  EXPECT_DOUBLE_EQ(ring.cp, L * n * 4 + L * (n * 4 + 2 * n * 4) + loss);
  EXPECT_DOUBLE_EQ(ring.cp, 196616.0);
  // The gradients: replicated over cp, all-reduced over dp x cp = 2 (the
  // matrix model's 46880 floats); nothing shards.
  EXPECT_DOUBLE_EQ(ring.dp, 2 * (2 - 1) / 2.0 * 4 * 46880);
  EXPECT_EQ(ring.fsdp, 0.0);
  EXPECT_STREQ(replica_key(cp_layout(2, CpComm::ring)), "dp_cp");
  EXPECT_STREQ(shard_key(cp_layout(2, CpComm::ring, 1, 2)), "fsdp_cp");
  EXPECT_STREQ(replica_key(cp_layout(2, CpComm::ring, 2, 2)), "dp");  // HSDP's replicas
  EXPECT_STREQ(replica_key(cp_layout(1, CpComm::ring, 2)), "dp");
}

// Recomputing whole blocks gathers every block again just before its
// backward (2L gathers, 2L forward ring passes); each chunk of a pipeline
// rank keeps its own last block's gather (2L - v).
TEST(PlanContext, RecomputeAndPipelineChunksChangeTheGathers) {
  const ModelConfig m = matrix_model();
  const double n = 64 * 2 * 4 * 8, loss = 8;
  TrainConfig t = matrix_train(8);
  t.recompute = Recompute::block;
  EXPECT_DOUBLE_EQ(cp_bytes_per_step(m, t, cp_layout(2, CpComm::allgather), PlanBackend::cpu, 3, 1),
                   6 * n * 4 + 3 * n * 4 + loss);
  EXPECT_DOUBLE_EQ(cp_bytes_per_step(m, t, cp_layout(2, CpComm::ring), PlanBackend::cpu, 3, 1),
                   6 * n * 4 + 3 * (n * 4 + 2 * n * 4) + loss);
  t.recompute = Recompute::none;
  PlanLayout pp = cp_layout(2, CpComm::allgather);
  pp.pp = 2;
  pp.schedule = PipeSchedule::interleaved_1f1b;
  pp.virtual_stages = 2;
  // 4 blocks on this rank over its 2 chunks, 2 micro-batches per step.
  EXPECT_DOUBLE_EQ(cp_bytes_per_step(m, t, pp, PlanBackend::cpu, 4, 2),
                   2 * ((2 * 4 - 2) * n * 4 + 4 * n * 4) + loss);
  // bf16 (the GPU plan): K|V at 2 bytes, their gradients fp32.
  EXPECT_DOUBLE_EQ(
      cp_bytes_per_step(m, t, cp_layout(2, CpComm::allgather), PlanBackend::cuda, 3, 1),
      5 * n * 2 + 3 * n * 4 + loss);
}

// {dp, fsdp, tp, micro, cp, cp_comm, recompute, backend} and the bytes
// layout_matrix.expected_bytes(..., ctx=cp_layouts.Ctx(cp, comm, True))
// prints for them, under the trainer's own keys (dp_cp, fsdp_cp at cp > 1).
struct CpCase {
  int dp, fsdp, tp, micro, cp;
  CpComm comm;
  Recompute recompute;
  PlanBackend backend;  // cuda: the bf16 model (layout_matrix --dtype bf16)
  double dp_bytes, fsdp_bytes, tp_bytes, dp_cp, fsdp_cp, cp_bytes;
};
void expect_cp_cases(const ModelConfig& m, const std::vector<CpCase>& cases) {
  for (const CpCase& c : cases) {
    PlanLayout l = cp_layout(c.cp, c.comm, c.dp, c.fsdp, c.tp, c.micro);
    TrainConfig t = matrix_train(c.micro);
    t.recompute = c.recompute;
    const CommBytes b = comm_bytes_per_step(m, t, l, c.backend);
    const std::string at = l.str() + " " + to_string(c.recompute);
    auto logged = [&](const char* key) {
      double v = 0;
      if (std::string(replica_key(l)) == key) v += b.dp;
      if (std::string(shard_key(l)) == key) v += b.fsdp;
      return v;
    };
    EXPECT_DOUBLE_EQ(logged("dp"), c.dp_bytes) << at;
    EXPECT_DOUBLE_EQ(logged("fsdp"), c.fsdp_bytes) << at;
    EXPECT_DOUBLE_EQ(logged("dp_cp"), c.dp_cp) << at;
    EXPECT_DOUBLE_EQ(logged("fsdp_cp"), c.fsdp_cp) << at;
    EXPECT_NEAR(b.tp, c.tp_bytes, 1e-9 * c.tp_bytes) << at;
    EXPECT_DOUBLE_EQ(b.cp, c.cp_bytes) << at;
  }
}

TEST(PlanContext, BytesEqualTheLayoutMatrixFormulas) {
  const auto ag = CpComm::allgather, ring = CpComm::ring;
  const auto none = Recompute::none, block = Recompute::block;
  const auto cpu = PlanBackend::cpu, cuda = PlanBackend::cuda;
  expect_cp_cases(matrix_model(),
                  {
                      {1, 1, 1, 8, 2, ag, none, cpu, 0, 0, 0, 187520, 0, 131080},
                      {1, 1, 1, 8, 2, ring, none, cpu, 0, 0, 0, 187520, 0, 196616},
                      {1, 1, 1, 4, 4, ring, none, cpu, 0, 0, 0, 281280, 0, 245772},
                      {2, 1, 1, 2, 2, ag, none, cpu, 0, 0, 0, 281280, 0, 65544},
                      {1, 1, 2, 4, 2, ring, block, cpu, 0, 0, 156160, 96064, 0, 122888},
                      {1, 2, 1, 2, 2, ag, none, cpu, 0, 0, 0, 0, 638784, 65544},
                      {2, 2, 1, 1, 2, ring, none, cpu, 46880, 0, 0, 0, 638784, 49160},
                      {1, 1, 2, 8, 2, ag, none, cuda, 0, 0, 104960, 96064, 0, 45064},
                  });
  expect_cp_cases(matrix_llama(),
                  {
                      {1, 1, 1, 8, 2, ag, none, cpu, 0, 0, 0, 177024, 0, 65544},
                      {1, 1, 1, 8, 2, ring, none, cpu, 0, 0, 0, 177024, 0, 98312},
                      {1, 1, 1, 4, 4, ring, none, cpu, 0, 0, 0, 265536, 0, 122892},
                      {2, 1, 1, 2, 2, ag, none, cpu, 0, 0, 0, 265536, 0, 32776},
                      {1, 1, 2, 4, 2, ring, block, cpu, 0, 0, 153216, 88960, 0, 61448},
                      {1, 2, 1, 2, 2, ag, none, cpu, 0, 0, 0, 0, 586752, 32776},
                      {2, 2, 1, 1, 2, ring, none, cpu, 44256, 0, 0, 0, 586752, 24584},
                      {1, 1, 2, 8, 2, ag, none, cuda, 0, 0, 102016, 88960, 0, 22536},
                  });
}

// A cp rank's matmuls are 1/cp of the sequence's; its attention the causal
// pairs of its chunks: 1/cp of T(T+1)/2 when balanced (rank r's chunks r
// and 2cp - 1 - r), the last chunk's when not (it sees every key).
TEST(PlanContext, AttentionFlopsAreTheSlowestRanksCausalPairs) {
  const ModelConfig m = matrix_model();
  const int T = 16;
  const MicroBatchFlops whole = micro_batch_flops(m, 2, T, 1);
  for (int cp : {2, 4}) {
    const MicroBatchFlops bal = micro_batch_flops(m, 2, T, 1, PlanCp{cp, CpComm::ring, true});
    EXPECT_DOUBLE_EQ(bal.linear, whole.linear / cp);
    EXPECT_DOUBLE_EQ(bal.lm_head, whole.lm_head / cp);
    EXPECT_DOUBLE_EQ(bal.attention, whole.attention / cp) << cp;
    EXPECT_DOUBLE_EQ(cp_rank_attention_pairs(T, PlanCp{cp, CpComm::ring, true}),
                     T * (T + 1) / 2.0 / cp);
    // Unbalanced: rank cp - 1's chunk of Tc rows sees the (cp - 1) Tc keys
    // before it and the causal triangle of its own.
    const double Tc = T / cp;
    const double last = Tc * (cp - 1) * Tc + Tc * (Tc + 1) / 2;
    EXPECT_DOUBLE_EQ(cp_rank_attention_pairs(T, PlanCp{cp, CpComm::ring, false}), last);
    const MicroBatchFlops unbal = micro_batch_flops(m, 2, T, 1, PlanCp{cp, CpComm::ring, false});
    EXPECT_DOUBLE_EQ(unbal.attention, 3 * 4.0 * 2 * 32 * last);  // L x 4 B C pairs
    EXPECT_GT(unbal.attention, bal.attention);
    // recompute=block reruns the rank's own attention.
    EXPECT_DOUBLE_EQ(
        recompute_flops(m, 2, T, 1, Recompute::block, PlanCp{cp, CpComm::ring, false}).attention,
        unbal.attention);
  }
}

// The activations a cp rank's model allocates (the CUDA model on the
// dry-run backend, its cp communicator one that moves nothing) are the
// planner's, in both modes, balanced or not, with tp; so is the state,
// sharded over fsdp x cp.
TEST(PlanContext, ActivationsAndStateAreWhatTheModelAllocates) {
  for (const ModelConfig& m0 : {matrix_model(), matrix_llama()})
    for (int cp : {2, 4})
      for (int tp : {1, 2})
        for (int fsdp : {1, 2})
          for (CpComm comm : {CpComm::allgather, CpComm::ring})
            for (bool balance : {true, false})
              for (Recompute r : {Recompute::none, Recompute::block}) {
                ModelConfig m = m0;
                m.block_size = 32;
                const int B = 2, T = 32;
                const ParallelDims d{1, fsdp, tp, 1, cp};
                ParallelPlan plan;
                plan.dtype = ComputeDType::bf16;
                plan.cp_comm = comm;
                plan.cp_load_balance = balance;
                const std::unique_ptr<Ops> ops = make_dry_run_ops();
                const DeviceMesh mesh = make_dry_run_mesh(d, d.world_size() - 1);
                const ParallelModel pm = parallelize(m, plan, mesh, *ops, {B, T, r});
                const PlanCp c{cp, comm, balance};
                const std::string at = std::string(to_string(m.arch)) + " " + d.str() + " " +
                                       to_string(comm) + (balance ? "" : " unbalanced") + " " +
                                       to_string(r);
                const int f = shard_degree(d);
                EXPECT_EQ(pm.runner->activation_bytes(),
                          predict_activation_bytes(
                              m, B, T, tp, true, PlanBackend::cuda, r, ComputeDType::bf16,
                              keeps_bf16_params(f, FsdpStage::parameters, true), c))
                    << at;
                const MemoryFigures state = pm.params->memory();
                const StateBytes want = predict_state_bytes(m, f, tp, 3, true, replica_degree(d));
                EXPECT_EQ(state.params, want.params) << at;
                EXPECT_EQ(state.grads, want.grads) << at;
                EXPECT_EQ(state.optimizer, want.optimizer) << at;
              }
}

// MPI's temporaries (the CPU plan) follow the gradients' groups: the DDP
// buckets' copies over dp x cp, the reduce-scatters' over fsdp x cp; stage
// 1 holds two blocks' in flight under cp, not three (memory_model.hpp).
TEST(PlanContext, MpiTemporariesFollowTheFoldedGroups) {
  const ModelConfig m = matrix_model();
  const UnitSizes u4 = unit_sizes(m, 1, 4);
  auto ws = [&](int dp, int fsdp, int cp, int stage) {
    PlanLayout l = cp_layout(cp, CpComm::ring, dp, fsdp, 1, 2);
    l.stage = stage;
    return predict_comm_workspace_bytes(m, l, 16, PlanBackend::cpu);
  };
  EXPECT_EQ(ws(1, 1, 2, 3), 46880 * 4);  // every bucket's all-reduce copy, over dp x cp = 2
  EXPECT_EQ(ws(1, 1, 2, 3), ws(2, 1, 1, 3));
  const int64_t slots = 2 * (u4.embed + u4.head + 2 * u4.block) * 4;
  EXPECT_EQ(ws(1, 2, 2, 3), slots);  // ZeRO over fsdp x cp = 4
  EXPECT_EQ(ws(1, 2, 2, 1), slots);
  EXPECT_EQ(ws(1, 4, 1, 1), 2 * (u4.embed + u4.head + 3 * u4.block) * 4);
  EXPECT_EQ(ws(2, 2, 2, 3), slots + u4.shard_total * 4);  // HSDP's replicas over dp = 2
}

// The activation plan the planner sums is the family's own with the cp
// fields set: T / cp rows, the lse as attention's saved state, and the
// layer's scratch.
TEST(PlanContext, ActivationsAreTheLlamaPlanOfARanksRows) {
  const Config cfg = config("llama3_8b_long");
  const ModelConfig& m = cfg.model;
  const int T = cfg.train.seq_len, cp = 8, tp = 2, NHl = m.n_head / tp;
  ActivationShape s;
  s.max_rows = 1;
  s.max_seq = T / cp;
  s.tp = tp;
  s.recompute = Recompute::block;
  s.dtype = ComputeDType::bf16;
  s.cp = cp;
  s.cp_mode = CpComm::ring;
  s.attention_saved = int64_t(NHl) * (T / cp);  // the global lse of the rank's rows
  s.attention_scratch = 0;                      // the cp layer holds its own
  s.cp_block_scratch = 0;                       // CUDA's kernels keep their tiles on chip
  const int64_t want = plan_llama_activations(m, s).bytes();
  EXPECT_EQ(predict_activation_bytes(m, 1, T, tp, true, PlanBackend::cuda, Recompute::block,
                                     ComputeDType::bf16, false, PlanCp{cp, CpComm::ring, true}),
            want);
  // Its K|V scratch: the ring's two (B, Tl, 2 KV hs) blocks and three of dK|dV.
  const int64_t kv = int64_t(T / cp) * 2 * (m.kv_heads() / tp) * m.head_size();
  EXPECT_EQ(plan_llama_activations(m, s).attention_cp.kv, 2 * kv);
  EXPECT_EQ(plan_llama_activations(m, s).attention_cp.dkv, 3 * kv);
}

TEST(PlanContext, InvalidLayoutsSayWhy) {
  Config cfg;
  cfg.model = matrix_model();
  cfg.train = matrix_train(8);
  const HardwareSpec hw = hardware("cpu_reference");
  // seq 16 cut into 2 x 16 balanced chunks: no.
  EXPECT_EQ(predict(cfg, hw, PlanCluster{16, 16}, cp_layout(16, CpComm::ring)).invalid,
            "cp=16 needs train.seq_len a multiple of 2 x cp = 32 (it is 16; "
            "parallel.cp_load_balance cuts each row into 2 cp chunks)");
  EXPECT_TRUE(
      predict(cfg, hw, PlanCluster{16, 16}, cp_layout(16, CpComm::ring, 1, 1, 1, 8, false))
          .invalid.empty());
  // 1 x 16 / 8 = 2 rows per cp rank do not split over tp = 4.
  cfg.train = matrix_train(1);
  EXPECT_EQ(predict(cfg, hw, PlanCluster{32, 32},
                    cp_layout(8, CpComm::ring, 1, 1, 4, 1, false))
                .invalid,
            "micro_batch x seq_len / cp = 2 rows per cp rank is not a multiple of tp=4");
  EXPECT_EQ(predict(cfg, hw, PlanCluster{8, 8}, cp_layout(2, CpComm::ring, 1, 1, 2, 1)).invalid,
            "dp x fsdp x cp x tp = 4 is not 8 devices");
}

// cp sits next to tp in the mesh: its group spans tp x cp ranks, intra-node
// while they fit a node; the gradients' groups span cp too. The ring's
// hops hide under the step's attention up to its time, the all-gathers
// not at all.
TEST(PlanContext, LinksAndOverlap) {
  const Config cfg = config("llama3_8b_long");
  const HardwareSpec hw = hardware("h100");
  PlanLayout l = cp_layout(4, CpComm::ring, 1, 8, 2, 1);
  const Prediction in_node = predict(cfg, hw, PlanCluster{64, 8}, l);
  ASSERT_TRUE(in_node.invalid.empty()) << in_node.invalid;
  EXPECT_FALSE(in_node.cp_inter);  // tp 2 x cp 4 = 8 ranks: one node
  EXPECT_TRUE(in_node.fsdp_inter);  // fsdp x cp x tp = 64
  EXPECT_DOUBLE_EQ(in_node.cp_ms, in_node.bytes.cp / hw.intra_busbw(false) * 1e3);
  EXPECT_DOUBLE_EQ(in_node.cp_exposed_ms,
                   std::max(0.0, in_node.cp_ms - in_node.attention_ms));
  l.cp = 8;
  l.fsdp = 4;
  const Prediction across = predict(cfg, hw, PlanCluster{64, 8}, l);
  EXPECT_TRUE(across.cp_inter);  // 16 ranks
  EXPECT_DOUBLE_EQ(across.cp_ms, across.bytes.cp / hw.inter_busbw() * 1e3);
  l.cp_comm = CpComm::allgather;
  const Prediction gathered = predict(cfg, hw, PlanCluster{64, 8}, l);
  EXPECT_DOUBLE_EQ(gathered.cp_exposed_ms, gathered.cp_ms);
  EXPECT_GT(gathered.step_ms, across.step_ms);
  // The attention the ring hides under: the slowest rank's, forward,
  // backward (twice) and recomputed (recompute=block), per step.
  const MicroBatchFlops f = micro_batch_flops(cfg.model, 1, cfg.train.seq_len, 2, l.context());
  EXPECT_NEAR(across.attention_ms,
              across.accum * 4 * f.attention / hw.achieved_flops(8) * 1e3, 1e-9 * across.attention_ms);
}

// Llama 3 8B at 131072 tokens a sequence (configs/llama3_8b_long.yaml):
// on 64 and on 512 H100s the planner cuts the sequences over cp ranks and
// says why; what it predicts fits. Without cp and tp one sequence's
// activations alone exceed the device.
TEST(PlanContext, Llama3LongContextPicksCpOn64And512H100s) {
  const Config cfg = config("llama3_8b_long");
  const HardwareSpec hw = hardware("h100");
  for (int devices : {64, 512}) {
    const Plan plan = make_plan(cfg, hw, PlanCluster{devices, 8}, {});
    const std::string at = "on " + std::to_string(devices);
    ASSERT_FALSE(plan.ranked.empty()) << at << ": " << plan.explanation;
    const Prediction& w = plan.ranked.front();
    EXPECT_GT(w.layout.cp, 1) << at << ": " << plan.explanation;
    EXPECT_LE(static_cast<double>(w.total_bytes()), hw.memory_bytes()) << at;
    EXPECT_EQ(w.activations,
              predict_activation_bytes(cfg.model, 1, cfg.train.seq_len, w.layout.tp, true,
                                       PlanBackend::cuda, Recompute::block, ComputeDType::bf16,
                                       keeps_bf16_params(shard_degree(w.layout.dims()),
                                                         FsdpStage::parameters, true),
                                       w.layout.context()))
        << at;
    EXPECT_GT(w.attention_ms, 0.5 * w.compute_ms) << at;  // attention dominates at 128K
    const std::string cut = "cp=" + std::to_string(w.layout.cp) + " cuts each 131072-token sequence";
    EXPECT_NE(plan.explanation.find(cut), std::string::npos) << plan.explanation;
    EXPECT_NE(plan.explanation.find("the fastest layout without it"), std::string::npos)
        << plan.explanation;
    EXPECT_NE(plan.explanation.find("Attention is "), std::string::npos) << plan.explanation;
    EXPECT_NE(plan.explanation.find("x cp=" + std::to_string(w.layout.cp) + " x tp="),
              std::string::npos)
        << plan.explanation;
    for (const Prediction& p : plan.ranked)
      EXPECT_FALSE(p.layout.cp == 1 && p.layout.tp == 1 && p.layout.pp == 1) << at << p.layout.str();
  }
  // Without cp, tp or pp one sequence's activations alone exceed the device.
  EXPECT_GT(static_cast<double>(predict_activation_bytes(
                cfg.model, 1, cfg.train.seq_len, 1, true, PlanBackend::cuda, Recompute::block,
                ComputeDType::bf16, false)),
            hw.memory_bytes());
  // On 512, a batch of 32 sequences feeds 32 data ranks: without cp the
  // other 16-fold is tp (at most 8) and a pipeline at one micro-batch.
  const Plan big = make_plan(cfg, hw, PlanCluster{512, 8}, {});
  EXPECT_NE(big.explanation.find("train.global_batch=32 sequences feed at most 32 data ranks"),
            std::string::npos)
      << big.explanation;
}

// The table and the JSON carry cp: a column, the layout's degree and mode,
// and the bytes under the trainer's keys.
TEST(PlanContext, TableAndJsonCarryCp) {
  const Config cfg = config("llama3_8b_long");
  const HardwareSpec hw = hardware("h100");
  const Plan plan = make_plan(cfg, hw, PlanCluster{64, 8}, {});
  const std::string text = format_plan(plan, cfg, hw, 5);
  EXPECT_NE(text.find("fsdp      cp   tp"), std::string::npos) << text;
  EXPECT_NE(text.find(":ring"), std::string::npos) << text;
  const nlohmann::json j = plan_json(plan, cfg, hw);
  const nlohmann::json& first = j["layouts"][0];
  EXPECT_EQ(first["cp"], plan.ranked.front().layout.cp);
  EXPECT_EQ(first["cp_comm"], to_string(plan.ranked.front().layout.cp_comm));
  EXPECT_DOUBLE_EQ(first["comm_bytes"]["cp"].get<double>(), plan.ranked.front().bytes.cp);
  const PlanLayout& l = plan.ranked.front().layout;
  EXPECT_DOUBLE_EQ(first["comm_bytes"][shard_key(l)].get<double>(), plan.ranked.front().bytes.fsdp);
  EXPECT_EQ(j["config"]["cp_comm"], "ring");
}

}  // namespace
}  // namespace gt
