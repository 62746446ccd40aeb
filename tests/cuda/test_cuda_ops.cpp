// CudaOps through the Ops interface: the factory's error without a device
// (this one runs on CPU-only machines), argument checks that name the op,
// every small op against CpuOps, and the whole-op-set test: one transformer
// block plus embedding, LM head and loss, forward and backward and an AdamW
// step, run on CpuOps and CudaOps from identical inputs and compared to 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "ops_pair.hpp"
#include "test_util.hpp"
#if defined(TRAINER_CUDA_EMULATOR)
#include "gt_emu/control.hpp"
#endif

namespace {

using gt::Ops;
using gt::TensorView;
using gt::test::all_close;
using gt::test::Init;
using gt::test::NamedTensors;

TEST(CudaOpsFactory, FailsWithAClearErrorWhenNoDeviceIsVisible) {
#if defined(TRAINER_CUDA_EMULATOR)
  // The emulated device hides its devices as CUDA_VISIBLE_DEVICES="" hides a GPU.
  const int visible = gt::cuda_device_count();
  gt::emu::set_visible_devices(0);
  const std::string msg = gt::test::error_message([] { gt::make_cuda_ops({}); });
  gt::emu::set_visible_devices(visible);
#else
  if (gt::cuda_available()) GTEST_SKIP() << "a CUDA device is visible: nothing to refuse";
  const std::string msg = gt::test::error_message([] { gt::make_cuda_ops({}); });
#endif
  EXPECT_NE(msg.find("no CUDA device is visible"), std::string::npos) << msg;
}

TEST(CudaOpsFactory, RejectsADeviceIndexOutOfRange) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaContextOptions o;
  o.device = gt::cuda_device_count();
  const std::string msg = gt::test::error_message([&] { gt::make_cuda_ops(o); });
  EXPECT_NE(msg.find("device(s) are visible"), std::string::npos) << msg;
  auto ops = gt::make_cuda_ops({});
  EXPECT_EQ(ops->device(), gt::Device::cuda);
}

TEST(CudaOps, ArgumentErrorsNameTheOpAndTheTensor) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  NamedTensors d(true, ops.stream());
  std::vector<float> host(4 * 8);
  auto msg = gt::test::error_message([&] {
    ops.matmul_forward(d.f32("out", {4, 3}), gt::cpu_f32(host.data(), {4, 8}), d.f32("w", {3, 8}),
                       TensorView{});
  });
  EXPECT_NE(msg.find("CudaOps::matmul_forward: inp must be a cuda tensor"), std::string::npos) << msg;
  msg = gt::test::error_message([&] {
    ops.matmul_forward(d.f32("out", {4, 3}), d.f32("x", {4, 8}), d.f32("w2", {3, 7}), TensorView{});
  });
  EXPECT_NE(msg.find("CudaOps::matmul_forward: weight must be (3, 8), got (3, 7)"),
            std::string::npos)
      << msg;
  gt::test::DeviceArray<uint16_t> b16(64, ops.stream());
  const TensorView x16 = gt::test::dev_view(b16, gt::DType::bf16, {4, 8});
  msg = gt::test::error_message([&] {
    ops.layernorm_backward(x16, d.f32("dw", {8}), d.f32("db", {8}), x16, x16, d.f32("lw", {8}),
                           d.f32("mu", {4}), d.f32("rs", {4}), {});
  });
  // inp may be bf16 (bf16 storage); the gradient it accumulates into may not.
  EXPECT_NE(msg.find("CudaOps::layernorm_backward: dinp must be fp32, got bf16"), std::string::npos)
      << msg;
  msg = gt::test::error_message([&] {
    ops.attention_forward(d.f32("att", {1, 2, 129}), d.f32("saved", {2}),
                          d.f32("qkv", {1, 2, 387}), 1);
  });
  EXPECT_NE(msg.find("head size 129"), std::string::npos) << msg;
  msg = gt::test::error_message([&] {
    ops.attention_forward(d.f32("att2", {1, 2, 8}), d.f32("saved2", {3}), d.f32("qkv2", {1, 2, 24}),
                          2);
  });
  EXPECT_NE(msg.find("saved holds 3 floats, expected B*NH*T = 4"), std::string::npos) << msg;
}

