// The planner's arithmetic (trainer/plan/): memory per rank against the
// real buffers (GPT and Llama activations here; ShardedParameters and both
// families' activations on every layout in tests/mpi/test_plan_memory_mpi.cpp),
// communication volumes against the formulas tests/layouts/layout_matrix.py
// checks the trainer's logged bytes with, FLOPs (by hand and against the
// GEMMs the models run), the hardware files, and the plan's choice for GPT-2
// 1.5B and Llama 3 8B and 70B (pipelines: test_plan_pipeline.cpp).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "kernels/core/attention_kernels.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "plan_test_models.hpp"
#include "test_util.hpp"
#include "trainer/model/gpt.hpp"
#include "trainer/model/llama.hpp"
#include "trainer/model/llama_activation_plan.hpp"
#include "trainer/model/make_model.hpp"
#include "trainer/plan/plan_command.hpp"
#include "trainer/plan/planner.hpp"
#include "trainer/profile/model_flops.hpp"
#include "trainer/profile/profiler.hpp"

namespace gt {
namespace {

using test::error_message;
using test::run_command;

using test::config;
using test::gpt2_xl;
using test::hardware;
using test::matrix_llama;
using test::matrix_mixtral;
using test::matrix_model;
using test::matrix_train;

TEST(PlanMemory, StateBytesByHandForTheMatrixModel) {
  // Units of one tp rank as layout_matrix.unit_sizes pads them: embed 8704,
  // block 12704, head 64 floats; 46880 in all.
  const ModelConfig m = matrix_model();
  const StateBytes dp = predict_state_bytes(m, 1, 1, 3);
  EXPECT_EQ(dp.params, 46880 * 4);
  EXPECT_EQ(dp.grads, 46880 * 4);
  EXPECT_EQ(dp.optimizer, 2 * 46880 * 4);
  // ZeRO-1 over 2: full params and grads + the reduced shard, moments sharded.
  const StateBytes z1 = predict_state_bytes(m, 2, 1, 1);
  EXPECT_EQ(z1.params, 46880 * 4);
  EXPECT_EQ(z1.grads, (46880 + 46880 / 2) * 4);
  EXPECT_EQ(z1.optimizer, 46880 * 4);
  // ZeRO-3 over 2: shards + four gather buffers (embed, head, 2 blocks) and
  // four reduce-scatter buffers with their half-size outputs.
  const StateBytes z3 = predict_state_bytes(m, 2, 1, 3);
  const int64_t bufs = 8704 + 64 + 2 * 12704;
  EXPECT_EQ(z3.params, (46880 / 2 + bufs) * 4);
  EXPECT_EQ(z3.grads, (46880 / 2 + bufs + bufs / 2) * 4);
  EXPECT_EQ(z3.optimizer, 46880 * 4);
}

TEST(PlanMemory, ActivationsMatchGptAllocateOnCpu) {
  auto ops = make_cpu_ops(1);
  for (const ModelConfig& m : {matrix_model(), [] {
         ModelConfig o;
         o.n_layer = 2;
         o.n_head = 3;
         o.n_embd = 33;
         o.vocab_size = 101;
         o.block_size = 13;
         return o;
       }()})
    for (int B : {1, 3})
      for (int T : {5, m.block_size})
        for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16}) {
          GPT model(m, *ops, B, T, Recompute::none, dtype);
          EXPECT_EQ(
              model.activation_bytes(),
              predict_activation_bytes(m, B, T, 1, true, PlanBackend::cpu, Recompute::none, dtype))
              << "n_embd=" << m.n_embd << " B=" << B << " T=" << T << " " << to_string(dtype);
        }
}

// The planner sums Llama's own plan: what Llama::allocate takes, in every
// recompute mode and dtype (grouped-query attention, an MLP width and a
// vocabulary of their own; the layouts over tp in tests/mpi).
TEST(PlanMemory, ActivationsMatchLlamaAllocateOnCpu) {
  auto ops = make_cpu_ops(1);
  ModelConfig odd = matrix_llama();
  odd.n_layer = 2;
  odd.n_head = 4;
  odd.n_kv_head = 1;
  odd.n_embd = 24;
  odd.ffn_hidden = 40;
  odd.vocab_size = 101;
  odd.block_size = 13;
  for (const ModelConfig& m : {matrix_llama(), odd})
    for (int B : {1, 3})
      for (int T : {5, m.block_size})
        for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16})
          for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block}) {
            Llama model(m, *ops, B, T, r, dtype);
            EXPECT_EQ(model.activation_bytes(),
                      predict_activation_bytes(m, B, T, 1, true, PlanBackend::cpu, r, dtype))
                << "n_embd=" << m.n_embd << " B=" << B << " T=" << T << " " << to_string(dtype)
                << " recompute " << to_string(r);
          }
}

// Mixtral's plan adds the mixture's buffers (MixtureOfExperts::planned_bytes)
// and drops the dense MLP's, in every dtype (bf16: the experts' weights
// rounded into a scratch, the local store keeps no bf16 copy) and recompute
// mode (the mixture keeps its state whatever is recomputed).
TEST(PlanMemory, ActivationsMatchMixtralAllocateOnCpu) {
  auto ops = make_cpu_ops(1);
  const ModelConfig m = matrix_mixtral();
  for (int B : {1, 3})
    for (int T : {5, m.block_size})
      for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16})
        for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block}) {
          Llama model(m, *ops, B, T, r, dtype);
          EXPECT_EQ(model.activation_bytes(),
                    predict_activation_bytes(m, B, T, 1, true, PlanBackend::cpu, r, dtype))
              << "B=" << B << " T=" << T << " " << to_string(dtype) << " recompute "
              << to_string(r);
        }
}

TEST(PlanMemory, CudaKeepsRowStatisticsNotT2Probabilities) {
  ModelConfig m = matrix_model();  // L 3, NH 4, C 32, V 256
  m.block_size = 1024;
  const int64_t cpu = predict_activation_bytes(m, 4, 1024, 1, true, PlanBackend::cpu);
  const int64_t gpu = predict_activation_bytes(m, 4, 1024, 1, true, PlanBackend::cuda);
  // Attention state, saved per layer plus one scratch: B*NH*T^2 floats on the
  // CPU, B*NH*T (the flash kernel's row statistics) on the GPU.
  const int64_t cpu_att = (3 + 1) * int64_t(4) * 4 * 1024 * 1024 * 4;
  const int64_t gpu_att = (3 + 1) * int64_t(4) * 4 * 1024 * 4;
  EXPECT_EQ(gpu, cpu - cpu_att + gpu_att);
}

