// `trainer costs` (trainer/plan/costs_command.hpp): the per-op cost table of
// one CUDA step, from the real model run on the dry-run backend. Checked
// against what it must agree with, computed here independently: the model
// FLOPs formula (GEMM + attention FLOPs of a step), each row's floor from its
// FLOPs, bytes and unit peak, the step floor as their sum, and the op counts
// of a GPT-2 step (forward, backward, AdamW per parameter tensor).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/plan/step_model.hpp"
#include "trainer/profile/model_flops.hpp"

namespace gt {
namespace {

const std::string kBin = GT_TRAINER_BIN, kSrc = GT_SOURCE_DIR;

nlohmann::json costs(const std::string& args, int* rc = nullptr) {
  std::string out;
  const int code =
      test::run_command(kBin + " costs --config " + kSrc + "/configs/gpt2_124m.yaml --hardware " +
                            kSrc + "/configs/hardware/h200.yaml --json - " + args,
                        &out);
  if (rc) *rc = code;
  EXPECT_EQ(code, 0) << out;
  return nlohmann::json::parse(out.substr(out.find('{')));
}

// A small GPT-2 in bf16, two micro-batches: every op class, accumulation.
const char* kSmall =
    "model.n_layer=2 model.n_head=4 model.n_embd=128 model.vocab_size=1000 "
    "model.block_size=256 train.seq_len=256 train.micro_batch=4 train.global_batch=8";

// On the SIMT attention kernels, which compute exactly the formula's products.
TEST(CostsCommand, FlopsAgreeWithTheModelFormulaAndFloorsAddUp) {
  const nlohmann::json j = costs(std::string(kSmall) + " runtime.attention=simt");
  double gemm_attention = 0, floors = 0, non_gemm_bytes = 0;
  const double tensor = j["peaks"]["tensor_bf16_flops"], fma = j["peaks"]["fma_fp32_flops"],
               hbm = j["peaks"]["hbm_bytes_per_s"];
  for (const auto& r : j["ops"]) {
    if (r["subtotal"]) continue;
    const std::string cls = r["class"], unit = r["unit"];
    const double flops = r["flops"], bytes = r["bytes"];
    if (cls == "gemm" || cls == "attention") gemm_attention += flops;
    if (cls != "gemm") non_gemm_bytes += bytes;
    EXPECT_EQ(unit, cls == "gemm"        ? "tensor bf16"
                    : cls == "attention" ? "fma fp32"
                                         : "memory")
        << r["name"];
    const double want = std::max(flops / (unit == "tensor bf16" ? tensor : fma), bytes / hbm);
    EXPECT_NEAR(r["floor_ms"].get<double>(), want * 1e3, 1e-9 + 1e-9 * want * 1e3) << r["name"];
    floors += r["floor_ms"].get<double>();
  }
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 128;
  m.vocab_size = 1000;
  m.block_size = 256;
  const double model = model_flops(m, 256).per_token() * 8 * 256;
  // The LM head's GEMMs also run over the padding rows (1000 -> 1024):
  // 6 FLOPs per padding weight per token that the model FLOPs leave out.
  const double padding = 6.0 * (m.padded_vocab_size() - m.vocab_size) * m.n_embd * 8 * 256;
  EXPECT_NEAR(gemm_attention, model + padding, 1e-9 * model);
  EXPECT_NEAR(j["model_flops"].get<double>(), model, 1e-9 * model);
  EXPECT_NEAR(j["step_floor_ms"].get<double>(), floors, 1e-9 * floors);
  EXPECT_NEAR(j["non_gemm_bytes"].get<double>(), non_gemm_bytes, 1e-6 * non_gemm_bytes);
  // The sustained figures of h200.yaml, not its datasheet.
  EXPECT_EQ(tensor, 790e12);
  EXPECT_EQ(hbm, 4300e9);
  EXPECT_NE(j["peaks"]["source"].get<std::string>().find("sustained"), std::string::npos);
}

TEST(CostsCommand, OpCountsAreThoseOfOneGpt2Step) {
  const nlohmann::json j = costs(kSmall);
  auto calls = [&](const std::string& prefix) {
    double n = 0;
    for (const auto& r : j["ops"])
      if (!r["subtotal"] && r["name"].get<std::string>().rfind(prefix, 0) == 0)
        n += r["calls"].get<double>();
    return n;
  };
  const int L = 2, micro = 2;
  // Per micro-batch: 4 linear layers per block plus the LM head; c_fc's
  // forward and c_proj's backward carry the MLP's GELU (no GELU op left).
  EXPECT_EQ(calls("matmul_forward"), micro * (3 * L + 1));
  EXPECT_EQ(calls("matmul_gelu_forward"), micro * L);
  EXPECT_EQ(calls("matmul_backward_dgelu"), micro * L);
  EXPECT_EQ(calls("matmul_backward"), micro * (4 * L + 1));  // the prefix counts _dgelu too
  EXPECT_EQ(calls("gelu_"), 0);
  EXPECT_EQ(calls("attention_forward"), micro * L);
  EXPECT_EQ(calls("attention_backward"), micro * L);
  // Every LayerNorm but block 0's ln_1 runs fused with the residual add in
  // front of it (ln_2, the next block's ln_1, ln_f): no add op is left.
  EXPECT_EQ(calls("layernorm_forward"), micro * 1);
  EXPECT_EQ(calls("add_layernorm_forward"), micro * 2 * L);
  double adds = 0;
  for (const auto& r : j["ops"])
    if (!r["subtotal"] && r["name"].get<std::string>() == "add") adds += r["calls"].get<double>();
  EXPECT_EQ(adds, 0);

  EXPECT_EQ(calls("softmax_cross_entropy"), micro);
  // One multi-tensor AdamW launch per optimizer step, whatever the count of
  // parameter tensors.
  EXPECT_EQ(calls("adamw_update"), 1);
  // The norm's squares and the losses' finiteness check, then the clip factor.
  EXPECT_EQ(calls("sum_squares_runs"), 2);
  EXPECT_EQ(calls("clip_scale"), 1);
}

// Llama in bf16 at tp = 1: every RMSNorm but block 0's input_layernorm
// runs fused with the residual add in front of it (block recomputation
// reruns post_attention_layernorm's fused too, input_layernorm alone), no
// add op is left, and the only cast is the embedding's: the norms' backward
// write the residual gradient's bf16 copy the row-parallel GEMMs read.
TEST(CostsCommand, LlamaRunsItsResidualAddsInsideTheNormsAndCastsNoGradient) {
  const int L = 2, micro = 2;
  for (const char* recompute : {"none", "block"}) {
    SCOPED_TRACE(recompute);
    std::string out;
    ASSERT_EQ(test::run_command(kBin + " costs --config " + kSrc + "/configs/llama_tiny.yaml" +
                                    " --hardware " + kSrc + "/configs/hardware/h200.yaml" +
                                    " --json - runtime.dtype=bf16 model.n_layer=2" +
                                    " train.micro_batch=2 train.global_batch=4 train.recompute=" +
                                    recompute,
                                &out),
              0)
        << out;
    const nlohmann::json j = nlohmann::json::parse(out.substr(out.find('{')));
    auto calls = [&](const std::string& op) {  // rows are "op" or "op <shape>"
      double n = 0;
      for (const auto& r : j["ops"]) {
        const std::string name = r["name"].get<std::string>();
        if (!r["subtotal"] && (name == op || name.rfind(op + " ", 0) == 0))
          n += r["calls"].get<double>();
      }
      return n;
    };
    const bool block = std::string(recompute) == "block";
    EXPECT_EQ(calls("add_rmsnorm_forward"), micro * (2 * L + (block ? L : 0)));
    EXPECT_EQ(calls("rmsnorm_forward"), micro * (1 + (block ? L : 0)));
    EXPECT_EQ(calls("add"), 0);
    EXPECT_EQ(calls("cast"), micro);  // the embedding's output
    EXPECT_EQ(calls("rmsnorm_backward"), micro * (2 * L + 1));
  }
}

TEST(CostsCommand, TheAttentionBackwardCarriesTheExtraItsKernelsMove) {
  const nlohmann::json j = costs(kSmall);
  for (const auto& r : j["ops"]) {
    if (r["name"].get<std::string>().rfind("attention_backward", 0) != 0) continue;
    // B=4 NH=4 T=256 hs=32, 2 calls per micro-batch x 2: the formula's
    // bytes (qkv, out, dout, lse read; dqkv written) plus qkv and dout again
    // and the rowsum and log-sum-exp traffic. The activations are bf16 (2
    // bytes: gpt2_124m.yaml is runtime.dtype=bf16), the statistics fp32.
    const double B = 4, NH = 4, T = 256, C = 128, calls = 4, a = 2;
    const double formula = (3 * C + C + C + 3 * C) * B * T * a + B * NH * T * 4;
    const double extra = 5 * C * B * T * a + 4 * B * NH * T * 4;
    EXPECT_NEAR(r["bytes"].get<double>(), calls * (formula + extra), 1.0) << r["name"];
    return;
  }
  ADD_FAILURE() << "no attention_backward row";
}

// runtime.attention=wgmma (head size 64 here) is named in the JSON and the
// header; its ops are costed as the tensor-core kernels' (the same products:
// one-pass forward, the tensor-core backward).
TEST(CostsCommand, WgmmaAttentionIsNamedAndCostedAsTheTensorCoreKernels) {
  const std::string shape =
      "model.n_layer=2 model.n_head=2 model.n_embd=128 model.vocab_size=1000 "
      "model.block_size=256 train.seq_len=256 train.micro_batch=4 train.global_batch=8";
  nlohmann::json wgmma = costs(shape + " runtime.attention=wgmma");
  nlohmann::json tc = costs(shape + " runtime.attention=tensor_cores");
  EXPECT_EQ(wgmma["attention"], "wgmma");
  EXPECT_EQ(tc["attention"], "tensor_cores");
  wgmma.erase("attention");
  tc.erase("attention");
  EXPECT_EQ(wgmma, tc);
}

// bf16 with a head size of 32 runs the tensor-core attention kernels by
// default (runtime.attention=auto), costed on the tensor cores with the
// products they repeat (none in the one-pass forward: 4 B NH T^2 hs FLOPs;
// the backward's S and dP again in the dq kernel: 12 instead of 8) and the
// same bytes as the SIMT kernels, which runtime.attention=simt costs.
TEST(CostsCommand, TensorCoreAttentionIsCostedWithTheProductsItRepeats) {
  const nlohmann::json simt = costs(std::string(kSmall) + " runtime.attention=simt");
  const nlohmann::json tc = costs(kSmall);
  EXPECT_EQ(simt["attention"], "simt");
  EXPECT_EQ(tc["attention"], "tensor_cores");
  EXPECT_EQ(costs(std::string(kSmall) + " runtime.attention=tensor_cores"), tc);
  const double B = 4, NH = 4, T = 256, hs = 32, calls = 4;
  auto row = [](const nlohmann::json& j, const std::string& prefix) {
    for (const auto& r : j["ops"])
      if (!r["subtotal"] && r["name"].get<std::string>().rfind(prefix, 0) == 0) return r;
    ADD_FAILURE() << "no " << prefix << " row";
    return nlohmann::json{};
  };
  for (const char* op : {"attention_forward", "attention_backward"}) {
    SCOPED_TRACE(op);
    const bool bwd = std::string(op) == "attention_backward";
    const nlohmann::json a = row(simt, op), b = row(tc, op);
    EXPECT_EQ(a["unit"], "fma fp32");
    EXPECT_EQ(b["unit"], "tensor bf16");
    EXPECT_EQ(a["bytes"], b["bytes"]);
    EXPECT_DOUBLE_EQ(a["flops"].get<double>(), calls * (bwd ? 8 : 4) * B * NH * T * T * hs);
    EXPECT_DOUBLE_EQ(b["flops"].get<double>(), calls * (bwd ? 12 : 4) * B * NH * T * T * hs);
  }
  EXPECT_LT(tc["step_floor_ms"].get<double>(), simt["step_floor_ms"].get<double>());
}

TEST(CostsCommand, ErrorsNameWhatIsMissingOrUnsupported) {
  std::string out;
  EXPECT_EQ(test::run_command(kBin + " costs --config " + kSrc + "/configs/gpt2_124m.yaml", &out),
            1);
  EXPECT_NE(out.find("costs needs --config FILE and --hardware FILE"), std::string::npos) << out;
  EXPECT_EQ(
      test::run_command(kBin + " costs --config " + kSrc + "/configs/gpt2_124m.yaml --hardware " +
                            kSrc + "/configs/hardware/h200.yaml parallel.tp=2",
                        &out),
      1);
  EXPECT_NE(out.find("costs: one data, tensor and pipeline rank only for now (parallel.pp x dp x "
                     "fsdp x tp = 2)"),
            std::string::npos)
      << out;
}

// runtime.fp8: the blocks' linear GEMMs are fp8_matmul rows on the fp8
// tensor cores (h200.yaml's fp8_tflops, scaled like its sustained bf16
// rate), costed 2MNK each; the LM head stays a bf16 GEMM; the amaxes and
// scales are memory rows; the model FLOPs do not change; hardware without
// an fp8 peak is refused by name.
TEST(CostsCommand, Fp8GemmsRunOnTheFp8TensorCoresAndTheirCastsAreCounted) {
  const std::string small = std::string(kSmall) + " runtime.dtype=bf16";
  const nlohmann::json bf16 = costs(small);
  const nlohmann::json fp8 = costs(small + " runtime.fp8=tensorwise");
  EXPECT_EQ(fp8["fp8"], "tensorwise");
  const double tensor = fp8["peaks"]["tensor_bf16_flops"], f8 = fp8["peaks"]["tensor_fp8_flops"];
  EXPECT_NEAR(f8, tensor * 1978.9 / 989.4, 1e-6 * f8);
  double fp8_gemm_flops = 0, amax_rows = 0, other_gemm_flops = 0;
  for (const auto& r : fp8["ops"]) {
    if (r["subtotal"]) continue;
    const std::string name = r["name"], unit = r["unit"];
    if (name.rfind("fp8_matmul", 0) == 0) {
      EXPECT_EQ(unit, "tensor fp8") << name;
      EXPECT_EQ(r["class"], "gemm");
      long long M = 0, N = 0, K = 0;
      ASSERT_EQ(std::sscanf(name.c_str(), "fp8_matmul M=%lld N=%lld K=%lld", &M, &N, &K), 3)
          << name;
      EXPECT_EQ(r["flops"].get<double>(), 2.0 * M * N * K * r["calls"].get<double>()) << name;
      fp8_gemm_flops += r["flops"].get<double>();
    } else if (r["class"] == "gemm") {
      EXPECT_EQ(unit, "tensor bf16") << name;  // the LM head
      other_gemm_flops += r["flops"].get<double>();
    }
    if (name.rfind("fp8_amax", 0) == 0) amax_rows += r["calls"].get<double>();
  }
  // Tensorwise, per linear and micro-batch: x and W in forward; dy, W and x
  // in backward (scales are not kept from forward to backward; dy's serves
  // both backward GEMMs). 2 blocks x 4 linears x 2 micro-batches.
  EXPECT_GT(fp8_gemm_flops, 0);
  EXPECT_EQ(amax_rows, 5.0 * 2 * 4 * 2);
  // Every GEMM FLOP is still there, on one unit or the other.
  EXPECT_NEAR(fp8_gemm_flops + other_gemm_flops, bf16["gemm_flops"].get<double>(),
              1e-9 * bf16["gemm_flops"].get<double>());
  EXPECT_EQ(fp8["model_flops"], bf16["model_flops"]);

  std::string out;
  EXPECT_EQ(test::run_command(kBin + " costs --config " + kSrc +
                                  "/configs/gpt2_124m.yaml --hardware " + kSrc +
                                  "/configs/hardware/a100.yaml runtime.dtype=bf16 runtime.fp8=rowwise",
                              &out),
            1);
  EXPECT_NE(out.find("runtime.fp8=rowwise but"), std::string::npos) << out;
  EXPECT_NE(out.find("has no fp8 tensor cores"), std::string::npos) << out;
}

// parallel.cp: the table is one cp rank's step (the last rank's). Its GEMMs
// run on its T / cp rows; its attention is over blocks, each call costed
// by the (query, key) pairs its causal mask leaves; the bytes its
// collectives would send are the planner's formulas (cp_bytes_per_step,
// which tests/layouts/cp_layouts.py holds the trainer's logged bytes to).
TEST(CostsCommand, ContextParallelismCostsOneCpRanksStep) {
  auto sum = [](const nlohmann::json& j, const std::string& prefix, const char* key) {
    double n = 0;
    for (const auto& r : j["ops"])
      if (!r["subtotal"] && r["name"].get<std::string>().rfind(prefix, 0) == 0)
        n += r[key].get<double>();
    return n;
  };
  const std::string small = std::string(kSmall) + " runtime.attention=simt";
  const nlohmann::json one = costs(small);
  const double L = 2, B = 4, NH = 4, hs = 32, micro = 2;
  for (bool balance : {true, false}) {
    SCOPED_TRACE(balance ? "balanced" : "unbalanced");
    const nlohmann::json j = costs(small + " parallel.cp=2 parallel.cp_comm=ring" +
                                   " parallel.cp_load_balance=" + (balance ? "true" : "false"));
    EXPECT_EQ(j["cp"]["rank"], 1);
    EXPECT_EQ(j["cp"]["rows"], 128);
    EXPECT_DOUBLE_EQ(sum(j, "matmul", "flops"), sum(one, "matmul", "flops") / 2);
    EXPECT_EQ(sum(j, "attention_forward", "calls"), 0);  // only blocks under cp
    // Rank 1's query rows of the 256: balanced, chunks 1 and 2 of 64
    // (positions 64-127 and 128-191); unbalanced, chunk 1 of 128 (128-255),
    // each against every key before it.
    const double pairs = balance ? (64 * 64 + 64 * 65 / 2) + (128 * 64 + 64 * 65 / 2)
                                 : 128 * 128 + 128 * 129 / 2;
    EXPECT_DOUBLE_EQ(sum(j, "attention_block_forward", "flops"), micro * L * 4 * B * NH * hs * pairs);
    EXPECT_DOUBLE_EQ(sum(j, "attention_block_backward", "flops"),
                     micro * L * 10 * B * NH * hs * pairs);
    EXPECT_DOUBLE_EQ(sum(j, "attention_row_dot", "calls"), micro * L);
  }
  // The bytes the step's collectives would send: the ring's K|V hops and
  // dK|dV partial sums, the gradients' all-reduce over dp x cp, the loss.
  const nlohmann::json j = costs(small + " parallel.cp=2 parallel.cp_comm=ring");
  const Config cfg = load_config(kSrc + "/configs/gpt2_124m.yaml",
                                 {"model.n_layer=2", "model.n_head=4", "model.n_embd=128",
                                  "model.vocab_size=1000", "model.block_size=256",
                                  "train.seq_len=256", "train.micro_batch=4",
                                  "train.global_batch=8", "parallel.cp=2",
                                  "parallel.cp_comm=ring"});
  PlanLayout l;
  l.cp = 2;
  l.cp_comm = CpComm::ring;
  l.micro_batch = 4;
  const CommBytes want = comm_bytes_per_step(cfg.model, cfg.train, l, PlanBackend::cuda);
  // n = 4 x 128 rows x 2 x 4 heads x 32 bf16 elements; per micro-batch and
  // block one forward hop, one backward hop and two fp32 dK|dV hops.
  const double n = 4 * 128 * 2 * 4 * 32;
  EXPECT_DOUBLE_EQ(want.cp, micro * L * (n * 2 + n * 2 + 2 * n * 4) + 8);
  EXPECT_DOUBLE_EQ(j["comm_bytes"]["cp"].get<double>(), want.cp);
  EXPECT_DOUBLE_EQ(j["comm_bytes"]["dp_cp"].get<double>(), want.dp);
}

}  // namespace
}  // namespace gt