// The fallbacks that run another op's kernels (the GEMM, then GELU or its
// backward, where cuBLASLt has no fused epilogue; a same-dtype cast as a
// copy) call the backend's own methods, not the public entries: an observer
// sees one op per call and never one inside another.
TEST(CudaOps, AnObserverSeesOneOpPerCallAndNoNestedOne) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Names final : gt::OpObserver {
    std::vector<std::string> seen;
    bool open = false;
    uint64_t on_begin(const gt::OpCall& call) override {
      EXPECT_FALSE(open) << call.name() << " began inside another op";
      open = true;
      seen.push_back(call.name());
      return seen.size();
    }
    void on_end(uint64_t, const gt::OpCall&) override { open = false; }
  } names;
  gt::CudaOps ops;
  ops.set_observer(&names);
  NamedTensors d(true, ops.stream());
  // OC = 7 and C = 7: no aux row stride cuBLASLt takes, so both fall back.
  ops.matmul_gelu_forward(d.f32("out", {4, 7}), d.f32("pre", {4, 7}), d.f32("x", {4, 8}),
                          d.f32("w", {7, 8}), TensorView{});
  ops.matmul_backward_dgelu(d.f32("dx", {4, 7}), d.f32("dw", {5, 7}), TensorView{},
                            d.f32("dy", {4, 5}), d.f32("x2", {4, 7}), d.f32("w2", {5, 7}),
                            d.f32("pre2", {4, 7}));
  ops.cast(d.f32("c1", {6}), d.f32("c2", {6}));
  ops.synchronize();
  ops.set_observer(nullptr);
  EXPECT_EQ(names.seen,
            (std::vector<std::string>{"matmul_gelu_forward", "matmul_backward_dgelu", "cast"}));
  EXPECT_FALSE(names.open);
}

// ---- the small ops, one by one ------------------------------------------------------

// Runs `body` on both backends with fresh named tensors, then compares the named outputs.
template <typename Body>
void compare_backends(const std::vector<std::string>& outputs, Body body, float atol = 1e-5f,
                      float rtol = 1e-5f) {
  auto cpu = gt::make_cpu_ops(1);
  gt::CudaOps gpu;
  NamedTensors hc(false, nullptr), hg(true, gpu.stream());
  body(*cpu, hc);
  body(gpu, hg);
  for (const std::string& name : outputs) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(all_close(hg.get(name), hc.get(name), atol, rtol));
  }
}

TEST(CudaOps, EmbeddingsMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 3, T = 17, C = 40, V = 50, maxT = 20, N = B * T;
  compare_backends({"out", "dwte", "dwpe", "tout", "tdwte", "pout", "pdwpe"},
                   [&](Ops& ops, NamedTensors& t) {
    ops.embedding_forward(t.f32("out", {B, T, C}, Init::poison), t.i32("tok", {B, T}, V),
                          t.f32("wte", {V, C}), t.f32("wpe", {maxT, C}));
    ops.embedding_backward(t.f32("dwte", {V, C}), t.f32("dwpe", {maxT, C}),
                           t.f32("dout", {B, T, C}), t.i32("tok", {B, T}, V));
    ops.token_embedding_forward(t.f32("tout", {N, C}, Init::poison), t.i32("tok", {N}, V),
                                t.f32("wte_shard", {20, C}), 25);
    ops.token_embedding_backward(t.f32("tdwte", {20, C}), t.f32("dout", {N, C}),
                                 t.i32("tok", {N}, V), 25);
    ops.position_embedding_forward(t.f32("pout", {N, C}), t.f32("wpe", {maxT, C}), 5, T);
    ops.position_embedding_backward(t.f32("pdwpe", {maxT, C}), t.f32("dout", {N, C}), 5, T);
  });
}

