// The profiler's per-op FLOPs of a whole training micro-batch (a tiny GPT
// and a tiny Llama run forward and backward through ProfilingOps) against
// the independent count model_flops() gives from the config: 6·N per token
// for the matmuls and 12·L·T·C per token for attention. They must agree
// within 1%; with the same conventions on both sides they agree exactly.
// Also: the roofline report built from those statistics, and the collective
// observer.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "parallel/in_process_communicator.hpp"
#include "test_util.hpp"
#include "trainer/model/make_model.hpp"
#include "trainer/profile/model_flops.hpp"
#include "trainer/profile/peaks.hpp"
#include "trainer/profile/profiler.hpp"
#include "trainer/profile/roofline.hpp"

namespace gt {
namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 64;
  m.vocab_size = 256;
  m.block_size = 32;
  return m;
}

// Grouped-query attention (4 query heads sharing 2 key/value heads) and an
// MLP width of its own; a vocabulary the padding leaves whole, so the LM
// head's GEMM is V·C as the count says.
ModelConfig tiny_llama_model() {
  ModelConfig m = tiny_model();
  m.arch = ModelArch::llama;
  m.n_kv_head = 2;
  m.ffn_hidden = 96;
  return m;
}

// One profiled forward + backward of B x T tokens; returns the statistics.
ProfileStats profile_one_micro_batch(const ModelConfig& m, int B, int T,
                                     Recompute recompute = Recompute::none) {
  auto ops = make_cpu_ops(1);
  Profiler prof(ProfileSchedule{1, 1}, false, 0);
  prof.observe(*ops);
  const std::unique_ptr<CausalLM> model = make_model(m, *ops, B, T, recompute);
  for (const auto& s : model->layout().specs()) {
    auto v = test::random_vector(static_cast<size_t>(s.numel), 11, -0.05f, 0.05f);
    std::copy(v.begin(), v.end(), model->params() + s.offset);
  }
  auto tokens = test::random_ints(size_t(B) * T, 1, 0, m.vocab_size);
  auto targets = test::random_ints(size_t(B) * T, 2, 0, m.vocab_size);
  prof.begin_step(0);
  model->forward(tokens.data(), targets.data(), B, T, 1.f / (B * T));
  model->backward();
  prof.end_step();
  return prof.stats();
}

double class_flops(const ProfileStats& s, OpClass c) {
  double sum = 0;
  for (const OpStat& o : s.ops)
    if (o.cls == c) sum += o.flops;
  return sum;
}

TEST(ProfileModelFlops, FormulaCountsMatmulWeightsAndTheLmHead) {
  const ModelConfig m = tiny_model();
  const ModelFlops f = model_flops(m, 32);
  EXPECT_EQ(f.matmul_params, 12.0 * 2 * 64 * 64 + 256.0 * 64);
  EXPECT_EQ(f.dense_per_token, 6.0 * f.matmul_params);
  EXPECT_EQ(f.attention_per_token, 12.0 * 2 * 32 * 64);
}

// Llama's N by hand: per block q_proj C·C, k_proj and v_proj C·K (K = 2
// key/value heads of hs = 16), o_proj C·C, gate, up and down C·F; the untied
// LM head V·C. Attention is the query heads': 12·L·T·C.
TEST(ProfileModelFlops, LlamaFormulaCountsGroupedQueryAndSwiGluWeights) {
  const ModelConfig m = tiny_llama_model();
  const double L = 2, C = 64, K = 2 * 16, F = 96, V = 256;
  const ModelFlops f = model_flops(m, 32);
  EXPECT_EQ(f.matmul_params, L * (C * C + 2 * C * K + C * C + 3 * C * F) + V * C);
  EXPECT_EQ(f.dense_per_token, 6.0 * f.matmul_params);
  EXPECT_EQ(f.attention_per_token, 12.0 * L * 32 * C);
  // Tying the head shares storage, not the matmul: the same count.
  ModelConfig tied = m;
  tied.tie_embeddings = true;
  EXPECT_EQ(model_flops(tied, 32).per_token(), f.per_token());
}

