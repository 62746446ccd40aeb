// The planner's pipelines (pp > 1; trainer/plan/pipeline_model.hpp): each
// rank's share of the state and the activations its schedule keeps in
// flight (by hand for a small GPT-2, Megatron's warm-up for interleaving),
// the bubble as the schedule states it, the point-to-point bytes by hand,
// each stage reducing only its own parameters, where pipelines rank, and
// why a pipeline cannot run. Expected values come from the formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "plan_test_models.hpp"
#include "trainer/parallelize/pipeline_schedule.hpp"
#include "trainer/parallelize/pipeline_stages.hpp"
#include "trainer/plan/pipeline_model.hpp"
#include "trainer/plan/planner.hpp"

namespace gt {
namespace {

using test::config;
using test::gpt2_xl;
using test::hardware;
using test::matrix_llama;
using test::matrix_mixtral;
using test::matrix_model;
using test::matrix_train;

// The activation plan splits into what a block keeps
// per micro-batch, the embedding's, the head's and the rest, and the parts
// add up to the whole plan in every mode.
TEST(PlanPipeline, ActivationPartsAddUpToThePlan) {
  for (const ModelConfig& m : {matrix_model(), matrix_llama(), matrix_mixtral()})
    for (PlanBackend backend : {PlanBackend::cpu, PlanBackend::cuda})
      for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16})
        for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block})
          for (int tp : {1, 2}) {
            const ActivationParts parts =
                predict_activation_parts(m, 2, 16, tp, true, backend, r, dtype);
            EXPECT_GT(parts.per_block, 0);
            EXPECT_GT(parts.embed, 0);
            EXPECT_GT(parts.head, 0);
            EXPECT_EQ(m.n_layer * parts.per_block + parts.embed + parts.head + parts.shared,
                      predict_activation_bytes(m, 2, 16, tp, true, backend, r, dtype))
                << to_string(m.arch) << " tp=" << tp << " " << to_string(r);
          }
}

// A small GPT-2 over two pipeline ranks on the CPU plan (fp32, no
// collective temporaries at dp = fsdp = 1): each rank's state is its units'
// (rank 0: the embedding and its blocks; rank 1: its blocks, the head and
// the tied embedding's copy) at 16 bytes a float, and its activations are
// what the schedule keeps in flight; the prediction reports the heavier.
TEST(PlanPipeline, HeaviestStageByHand) {
  Config cfg;
  cfg.model = matrix_model();
  cfg.model.n_layer = 4;
  cfg.train = matrix_train(1);  // 8 micro-batches of one row
  const HardwareSpec hw = hardware("cpu_reference");
  const ModelConfig& m = cfg.model;
  const UnitSizes u = unit_sizes(m, 1, 1);
  const ActivationParts parts =
      predict_activation_parts(m, 1, 16, 1, true, PlanBackend::cpu, Recompute::none);
  const int64_t boundary = 16 * m.n_embd * 4;  // (R, C) fp32 rows received
  for (PipeSchedule kind : {PipeSchedule::one_f_one_b, PipeSchedule::gpipe}) {
    PlanLayout l;
    l.pp = 2;
    l.schedule = kind;
    const Prediction p = predict(cfg, hw, PlanCluster{2, 2}, l);
    ASSERT_TRUE(p.invalid.empty()) << p.invalid;
    ASSERT_EQ(p.accum, 8);
    const std::vector<int> split = pipeline_layer_split(m, 2, 1, {});
    EXPECT_EQ(p.stage_layers, split);
    // 1F1B keeps min(p - r, m) micro-batches on rank r, gpipe all m.
    const int64_t held0 = kind == PipeSchedule::gpipe ? 8 : 2;
    const int64_t held1 = kind == PipeSchedule::gpipe ? 8 : 1;
    const int64_t act0 = held0 * (split[0] * parts.per_block + parts.embed) + parts.shared;
    const int64_t act1 =
        held1 * (split[1] * parts.per_block + boundary + parts.head) + parts.shared;
    const int64_t floats0 = u.embed + split[0] * u.block;
    const int64_t floats1 = u.embed + u.head + split[1] * u.block;  // the tied copy
    const int64_t total0 = 16 * floats0 + act0, total1 = 16 * floats1 + act1;
    const int heavy = total0 >= total1 ? 0 : 1;
    EXPECT_EQ(p.heaviest_rank, heavy) << to_string(kind);
    EXPECT_EQ(p.state.params, 4 * (heavy == 0 ? floats0 : floats1)) << to_string(kind);
    EXPECT_EQ(p.state.total(), 16 * (heavy == 0 ? floats0 : floats1)) << to_string(kind);
    EXPECT_EQ(p.activations, heavy == 0 ? act0 : act1) << to_string(kind);
    EXPECT_EQ(p.total_bytes(), std::max(total0, total1) + p.baseline) << to_string(kind);
  }
}