TEST(CudaOps, LayerNormGeluAndElementwiseMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t R = 37, C = 96;
  compare_backends({"ln", "mean", "rstd", "dx", "dw", "db", "g", "dg", "sum", "acc", "zeroed",
                    "copied", "biased"},
                   [&](Ops& ops, NamedTensors& t) {
    ops.layernorm_forward(t.f32("ln", {R, C}, Init::poison), t.f32("mean", {R}, Init::poison),
                          t.f32("rstd", {R}, Init::poison), t.f32("x", {R, C}, -2.f, 3.f),
                          t.f32("w", {C}, 0.5f, 1.5f), t.f32("b", {C}));
    ops.layernorm_backward(t.f32("dx", {R, C}), t.f32("dw", {C}), t.f32("db", {C}),
                           t.f32("dy", {R, C}), t.f32("x", {R, C}), t.f32("w", {C}),
                           t.f32("mean", {R}), t.f32("rstd", {R}), {});
    ops.gelu_forward(t.f32("g", {R, C}, Init::poison), t.f32("x", {R, C}));
    ops.gelu_backward(t.f32("dg", {R, C}, Init::poison), t.f32("x", {R, C}), t.f32("dy", {R, C}));
    ops.add(t.f32("sum", {R, C}, Init::poison), t.f32("x", {R, C}), t.f32("dy", {R, C}));
    ops.accumulate(t.f32("acc", {R, C}), t.f32("x", {R, C}));
    ops.zero(t.f32("zeroed", {R, C}));
    ops.copy(t.f32("copied", {R, C}, Init::poison), t.f32("x", {R, C}));
    ops.add_bias(t.f32("biased", {R, C}), t.f32("b", {C}));
  }, 1e-5f, 1e-4f);
}

TEST(CudaOps, CrossEntropySumSquaresAndAdamWMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t R = 19, V = 333, n = 1001;
  std::vector<double> norms[2];
  int which = 0;
  compare_backends(
      {"loss", "dlogits", "loss2", "logits2", "rmax", "se", "tl", "sloss", "sd", "p", "m", "v"},
      [&](Ops& ops, NamedTensors& t) {
        ops.softmax_cross_entropy(
            t.f32("loss", {R}, Init::poison), t.f32("dlogits", {R, V}, Init::poison),
            t.f32("logits", {R, V}, -5.f, 5.f), t.i32("tgt", {R}, V), V, 0.25f);
        // In place: dlogits aliases the logits.
        ops.softmax_cross_entropy(t.f32("loss2", {R}, Init::poison), t.f32("logits2", {R, V}),
                                  t.f32("logits2", {R, V}), t.i32("tgt", {R}, V), V, 1.f);
        // One shard of [100, 300): a target may fall outside it.
        ops.cross_entropy_shard_max(t.f32("rmax", {R}, Init::poison), t.f32("shard", {R, 200}), 100,
                                    V);
        ops.cross_entropy_shard_sums(t.f32("se", {R}, Init::poison), t.f32("tl", {R}, Init::poison),
                                     t.f32("shard", {R, 200}), t.i32("tgt", {R}, V),
                                     t.f32("rmax", {R}), 100, V);
        ops.cross_entropy_shard_finish(
            t.f32("sloss", {R}, Init::poison), t.f32("sd", {R, 200}, Init::poison),
            t.f32("shard", {R, 200}), t.i32("tgt", {R}, V), t.f32("rmax", {R}), t.f32("se", {R}),
            t.f32("tl", {R}), 100, V, 0.5f);
        norms[which++] = {ops.sum_squares(t.f32("g", {n})),
                          ops.sum_squares(t.f32("dlogits", {R, V}))};
        Ops::AdamWParams p{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 5};
        ops.adamw_update(t.f32("p", {n}), t.f32("g", {n}), t.f32("m", {n}, -0.1f, 0.1f),
                         t.f32("v", {n}, 0.f, 0.01f), p);
      },
      1e-5f, 1e-4f);
  for (size_t i = 0; i < norms[0].size(); ++i)
    EXPECT_NEAR(norms[1][i], norms[0][i], 1e-6 * std::fabs(norms[0][i])) << "sum_squares " << i;
}