// bf16 storage halves what the model keeps; the fp32 accumulators, staging
// rows and the bf16 weight and bias copies come on top (exact per-buffer agreement with
// GPT::allocate is PlanMemory.ActivationsMatchTheModelByteForByte).
TEST(PlanMemory, Bf16StorageHalvesTheKeptActivations) {
  ModelConfig m = matrix_model();  // L 3, NH 4, C 32, V 256
  m.block_size = 1024;
  const int64_t R = 4 * 1024, C = 32, L = 3, V = 256;
  const int64_t fp32 = predict_activation_bytes(m, 4, 1024, 1, true, PlanBackend::cuda);
  const int64_t bf16 = predict_activation_bytes(m, 4, 1024, 1, true, PlanBackend::cuda,
                                                Recompute::none, ComputeDType::bf16);
  // Kept per layer: ln1, ln2, atty (C), qkv (3C), res2, res3 (C), fch, fch_gelu (4C) = 16C.
  const int64_t kept = L * R * 16 * C + 2 * R * C /* encoded, lnf */ + R * V /* logits */;
  const int64_t grads = R * (C + 4 * C + 3 * C) + 2 * R * C /* datty, dfch, dqkv; proj_tmp, dln */;
  const int64_t extra = R * C * 4 /* the tp layers' fp32 sum rows */ +
                        2 * (R * C + V * C + 4 * C) /* bf16 copies: rows, weight, bias */;
  EXPECT_EQ(bf16, fp32 - 2 * (kept + grads) + extra);
}

TEST(PlanMemory, MpiTemporariesFollowTheSchedule) {
  const ModelConfig m = matrix_model();  // units: embed 8704, block 12704, head 64, total 46880
  auto ws = [&](int dp, int fsdp, int tp, int stage, bool overlap = true,
                PlanBackend b = PlanBackend::cpu) {
    PlanLayout l;
    l.dp = dp;
    l.fsdp = fsdp;
    l.tp = tp;
    l.stage = stage;
    l.micro_batch = 2;
    l.tp_overlap = overlap;
    return predict_comm_workspace_bytes(m, l, 16, b);
  };
  EXPECT_EQ(ws(1, 1, 1, 3), 0);
  EXPECT_EQ(ws(4, 1, 1, 3), 46880 * 4);               // every bucket's all-reduce copy
  EXPECT_EQ(ws(1, 2, 1, 3), 0);                       // two-rank reduce-scatters: none measured
  EXPECT_EQ(ws(2, 2, 1, 3), 46880 / 2 * 4);           // HSDP: the shards' all-reduce copies
  EXPECT_EQ(ws(1, 4, 1, 3), 2 * (8704 + 64 + 2 * 12704) * 4);  // the four slots, two copies
  EXPECT_EQ(ws(1, 4, 1, 1), std::min<int64_t>(2 * 46880, 2 * (8704 + 64 + 3 * 12704)) * 4);
  EXPECT_EQ(ws(1, 1, 2, 3, false), 2 * 2 * 16 * 32 * 4);  // plain tp reduce-scatter
  EXPECT_EQ(ws(1, 1, 2, 3, true), 0);                 // the rings need none
  EXPECT_EQ(ws(4, 1, 1, 3, true, PlanBackend::cuda), 0);  // NCCL: in the baseline
  // bf16 reductions: MPI's copies of the gradients are bf16 (the tp sums stay fp32).
  auto ws16 = [&](int dp, int fsdp, int tp, bool overlap) {
    PlanLayout l;
    l.dp = dp;
    l.fsdp = fsdp;
    l.tp = tp;
    l.micro_batch = 2;
    l.tp_overlap = overlap;
    l.reduce_dtype = ComputeDType::bf16;
    return predict_comm_workspace_bytes(m, l, 16, PlanBackend::cpu);
  };
  EXPECT_EQ(ws16(4, 1, 1, true), 46880 * 2);
  EXPECT_EQ(ws16(2, 2, 1, true), 46880 / 2 * 2);
  EXPECT_EQ(ws16(1, 1, 2, false), 2 * 2 * 16 * 32 * 4);
}

// {dp, fsdp, tp, stage, micro, dp bytes, fsdp bytes, tp bytes}, as
// layout_matrix.expected_bytes prints them, checked against the planner's
// comm_bytes_per_step at parallel.reduce_dtype `reduce`.
struct CommCase {
  int dp, fsdp, tp, stage, micro;
  double b_dp, b_fsdp, b_tp;
};
void expect_comm_bytes(const std::vector<CommCase>& cases, ComputeDType reduce,
                       const ModelConfig& m = matrix_model()) {
  for (const CommCase& c : cases) {
    PlanLayout l;
    l.dp = c.dp;
    l.fsdp = c.fsdp;
    l.tp = c.tp;
    l.stage = c.stage;
    l.micro_batch = c.micro;
    l.reduce_dtype = reduce;
    const CommBytes b = comm_bytes_per_step(m, matrix_train(c.micro), l, PlanBackend::cpu);
    EXPECT_DOUBLE_EQ(b.dp, c.b_dp) << l.str();
    EXPECT_DOUBLE_EQ(b.fsdp, c.b_fsdp) << l.str();
    EXPECT_NEAR(b.tp, c.b_tp, 1e-6 * c.b_tp) << l.str();
  }
}

// The layout matrix's layouts at accumulation 1 and 2.
TEST(PlanComm, BytesEqualLayoutMatrixFormulas) {
  expect_comm_bytes(
      {
          {2, 1, 1, 3, 4, 187520.0, 0.0, 0.0},
          {2, 2, 1, 3, 2, 93760.0, 212928.0, 0.0},
          {2, 2, 1, 3, 1, 93760.0, 425856.0, 0.0},
          {2, 2, 1, 1, 1, 93760.0, 187520.0, 0.0},
          {2, 1, 2, 3, 2, 96064.0, 0.0, 119296.0},
          {4, 1, 1, 3, 1, 281280.0, 0.0, 0.0},
          {1, 2, 1, 1, 2, 0.0, 187520.0, 0.0},
          {1, 2, 1, 2, 2, 0.0, 281280.0, 0.0},
          {1, 2, 1, 3, 4, 0.0, 212928.0, 0.0},
          {1, 2, 2, 3, 2, 0.0, 217920.0, 123136.0},
          {1, 2, 2, 2, 4, 0.0, 96064.0, 119296.0},
          {1, 2, 2, 2, 2, 0.0, 144096.0, 123136.0},
          {1, 4, 1, 3, 1, 0.0, 638784.0, 0.0},
          {1, 1, 2, 3, 8, 0.0, 0.0, 234752.0},
          {1, 1, 4, 3, 4, 0.0, 0.0, 352128.0},
      },
      ComputeDType::fp32);
}

