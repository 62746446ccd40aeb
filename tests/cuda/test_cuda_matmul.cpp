// Linear layers on cuBLASLt (kernels/cuda/matmul.cpp through CudaOps, and the
// GemmContext's fused epilogues directly) against the CPU twin: fp32 and
// bf16, sizes that are not multiples of any tile (1, 7, 13, 37, 771...),
// with and without bias, dinp skipped, accumulation into pre-filled dweight
// and dbias with the fused (BGRADB) and the unfused bias gradient, the GELU
// epilogues, bitwise repeatability, and the per-shape plan cache.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/matmul.cuh"
#include "test_util.hpp"

namespace {

using gt::DType;
using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::dev_view;
using gt::test::random_vector;

struct Case {
  int64_t R, C, OC;
};
const Case kCases[] = {{1, 1, 1},      {7, 13, 5},    {37, 771, 129},
                       {64, 768, 2304}, {33, 64, 1000}, {130, 3072, 768}};

std::string name(const Case& c) {
  return "R=" + std::to_string(c.R) + " C=" + std::to_string(c.C) + " OC=" + std::to_string(c.OC);
}

// fp32 sums of K products of values in [-1, 1): the two libraries order them differently.
float f32_atol(int64_t K) { return 2e-6f * std::sqrt(static_cast<float>(K)) + 1e-6f; }

std::vector<float> cpu_forward(const Case& c, std::vector<float> inp, std::vector<float> w,
                               std::vector<float> bias, bool with_bias) {
  auto cpu = gt::make_cpu_ops(1);
  std::vector<float> out(c.R * c.OC);
  cpu->matmul_forward(gt::cpu_f32(out.data(), {c.R, c.OC}), gt::cpu_f32(inp.data(), {c.R, c.C}),
                      gt::cpu_f32(w.data(), {c.OC, c.C}),
                      with_bias ? gt::cpu_f32(bias.data(), {c.OC}) : gt::TensorView{});
  return out;
}

TEST(CudaMatmul, ForwardFp32MatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  for (const Case& c : kCases) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(name(c) + (with_bias ? " +bias" : ""));
      const auto inp = random_vector(c.R * c.C, 1), w = random_vector(c.OC * c.C, 2),
                 bias = random_vector(c.OC, 3);
      const auto want = cpu_forward(c, inp, w, bias, with_bias);
      DeviceArray<float> d_inp(inp, s), d_w(w, s), d_b(bias, s), d_out(c.R * c.OC, s);
      d_out.poison();
      ops.matmul_forward(dev_view(d_out, DType::f32, {c.R, c.OC}),
                         dev_view(d_inp, DType::f32, {c.R, c.C}),
                         dev_view(d_w, DType::f32, {c.OC, c.C}),
                         with_bias ? dev_view(d_b, DType::f32, {c.OC}) : gt::TensorView{});
      const auto got = d_out.download();
      EXPECT_TRUE(all_close(got, want, f32_atol(c.C), 1e-5f));
      // Same shape again: the cached plan, the same bits.
      d_out.poison();
      ops.matmul_forward(dev_view(d_out, DType::f32, {c.R, c.OC}),
                         dev_view(d_inp, DType::f32, {c.R, c.C}),
                         dev_view(d_w, DType::f32, {c.OC, c.C}),
                         with_bias ? dev_view(d_b, DType::f32, {c.OC}) : gt::TensorView{});
      EXPECT_TRUE(gt::test::bitwise_equal(d_out.download(), got)) << "not repeatable";
    }
  }
}

TEST(CudaMatmul, ForwardBf16MatchesCpuWithBf16AndFp32Outputs) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const auto inp = gt::test::round_to_bf16(random_vector(c.R * c.C, 11));
    const auto w = gt::test::round_to_bf16(random_vector(c.OC * c.C, 12));
    const auto bias = gt::test::round_to_bf16(random_vector(c.OC, 13));
    const auto want = cpu_forward(c, inp, w, bias, true);
    DeviceArray<uint16_t> d_inp(gt::test::to_bf16(inp), s), d_w(gt::test::to_bf16(w), s),
        d_b(gt::test::to_bf16(bias), s), d_out(c.R * c.OC, s);
    d_out.poison();
    ops.matmul_forward(dev_view(d_out, DType::bf16, {c.R, c.OC}),
                       dev_view(d_inp, DType::bf16, {c.R, c.C}),
                       dev_view(d_w, DType::bf16, {c.OC, c.C}), dev_view(d_b, DType::bf16, {c.OC}));
    // One bf16 rounding of the fp32 result.
    EXPECT_TRUE(all_close(gt::test::from_bf16(d_out.download()), want, 1e-2f, 1e-2f)) << "bf16 out";

    // fp32 output (and fp32 bias): exact products, fp32 sums.
    DeviceArray<float> d_out32(c.R * c.OC, s), d_b32(bias, s);
    d_out32.poison();
    ops.matmul_forward(dev_view(d_out32, DType::f32, {c.R, c.OC}),
                       dev_view(d_inp, DType::bf16, {c.R, c.C}),
                       dev_view(d_w, DType::bf16, {c.OC, c.C}), dev_view(d_b32, DType::f32, {c.OC}));
    EXPECT_TRUE(all_close(d_out32.download(), want, f32_atol(c.C), 1e-5f)) << "fp32 out";
  }
}