// Interleaving: rank 0 runs (p - 1) * 2 + (v - 1) * p + 1 forwards before
// its first backward, and from then on one backward frees a slot for each
// forward: that many (micro-batch, chunk) pairs at its peak, Megatron's p (1
// + (p - 1) / (p v)) stages' worth of activations. (The embedding and the
// received rows are made the same size here, so that which chunk a pair is
// on does not matter.)
TEST(PlanPipeline, InterleavedRankZeroHoldsMegatronsWarmUp) {
  const ModelConfig m = gpt2_xl().model;
  const int p = 4, v = 2, micro = 16;
  PlanLayout l;
  l.pp = p;
  l.virtual_stages = v;
  l.schedule = PipeSchedule::interleaved_1f1b;
  PipelineShape shape;
  shape.split = std::vector<int>(p * v, m.n_layer / (p * v));  // 6 blocks a chunk
  ActivationParts parts;
  parts.per_block = 1000;
  parts.embed = 5;
  parts.head = 11;
  parts.shared = 13;
  const int64_t boundary = 5;
  const std::vector<int64_t> peaks = pipeline_activation_peaks(shape, l, micro, parts, boundary);
  const int pairs = (p - 1) * 2 + (v - 1) * p + 1;
  EXPECT_EQ(peaks[0], pairs * (6 * parts.per_block + boundary) + parts.shared);
  // In blocks, Megatron's formula: p (1 + (p - 1) / (p v)) stages of v chunks.
  EXPECT_DOUBLE_EQ(pairs * 6.0, p * (1.0 + (p - 1.0) / (p * v)) * (v * 6.0));
  // The last rank holds the head's activations of one micro-batch at a time.
  const int last_pairs = (v - 1) * p + 1;
  EXPECT_EQ(peaks[p - 1],
            last_pairs * (6 * parts.per_block + boundary) + parts.head + parts.shared);
}

// The bubble is the schedule's own figure, and it idles that share of the
// pipelined work (memory traffic made free so the work is the compute).
TEST(PlanPipeline, BubbleIsTheSchedulesFraction) {
  const Config cfg = gpt2_xl();
  HardwareSpec hw = hardware("h100");
  hw.hbm_gbps = 1e15;
  for (int v : {1, 2}) {
    PlanLayout l;
    l.pp = 4;
    l.dp = 2;
    l.micro_batch = 4;
    l.virtual_stages = v;
    l.schedule = v > 1 ? PipeSchedule::interleaved_1f1b : PipeSchedule::one_f_one_b;
    const Prediction p = predict(cfg, hw, PlanCluster{8, 8}, l);
    ASSERT_TRUE(p.invalid.empty()) << p.invalid;
    PipeScheduleSpec spec;
    spec.kind = l.schedule;
    spec.stages = 4;
    spec.micro_batches = p.accum;
    spec.virtual_stages = v;
    EXPECT_DOUBLE_EQ(p.bubble, pipeline_bubble_fraction(spec));
    EXPECT_NEAR(p.bubble_ms / (p.compute_ms + p.bubble_ms), p.bubble, 1e-6);
    EXPECT_NEAR(p.step_ms, p.compute_ms + p.bubble_ms + p.memory_ms + p.exposed_ms, 1e-9);
  }
}