// layout_matrix.expected_bytes with --arch llama: Llama's units
// (embed_tokens; nine tensors a block; norm and the untied lm_head) and its
// tp-partial RMSNorm weights; the layout matrix holds the trainer's logged
// bytes to the same formula (tests/CMakeLists.txt, layout_llama_*).
TEST(PlanComm, LlamaBytesEqualLayoutMatrixFormulas) {
  expect_comm_bytes(
      {
          {2, 1, 1, 3, 4, 177024.0, 0.0, 0.0},
          {2, 2, 1, 3, 2, 88512.0, 195584.0, 0.0},
          {2, 1, 2, 3, 2, 88960.0, 0.0, 116352.0},
          {1, 2, 2, 3, 2, 0.0, 196608.0, 117248.0},
          {1, 1, 2, 3, 8, 0.0, 0.0, 231808.0},
          {1, 1, 4, 3, 4, 0.0, 0.0, 347712.0},
          {1, 2, 2, 2, 4, 0.0, 88960.0, 116352.0},
          {1, 2, 1, 1, 2, 0.0, 177024.0, 0.0},
          {1, 4, 1, 3, 1, 0.0, 586752.0, 0.0},
      },
      ComputeDType::fp32, matrix_llama());
}

// Llama's tp traffic by hand: the same (8L + 4) sequence-parallel
// collectives of (t-1)/t of the (B*T, C) rows as GPT-2 (two column- and two
// row-parallel layers a block, the embedding and the LM head) and the
// cross-entropy's all-reduces; the tp-partial gradients all-reduced once are
// the RMSNorm weights, 2C a block and C for the final norm.
TEST(PlanComm, LlamaTpBytesByHand) {
  const ModelConfig m = matrix_llama();
  const double L = 3, C = 32, tp = 2, R = 8 * 16;
  PlanLayout l;
  l.tp = 2;
  l.micro_batch = 8;  // one micro-batch per step
  const double chunk = R / tp * C * 4;
  const double ce = 2 * (tp - 1) / tp * 3 * R * 4;
  const double partial = 2 * (tp - 1) / tp * 4 * (2 * C * L + C);
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(m, matrix_train(8), l, PlanBackend::cpu).tp,
                   (8 * L + 4) * (tp - 1) * chunk + ce + partial);
  // GPT-2 of the same width and depth differs only in what is tp-partial:
  // its LayerNorms' biases, wpe and ln_f's bias too.
  const double P = 16;  // block_size: wpe's rows
  const double gpt_partial = 2 * (tp - 1) / tp * 4 * (4 * C * L + P * C + 2 * C);
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(matrix_model(), matrix_train(8), l, PlanBackend::cpu).tp -
                       comm_bytes_per_step(m, matrix_train(8), l, PlanBackend::cpu).tp,
                   gpt_partial - partial);
}

// parallel.reduce_dtype=bf16: the gradients' all-reduces (dp) and
// reduce-scatters (fsdp) at 2 bytes an element, the parameters' all-gathers
// and tp's traffic unchanged.
TEST(PlanComm, Bf16ReductionsHalveTheGradientBytes) {
  expect_comm_bytes(
      {
          {2, 1, 1, 3, 4, 93760.0, 0.0, 0.0},
          {2, 2, 1, 3, 2, 46880.0, 166048.0, 0.0},
          {2, 2, 1, 1, 1, 46880.0, 140640.0, 0.0},
          {1, 2, 1, 1, 2, 0.0, 140640.0, 0.0},
          {1, 2, 1, 2, 2, 0.0, 187520.0, 0.0},
          {1, 2, 1, 3, 4, 0.0, 166048.0, 0.0},
          {1, 2, 2, 2, 4, 0.0, 72048.0, 119296.0},
          {2, 1, 2, 3, 2, 48032.0, 0.0, 119296.0},
      },
      ComputeDType::bf16);
}

// The GPU plan is the bf16 model: its forward all-gathers move bf16 rows
// (layout_matrix.expected_bytes(..., dtype="bf16")), the rest as fp32.
TEST(PlanComm, Bf16ActivationGathersOnTheGpuPlan) {
  struct Case {
    int dp, tp, micro;
    Recompute recompute;
    double b_tp;
  };
  const Case cases[] = {{1, 2, 8, Recompute::none, 206080.0},
                        {2, 2, 2, Recompute::none, 104960.0},
                        {1, 4, 4, Recompute::none, 309120.0},
                        {1, 2, 8, Recompute::block, 255232.0},
                        {1, 2, 8, Recompute::mlp, 218368.0}};
  for (const Case& c : cases) {
    PlanLayout l;
    l.dp = c.dp;
    l.tp = c.tp;
    l.micro_batch = c.micro;
    TrainConfig t = matrix_train(c.micro);
    t.recompute = c.recompute;
    EXPECT_NEAR(comm_bytes_per_step(matrix_model(), t, l, PlanBackend::cuda).tp, c.b_tp,
                1e-6 * c.b_tp)
        << l.str() << " recompute " << to_string(c.recompute);
  }
}

TEST(PlanFlops, MatmulsAttentionAndHead) {
  const ModelConfig m = matrix_model();
  const MicroBatchFlops f = micro_batch_flops(m, 2, 16, 1);
  EXPECT_DOUBLE_EQ(f.linear, 3 * 2.0 * 32 * 12 * 32 * 32);
  EXPECT_DOUBLE_EQ(f.attention, 3 * 4.0 * 2 * 32 * 16 * 17 / 2);
  EXPECT_DOUBLE_EQ(f.lm_head, 2.0 * 32 * 32 * 256);
  // tp splits every term evenly; the head's rows are the vocabulary padded
  // for tp 4 (512).
  const MicroBatchFlops f4 = micro_batch_flops(m, 2, 16, 4);
  EXPECT_DOUBLE_EQ(f4.linear + f4.attention, (f.linear + f.attention) / 4);
  EXPECT_DOUBLE_EQ(f4.lm_head, 2.0 * 32 * 32 * 512 / 4);
  TrainConfig t = matrix_train(8);
  // MFU's numerator is the trainer's (model_flops()): 6N + 12·L·T·C per token
  // with N = 12·L·C² + V·C and the full T x T attention, x 8 rows x 16 tokens.
  const double N = 12.0 * 3 * 32 * 32 + 256.0 * 32;
  EXPECT_DOUBLE_EQ(model_flops_per_step(m, t), (6 * N + 12.0 * 3 * 16 * 32) * 8 * 16);
  EXPECT_DOUBLE_EQ(model_flops_per_step(m, t), model_flops(m, 16).per_token() * 8 * 16);
}