TEST(CudaOps, CastAndAdamWWithTheBf16CopyThroughTheInterface) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  const int64_t n = 4099;
  const auto x = gt::test::random_vector(n, 61, -3.f, 3.f);
  gt::test::DeviceArray<float> d_x(x, s), d_back(n, s);
  gt::test::DeviceArray<uint16_t> d_b(n, s);
  d_b.poison();
  d_back.poison();
  ops.cast(gt::test::dev_view(d_b, gt::DType::bf16, {n}), gt::test::dev_view(d_x, gt::DType::f32, {n}));
  EXPECT_TRUE(d_b.download() == gt::test::to_bf16(x)) << "fp32 -> bf16";
  ops.cast(gt::test::dev_view(d_back, gt::DType::f32, {n}), gt::test::dev_view(d_b, gt::DType::bf16, {n}));
  EXPECT_TRUE(gt::test::bitwise_equal(d_back.download(), gt::test::round_to_bf16(x))) << "bf16 -> fp32";

  // AdamW writes the fp32 master weights and their bf16 copy in one pass.
  auto p0 = gt::test::random_vector(n, 62), g = gt::test::random_vector(n, 63);
  std::vector<float> m(n, 0.f), v(n, 0.f), want = p0;
  const Ops::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.f, 1};
  auto cpu = gt::make_cpu_ops(1);
  {
    std::vector<float> mm = m, vv = v;
    cpu->adamw_update(gt::cpu_f32(want.data(), {n}), gt::cpu_f32(g.data(), {n}),
                      gt::cpu_f32(mm.data(), {n}), gt::cpu_f32(vv.data(), {n}), hp);
  }
  gt::test::DeviceArray<float> d_p(p0, s), d_g(g, s), d_m(m, s), d_v(v, s);
  d_b.poison();
  ops.adamw_update_runs(
      gt::test::dev_view(d_p, gt::DType::f32, {n}), gt::test::dev_view(d_g, gt::DType::f32, {n}),
      gt::test::dev_view(d_m, gt::DType::f32, {n}), gt::test::dev_view(d_v, gt::DType::f32, {n}),
      gt::test::dev_view(d_b, gt::DType::bf16, {n}), gt::TensorView{}, {{0, 0, n, true}}, hp);
  const auto got = d_p.download();
  EXPECT_TRUE(all_close(got, want, 1e-6f, 1e-5f)) << "param";
  EXPECT_TRUE(d_b.download() == gt::test::to_bf16(got)) << "the bf16 copy is the rounded param";
}

// ---- the whole op set --------------------------------------------------------------

struct BlockDims {
  int64_t B = 2, T = 70, C = 64, NH = 4, V = 101, maxT = 80;
  int64_t R() const { return B * T; }
};