// Point-to-point bytes by hand: per micro-batch and boundary the (R/tp, C)
// activations forward at the activation dtype (bf16 on the GPU plan) and
// the fp32 gradient back; the busiest rank's sends; GPT-2's tied embedding
// adds its gradient's all-reduce between the first and the last rank.
TEST(PlanPipeline, PointToPointBytesByHand) {
  const HardwareSpec hw = hardware("h100");
  for (const char* name : {"gpt2_1.5b", "llama3_8b"}) {
    const Config cfg = config(name);
    const ModelConfig& m = cfg.model;
    for (int v : {1, 2}) {
      PlanLayout l;
      l.pp = 4;
      l.dp = 1;
      l.tp = m.arch == ModelArch::llama ? 2 : 1;
      l.micro_batch = 1;
      l.virtual_stages = v;
      l.schedule = v > 1 ? PipeSchedule::interleaved_1f1b : PipeSchedule::one_f_one_b;
      for (int per_node : {8, 2}) {
        const Prediction p = predict(cfg, hw, PlanCluster{4 * l.tp, per_node}, l);
        ASSERT_TRUE(p.invalid.empty()) << p.invalid;
        const double A = cfg.train.global_batch;  // dp = fsdp = 1, one row a micro-batch
        ASSERT_EQ(p.accum, A);
        const double rows = double(cfg.train.seq_len) / l.tp;
        const double fwd = rows * m.n_embd * 2, bwd = rows * m.n_embd * 4;
        const double tied = m.tied_embeddings() ? double(unit_sizes(m, l.tp, 1).embed) * 4 : 0.0;
        // Rank 0 sends no gradient from stage 0, rank 3 no activations from
        // the last stage; with v = 2 each rank runs two chunks.
        const double first = A * (v * fwd + (v - 1) * bwd) + tied;
        const double middle = A * v * (fwd + bwd);
        const double last = A * ((v - 1) * fwd + v * bwd) + tied;
        const double expected = std::max({first, middle, last});
        EXPECT_NEAR(p.bytes.pp, expected, 1e-9 * expected) << name << " v=" << v;
        const bool inter = 4 * l.tp > per_node;
        EXPECT_EQ(p.pp_inter, inter) << name;
        const double bw = inter ? hw.inter_busbw() : hw.intra_busbw(false);
        EXPECT_NEAR(p.pp_ms, expected / bw * 1e3, 1e-9 * p.pp_ms) << name;
        EXPECT_EQ(p.pp_exposed_ms, p.pp_ms);
      }
    }
  }
}

// A stage reduces only its own parameters: at the same dp x fsdp x tp, four
// pipeline ranks hold and all-reduce about a quarter of the state.
TEST(PlanPipeline, EachStageHoldsAndReducesItsOwnParameters) {
  const Config cfg = config("llama3_8b");
  const HardwareSpec hw = hardware("h100");
  PlanLayout whole;
  whole.dp = 2;
  whole.fsdp = 2;
  whole.micro_batch = 1;
  PlanLayout piped = whole;
  piped.pp = 4;
  const Prediction a = predict(cfg, hw, PlanCluster{4, 8}, whole);
  const Prediction b = predict(cfg, hw, PlanCluster{16, 8}, piped);
  ASSERT_TRUE(a.invalid.empty() && b.invalid.empty()) << a.invalid << b.invalid;
  const UnitSizes u = unit_sizes(cfg.model, 1, 2);
  const std::vector<int> blocks = pipeline_rank_blocks(b.stage_layers, 4);
  // The dp all-reduce and fsdp traffic follow the largest stage's units.
  int64_t largest = 0;
  for (int r = 0; r < 4; ++r)
    largest = std::max<int64_t>(
        largest, blocks[r] * u.block + (r == 0 ? u.embed : 0) + (r == 3 ? u.head : 0));
  EXPECT_NEAR(b.bytes.dp, 2.0 * (2 - 1) / 2 * 4.0 * double(largest / 2), 1.0);
  EXPECT_NEAR(b.bytes.dp / a.bytes.dp, double(largest) / double(u.total), 1e-9);
  EXPECT_LT(b.state.total(), a.state.total() / 2);
}