// Llama by hand: per block q|k|v C(Q + 2K), o_proj QC, gate|up 2CF and
// down FC; attention over the query heads' Q = C features; the untied head.
TEST(PlanFlops, LlamaMatmulsAttentionAndHead) {
  const ModelConfig m = matrix_llama();
  const double L = 3, R = 2 * 16, C = 32, Q = 32, K = 16, F = 64, V = 256;
  const double block = C * (Q + 2 * K) + Q * C + 3 * C * F;
  const MicroBatchFlops f = micro_batch_flops(m, 2, 16, 1);
  EXPECT_DOUBLE_EQ(f.linear, L * 2 * R * block);
  EXPECT_DOUBLE_EQ(f.attention, L * 4.0 * 2 * Q * 16 * 17 / 2);
  EXPECT_DOUBLE_EQ(f.lm_head, 2 * R * C * V);
  const MicroBatchFlops f4 = micro_batch_flops(m, 2, 16, 4);
  EXPECT_DOUBLE_EQ(f4.linear + f4.attention, (f.linear + f.attention) / 4);
  EXPECT_DOUBLE_EQ(f4.lm_head, 2 * R * C * 512 / 4);  // padded for tp 4
  const MicroBatchFlops mlp = recompute_flops(m, 2, 16, 2, Recompute::mlp);
  EXPECT_DOUBLE_EQ(mlp.linear, L * 2 * R * 2 * C * F / 2);  // gate|up
  EXPECT_EQ(mlp.attention, 0.0);
  const MicroBatchFlops again = recompute_flops(m, 2, 16, 2, Recompute::block);
  EXPECT_DOUBLE_EQ(again.linear, L * 2 * R * (C * (Q + 2 * K) + Q * C + 2 * C * F) / 2);
  EXPECT_DOUBLE_EQ(again.attention, micro_batch_flops(m, 2, 16, 2).attention);
  EXPECT_EQ(again.lm_head, 0.0);
  // MFU's numerator: 6N + 12·L·T·C per token, N = L·block + V·C.
  const double N = L * block + V * C;
  EXPECT_DOUBLE_EQ(model_flops_per_step(m, matrix_train(8)), (6 * N + 12 * L * 16 * C) * 8 * 16);
}

// Mixtral by hand: the active weights, k of the E experts' gate, up and
// down (3kCF) and the router's EC per block, in place of Llama's 3CF.
TEST(PlanFlops, MixtralCountsTheActiveExpertsAndTheRouter) {
  const ModelConfig m = matrix_mixtral();  // L 3, C 32, Q 32, K 16, F 32, E 4, k 2
  const double L = 3, R = 2 * 16, C = 32, Q = 32, K = 16, F = 32, E = 4, k = 2, V = 256;
  const double block = C * (Q + 2 * K) + Q * C + 3 * k * C * F + E * C;
  EXPECT_DOUBLE_EQ(block_matmuls(m).total(), block);
  EXPECT_DOUBLE_EQ(micro_batch_flops(m, 2, 16, 1).linear, L * 2 * R * block);
  // The mixture is not split by tp, but each tp rank routes R / tp rows.
  EXPECT_DOUBLE_EQ(micro_batch_flops(m, 2, 16, 2).linear, L * 2 * R * block / 2);
  // Recomputation reruns no expert: the mixture keeps its activations.
  EXPECT_EQ(recompute_flops(m, 2, 16, 1, Recompute::mlp).linear, 0.0);
  const double N = L * block + V * C;
  EXPECT_DOUBLE_EQ(model_flops_per_step(m, matrix_train(8)), (6 * N + 12 * L * 16 * C) * 8 * 16);
}

// The step model's matmul FLOPs are the GEMMs each family's model runs
// (recorded by the profiler on the CPU): forward and backward three times
// the forward's, and what train.recompute adds is what its backward reruns.
TEST(PlanFlops, MatmulsAreTheGemmsEachModelRuns) {
  auto gemm_flops = [](const ModelConfig& m, int B, int T, Recompute r) {
    auto ops = make_cpu_ops(1);
    Profiler prof(ProfileSchedule{1, 1}, false, 0);
    prof.observe(*ops);
    const std::unique_ptr<CausalLM> model = make_model(m, *ops, B, T, r);
    std::vector<int32_t> tokens(static_cast<size_t>(B) * T, 1);
    prof.begin_step(0);
    model->forward(tokens.data(), tokens.data(), B, T, 1.f / (B * T));
    model->backward();
    prof.end_step();
    double sum = 0;
    for (const OpStat& o : prof.stats().ops)
      if (o.cls == OpClass::gemm) sum += o.flops;
    return sum;
  };
  for (const ModelConfig& m : {matrix_model(), matrix_llama(), matrix_mixtral()}) {
    const int B = 2, T = 16;
    const MicroBatchFlops f = micro_batch_flops(m, B, T, 1);
    const double none = gemm_flops(m, B, T, Recompute::none);
    EXPECT_NEAR(none, 3 * (f.linear + f.lm_head), 1e-9 * none) << to_string(m.arch);
    for (Recompute r : {Recompute::mlp, Recompute::block})
      EXPECT_NEAR(gemm_flops(m, B, T, r) - none, recompute_flops(m, B, T, 1, r).linear, 1e-9 * none)
          << to_string(m.arch) << " recompute " << to_string(r);
  }
}

TEST(PlanFlops, RecomputeRepeatsPartOfTheForward) {
  const ModelConfig m = matrix_model();
  const MicroBatchFlops f = micro_batch_flops(m, 2, 16, 2);
  const MicroBatchFlops none = recompute_flops(m, 2, 16, 2, Recompute::none);
  EXPECT_EQ(none.total(), 0.0);
  const MicroBatchFlops mlp = recompute_flops(m, 2, 16, 2, Recompute::mlp);
  EXPECT_DOUBLE_EQ(mlp.linear, 3 * 2.0 * 32 * 4 * 32 * 32 / 2);  // c_fc: L x 2 R 4C C / tp
  EXPECT_EQ(mlp.attention, 0.0);
  const MicroBatchFlops block = recompute_flops(m, 2, 16, 2, Recompute::block);
  EXPECT_DOUBLE_EQ(block.linear, 3 * 2.0 * 32 * 8 * 32 * 32 / 2);  // c_attn, c_proj, c_fc
  EXPECT_DOUBLE_EQ(block.attention, f.attention);
  EXPECT_EQ(block.lm_head, 0.0);
  // MFU's numerator is the model's, whatever is recomputed.
  TrainConfig t = matrix_train(8);
  const double model = model_flops_per_step(m, t);
  t.recompute = Recompute::block;
  EXPECT_EQ(model_flops_per_step(m, t), model);
}