// Embedding, one pre-LN transformer block, final LayerNorm, tied LM head and
// the loss, then the backward of all of it and an AdamW step on two weights:
// the order GPT::forward/backward calls Ops in.
void run_block(Ops& ops, NamedTensors& t, const BlockDims& d) {
  const int64_t B = d.B, T = d.T, C = d.C, V = d.V, R = d.R();
  const int nh = static_cast<int>(d.NH);
  const Init P = Init::poison;
  auto w = [&](const std::string& n, std::initializer_list<int64_t> s) {
    return t.f32(n, s, Init::random, -0.1f, 0.1f);
  };
  auto ones = [&](const std::string& n, int64_t c) { return t.f32(n, {c}, Init::random, 0.8f, 1.2f); };
  const auto tok = t.i32("tokens", {B, T}, static_cast<int32_t>(V));
  const auto tgt = t.i32("targets", {R}, static_cast<int32_t>(V));
  const int64_t saved_n = ops.attention_saved_elems(static_cast<int>(B), nh, static_cast<int>(T));
  const int64_t scratch_n = ops.attention_scratch_elems(static_cast<int>(B), nh, static_cast<int>(T));

  // forward
  ops.embedding_forward(t.f32("x", {B, T, C}, P), tok, w("wte", {V, C}), w("wpe", {d.maxT, C}));
  ops.layernorm_forward(t.f32("ln1", {R, C}, P), t.f32("mean1", {R}, P), t.f32("rstd1", {R}, P),
                        t.f32("x", {R, C}), ones("ln1_w", C), w("ln1_b", {C}));
  ops.matmul_forward(t.f32("qkv", {R, 3 * C}, P), t.f32("ln1", {R, C}), w("attn_w", {3 * C, C}),
                     w("attn_b", {3 * C}));
  ops.attention_forward(t.f32("att", {B, T, C}, P), t.f32("att_saved", {saved_n}, P),
                        t.f32("qkv", {B, T, 3 * C}), nh);
  ops.matmul_forward(t.f32("proj", {R, C}, P), t.f32("att", {R, C}), w("proj_w", {C, C}),
                     w("proj_b", {C}));
  ops.add(t.f32("x2", {R, C}, P), t.f32("x", {R, C}), t.f32("proj", {R, C}));
  ops.layernorm_forward(t.f32("ln2", {R, C}, P), t.f32("mean2", {R}, P), t.f32("rstd2", {R}, P),
                        t.f32("x2", {R, C}), ones("ln2_w", C), w("ln2_b", {C}));
  ops.matmul_forward(t.f32("fc", {R, 4 * C}, P), t.f32("ln2", {R, C}), w("fc_w", {4 * C, C}),
                     w("fc_b", {4 * C}));
  ops.gelu_forward(t.f32("h", {R, 4 * C}, P), t.f32("fc", {R, 4 * C}));
  ops.matmul_forward(t.f32("fcp", {R, C}, P), t.f32("h", {R, 4 * C}), w("fcp_w", {C, 4 * C}),
                     w("fcp_b", {C}));
  ops.add(t.f32("x3", {R, C}, P), t.f32("x2", {R, C}), t.f32("fcp", {R, C}));
  ops.layernorm_forward(t.f32("lnf", {R, C}, P), t.f32("meanf", {R}, P), t.f32("rstdf", {R}, P),
                        t.f32("x3", {R, C}), ones("lnf_w", C), w("lnf_b", {C}));
  ops.matmul_forward(t.f32("logits", {R, V}, P), t.f32("lnf", {R, C}), t.f32("wte", {V, C}),
                     TensorView{});
  ops.softmax_cross_entropy(t.f32("losses", {R}, P), t.f32("logits", {R, V}),
                            t.f32("logits", {R, V}), tgt, V, 1.f / static_cast<float>(R));

  // backward (parameter gradients accumulate: zero them first)
  for (const auto& [n, s] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"d_wte", {V * C}}, {"d_wpe", {d.maxT * C}}, {"d_ln1_w", {C}}, {"d_ln1_b", {C}},
           {"d_attn_w", {3 * C * C}}, {"d_attn_b", {3 * C}}, {"d_proj_w", {C * C}},
           {"d_proj_b", {C}}, {"d_ln2_w", {C}}, {"d_ln2_b", {C}}, {"d_fc_w", {4 * C * C}},
           {"d_fc_b", {4 * C}}, {"d_fcp_w", {4 * C * C}}, {"d_fcp_b", {C}}, {"d_lnf_w", {C}},
           {"d_lnf_b", {C}}})
    ops.zero(t.f32(n, {s[0]}, P));
  ops.matmul_backward(t.f32("d_lnf", {R, C}, P), t.f32("d_wte", {V, C}), TensorView{},
                      t.f32("logits", {R, V}), t.f32("lnf", {R, C}), t.f32("wte", {V, C}));
  ops.zero(t.f32("d_x3", {R, C}, P));  // layernorm_backward accumulates into dinp
  ops.layernorm_backward(t.f32("d_x3", {R, C}), t.f32("d_lnf_w", {C}), t.f32("d_lnf_b", {C}),
                         t.f32("d_lnf", {R, C}), t.f32("x3", {R, C}), t.f32("lnf_w", {C}),
                         t.f32("meanf", {R}), t.f32("rstdf", {R}), {});
  ops.matmul_backward(t.f32("d_h", {R, 4 * C}, P), t.f32("d_fcp_w", {C, 4 * C}),
                      t.f32("d_fcp_b", {C}), t.f32("d_x3", {R, C}), t.f32("h", {R, 4 * C}),
                      t.f32("fcp_w", {C, 4 * C}));
  ops.gelu_backward(t.f32("d_fc", {R, 4 * C}, P), t.f32("fc", {R, 4 * C}), t.f32("d_h", {R, 4 * C}));
  ops.matmul_backward(t.f32("d_ln2", {R, C}, P), t.f32("d_fc_w", {4 * C, C}),
                      t.f32("d_fc_b", {4 * C}), t.f32("d_fc", {R, 4 * C}), t.f32("ln2", {R, C}),
                      t.f32("fc_w", {4 * C, C}));
  ops.copy(t.f32("d_x2", {R, C}, P), t.f32("d_x3", {R, C}));  // residual: x3 = x2 + fcp
  ops.layernorm_backward(t.f32("d_x2", {R, C}), t.f32("d_ln2_w", {C}), t.f32("d_ln2_b", {C}),
                         t.f32("d_ln2", {R, C}), t.f32("x2", {R, C}), t.f32("ln2_w", {C}),
                         t.f32("mean2", {R}), t.f32("rstd2", {R}), {});
  ops.matmul_backward(t.f32("d_att", {R, C}, P), t.f32("d_proj_w", {C, C}), t.f32("d_proj_b", {C}),
                      t.f32("d_x2", {R, C}), t.f32("att", {R, C}), t.f32("proj_w", {C, C}));
  ops.attention_backward(t.f32("d_qkv", {B, T, 3 * C}, P), t.f32("att_scratch", {scratch_n}, P),
                         t.f32("d_att", {B, T, C}), t.f32("qkv", {B, T, 3 * C}),
                         t.f32("att", {B, T, C}), t.f32("att_saved", {saved_n}), nh);
  ops.matmul_backward(t.f32("d_ln1", {R, C}, P), t.f32("d_attn_w", {3 * C, C}),
                      t.f32("d_attn_b", {3 * C}), t.f32("d_qkv", {R, 3 * C}), t.f32("ln1", {R, C}),
                      t.f32("attn_w", {3 * C, C}));
  ops.copy(t.f32("d_x", {R, C}, P), t.f32("d_x2", {R, C}));  // residual: x2 = x + proj
  ops.layernorm_backward(t.f32("d_x", {R, C}), t.f32("d_ln1_w", {C}), t.f32("d_ln1_b", {C}),
                         t.f32("d_ln1", {R, C}), t.f32("x", {R, C}), t.f32("ln1_w", {C}),
                         t.f32("mean1", {R}), t.f32("rstd1", {R}), {});
  ops.embedding_backward(t.f32("d_wte", {V, C}), t.f32("d_wpe", {d.maxT, C}),
                         t.f32("d_x", {B, T, C}), tok);

  // one AdamW step on two weights (moments start at zero)
  const Ops::AdamWParams p{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.f, 1};
  for (const std::string n : {"fc_w", "wte"}) {
    const int64_t sz = n == "fc_w" ? 4 * C * C : V * C;
    ops.adamw_update(t.f32(n, {sz}), t.f32("d_" + n, {sz}), t.f32("m_" + n, {sz}, Init::zeros),
                     t.f32("v_" + n, {sz}, Init::zeros), p);
  }
}