// The recorded GEMMs and attention of the real Llama equal the count: the
// MFU numerator metrics.jsonl uses (ProfileSession) is Llama's own.
TEST(ProfileModelFlops, LlamaRecordedOpsAgreeWithSixNPlusAttention) {
  const ModelConfig m = tiny_llama_model();
  const int B = 2, T = 32;
  const ProfileStats s = profile_one_micro_batch(m, B, T);
  const ModelFlops f = model_flops(m, T);
  const double tokens = double(B) * T;
  EXPECT_NEAR(class_flops(s, OpClass::gemm) / (f.dense_per_token * tokens), 1.0, 1e-12);
  EXPECT_NEAR(class_flops(s, OpClass::attention) / (f.attention_per_token * tokens), 1.0, 1e-12);
}

TEST(ProfileModelFlops, RecordedOpsAgreeWithSixNPlusAttention) {
  const ModelConfig m = tiny_model();
  const int B = 2, T = 32;
  const ProfileStats s = profile_one_micro_batch(m, B, T);
  const ModelFlops f = model_flops(m, T);
  const double tokens = double(B) * T;

  const double gemm = class_flops(s, OpClass::gemm);
  const double attention = class_flops(s, OpClass::attention);
  EXPECT_NEAR(gemm / (f.dense_per_token * tokens), 1.0, 1e-12);
  EXPECT_NEAR(attention / (f.attention_per_token * tokens), 1.0, 1e-12);
  const double model = s.total_flops(true), expected = f.per_token() * tokens;
  EXPECT_NEAR(model / expected, 1.0, 0.01) << model << " vs " << expected;

  // Every other op (LayerNorm, GELU, softmax, embedding, residual adds) is
  // recorded too and stays a small share on top of the model FLOPs.
  const double all = s.total_flops(false);
  EXPECT_GT(all, model);
  EXPECT_LT((all - model) / model, 0.05);

  // 12 matmul calls per block... every op of the model is seen: 2 matmuls
  // (fwd, bwd) x (4 per block x L + LM head), 2 attention calls per block.
  int64_t gemm_calls = 0, attention_calls = 0;
  for (const OpStat& o : s.ops) {
    if (o.cls == OpClass::gemm) gemm_calls += o.count;
    if (o.cls == OpClass::attention) attention_calls += o.count;
  }
  EXPECT_EQ(gemm_calls, 2 * (4 * m.n_layer + 1));
  EXPECT_EQ(attention_calls, 2 * m.n_layer);
}

// Recomputation's forward ops go through Ops, so the profiler sees them on
// top of the model FLOPs (which MFU keeps as its numerator: recomputation is
// overhead). Per token and layer: mlp repeats c_fc (2*4C^2); block c_attn,
// attn.c_proj and c_fc (2*8C^2) and attention's forward (4*T*C).
TEST(ProfileModelFlops, RecomputedForwardIsRecordedOnTopOfTheModelFlops) {
  const ModelConfig m = tiny_model();
  const int B = 2, T = 32;
  const ModelFlops f = model_flops(m, T);
  const double tokens = double(B) * T, C = m.n_embd, L = m.n_layer;
  struct Want {
    Recompute mode;
    double gemm_extra, attention_extra;
    int64_t gemm_calls, attention_calls;
  };
  for (const Want& w : {Want{Recompute::mlp, 2 * 4 * C * C, 0, 1, 0},
                        Want{Recompute::block, 2 * 8 * C * C, 4 * T * C, 3, 1}}) {
    const ProfileStats s = profile_one_micro_batch(m, B, T, w.mode);
    EXPECT_NEAR(class_flops(s, OpClass::gemm) /
                    ((f.dense_per_token + L * w.gemm_extra) * tokens),
                1.0, 1e-12)
        << to_string(w.mode);
    EXPECT_NEAR(class_flops(s, OpClass::attention) /
                    ((f.attention_per_token + L * w.attention_extra) * tokens),
                1.0, 1e-12)
        << to_string(w.mode);
    int64_t gemm_calls = 0, attention_calls = 0;
    for (const OpStat& o : s.ops) {
      if (o.cls == OpClass::gemm) gemm_calls += o.count;
      if (o.cls == OpClass::attention) attention_calls += o.count;
    }
    EXPECT_EQ(gemm_calls, 2 * (4 * m.n_layer + 1) + w.gemm_calls * m.n_layer);
    EXPECT_EQ(attention_calls, (2 + w.attention_calls) * m.n_layer);
  }
  // The MFU numerator does not depend on recomputation: it is the config's.
  EXPECT_EQ(model_flops(m, T).per_token(), f.per_token());
}