TEST(PlanComm, RecomputeRepeatsItsTpCollectives) {
  PlanLayout l;
  l.tp = 2;
  l.micro_batch = 4;
  TrainConfig t = matrix_train(4);  // 2 micro-batches per step
  const double none = comm_bytes_per_step(matrix_model(), t, l, PlanBackend::cpu).tp;
  // One (t-1)/t chunk of the (B*T, C) activations per repeated collective.
  const double chunk = 4.0 * 16 / 2 * 32 * 4;
  t.recompute = Recompute::mlp;  // c_fc's all-gather per block
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(matrix_model(), t, l, PlanBackend::cpu).tp,
                   none + 2 * 3 * chunk);
  t.recompute = Recompute::block;  // and c_attn's all-gather, attn.c_proj's reduce-scatter
  EXPECT_DOUBLE_EQ(comm_bytes_per_step(matrix_model(), t, l, PlanBackend::cpu).tp,
                   none + 2 * 3 * 3 * chunk);
}

TEST(Planner, RecomputeTradesStepTimeForActivationMemory) {
  Config cfg = gpt2_xl();
  PlanLayout l;
  l.dp = 8;
  l.micro_batch = 4;
  Prediction previous;
  for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block}) {
    cfg.train.recompute = r;
    const Prediction p = predict(cfg, hardware("h100"), PlanCluster{8, 8}, l);
    ASSERT_TRUE(p.invalid.empty()) << p.invalid;
    // dp = 8, fsdp = 1: the store keeps the bf16 weights, no per-GEMM copy.
    EXPECT_EQ(p.activations,
              predict_activation_bytes(cfg.model, 4, cfg.train.seq_len, 1, true, PlanBackend::cuda,
                                       r, ComputeDType::bf16, true));
    if (r != Recompute::none) {
      EXPECT_LT(p.activations, previous.activations) << to_string(r);
      EXPECT_GT(p.compute_ms, previous.compute_ms) << to_string(r);
      EXPECT_LT(p.mfu, previous.mfu) << to_string(r);  // same model FLOPs, longer step
    }
    previous = p;
  }
}

// runtime.fp8 on an H100: the blocks' linear GEMMs at twice the bf16 rate,
// the casts' traffic added; fp8_min_dim above every width leaves the plan
// bf16's except nothing; memory does not change (fp8 keeps no state).
TEST(Planner, Fp8SpeedsUpTheLinearGemmsAndCountsItsCasts) {
  Config cfg = gpt2_xl();
  cfg.runtime.dtype = ComputeDType::bf16;
  PlanLayout l;
  l.dp = 8;
  l.micro_batch = 4;
  const HardwareSpec hw = hardware("h100");
  const Prediction bf16 = predict(cfg, hw, PlanCluster{8, 8}, l);
  cfg.runtime.fp8 = Fp8Recipe::tensorwise;
  const Prediction fp8 = predict(cfg, hw, PlanCluster{8, 8}, l);
  ASSERT_TRUE(fp8.invalid.empty()) << fp8.invalid;
  EXPECT_LT(fp8.compute_ms, bf16.compute_ms);
  EXPECT_GT(fp8.memory_ms, bf16.memory_ms);
  EXPECT_LT(fp8.step_ms, bf16.step_ms);
  EXPECT_EQ(fp8.total_bytes(), bf16.total_bytes());
  // The compute saved is the linear layers' time less that time at the
  // fp8/bf16 peak ratio (1978.9 / 989.4, about 2): all four block linears of
  // GPT-2 are fp8 (min_dim 0), the LM head and attention are not.
  const MicroBatchFlops f = micro_batch_flops(cfg.model, 4, cfg.train.seq_len, 1);
  const double linear_ms = 3.0 * f.linear / hw.achieved_flops(8) * 1e3 * fp8.accum;
  EXPECT_NEAR(bf16.compute_ms - fp8.compute_ms,
              linear_ms * (1.0 - hw.bf16_tflops / hw.fp8_tflops), 1e-6 * linear_ms);
  const Fp8Work w = fp8_work(cfg.model, 4, cfg.train.seq_len, 1, 0);
  EXPECT_DOUBLE_EQ(w.linear_share, 1.0);
  // By hand, one block linear c_fc (4C, C) at R = 4 x 1024 rows: x R·C, W
  // 4C·C, dy R·4C elements, each twice (two GEMMs), 4 bytes each, less the
  // 2-byte amax pass of a forward input or output gradient whose producer
  // takes it (all but c_attn's dy, from attention, and attn.c_proj's x).
  const double R = 4.0 * cfg.train.seq_len, C = cfg.model.n_embd;
  const double c_fc = 4.0 * 2.0 * (R * C + 4 * C * C + R * 4 * C) - 2.0 * (R * C + R * 4 * C);
  const double c_attn = 4.0 * 2.0 * (R * C + 3 * C * C + R * 3 * C) - 2.0 * R * C;
  const double attn_proj = 4.0 * 2.0 * (R * C + C * C + R * C) - 2.0 * R * C;
  const double mlp_proj = 4.0 * 2.0 * (R * 4 * C + 4 * C * C + R * C) - 2.0 * (R * 4 * C + R * C);
  EXPECT_DOUBLE_EQ(w.cast_bytes, cfg.model.n_layer * (c_fc + c_attn + attn_proj + mlp_proj));
  // Rowwise takes the same passes at tp = 1; at tp = 2 the rows a gather
  // brings (c_attn's and c_fc's inputs, the projections' output gradients,
  // R·C each) are scaled in passes of their own.
  EXPECT_DOUBLE_EQ(fp8_work(cfg.model, 4, cfg.train.seq_len, 1, 0, {}, true).cast_bytes,
                   w.cast_bytes);
  EXPECT_DOUBLE_EQ(fp8_work(cfg.model, 4, cfg.train.seq_len, 2, 0, {}, true).cast_bytes -
                       fp8_work(cfg.model, 4, cfg.train.seq_len, 2, 0).cast_bytes,
                   cfg.model.n_layer * 2.0 * 4 * R * C);
  EXPECT_NEAR(fp8.memory_ms - bf16.memory_ms, fp8.accum * w.cast_bytes / hw.memory_bytes_per_s(8) * 1e3,
              1e-9 * fp8.memory_ms);
  // fp8_min_dim past C: no layer is fp8, the plan is bf16's.
  cfg.runtime.fp8_min_dim = cfg.model.n_embd + 1;
  const Prediction none = predict(cfg, hw, PlanCluster{8, 8}, l);
  EXPECT_DOUBLE_EQ(none.step_ms, bf16.step_ms);
  // A mixture's experts stay bf16: only attention's qkv and out are fp8.
  Config mix = cfg;
  mix.model.arch = ModelArch::mixtral;
  mix.model.n_experts = 8;
  mix.model.experts_per_token = 2;
  mix.model.n_kv_head = mix.model.n_head;
  const BlockMatmuls b = block_matmuls(mix.model);
  EXPECT_DOUBLE_EQ(fp8_work(mix.model, 4, 1024, 1, 0).linear_share, (b.qkv + b.out) / b.total());
}