// What run_block computes, forward and backward, and the optimizer state.
const char* const kBlockTensors[] = {
    "x",        "ln1",      "qkv",     "att",      "x2",      "h",        "x3",      "lnf",
    "losses",   "logits",   "d_lnf",   "d_x3",     "d_h",     "d_fc",     "d_x2",    "d_att",
    "d_qkv",    "d_x",      "d_wte",   "d_wpe",    "d_ln1_w", "d_ln1_b",  "d_attn_w", "d_attn_b",
    "d_proj_w", "d_proj_b", "d_ln2_w", "d_ln2_b",  "d_fc_w",  "d_fc_b",   "d_fcp_w", "d_fcp_b",
    "d_lnf_w",  "d_lnf_b",  "fc_w",    "wte",      "m_fc_w",  "v_wte"};

// run_block on CpuOps (with `cpu_threads`) and CudaOps from identical
// inputs; every tensor of kBlockTensors compared with tol(name) = (atol, rtol).
template <typename Tol>
void compare_block(const BlockDims& d, int cpu_threads, Tol tol) {
  auto cpu = gt::make_cpu_ops(cpu_threads);
  gt::CudaOps gpu;
  NamedTensors hc(false, nullptr), hg(true, gpu.stream());
  run_block(*cpu, hc, d);
  run_block(gpu, hg, d);
  for (const char* n : kBlockTensors) {
    SCOPED_TRACE(n);
    const auto [atol, rtol] = tol(std::string(n));
    EXPECT_TRUE(all_close(hg.get(n), hc.get(n), atol, rtol));
  }
}

// upload(): the host buffer is reusable the moment it returns, uploads queue
// without waiting for the GPU (pinned staging, a ring of slots reused more
// than once here), and an upload too large to stage is still correct.
TEST(CudaOps, UploadsQueueWithoutWaitingAndLetTheHostReuseItsMemory) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  const int64_t n = 3000;  // 12 KB: staged
  const int kUploads = 3 * gt::cuda::UploadStaging::kSlots;
  std::vector<gt::test::DeviceArray<int32_t>> dst;
  for (int i = 0; i < kUploads; ++i) dst.emplace_back(n, s);
#if defined(TRAINER_CUDA_EMULATOR)
  // Kernels queued before an upload have not run when it returns: the
  // emulated device runs queued work only when the host waits for it.
  gt::test::DeviceArray<float> d_x(n, s);
  gt::test::DeviceArray<uint16_t> d_b(n, s);
  gt::emu::set_traffic_counting(true);
  (void)gt::emu::take_traffic();
  ops.cast(gt::test::dev_view(d_b, gt::DType::bf16, {n}),
           gt::test::dev_view(d_x, gt::DType::f32, {n}));