TEST(ProfileRoofline, FractionsSubtotalsAndOther) {
  ProfileStats s;
  s.steps = 2;
  s.step_seconds = 2.0;  // 1 s per step
  // A GEMM: 2e12 FLOPs, 1e9 bytes in 0.4 s over 2 steps.
  s.ops.push_back({OpClass::gemm, "matmul_forward M=1 N=1 K=1", 4, 0.4, 2e12, 1e9});
  // A copy: 0 FLOPs, 4e9 bytes in 0.8 s.
  s.ops.push_back({OpClass::elementwise, "copy", 2, 0.8, 0.0, 4e9});
  CommStat c;
  c.axis = "dp";
  c.kind = CommKind::all_reduce;
  c.group_size = 2;
  c.count = 2;
  c.bytes = 2e9;
  c.exposed_s = 0.2;
  c.inflight_s = 1.0;
  s.comms.push_back(c);
  Peaks p;
  p.source = "test";
  p.flops = 10e12;        // 10 TFLOP/s
  p.mem_bw = 10e9;        // 10 GB/s
  p.all_reduce_busbw = 4e9;
  RooflineContext ctx;
  ctx.expected_model_flops_per_step = 1e12;
  const RooflineReport r = build_roofline(s, p, nullptr, ctx);
  EXPECT_EQ(r.steps, 2);
  EXPECT_DOUBLE_EQ(r.step_ms, 1000.0);
  ASSERT_EQ(r.ops.size(), 4u);  // gemm row + subtotal, elementwise row + subtotal
  const RooflineRow& g = r.ops[0];
  EXPECT_DOUBLE_EQ(g.ms, 200.0);
  EXPECT_DOUBLE_EQ(g.calls, 2.0);
  EXPECT_DOUBLE_EQ(g.share, 0.2);
  EXPECT_DOUBLE_EQ(g.tflops, 5.0);  // 2e12 / 0.4 s
  EXPECT_DOUBLE_EQ(g.intensity, 2000.0);
  EXPECT_EQ(g.bound, "compute");
  EXPECT_DOUBLE_EQ(g.roof, 0.5);  // 0.2 s at the roof over 0.4 s
  EXPECT_TRUE(r.ops[1].subtotal);
  const RooflineRow& cp = r.ops[2];
  EXPECT_EQ(cp.bound, "memory");
  EXPECT_DOUBLE_EQ(cp.roof, 0.5);  // 0.4 s at 10 GB/s over 0.8 s
  ASSERT_EQ(r.comms.size(), 1u);
  EXPECT_DOUBLE_EQ(r.comms[0].exposed_ms, 100.0);
  EXPECT_DOUBLE_EQ(r.comms[0].gbps, 2.0);  // 2e9 bytes / 1 s in flight
  EXPECT_DOUBLE_EQ(r.comms[0].roof, 0.5);
  EXPECT_DOUBLE_EQ(r.other_ms, 1000.0 - 600.0 - 100.0);
  EXPECT_DOUBLE_EQ(r.ctx.recorded_model_flops_per_step, 1e12);

  const std::string text = format_roofline(r);
  for (const char* part : {"roofline: 2 profiled step(s)", "matmul_forward M=1 N=1 K=1",
                           "= gemm", "dp all_reduce", "other", "ratio 1.0000", "%roof"})
    EXPECT_NE(text.find(part), std::string::npos) << part << " missing from\n" << text;
  const nlohmann::json j = roofline_json(r);
  EXPECT_EQ(j["ops"].size(), 4u);
  EXPECT_DOUBLE_EQ(j["ops"][0]["fraction_of_roofline"].get<double>(), 0.5);
  EXPECT_TRUE(j["datasheet"].is_null());
  EXPECT_DOUBLE_EQ(j["comms"][0]["overlapped_ms_per_step_upper_bound"].get<double>(), 400.0);
}