TEST(PlanHardware, FilesLoadAndTyposAreErrors) {
  for (const char* name : {"h100", "h200", "a100", "cpu_reference"}) {
    const HardwareSpec hw = hardware(name);
    EXPECT_GT(hw.peak_flops(), 0) << name;
    EXPECT_GT(hw.memory_bytes(), 0) << name;
  }
  EXPECT_EQ(hardware("h100").backend, PlanBackend::cuda);
  EXPECT_DOUBLE_EQ(hardware("h100").peak_flops(), 989.4e12);
  EXPECT_EQ(hardware("cpu_reference").backend, PlanBackend::cpu);
  const std::string path = testing::TempDir() + "/hw_typo.yaml";
  std::ofstream(path) << "name: x\nbf16_tflop: 1\n";
  EXPECT_NE(error_message([&] { load_hardware(path); }).find("unknown key 'bf16_tflop'"),
            std::string::npos);
  std::ofstream(path) << "name: x\nbf16_tflops: 1\n";
  EXPECT_NE(error_message([&] { load_hardware(path); }).find("missing key"), std::string::npos);
}

TEST(PlanHardware, BenchPeaksReplaceTheEfficiencyAssumption) {
  HardwareSpec hw = hardware("h100");
  const double assumed = hw.achieved_flops(8);
  EXPECT_DOUBLE_EQ(assumed, 989.4e12 * hw.compute_efficiency);
  const std::string path = testing::TempDir() + "/peaks.json";
  std::ofstream(path) << R"({"gemm_flops": 6.0e14, "memcpy_bytes_per_s": 2.5e12,
                            "all_reduce_busbw": 3.5e11, "all_gather_busbw": 3.6e11,
                            "other": "ignored"})";
  apply_bench_peaks(hw, path);
  EXPECT_DOUBLE_EQ(hw.achieved_flops(8), 6.0e14);
  EXPECT_DOUBLE_EQ(hw.intra_busbw(true), 3.5e11);
  EXPECT_DOUBLE_EQ(hw.intra_busbw(false), 3.6e11);
  EXPECT_DOUBLE_EQ(hw.inter_busbw(), 50e9 * hw.comm_efficiency);  // bench runs on one node
  EXPECT_NE(hw.efficiency_note().find("measured by bench"), std::string::npos);
}

TEST(Planner, InvalidLayoutsSayWhy) {
  Config cfg = gpt2_xl();  // 25 heads: no tp > 1 divides them
  PlanLayout l;
  l.tp = 2;
  l.dp = 32;
  l.micro_batch = 4;
  const Prediction p = predict(cfg, hardware("h100"), PlanCluster{64, 8}, l);
  EXPECT_NE(p.invalid.find("tp=2 does not divide model.n_head=25"), std::string::npos) << p.invalid;
  l.tp = 1;
  l.dp = 64;
  l.micro_batch = 3;
  EXPECT_NE(predict(cfg, hardware("h100"), PlanCluster{64, 8}, l).invalid.find("global_batch"),
            std::string::npos);
}

// A Llama prediction is Llama's: its activation plan (flash attention's row
// statistics for the n_head / tp query heads, bf16), its FLOPs and its
// tp-partial gradients, not GPT-2's of the same depth and width.
TEST(Planner, LlamaPredictionsAreLlamas) {
  const Config cfg = config("llama3_8b");
  const HardwareSpec hw = hardware("h100");
  PlanLayout l;
  l.dp = 2;
  l.fsdp = 2;
  l.tp = 2;
  l.micro_batch = 1;
  const Prediction p = predict(cfg, hw, PlanCluster{8, 8}, l);
  ASSERT_TRUE(p.invalid.empty()) << p.invalid;
  const ModelConfig& m = cfg.model;
  const int T = cfg.train.seq_len;
  ActivationShape s;
  s.max_rows = 1;
  s.max_seq = T;
  s.tp = 2;
  s.recompute = cfg.train.recompute;
  s.dtype = ComputeDType::bf16;
  s.attention_saved = attention_saved_elems(Device::cuda, 1, m.n_head / 2, T);
  s.attention_scratch = attention_scratch_elems(Device::cuda, 1, m.n_head / 2, T);
  s.store_keeps_bf16_params = false;  // ZeRO-3 over fsdp = 2 gathers fp32 units
  EXPECT_EQ(p.activations, plan_llama_activations(m, s).bytes());
  const double A = p.accum;
  const MicroBatchFlops f = micro_batch_flops(m, 1, T, 2);
  const MicroBatchFlops rf = recompute_flops(m, 1, T, 2, cfg.train.recompute);
  const double compute_ms = A * (3 * f.total() + rf.total()) / hw.achieved_flops(8) * 1e3;
  EXPECT_NEAR(p.compute_ms, compute_ms, 1e-12 * compute_ms);
  EXPECT_GT(rf.total(), 0.0);  // the config recomputes whole blocks
}

// Llama 3 8B on 8 and 64 H100s, 70B on 64 and 512: every ranked layout
// fits and the fastest is picked with its reasons. 16 bytes a parameter
// (fp32 weights, gradients and AdamW moments) rule out plain data
// parallelism for 8B on 80 GB, and 70B does not fit in 8-way sharding
// without tp.
TEST(Planner, Llama3PicksAFittingLayoutAndExplains) {
  const HardwareSpec hw = hardware("h100");
  const std::pair<const char*, int> cases[] = {
      {"llama3_8b", 8}, {"llama3_8b", 64}, {"llama3_70b", 64}, {"llama3_70b", 512}};
  for (const auto& [name, devices] : cases) {
    const Config cfg = config(name);
    const double params = static_cast<double>(ParameterLayout(cfg.model).global_numel());
    const Plan plan = make_plan(cfg, hw, PlanCluster{devices, 8}, {});
    const std::string at = std::string(name) + " on " + std::to_string(devices);
    ASSERT_FALSE(plan.ranked.empty()) << at << ": " << plan.explanation;
    for (size_t i = 1; i < plan.ranked.size(); ++i)
      EXPECT_LE(plan.ranked[i - 1].step_ms, plan.ranked[i].step_ms) << at;
    for (const auto& p : plan.ranked) {
      EXPECT_LE(static_cast<double>(p.total_bytes()), hw.memory_bytes()) << at;
      EXPECT_GT(p.mfu, 0) << at;
      EXPECT_LT(p.mfu, hw.compute_efficiency + 1e-9) << at;
      EXPECT_LE(p.layout.tp, cfg.model.kv_heads()) << at;  // tp splits the key/value heads
    }
    for (const auto& p : plan.too_big)
      EXPECT_GT(static_cast<double>(p.total_bytes()), hw.memory_bytes()) << at;
    EXPECT_NE(plan.explanation.find("the planner picks"), std::string::npos) << plan.explanation;
    if (devices > 8) {
      EXPECT_NE(plan.explanation.find("do not divide model.n_kv_head=8"), std::string::npos)
          << plan.explanation;
    }
    PlanLayout dp;  // whole copies
    dp.dp = devices;
    const Prediction whole = predict(cfg, hw, plan.cluster, dp);
    EXPECT_GE(static_cast<double>(whole.state.total()), 16 * params) << at;
    EXPECT_FALSE(whole.fits) << at;
    PlanLayout z3;  // ZeRO-3 over 8, no tp: 16 bytes x 8B / 8 fit, x 70B / 8 do not
    z3.dp = devices / 8;
    z3.fsdp = 8;
    const Prediction sharded = predict(cfg, hw, plan.cluster, z3);
    EXPECT_GE(static_cast<double>(sharded.state.total()), 16 * params / 8) << at;
    EXPECT_EQ(sharded.fits, params < 20e9) << at;
  }
}