struct BackwardWant {
  std::vector<float> dinp, dweight, dbias;
};
BackwardWant cpu_backward(const Case& c, std::vector<float> dout, std::vector<float> inp,
                          std::vector<float> w, const std::vector<float>& dw0,
                          const std::vector<float>& db0) {
  auto cpu = gt::make_cpu_ops(1);
  BackwardWant r{std::vector<float>(c.R * c.C), dw0, db0};
  cpu->matmul_backward(gt::cpu_f32(r.dinp.data(), {c.R, c.C}),
                       gt::cpu_f32(r.dweight.data(), {c.OC, c.C}),
                       gt::cpu_f32(r.dbias.data(), {c.OC}), gt::cpu_f32(dout.data(), {c.R, c.OC}),
                       gt::cpu_f32(inp.data(), {c.R, c.C}), gt::cpu_f32(w.data(), {c.OC, c.C}));
  return r;
}

TEST(CudaMatmul, BackwardFp32AccumulatesLikeCpuFusedAndUnfusedBiasGrad) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (bool fuse : {true, false}) {
    gt::CudaContextOptions o;
    o.fuse_bias_grad = fuse;
    gt::CudaOps ops(o);
    const cudaStream_t s = ops.stream();
    for (const Case& c : kCases) {
      SCOPED_TRACE(name(c) + (fuse ? " fused dbias" : " unfused dbias"));
      const auto dout = random_vector(c.R * c.OC, 21), inp = random_vector(c.R * c.C, 22),
                 w = random_vector(c.OC * c.C, 23);
      const auto dw0 = random_vector(c.OC * c.C, 24), db0 = random_vector(c.OC, 25);
      const BackwardWant want = cpu_backward(c, dout, inp, w, dw0, db0);

      DeviceArray<float> d_dout(dout, s), d_inp(inp, s), d_w(w, s), d_dinp(c.R * c.C, s),
          d_dw(dw0, s), d_db(db0, s);
      d_dinp.poison();
      auto run = [&](bool with_dinp) {
        ops.matmul_backward(with_dinp ? dev_view(d_dinp, DType::f32, {c.R, c.C}) : gt::TensorView{},
                            dev_view(d_dw, DType::f32, {c.OC, c.C}),
                            dev_view(d_db, DType::f32, {c.OC}),
                            dev_view(d_dout, DType::f32, {c.R, c.OC}),
                            dev_view(d_inp, DType::f32, {c.R, c.C}),
                            dev_view(d_w, DType::f32, {c.OC, c.C}));
      };
      run(true);
      const auto dinp = d_dinp.download(), dw = d_dw.download(), db = d_db.download();
      EXPECT_TRUE(all_close(dinp, want.dinp, f32_atol(c.OC), 1e-5f)) << "dinp";
      EXPECT_TRUE(all_close(dw, want.dweight, f32_atol(c.R), 1e-5f)) << "dweight";
      EXPECT_TRUE(all_close(db, want.dbias, f32_atol(c.R), 1e-5f)) << "dbias";

      // Again from the same start without dinp: same bits, dinp untouched.
      d_dw.upload(dw0);
      d_db.upload(db0);
      d_dinp.poison();
      run(false);
      EXPECT_TRUE(gt::test::bitwise_equal(d_dw.download(), dw)) << "dweight not repeatable";
      EXPECT_TRUE(gt::test::bitwise_equal(d_db.download(), db)) << "dbias not repeatable";
      for (float x : d_dinp.download()) ASSERT_TRUE(std::isnan(x)) << "dinp written when skipped";
    }
  }
}