TEST(ProfileRoofline, UnknownPeaksLeaveFractionsOut) {
  ProfileStats s;
  s.steps = 1;
  s.step_seconds = 1.0;
  s.ops.push_back({OpClass::gemm, "matmul_forward M=1 N=1 K=1", 1, 0.5, 1e9, 1e6});
  const RooflineReport r = build_roofline(s, Peaks{}, nullptr, RooflineContext{});
  EXPECT_LT(r.ops[0].roof, 0.0);
  EXPECT_NE(format_roofline(r).find(" - "), std::string::npos);
}

TEST(ProfileRoofline, RowsAboveTheRoofBlameThePeak) {
  ProfileStats s;
  s.steps = 1;
  s.step_seconds = 1.0;
  // 2e12 FLOPs in 0.1 s against a 10 TFLOP/s roof: 200%.
  s.ops.push_back({OpClass::gemm, "matmul_forward M=1 N=1 K=1", 1, 0.1, 2e12, 1e6});
  Peaks p;
  p.source = "quick bench at start";
  p.flops = 10e12;
  p.mem_bw = 1e12;
  const RooflineReport r = build_roofline(s, p, nullptr, RooflineContext{});
  EXPECT_DOUBLE_EQ(r.ops[0].roof, 2.0);
  ASSERT_EQ(r.above_roof.size(), 1u);
  const std::string text = format_roofline(r);
  EXPECT_NE(text.find("warning: 1 row(s) above 110% of the measured roof"), std::string::npos)
      << text;
  EXPECT_EQ(roofline_json(r)["rows_above_measured_roof"].size(), 1u);
}

// A collective observer that logs what it hears.
struct LogObserver : CommObserver {
  std::vector<std::string> log;
  uint64_t on_start(const CommOp& op, Clock::time_point) override {
    log.push_back(std::string("start ") + comm_kind_name(op.kind) + " " + op.comm->name());
    return 7;
  }
  void on_wait(uint64_t token, const CommOp& op, Clock::time_point b,
               Clock::time_point e) override {
    EXPECT_EQ(token, 7u);
    EXPECT_LE(b, e);
    log.push_back(std::string("wait ") + comm_kind_name(op.kind));
  }
  void on_complete(uint64_t token, const CommOp& op, Clock::time_point) override {
    EXPECT_EQ(token, 7u);
    log.push_back(std::string("complete ") + comm_kind_name(op.kind));
  }
};

TEST(ProfileCommObserver, SeesEveryCollectiveOfTheBaseClass) {
  InProcessCommunicator comm("dp");
  LogObserver obs;
  std::vector<float> buf(8, 1.f);
  comm.all_reduce_sum(buf.data(), 8).wait();  // no observer yet
  comm.set_observer(&obs);
  comm.all_reduce_sum(buf.data(), 8).wait();
  comm.all_gather(buf.data(), buf.data(), 8).wait();
  EXPECT_EQ(comm.all_reduce_f64(2.0, ReduceOp::sum), 2.0);
  comm.barrier();
  comm.set_observer(nullptr);
  comm.barrier();
  EXPECT_EQ(obs.log, (std::vector<std::string>{
                         "start all_reduce dp", "complete all_reduce", "start all_gather dp",
                         "complete all_gather", "start scalar_reduce dp", "wait scalar_reduce",
                         "complete scalar_reduce", "start barrier dp", "wait barrier",
                         "complete barrier"}));
}