TEST(Planner, Gpt2XlOn64H100PicksAFittingLayoutAndExplains) {
  const Config cfg = gpt2_xl();
  const HardwareSpec hw = hardware("h100");
  const Plan plan = make_plan(cfg, hw, PlanCluster{64, 8}, {1, 2, 4, 8});
  ASSERT_FALSE(plan.ranked.empty());
  for (size_t i = 1; i < plan.ranked.size(); ++i)
    EXPECT_LE(plan.ranked[i - 1].step_ms, plan.ranked[i].step_ms);
  for (const auto& p : plan.ranked) {
    EXPECT_TRUE(p.fits);
    EXPECT_LE(static_cast<double>(p.total_bytes()), hw.memory_bytes());
    EXPECT_EQ(p.layout.tp, 1);
    EXPECT_GT(p.mfu, 0);
    EXPECT_LT(p.mfu, hw.compute_efficiency + 1e-9);
  }
  for (const auto& p : plan.too_big) EXPECT_GT(static_cast<double>(p.total_bytes()), hw.memory_bytes());
  EXPECT_FALSE(plan.invalid.empty());
  EXPECT_NE(plan.explanation.find("the planner picks"), std::string::npos) << plan.explanation;
  EXPECT_NE(plan.explanation.find("runner-up"), std::string::npos) << plan.explanation;
  // The winner keeps the big dp traffic off the inter-node links or hides it.
  const Prediction& w = plan.ranked.front();
  EXPECT_LT(w.exposed_ms, w.compute_ms);
  const std::string text = format_plan(plan, cfg, hw);
  EXPECT_NE(text.find(plan.explanation), std::string::npos);
  const nlohmann::json j = plan_json(plan, cfg, hw);
  EXPECT_EQ(j["layouts"][0]["rank"], 1);
}

// Expert parallelism in the plan: a Mixtral's layouts include every ep that
// divides the data ranks and the experts (a dense model's none), the ep
// exchange is counted by its formula (a balanced router's: 4 exchanges of
// the (ep - 1)/ep of R k rows that leave, plus the counts, per block and
// micro-batch) and exposed whole, the expert buffers grow with ep, and an
// ep that cannot split the experts or the data ranks is invalid by name.
TEST(Planner, MixtralEnumeratesExpertParallelLayouts) {
  const Config cfg = config("mixtral_tiny");
  const HardwareSpec hw = hardware("cpu_reference");
  const Plan plan = make_plan(cfg, hw, PlanCluster{4, 4}, {1, 2});
  std::set<int> eps;
  for (const auto* list : {&plan.ranked, &plan.too_big})
    for (const Prediction& p : *list) {
      eps.insert(p.layout.ep);
      EXPECT_EQ((p.layout.dp * p.layout.fsdp) % p.layout.ep, 0) << p.layout.str();
    }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4}));
  const Config dense = config("llama_tiny");
  for (const Prediction& p : make_plan(dense, hw, PlanCluster{4, 4}, {1, 2}).ranked)
    EXPECT_EQ(p.layout.ep, 1) << p.layout.str();

  PlanLayout l;
  l.dp = 4;
  l.micro_batch = cfg.train.global_batch / 4;
  const Prediction one = predict(cfg, hw, plan.cluster, l);
  l.ep = 2;
  const Prediction two = predict(cfg, hw, plan.cluster, l);
  ASSERT_TRUE(one.invalid.empty() && two.invalid.empty()) << one.invalid << two.invalid;
  const ModelConfig& m = cfg.model;
  const double R = double(l.micro_batch) * cfg.train.seq_len;
  const double want = one.accum * m.n_layer *
                      (1.0 * (m.n_experts / 2) * 4 + 4.0 * R * m.experts_per_token / 2 * m.n_embd * 4);
  EXPECT_DOUBLE_EQ(two.bytes.ep, want);
  EXPECT_EQ(one.bytes.ep, 0.0);
  EXPECT_DOUBLE_EQ(two.ep_exposed_ms, two.ep_ms);
  EXPECT_GT(two.activations, one.activations);  // the experts' buffers hold ep x the rows
  // Each rank stores half the experts: its AdamW moments lose the other
  // half (8 bytes a float), which its edp group of 2 all-reduces instead of dp.
  const StateUnits su = state_units(m, l, whole_model(m));
  ASSERT_GT(su.experts.total, 0);
  EXPECT_EQ(one.state.optimizer - two.state.optimizer, 8 * su.experts.total);
  EXPECT_EQ(su.expert_fsdp, 1);
  EXPECT_EQ(su.expert_dp, 2);
  EXPECT_DOUBLE_EQ(two.bytes.edp, 2.0 * (2 - 1) / 2 * 4.0 * double(su.experts.total));
  EXPECT_DOUBLE_EQ(one.bytes.dp - two.bytes.dp, 2.0 * 3 / 4 * 4.0 * 2 * double(su.experts.total));
  EXPECT_EQ(one.bytes.edp, 0.0);
  EXPECT_NE(two.layout.str().find(" ep=2"), std::string::npos) << two.layout.str();
  l.ep = 3;
  EXPECT_NE(predict(cfg, hw, plan.cluster, l).invalid.find("ep=3 must divide"), std::string::npos);
  PlanLayout d = l;
  d.ep = 2;
  EXPECT_NE(predict(dense, hw, plan.cluster, d).invalid.find("has no experts to split"),
            std::string::npos);
}