TEST(CudaMatmul, BackwardBf16MatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const auto dout = gt::test::round_to_bf16(random_vector(c.R * c.OC, 31));
    const auto inp = gt::test::round_to_bf16(random_vector(c.R * c.C, 32));
    const auto w = gt::test::round_to_bf16(random_vector(c.OC * c.C, 33));
    const auto dw0 = random_vector(c.OC * c.C, 34), db0 = random_vector(c.OC, 35);
    const BackwardWant want = cpu_backward(c, dout, inp, w, dw0, db0);

    DeviceArray<uint16_t> d_dout(gt::test::to_bf16(dout), s), d_inp(gt::test::to_bf16(inp), s),
        d_w(gt::test::to_bf16(w), s), d_dinp(c.R * c.C, s);
    // fp32 dweight and dbias: the mixed-precision accumulation.
    DeviceArray<float> d_dw(dw0, s), d_db(db0, s);
    d_dinp.poison();
    ops.matmul_backward(dev_view(d_dinp, DType::bf16, {c.R, c.C}),
                        dev_view(d_dw, DType::f32, {c.OC, c.C}), dev_view(d_db, DType::f32, {c.OC}),
                        dev_view(d_dout, DType::bf16, {c.R, c.OC}),
                        dev_view(d_inp, DType::bf16, {c.R, c.C}),
                        dev_view(d_w, DType::bf16, {c.OC, c.C}));
    EXPECT_TRUE(all_close(gt::test::from_bf16(d_dinp.download()), want.dinp, 1e-2f, 1e-2f))
        << "dinp";
    EXPECT_TRUE(all_close(d_dw.download(), want.dweight, f32_atol(c.R), 1e-5f)) << "dweight fp32";
    EXPECT_TRUE(all_close(d_db.download(), want.dbias, f32_atol(c.R), 1e-5f)) << "dbias";

    // bf16 dweight: accumulated in place, one rounding.
    DeviceArray<uint16_t> d_dw16(gt::test::to_bf16(gt::test::round_to_bf16(dw0)), s);
    const BackwardWant want16 =
        cpu_backward(c, dout, inp, w, gt::test::round_to_bf16(dw0), db0);
    ops.matmul_backward(gt::TensorView{}, dev_view(d_dw16, DType::bf16, {c.OC, c.C}),
                        gt::TensorView{}, dev_view(d_dout, DType::bf16, {c.R, c.OC}),
                        dev_view(d_inp, DType::bf16, {c.R, c.C}),
                        dev_view(d_w, DType::bf16, {c.OC, c.C}));
    EXPECT_TRUE(all_close(gt::test::from_bf16(d_dw16.download()), want16.dweight, 2e-2f, 1e-2f))
        << "dweight bf16";
  }
}

// ---- the fused GELU epilogues, through GemmContext directly ---------------------------

// CPU twin of gelu(inp @ w^T + b): matmul_forward then gelu_forward.
TEST(CudaMatmul, GeluBiasEpilogueMatchesCpuMatmulThenGelu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  gt::cuda::GemmContext gemm;
  const cudaStream_t s = stream.get();
  auto cpu = gt::make_cpu_ops(1);
  const Case cases[] = {{64, 96, 256}, {37, 771, 1024}, {5, 8, 8}};
  for (const Case& c : cases) {
    SCOPED_TRACE(name(c));
    auto inp = random_vector(c.R * c.C, 41), w = random_vector(c.OC * c.C, 42),
         bias = random_vector(c.OC, 43);
    auto pre = cpu_forward(c, inp, w, bias, true);
    std::vector<float> want(pre.size());
    cpu->gelu_forward(gt::cpu_f32(want.data(), {c.R, c.OC}), gt::cpu_f32(pre.data(), {c.R, c.OC}));

    DeviceArray<float> d_inp(inp, s), d_w(w, s), d_b(bias, s), d_out(c.R * c.OC, s),
        d_aux(c.R * c.OC, s);
    d_out.poison();
    d_aux.poison();
    gt::cuda::GemmArgs g;
    g.M = c.R;
    g.N = c.OC;
    g.K = c.C;
    g.A = d_inp.get();
    g.B = d_w.get();
    g.trans_b = true;
    g.D = d_out.get();
    g.epilogue = gt::cuda::GemmEpilogue::gelu_bias;
    g.bias = d_b.get();
    g.aux = d_aux.get();
    if (!gemm.supported(g)) GTEST_FAIL() << "no cuBLASLt algorithm for " << gt::cuda::describe(g);
    gemm.run(g, s);
    // cuBLASLt's GELU is the tanh approximation like ours, but it may
    // evaluate tanh with a faster, less exact instruction: 1e-3 relative.
    EXPECT_TRUE(all_close(d_out.download(), want, f32_atol(c.C) + 2e-4f, 1e-3f)) << "gelu out";
    EXPECT_TRUE(all_close(d_aux.download(), pre, f32_atol(c.C), 1e-5f)) << "aux = pre-activation";
  }
}