#endif
  std::vector<int32_t> host(n);
  for (int i = 0; i < kUploads; ++i) {
    for (int64_t j = 0; j < n; ++j) host[j] = static_cast<int32_t>(i * 100000 + j);
    ops.upload(gt::test::dev_view(dst[i], gt::DType::i32, {n}), host.data());
#if defined(TRAINER_CUDA_EMULATOR)
    // The first kSlots uploads take fresh slots; the next one waits for the
    // copy that read its slot, which ran after the cast.
    if (i == gt::cuda::UploadStaging::kSlots - 1) {
      EXPECT_TRUE(gt::emu::take_traffic().empty())
          << "an upload waited for the work queued before it";
    }
    if (i == gt::cuda::UploadStaging::kSlots) {
      EXPECT_FALSE(gt::emu::take_traffic().empty());
    }
#endif
  }
#if defined(TRAINER_CUDA_EMULATOR)
  gt::emu::set_traffic_counting(false);
#endif
  for (int i = 0; i < kUploads; ++i) {
    const auto got = dst[i].download();
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(got[j], i * 100000 + j) << "upload " << i << " element " << j;
  }
  // Past the staging limit: the synchronous path.
  const int64_t big = static_cast<int64_t>(gt::cuda::UploadStaging::kMaxStagedBytes / 4) + 1;
  std::vector<int32_t> hbig(big);
  for (int64_t j = 0; j < big; ++j) hbig[j] = static_cast<int32_t>(7 * j);
  gt::test::DeviceArray<int32_t> dbig(big, s);
  ops.upload(gt::test::dev_view(dbig, gt::DType::i32, {big}), hbig.data());
  std::fill(hbig.begin(), hbig.end(), -1);  // reused at once
  const auto got = dbig.download();
  for (int64_t j = 0; j < big; ++j) ASSERT_EQ(got[j], 7 * j) << "element " << j;
}

TEST(CudaOps, TransformerBlockForwardBackwardMatchesCpuTo1e4) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  compare_block(BlockDims{}, 1, [](const std::string&) { return std::pair{1e-4f, 1e-4f}; });
}

// The same block at GPT-2 124M's width and length (C=768, 12 heads of 64,
// T=1024, B=2), the CPU twin on all cores; a small vocabulary keeps the CPU
// side to seconds (the LM head's shape has its own sampled check in
// test_cuda_lm_head.cpp). Sums 12-48x longer than the small block's: the
// relative tolerance is 1e-3. A real GPU only (scripts/gpu_check.sh runs it).
TEST(CudaOps, TransformerBlockMatchesCpuAtProductionShape) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (const char* why = gt::test::production_shapes_skipped()) GTEST_SKIP() << why;
  BlockDims d;
  d.B = 2;
  d.T = 1024;
  d.C = 768;
  d.NH = 12;
  d.V = 1024;
  d.maxT = 1024;
  // AdamW's first step moves a weight by lr * g / (|g| + eps): a gradient
  // within rounding of zero can land anywhere in [-lr, lr] on either backend
  // (seen on the emulated device: 1 weight of fc_w's 2.4M off by 2.7e-4).
  // The updated weights get 2 lr; their gradients stay at 1e-3 relative.
  compare_block(d, 0, [](const std::string& n) {
    const bool updated = n == "fc_w" || n == "wte";
    return std::pair{updated ? 2e-3f : 2e-4f, 1e-3f};
  });
}

#if defined(TRAINER_CUDA_EMULATOR)
// A GPU runs the blocks of a grid in any order: every op gives the same bits
// with the emulator's blocks (and the threads of each block) run forward and
// in reverse. A kernel that assumes an order between blocks fails here.
TEST(CudaOps, TheWholeOpSetGivesTheSameBitsInEitherGridOrder) {
  const BlockDims d;
  const std::string saved = gt::emu::block_order();
  auto run = [&](const char* order) {
    EXPECT_TRUE(gt::emu::set_block_order(order));
    gt::CudaOps gpu;
    NamedTensors t(true, gpu.stream());
    run_block(gpu, t, d);
    std::vector<std::vector<float>> out;
    for (const char* n : kBlockTensors) out.push_back(t.get(n));
    return out;
  };
  const auto forward = run("forward"), reverse = run("reverse");
  gt::emu::set_block_order(saved);
  for (size_t i = 0; i < forward.size(); ++i)
    EXPECT_TRUE(gt::test::bitwise_equal(forward[i], reverse[i])) << kBlockTensors[i];
}
#endif

}  // namespace