TEST(Planner, NothingFitsSaysSo) {
  const Config cfg = gpt2_xl();
  HardwareSpec hw = hardware("a100");
  hw.memory_gib = 4;  // 1.5B parameters x 16 bytes do not fit on one 4 GiB device
  const Plan plan = make_plan(cfg, hw, PlanCluster{1, 8}, {});
  EXPECT_TRUE(plan.ranked.empty());
  EXPECT_FALSE(plan.too_big.empty());
  EXPECT_NE(plan.explanation.find("no layout fits"), std::string::npos) << plan.explanation;
}

TEST(PlanCommand, IntListsAreChecked) {
  EXPECT_EQ(parse_int_list("8,64,512", "gpus"), (std::vector<int>{8, 64, 512}));
  EXPECT_NE(error_message([] { parse_int_list("8,x", "gpus"); }).find("--gpus"), std::string::npos);
  EXPECT_NE(error_message([] { parse_int_list("0", "nodes"); }).find("positive"), std::string::npos);
}

TEST(PlanCommand, CliPrintsTheTableAndTheParagraphOrJson) {
  const std::string bin = GT_TRAINER_BIN, src = GT_SOURCE_DIR;
  const std::string base = bin + " plan --config " + src + "/configs/gpt2_1.5b.yaml --hardware " +
                           src + "/configs/hardware/h100.yaml";
  std::string out;
  ASSERT_EQ(run_command(base + " --gpus 8,64 --nodes 1,8", &out), 0) << out;
  EXPECT_NE(out.find("== 64 x NVIDIA H100"), std::string::npos) << out;
  EXPECT_NE(out.find("the planner picks"), std::string::npos) << out;
  ASSERT_EQ(run_command(base + " --gpus 64 --micro-batch 2,4 --json - 2>/dev/null", &out), 0);
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["devices"], 64);
  EXPECT_EQ(j[0]["nodes"], 8);
  EXPECT_TRUE(j[0]["layouts"][0]["fits"].get<bool>());
  EXPECT_EQ(run_command(bin + " plan --config " + src + "/configs/gpt2_1.5b.yaml --gpus 8", &out), 1);
  EXPECT_NE(out.find("plan needs --config FILE, --hardware FILE"), std::string::npos) << out;
  EXPECT_EQ(run_command(base + " --gpus 64 --nodes 3", &out), 1);
  EXPECT_NE(out.find("does not split evenly"), std::string::npos) << out;
}

// --top N prints the N best rows of each table and counts the rest; the
// JSON keeps every layout; a bad count is named.
TEST(PlanCommand, TopPrintsTheBestRowsAndCountsTheRest) {
  const std::string bin = GT_TRAINER_BIN, src = GT_SOURCE_DIR;
  const std::string base = bin + " plan --config " + src + "/configs/gpt2_1.5b.yaml --hardware " +
                           src + "/configs/hardware/h100.yaml --gpus 64";
  std::string all, top;
  ASSERT_EQ(run_command(base + " --json - 2>/dev/null", &all), 0) << all;
  const nlohmann::json j = nlohmann::json::parse(all);
  size_t fit = 0, too_big = 0;
  for (const auto& l : j[0]["layouts"]) {
    if (l.contains("invalid")) continue;
    ++(l["fits"].get<bool>() ? fit : too_big);
  }
  ASSERT_GT(fit, 3u);
  ASSERT_EQ(run_command(base + " --top 3", &top), 0) << top;
  EXPECT_NE(top.find("\n   3 "), std::string::npos) << top;  // the third ranked row
  EXPECT_EQ(top.find("\n   4 "), std::string::npos) << top;
  EXPECT_NE(top.find("(" + std::to_string(fit - 3) + " more layouts that fit and " +
                     std::to_string(too_big) + " that do not: --top 0 lists every one)"),
            std::string::npos)
      << top;
  EXPECT_NE(top.find("the planner picks"), std::string::npos) << top;
  EXPECT_EQ(run_command(base + " --top 2,3", &top), 1);
  EXPECT_NE(top.find("--top 2,3: expected a number of layouts >= 0"), std::string::npos) << top;
}

// A Llama config plans from the command line: its family and widths head
// the table and the JSON.
TEST(PlanCommand, LlamaConfigPlans) {
  const std::string bin = GT_TRAINER_BIN, src = GT_SOURCE_DIR;
  const std::string base = bin + " plan --config " + src + "/configs/llama3_8b.yaml --hardware " +
                           src + "/configs/hardware/h100.yaml --gpus 8";
  std::string out;
  ASSERT_EQ(run_command(base, &out), 0) << out;
  EXPECT_NE(out.find("(llama: 32 layers, 32 heads sharing 8 key/value heads, 4096 embd, MLP 14336"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("the planner picks"), std::string::npos) << out;
  ASSERT_EQ(run_command(base + " --json - 2>/dev/null", &out), 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j[0]["model"]["arch"], "llama");
  EXPECT_EQ(j[0]["model"]["n_kv_head"], 8);
  EXPECT_EQ(j[0]["model"]["ffn_width"], 14336);
}

// --baseline-mib replaces the hardware file's baseline_mib in every total.
TEST(PlanCommand, BaselineMibReplacesTheHardwareFilesBaseline) {
  const std::string bin = GT_TRAINER_BIN, src = GT_SOURCE_DIR;
  const std::string base = bin + " plan --config " + src + "/configs/sweep.yaml --hardware " + src +
                           "/configs/hardware/cpu_reference.yaml --gpus 2 --json -";
  std::string a, b;
  ASSERT_EQ(run_command(base + " 2>/dev/null", &a), 0) << a;
  ASSERT_EQ(run_command(base + " --baseline-mib 176.5 2>/dev/null", &b), 0) << b;
  const nlohmann::json ja = nlohmann::json::parse(a)[0], jb = nlohmann::json::parse(b)[0];
  EXPECT_EQ(ja["hardware"]["baseline_bytes"].get<double>(), 22.0 * 1048576);
  EXPECT_EQ(jb["hardware"]["baseline_bytes"].get<double>(), 176.5 * 1048576);
  EXPECT_NE(jb["hardware"]["baseline_source"].get<std::string>().find("measured"),
            std::string::npos);
  ASSERT_EQ(ja["layouts"].size(), jb["layouts"].size());
  for (size_t i = 0; i < ja["layouts"].size(); ++i)
    EXPECT_EQ(jb["layouts"][i]["memory_bytes"]["total"].get<double>() -
                  ja["layouts"][i]["memory_bytes"]["total"].get<double>(),
              (176.5 - 22.0) * 1048576)
        << i;
  std::string out;
  EXPECT_EQ(run_command(base + " --baseline-mib -3", &out), 1);
  EXPECT_NE(out.find("--baseline-mib -3: expected a non-negative number of MiB"), std::string::npos)
      << out;
}

}  // namespace
}  // namespace gt