TEST(ProfileCommObserver, ProfilerCountsExposedTimeEveryStepAndDetailOnlyWhenProfiled) {
  InProcessCommunicator comm("data");
  Profiler prof(ProfileSchedule{2, 1}, true, 0);
  prof.observe(comm);
  prof.begin_step(0);  // not profiled
  comm.all_reduce_f64(1.0, ReduceOp::sum);
  EXPECT_GE(prof.end_step().comm_exposed_s, 0.0);
  EXPECT_TRUE(prof.stats().comms.empty());
  prof.begin_step(1);  // profiled
  comm.all_reduce_f64(1.0, ReduceOp::sum);
  prof.end_step();
  ASSERT_EQ(prof.stats().comms.size(), 1u);
  EXPECT_EQ(prof.stats().comms[0].axis, "data");
  EXPECT_EQ(prof.stats().comms[0].count, 1);
  const nlohmann::json t = prof.trace_json();
  bool wait_event = false;
  for (const auto& e : t["traceEvents"])
    wait_event = wait_event || (e["cat"] == "comm" && e["ph"] == "X");
  EXPECT_TRUE(wait_event);
}

TEST(ProfilePeaks, HardwareFileAndBenchJson) {
  test::TempDir dir;
  {
    std::ofstream f(dir.file("hw.yaml"));
    f << "name: Test GPU\nbf16_tflops: 989\nfp32_tflops: 67\nhbm_gbps: 3350\n"
         "intra_node_gbps: 450\ninter_node_gbps: 50\nmemory_gib: 80\nnotes: ignored\n";
  }
  const HardwareSpec h = load_hardware(dir.file("hw.yaml"));
  EXPECT_EQ(h.name, "Test GPU");
  const Peaks bf16 = h.peaks(ComputeDType::bf16, false);
  EXPECT_DOUBLE_EQ(bf16.flops, 989e12);
  EXPECT_DOUBLE_EQ(bf16.mem_bw, 3350e9);
  EXPECT_DOUBLE_EQ(bf16.all_reduce_busbw, 450e9);
  EXPECT_DOUBLE_EQ(h.peaks(ComputeDType::fp32, true).flops, 67e12);
  EXPECT_DOUBLE_EQ(h.peaks(ComputeDType::fp32, true).all_gather_busbw, 50e9);

  {
    std::ofstream f(dir.file("bad.yaml"));
    f << "name: x\nbf16_tflops: 1\n";
  }
  const std::string msg = test::error_message([&] { load_hardware(dir.file("bad.yaml")); });
  EXPECT_NE(msg.find("profile.hardware"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fp32_tflops"), std::string::npos) << msg;

  const nlohmann::json bench = {
      {"peaks",
       {{"gemm_tflops", 0.05}, {"mem_gbps", 12.0}, {"all_reduce_busbw_gbps", nullptr},
        {"all_gather_busbw_gbps", 3.0}}}};
  const Peaks p = peaks_from_bench_json(bench, "b.json");
  EXPECT_DOUBLE_EQ(p.flops, 0.05e12);
  EXPECT_DOUBLE_EQ(p.mem_bw, 12e9);
  EXPECT_EQ(p.all_reduce_busbw, 0.0);
  EXPECT_DOUBLE_EQ(p.all_gather_busbw, 3e9);
  const std::string missing = test::error_message(
      [&] { peaks_from_bench_json(nlohmann::json::object(), "x.json"); });
  EXPECT_NE(missing.find("x.json"), std::string::npos) << missing;
  const std::string nofile = test::error_message([&] { load_peaks_file(dir.file("none.json")); });
  EXPECT_NE(nofile.find("profile.peaks"), std::string::npos) << nofile;
}

}  // namespace
}  // namespace gt