// CPU twin of dinp = (dout @ w) * gelu'(pre) and dbias = column sums of it:
// matmul_backward, gelu_backward, and a sum.
TEST(CudaMatmul, DgeluBgradEpilogueMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  gt::cuda::GemmContext gemm;
  const cudaStream_t s = stream.get();
  auto cpu = gt::make_cpu_ops(1);
  // (R, C = GELU width, OC = the next layer's width); C % 8 == 0 for the aux stride.
  const Case cases[] = {{64, 96, 256}, {37, 1024, 771}, {3, 8, 5}};
  for (const Case& c : cases) {
    SCOPED_TRACE(name(c));
    auto dout = random_vector(c.R * c.OC, 51), w = random_vector(c.OC * c.C, 52),
         pre = random_vector(c.R * c.C, 53, -3.f, 3.f);
    auto dw_unused = std::vector<float>(c.OC * c.C), x_unused = std::vector<float>(c.R * c.C);
    std::vector<float> dh(c.R * c.C), want(c.R * c.C), want_db(c.C, 0.f);
    cpu->matmul_backward(gt::cpu_f32(dh.data(), {c.R, c.C}), gt::cpu_f32(dw_unused.data(), {c.OC, c.C}),
                         gt::TensorView{}, gt::cpu_f32(dout.data(), {c.R, c.OC}),
                         gt::cpu_f32(x_unused.data(), {c.R, c.C}), gt::cpu_f32(w.data(), {c.OC, c.C}));
    cpu->gelu_backward(gt::cpu_f32(want.data(), {c.R, c.C}), gt::cpu_f32(pre.data(), {c.R, c.C}),
                       gt::cpu_f32(dh.data(), {c.R, c.C}));
    for (int64_t i = 0; i < c.R; ++i)
      for (int64_t j = 0; j < c.C; ++j) want_db[j] += want[i * c.C + j];

    DeviceArray<float> d_dout(dout, s), d_w(w, s), d_pre(pre, s), d_dinp(c.R * c.C, s),
        d_db(c.C, s);
    for (bool bgrad : {false, true}) {
      d_dinp.poison();
      d_db.poison();
      gt::cuda::GemmArgs g;
      g.M = c.R;
      g.N = c.C;
      g.K = c.OC;
      g.A = d_dout.get();
      g.B = d_w.get();
      g.D = d_dinp.get();
      g.epilogue = bgrad ? gt::cuda::GemmEpilogue::dgelu_bgrad : gt::cuda::GemmEpilogue::dgelu;
      g.aux = d_pre.get();
      g.bias = bgrad ? d_db.get() : nullptr;
      if (!gemm.supported(g)) GTEST_FAIL() << "no cuBLASLt algorithm for " << gt::cuda::describe(g);
      gemm.run(g, s);
      EXPECT_TRUE(all_close(d_dinp.download(), want, f32_atol(c.OC) + 2e-4f, 1e-3f))
          << (bgrad ? "dgelu_bgrad" : "dgelu") << " dinp";
      if (bgrad) {
        EXPECT_TRUE(all_close(d_db.download(), want_db, 2e-4f * c.R, 1e-3f)) << "dbias";
      }
    }
  }
}

TEST(CudaMatmul, PlanCacheHoldsOneEntryPerShapeAndRejectsBadArguments) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  gt::cuda::GemmContext gemm;
  const cudaStream_t s = stream.get();
  DeviceArray<float> a(64 * 64, s), b(64 * 64, s), d(64 * 64, s), aux(64 * 64, s);
  gt::cuda::GemmArgs g;
  g.M = 64;
  g.N = 64;
  g.K = 64;
  g.A = a.get();
  g.B = b.get();
  g.D = d.get();
  EXPECT_EQ(gemm.cached_shapes(), 0u);
  gemm.run(g, s);
  gemm.run(g, s);
  EXPECT_EQ(gemm.cached_shapes(), 1u);
  g.K = 32;
  gemm.run(g, s);
  EXPECT_EQ(gemm.cached_shapes(), 2u);
  g.trans_a = true;
  gemm.run(g, s);
  EXPECT_EQ(gemm.cached_shapes(), 3u);

  g.epilogue = gt::cuda::GemmEpilogue::gelu;
  g.aux = aux.get();
  g.ld_aux = 63;  // must be a multiple of 8
  EXPECT_NE(gt::test::error_message([&] { gemm.run(g, s); }).find("multiple of 8"),
            std::string::npos);
  g.epilogue = gt::cuda::GemmEpilogue::bias;  // no bias pointer
  EXPECT_NE(gt::test::error_message([&] { gemm.run(g, s); }).find("needs a bias"),
            std::string::npos);
  stream.synchronize();
}

}  // namespace