// Where the batch cannot feed every device without one (64 devices at
// micro-batch 4 need 256 rows a pass; the step has 64) and tp cannot split
// GPT-2 1.5B's 25 heads, only pipelines and context parallelism (which
// splits each row's positions instead) run: every layout with neither is
// ruled out, and the pick says what its pipeline keeps per device, what
// crosses nodes and its bubble.
TEST(Planner, PipelinesRankWhenTheBatchCannotFeedEveryDevice) {
  Config cfg = gpt2_xl();
  cfg.train.global_batch = 64;
  const HardwareSpec hw = hardware("h100");
  const Plan plan = make_plan(cfg, hw, PlanCluster{64, 8}, {4});
  ASSERT_FALSE(plan.ranked.empty()) << plan.explanation;
  for (const auto& p : plan.ranked) EXPECT_TRUE(p.layout.pp > 1 || p.layout.cp > 1) << p.layout.str();
  ASSERT_GT(plan.ranked.front().layout.pp, 1) << plan.explanation;
  for (const auto& p : plan.invalid)
    if (p.layout.pp == 1 && p.layout.cp == 1) {
      EXPECT_TRUE(p.invalid.find("global_batch") != std::string::npos ||
                  p.invalid.find("does not divide") != std::string::npos)
          << p.invalid;
    }
  const Prediction& w = plan.ranked.front();
  EXPECT_NE(plan.explanation.find("pp=" + std::to_string(w.layout.pp) + " keeps the weights"),
            std::string::npos)
      << plan.explanation;
  EXPECT_NE(plan.explanation.find("crosses nodes with only activations"), std::string::npos)
      << plan.explanation;
  EXPECT_NE(plan.explanation.find("bubble"), std::string::npos) << plan.explanation;
  const std::string text = format_plan(plan, cfg, hw);
  EXPECT_NE(text.find(" 1f1b "), std::string::npos);
  const nlohmann::json j = plan_json(plan, cfg, hw);
  EXPECT_EQ(j["layouts"][0]["pp"], w.layout.pp);
  EXPECT_DOUBLE_EQ(j["layouts"][0]["bubble"].get<double>(), w.bubble);
  EXPECT_DOUBLE_EQ(j["layouts"][0]["comm_bytes"]["pp"].get<double>(), w.bytes.pp);
  EXPECT_DOUBLE_EQ(j["layouts"][0]["pp_ms"].get<double>(), w.pp_ms);
}

// Sharding the weights over stages instead of fsdp: Llama 3 70B over 64
// devices as dp=8 x tp=8 does not fit (16 bytes a parameter / 8); eight
// pipeline stages with the same tp fit, and such layouts rank.
TEST(Planner, PipelineStagesShardTheWeights) {
  const Config cfg = config("llama3_70b");
  const HardwareSpec hw = hardware("h100");
  PlanLayout dp;
  dp.dp = 8;
  dp.tp = 8;
  EXPECT_FALSE(predict(cfg, hw, PlanCluster{64, 8}, dp).fits);
  PlanLayout pp = dp;
  pp.dp = 1;
  pp.pp = 8;
  const Prediction p = predict(cfg, hw, PlanCluster{64, 8}, pp);
  ASSERT_TRUE(p.invalid.empty()) << p.invalid;
  EXPECT_TRUE(p.fits);
  EXPECT_TRUE(p.pp_inter);
}

// Layouts a pipeline cannot run say why.
TEST(Planner, PipelineLayoutsThatCannotRunSayWhy) {
  const Config cfg = gpt2_xl();  // 48 blocks, global batch 512
  const HardwareSpec hw = hardware("h100");
  auto why = [&](int pp, int v, int dp, int mb) {
    PlanLayout l;
    l.pp = pp;
    l.virtual_stages = v;
    l.schedule = v > 1 ? PipeSchedule::interleaved_1f1b : PipeSchedule::one_f_one_b;
    l.dp = dp;
    l.micro_batch = mb;
    return predict(cfg, hw, PlanCluster{pp * dp, 8}, l).invalid;
  };
  EXPECT_NE(why(32, 2, 1, 1)
                .find("pp=32 x v=2 = 64 chunks of at least one block need "
                      "model.n_layer >= 64 (it is 48)"),
            std::string::npos)
      << why(32, 2, 1, 1);
  // 512 / (8 * 16) = 4 micro-batches per step, not a multiple of pp = 8.
  EXPECT_NE(why(8, 2, 16, 8)
                .find("interleaved_1f1b needs the micro-batches per step a "
                      "multiple of pp=8"),
            std::string::npos)
      << why(8, 2, 16, 8);
  EXPECT_EQ(why(8, 1, 16, 8), "");  // 1f1b takes any number
  EXPECT_NE(why(2, 1, 2, 512)
                .find("global_batch=512 is not a multiple of micro_batch x dp x "
                      "fsdp = 1024"),
            std::string::npos)
      << why(2, 1, 2, 512);
  PlanLayout gpipe_v;
  gpipe_v.pp = 2;
  gpipe_v.virtual_stages = 2;
  gpipe_v.schedule = PipeSchedule::gpipe;
  EXPECT_NE(predict(cfg, hw, PlanCluster{2, 8}, gpipe_v).invalid.find("virtual stages need"),
            std::string::npos);
}

}  // namespace
}  // namespace gt
