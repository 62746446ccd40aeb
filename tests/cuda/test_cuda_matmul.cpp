// Linear layers on cuBLASLt (kernels/cuda/matmul.cpp through CudaOps, and the
// GemmContext's fused epilogues directly) against the CPU twin: fp32 and
// bf16, sizes that are not multiples of any tile (1, 7, 13, 37, 771...),
// with and without bias, dinp skipped, accumulation into pre-filled dweight
// and dbias with the fused (BGRADB) and the unfused bias gradient, the GELU
// epilogues, bitwise repeatability, and the per-shape plan cache.
//
// The tests after the plan cache pin down what cuBLASLt's documentation
// leaves open and the emulated cuBLASLt had to choose (the numbered
// "Assumptions" at the top of emulator/src/cublaslt.cpp name the test that
// checks each): the order of alpha, beta, bias and activation, the GELU
// approximation, the bias/aux types with bf16 inputs, whether the bias
// gradients are scaled or accumulated, TF32 rounding, the aux stride rule
// and misaligned operands. On a GPU they check the real library; on the
// emulator, that the emulation made the same choice.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
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

// GT_EMU_CUBLASLT_REFUSE_EPILOGUES=1 (emulator builds) makes the cuBLASLt heuristic refuse
// every fused epilogue so that callers' fallbacks run: the tests of the fused epilogues
// themselves have nothing to check then.
bool epilogues_refused_on_purpose() {
  const char* v = std::getenv("GT_EMU_CUBLASLT_REFUSE_EPILOGUES");
  return v && std::string(v) == "1";
}

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

// bf16 storage: bf16 activations and weights, the model's fp32 bias, a bf16
// out. The fused epilogue (BIAS_DATA_TYPE = fp32) rounds the fp32 result
// once, like the CPU; with epilogues refused the bias is added after the
// bf16 product (rounded twice), still within two bf16 steps.
TEST(CudaMatmul, ForwardBf16OutWithFp32BiasMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const auto inp = gt::test::round_to_bf16(random_vector(c.R * c.C, 21));
    const auto w = gt::test::round_to_bf16(random_vector(c.OC * c.C, 22));
    const auto bias = random_vector(c.OC, 23);  // fp32, not bf16-exact
    const auto want = gt::test::round_to_bf16(cpu_forward(c, inp, w, bias, true));
    DeviceArray<uint16_t> d_inp(gt::test::to_bf16(inp), s), d_w(gt::test::to_bf16(w), s),
        d_out(c.R * c.OC, s);
    DeviceArray<float> d_b(bias, s);
    d_out.poison();
    ops.matmul_forward(dev_view(d_out, DType::bf16, {c.R, c.OC}),
                       dev_view(d_inp, DType::bf16, {c.R, c.C}),
                       dev_view(d_w, DType::bf16, {c.OC, c.C}), dev_view(d_b, DType::f32, {c.OC}));
    const float rel = epilogues_refused_on_purpose() ? 1.6e-2f : 8e-3f;
    EXPECT_TRUE(all_close(gt::test::from_bf16(d_out.download()), want, 1e-2f, rel));
  }
}

// The GELU-fused linear layers through CudaOps (the GELU_AUX_BIAS and DGELU
// epilogues, or their fallbacks when the emulator refuses epilogues) against
// the CPU twin (kernels/cpu/linear_gelu.cpp), fp32 and bf16.
TEST(CudaMatmul, LinearGeluOpsMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  auto cpu = gt::make_cpu_ops(1);
  // OC = 100: no multiple of 8, so the forward's fallback runs as well.
  for (const Case& c : {Case{37, 64, 256}, Case{16, 128, 100}, Case{130, 768, 3072}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(name(c) + " " + gt::dtype_name(dt));
      const bool b16 = dt == DType::bf16;
      auto fit = [&](std::vector<float> v) { return b16 ? gt::test::round_to_bf16(v) : v; };
      const auto x = fit(random_vector(c.R * c.C, 31)), w = fit(random_vector(c.OC * c.C, 32));
      const auto bias = random_vector(c.OC, 33);  // fp32 in both (the model's)
      // CPU: the same op on host views of the same values.
      std::vector<uint16_t> x16 = gt::test::to_bf16(x), w16 = gt::test::to_bf16(w);
      std::vector<float> xh = x, wh = w, bh = bias;
      auto host = [&](std::vector<float>& f, std::vector<uint16_t>& h,
                      std::initializer_list<int64_t> shape) {
        return b16 ? gt::make_view(h.data(), DType::bf16, gt::Device::cpu, shape)
                   : gt::cpu_f32(f.data(), shape);
      };
      std::vector<float> out(c.R * c.OC), pre(c.R * c.OC);
      std::vector<uint16_t> out16(out.size()), pre16(pre.size());
      cpu->matmul_gelu_forward(host(out, out16, {c.R, c.OC}), host(pre, pre16, {c.R, c.OC}),
                               host(xh, x16, {c.R, c.C}), host(wh, w16, {c.OC, c.C}),
                               gt::cpu_f32(bh.data(), {c.OC}));
      const auto want_out = b16 ? gt::test::from_bf16(out16) : out;
      const auto want_pre = b16 ? gt::test::from_bf16(pre16) : pre;

      DeviceArray<float> d_b(bias, s);
      DeviceArray<float> f_x(x, s), f_w(w, s), f_out(c.R * c.OC, s), f_pre(c.R * c.OC, s);
      DeviceArray<uint16_t> h_x(x16, s), h_w(w16, s), h_out(c.R * c.OC, s), h_pre(c.R * c.OC, s);
      auto dv = [&](DeviceArray<float>& f, DeviceArray<uint16_t>& h,
                    std::initializer_list<int64_t> shape) {
        return b16 ? dev_view(h, DType::bf16, shape) : dev_view(f, DType::f32, shape);
      };
      auto down = [&](DeviceArray<float>& f, DeviceArray<uint16_t>& h) {
        return b16 ? gt::test::from_bf16(h.download()) : f.download();
      };
      ops.matmul_gelu_forward(dv(f_out, h_out, {c.R, c.OC}), dv(f_pre, h_pre, {c.R, c.OC}),
                              dv(f_x, h_x, {c.R, c.C}), dv(f_w, h_w, {c.OC, c.C}),
                              dev_view(d_b, DType::f32, {c.OC}));
      // bf16: one rounding step apart (two in a fallback, which rounds pre first).
      const float atol = b16 ? 1e-2f : f32_atol(c.C), rtol = b16 ? 1.6e-2f : 1e-5f;
      EXPECT_TRUE(all_close(down(f_pre, h_pre), want_pre, atol, rtol)) << "pre";
      EXPECT_TRUE(all_close(down(f_out, h_out), want_out, atol, rtol)) << "out";

      // Backward of a layer (OC -> C) whose input was gelu(pre): here the
      // forward's out/pre serve as its (R, OC) input and pre.
      const auto dout = fit(random_vector(c.R * c.C, 34));
      const auto w2 = fit(random_vector(c.C * c.OC, 35));
      std::vector<uint16_t> dout16 = gt::test::to_bf16(dout), w216 = gt::test::to_bf16(w2);
      std::vector<float> douth = dout, w2h = w2, dx(c.R * c.OC), dw(c.C * c.OC, 0.f), db(c.C, 0.f);
      std::vector<uint16_t> dx16(dx.size());
      cpu->matmul_backward_dgelu(host(dx, dx16, {c.R, c.OC}), gt::cpu_f32(dw.data(), {c.C, c.OC}),
                                 gt::cpu_f32(db.data(), {c.C}), host(douth, dout16, {c.R, c.C}),
                                 host(out, out16, {c.R, c.OC}), host(w2h, w216, {c.C, c.OC}),
                                 host(pre, pre16, {c.R, c.OC}));
      const auto want_dx = b16 ? gt::test::from_bf16(dx16) : dx;
      DeviceArray<float> f_dout(dout, s), f_w2(w2, s), f_dx(c.R * c.OC, s),
          d_dw(std::vector<float>(c.C * c.OC, 0.f), s), d_db(std::vector<float>(c.C, 0.f), s);
      DeviceArray<uint16_t> h_dout(dout16, s), h_w2(w216, s), h_dx(c.R * c.OC, s);
      // The device forward's own out/pre, uploaded from the CPU's so both
      // backwards read the same values.
      DeviceArray<float> f_in(out, s), f_p(pre, s);
      DeviceArray<uint16_t> h_in(out16, s), h_p(pre16, s);
      ops.matmul_backward_dgelu(
          dv(f_dx, h_dx, {c.R, c.OC}), dev_view(d_dw, DType::f32, {c.C, c.OC}),
          dev_view(d_db, DType::f32, {c.C}), dv(f_dout, h_dout, {c.R, c.C}),
          dv(f_in, h_in, {c.R, c.OC}), dv(f_w2, h_w2, {c.C, c.OC}), dv(f_p, h_p, {c.R, c.OC}));
      const float datol = b16 ? 2e-2f : 10 * f32_atol(c.C);
      EXPECT_TRUE(all_close(down(f_dx, h_dx), want_dx, datol, rtol)) << "dinp";
      EXPECT_TRUE(all_close(d_dw.download(), dw, 10 * f32_atol(c.R), 1e-4f)) << "dweight";
      EXPECT_TRUE(all_close(d_db.download(), db, 10 * f32_atol(c.R), 1e-4f)) << "dbias";
    }
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
  if (epilogues_refused_on_purpose()) GTEST_SKIP() << "fused epilogues refused on purpose";
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
  if (epilogues_refused_on_purpose()) GTEST_SKIP() << "fused epilogues refused on purpose";
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

// ---- what cuBLASLt's documentation leaves open (see emulator/src/cublaslt.cpp) ----------

using gt::cuda::GemmArgs;
using gt::cuda::GemmEpilogue;

double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_grad(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_erf_grad(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

// Row-major op(A) (M,K) @ op(B) (K,N) in double; a and b are stored packed.
std::vector<double> product(const std::vector<float>& a, const std::vector<float>& b, int64_t M,
                            int64_t N, int64_t K, bool ta = false, bool tb = false) {
  std::vector<double> out(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k)
        out[i * N + j] += static_cast<double>(ta ? a[k * M + i] : a[i * K + k]) *
                          (tb ? b[j * K + k] : b[k * N + j]);
  return out;
}

std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// A GPU may have no algorithm for a combination the emulated cuBLASLt offers
// (its assumption 14): callers fall back then, so it is not a failure, but
// the check it would have made is skipped, and says so.
void note_refusal(const GemmArgs& g) {
  if (epilogues_refused_on_purpose()) return;
  std::cout << "[   info   ] cuBLASLt has no algorithm for " << gt::cuda::describe(g)
            << ": that check is skipped\n";
}

// A device array of `dtype` (f32 or bf16) uploaded and downloaded as floats.
class TypedArray {
 public:
  TypedArray(DType t, const std::vector<float>& host, cudaStream_t s) : t_(t) {
    if (t == DType::bf16)
      b16_ = std::make_unique<DeviceArray<uint16_t>>(gt::test::to_bf16(host), s);
    else
      f32_ = std::make_unique<DeviceArray<float>>(host, s);
  }
  // The address of element i.
  void* at(int64_t i = 0) const {
    return t_ == DType::bf16 ? static_cast<void*>(b16_->get() + i)
                             : static_cast<void*>(f32_->get() + i);
  }
  std::vector<float> download() const {
    return t_ == DType::bf16 ? gt::test::from_bf16(b16_->download()) : f32_->download();
  }

 private:
  DType t_;
  std::unique_ptr<DeviceArray<float>> f32_;
  std::unique_ptr<DeviceArray<uint16_t>> b16_;
};

std::vector<float> nans(size_t n) { return std::vector<float>(n, NAN); }

// Assumptions 1, 4, 5: D = act(alpha AB + beta C + bias); aux is all of the
// pre-activation; DGELU scales alpha AB + beta C.
TEST(CudaMatmul, EpiloguesApplyToAlphaABPlusBetaCPlusBias) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  gt::cuda::GemmContext gemm;
  const cudaStream_t s = stream.get();
  const int64_t M = 9, N = 24, K = 13;
  const float alpha = 0.5f, beta = 1.f;
  const auto a = random_vector(M * K, 61), b = random_vector(K * N, 62),
             d0 = random_vector(M * N, 63), bias = random_vector(N, 64),
             pre = random_vector(M * N, 65, -3.f, 3.f);
  const auto ab = product(a, b, M, N, K);
  for (GemmEpilogue ep : {GemmEpilogue::bias, GemmEpilogue::gelu, GemmEpilogue::gelu_bias,
                          GemmEpilogue::dgelu, GemmEpilogue::dgelu_bgrad}) {
    SCOPED_TRACE(gt::cuda::gemm_epilogue_name(ep));
    const bool reads_bias = ep == GemmEpilogue::bias || ep == GemmEpilogue::gelu_bias;
    const bool writes_aux = ep == GemmEpilogue::gelu || ep == GemmEpilogue::gelu_bias;
    const bool dgelu = ep == GemmEpilogue::dgelu || ep == GemmEpilogue::dgelu_bgrad;
    DeviceArray<float> d_a(a, s), d_b(b, s), d_d(d0, s), d_bias(reads_bias ? bias : nans(N), s),
        d_aux(writes_aux ? nans(M * N) : pre, s);
    GemmArgs g;
    g.M = M;
    g.N = N;
    g.K = K;
    g.A = d_a.get();
    g.B = d_b.get();
    g.D = d_d.get();
    g.alpha = alpha;
    g.beta = beta;
    g.epilogue = ep;
    g.bias = reads_bias || ep == GemmEpilogue::dgelu_bgrad ? d_bias.get() : nullptr;
    g.aux = ep == GemmEpilogue::bias ? nullptr : d_aux.get();
    if (!gemm.supported(g)) {
      note_refusal(g);
      continue;
    }
    gemm.run(g, s);
    std::vector<double> want(M * N), want_aux(M * N), want_bias(N, 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double v = alpha * ab[i * N + j] + beta * static_cast<double>(d0[i * N + j]);
        if (reads_bias) v += bias[j];
        if (writes_aux) {
          want_aux[i * N + j] = v;
          v = gelu_tanh(v);
        } else if (dgelu) {
          v *= gelu_tanh_grad(pre[i * N + j]);
        }
        want[i * N + j] = v;
        want_bias[j] += v;
      }
    EXPECT_TRUE(all_close(d_d.download(), to_float(want), 2e-4f, 1e-3f)) << "D";
    if (writes_aux) {
      EXPECT_TRUE(all_close(d_aux.download(), to_float(want_aux), f32_atol(K), 1e-5f))
          << "aux = alpha AB + beta C (+ bias)";
    }
    if (ep == GemmEpilogue::dgelu_bgrad) {
      EXPECT_TRUE(all_close(d_bias.download(), to_float(want_bias), 2e-4f * M, 1e-3f)) << "dbias";
    }
  }
}

// Assumption 3: the GELU epilogues use the tanh approximation and its exact
// derivative. The two GELU forms differ by a few 1e-4 over [-3, 3]; a GPU's
// fast tanh may blur single points, so the test asks that the output be, in
// RMS, within half the distance between the two forms of the tanh one.
TEST(CudaMatmul, GeluEpiloguesUseTheTanhApproximation) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  gt::cuda::GemmContext gemm;
  const cudaStream_t s = stream.get();
  const int64_t M = 64, N = 8;
  std::vector<float> x(M), x_matrix(M * N);
  for (int64_t i = 0; i < M; ++i) {
    x[i] = -3.f + 6.f * static_cast<float>(i) / static_cast<float>(M - 1);
    for (int64_t j = 0; j < N; ++j) x_matrix[i * N + j] = x[i];
  }
  DeviceArray<float> d_x(x, s), d_x_matrix(x_matrix, s), d_ones_m(std::vector<float>(M, 1.f), s),
      d_ones_n(std::vector<float>(N, 1.f), s), d_out(nans(M * N), s), d_aux(nans(M * N), s);
  auto check = [&](const std::vector<float>& got, double (*tanh_form)(double),
                   double (*erf_form)(double)) {
    std::vector<float> want(M * N);
    double err = 0, separation = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const double t = tanh_form(x[i]);
        want[i * N + j] = static_cast<float>(t);
        err += (got[i * N + j] - t) * (got[i * N + j] - t);
        separation += (t - erf_form(x[i])) * (t - erf_form(x[i]));
      }
    EXPECT_TRUE(all_close(got, want, 1e-3f, 1e-3f));
    EXPECT_LT(std::sqrt(err), 0.5 * std::sqrt(separation))
        << "not the tanh approximation (RMS distance to it " << std::sqrt(err / (M * N))
        << ", between the tanh and erf forms " << std::sqrt(separation / (M * N)) << ")";
  };
  // gelu: D = gelu(x (M,1) @ ones (1,N)), aux = x.
  GemmArgs g;
  g.M = M;
  g.N = N;
  g.K = 1;
  g.A = d_x.get();
  g.B = d_ones_n.get();
  g.D = d_out.get();
  g.epilogue = GemmEpilogue::gelu;
  g.aux = d_aux.get();
  if (gemm.supported(g)) {
    gemm.run(g, s);
    SCOPED_TRACE("gelu");
    check(d_out.download(), gelu_tanh, gelu_erf);
  } else {
    note_refusal(g);
  }
  // dgelu: D = (ones (M,1) @ ones (1,N)) * gelu'(aux = x).
  g.A = d_ones_m.get();
  g.epilogue = GemmEpilogue::dgelu;
  g.aux = d_x_matrix.get();
  if (gemm.supported(g)) {
    gemm.run(g, s);
    SCOPED_TRACE("dgelu");
    check(d_out.download(), gelu_tanh_grad, gelu_erf_grad);
  } else {
    note_refusal(g);
  }
}

// Assumptions 4, 6, 8: with bf16 inputs, the bias, the bias gradient and the
// aux matrix have D's type (fp32 or bf16), not the inputs'.
TEST(CudaMatmul, EpiloguesWithBf16InputsKeepBiasAndAuxInDsType) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  gt::cuda::GemmContext gemm;
  const cudaStream_t s = stream.get();
  const int64_t M = 37, N = 64, K = 96;
  const auto a = gt::test::round_to_bf16(random_vector(M * K, 71));
  const auto b = gt::test::round_to_bf16(random_vector(K * N, 72));
  const auto pre = gt::test::round_to_bf16(random_vector(M * N, 73, -3.f, 3.f));
  const auto bias = gt::test::round_to_bf16(random_vector(N, 74));
  const auto ab = product(a, b, M, N, K);
  DeviceArray<uint16_t> d_a(gt::test::to_bf16(a), s), d_b(gt::test::to_bf16(b), s);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string("D ") + gt::dtype_name(dt));
    const bool b16 = dt == DType::bf16;
    // D within one bf16 rounding (bf16), or cuBLASLt's GELU accuracy (fp32).
    const float atol = b16 ? 1e-2f : 2e-4f, rtol = b16 ? 1e-2f : 1e-3f;
    GemmArgs g;
    g.M = M;
    g.N = N;
    g.K = K;
    g.A = d_a.get();
    g.B = d_b.get();
    g.ab_type = DType::bf16;
    g.d_type = dt;
    {  // gelu_bias: aux = AB + bias, D = gelu(aux)
      TypedArray d_out(dt, nans(M * N), s), d_aux(dt, nans(M * N), s), d_bias(dt, bias, s);
      g.D = d_out.at();
      g.epilogue = GemmEpilogue::gelu_bias;
      g.bias = d_bias.at();
      g.aux = d_aux.at();
      if (gemm.supported(g)) {
        gemm.run(g, s);
        std::vector<double> want_aux(M * N), want(M * N);
        for (int64_t i = 0; i < M * N; ++i) {
          want_aux[i] = ab[i] + bias[i % N];
          want[i] = gelu_tanh(want_aux[i]);
        }
        EXPECT_TRUE(all_close(d_aux.download(), to_float(want_aux), b16 ? 1e-2f : f32_atol(K),
                              b16 ? 1e-2f : 1e-5f))
            << "gelu_bias aux";
        EXPECT_TRUE(all_close(d_out.download(), to_float(want), atol, rtol)) << "gelu_bias D";
      } else {
        note_refusal(g);
      }
    }
    {  // dgelu_bgrad: D = AB * gelu'(aux), bias = column sums of D
      TypedArray d_out(dt, nans(M * N), s), d_aux(dt, pre, s), d_bias(dt, nans(N), s);
      g.D = d_out.at();
      g.epilogue = GemmEpilogue::dgelu_bgrad;
      g.bias = d_bias.at();
      g.aux = d_aux.at();
      if (gemm.supported(g)) {
        gemm.run(g, s);
        std::vector<double> want(M * N), want_bias(N, 0.0);
        for (int64_t i = 0; i < M * N; ++i) {
          want[i] = ab[i] * gelu_tanh_grad(pre[i]);
          want_bias[i % N] += want[i];
        }
        EXPECT_TRUE(all_close(d_out.download(), to_float(want), atol, rtol)) << "dgelu_bgrad D";
        EXPECT_TRUE(all_close(d_bias.download(), to_float(want_bias), b16 ? 5e-2f : 2e-4f * M,
                              b16 ? 1e-2f : 1e-3f))
            << "dgelu_bgrad bias";
      } else {
        note_refusal(g);
      }
    }
    {  // bgrad_a: D = AB, bias = row sums of A (length M)
      TypedArray d_out(dt, nans(M * N), s), d_bias(dt, nans(M), s);
      g.D = d_out.at();
      g.epilogue = GemmEpilogue::bgrad_a;
      g.bias = d_bias.at();
      g.aux = nullptr;
      if (gemm.supported(g)) {
        gemm.run(g, s);
        std::vector<double> want_bias(M, 0.0);
        for (int64_t i = 0; i < M * K; ++i) want_bias[i / K] += a[i];
        EXPECT_TRUE(all_close(d_out.download(), to_float(ab), b16 ? 1e-2f : f32_atol(K),
                              b16 ? 1e-2f : 1e-5f))
            << "bgrad_a D";
        EXPECT_TRUE(all_close(d_bias.download(), to_float(want_bias), b16 ? 1e-2f : f32_atol(K),
                              b16 ? 1e-2f : 1e-5f))
            << "bgrad_a bias";
      } else {
        note_refusal(g);
      }
    }
  }
}

// Raw cuBLASLt for what GemmContext cannot express (BGRADA, an invalid aux
// stride): one fp32 column-major D (m x n) = alpha A (m x k) B (k x n) with
// an epilogue, default preference (no workspace, 256-byte alignment).
struct RawLtGemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  RawLtGemm(int64_t m, int64_t n, int64_t k, uint32_t epilogue) {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, m, k, m));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, k, n, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, m, n, m));
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  }
  ~RawLtGemm() {
    CUBLAS_LOG_ERROR(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_LOG_ERROR(cublasLtMatrixLayoutDestroy(d));
    CUBLAS_LOG_ERROR(cublasLtMatrixLayoutDestroy(b));
    CUBLAS_LOG_ERROR(cublasLtMatrixLayoutDestroy(a));
    CUBLAS_LOG_ERROR(cublasLtMatmulDescDestroy(desc));
  }
  RawLtGemm(const RawLtGemm&) = delete;
  RawLtGemm& operator=(const RawLtGemm&) = delete;
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attr, T v) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof v));
  }
  // The heuristic's first algorithm; false when it refuses or has none.
  bool heuristic(cublasLtHandle_t h, cublasLtMatmulAlgo_t* algo) {
    cublasLtMatmulHeuristicResult_t r = {};
    int returned = 0;
    if (cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, d, d, pref, 1, &r, &returned) !=
            CUBLAS_STATUS_SUCCESS ||
        returned == 0 || r.state != CUBLAS_STATUS_SUCCESS)
      return false;
    *algo = r.algo;
    return true;
  }
  cublasStatus_t run(cublasLtHandle_t h, const cublasLtMatmulAlgo_t* algo, float alpha,
                     const float* A, const float* B, float* D, cudaStream_t s) {
    const float beta = 0.f;
    return cublasLtMatmul(h, desc, &alpha, A, a, B, b, &beta, D, d, D, d, algo, nullptr, 0, s);
  }
};

// Assumption 7: the bias-gradient epilogues assign plain sums of their input
// (not scaled by alpha, whatever beta does to D).
TEST(CudaMatmul, BiasGradientEpiloguesAreAssignedAndNotScaledByAlpha) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  {  // BGRADB through GemmContext, as CudaOps' dweight/dbias: op(A) = dout^T.
    gt::cuda::GemmContext gemm;
    const int64_t R = 37, OC = 13, C = 24;
    const auto dout = random_vector(R * OC, 81), inp = random_vector(R * C, 82),
               dw0 = random_vector(OC * C, 83);
    DeviceArray<float> d_dout(dout, s), d_inp(inp, s), d_dw(dw0, s), d_db(nans(OC), s);
    GemmArgs g;
    g.M = OC;
    g.N = C;
    g.K = R;
    g.A = d_dout.get();
    g.trans_a = true;
    g.B = d_inp.get();
    g.D = d_dw.get();
    g.alpha = 2.f;
    g.beta = 1.f;
    g.epilogue = GemmEpilogue::bgrad_a;
    g.bias = d_db.get();
    if (gemm.supported(g)) {
      gemm.run(g, s);
      const auto p = product(dout, inp, OC, C, R, true, false);
      std::vector<double> want_dw(OC * C), want_db(OC, 0.0);
      for (int64_t i = 0; i < OC * C; ++i) want_dw[i] = 2.0 * p[i] + dw0[i];
      for (int64_t r = 0; r < R; ++r)
        for (int64_t i = 0; i < OC; ++i) want_db[i] += dout[r * OC + i];
      EXPECT_TRUE(all_close(d_dw.download(), to_float(want_dw), 2 * f32_atol(R), 1e-5f)) << "D";
      EXPECT_TRUE(all_close(d_db.download(), to_float(want_db), f32_atol(R), 1e-5f))
          << "BGRADB: the plain column sums of dout, assigned (alpha = 2 not applied)";
    } else {
      note_refusal(g);
    }
  }
  {  // BGRADA through the raw API: bias[i] = sum_p A[i][p] (column-major, length m).
    gt::cuda::CublasLtHandle handle;
    const int64_t m = 6, n = 5, k = 7;
    const auto a = random_vector(m * k, 84), b = random_vector(k * n, 85);
    DeviceArray<float> d_a(a, s), d_b(b, s), d_d(nans(m * n), s), d_bias(nans(m), s);
    RawLtGemm raw(m, n, k, CUBLASLT_EPILOGUE_BGRADA);
    raw.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(d_bias.get()));
    cublasLtMatmulAlgo_t algo;
    if (!raw.heuristic(handle.get(), &algo)) {
      std::cout << "[   info   ] cuBLASLt has no BGRADA algorithm: that check is skipped\n";
      return;
    }
    CUBLAS_CHECK(raw.run(handle.get(), &algo, 2.f, d_a.get(), d_b.get(), d_d.get(), s));
    std::vector<double> want_d(m * n, 0.0), want_bias(m, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        want_bias[i] += a[i + p * m];
        for (int64_t j = 0; j < n; ++j) want_d[i + j * m] += 2.0 * a[i + p * m] * b[p + j * k];
      }
    EXPECT_TRUE(all_close(d_d.download(), to_float(want_d), 2 * f32_atol(k), 1e-5f)) << "D";
    EXPECT_TRUE(all_close(d_bias.download(), to_float(want_bias), f32_atol(k), 1e-5f))
        << "BGRADA: the plain row sums of A, assigned (alpha = 2 not applied)";
  }
}

// fp32 -> TF32 candidates on the bits (10 mantissa bits kept).
float tf32_nearest_even(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
  std::memcpy(&x, &u, 4);
  return x;
}
float tf32_nearest_away(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & ~0x1FFFu;
  std::memcpy(&x, &u, 4);
  return x;
}
float tf32_truncated(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= ~0x1FFFu;
  std::memcpy(&x, &u, 4);
  return x;
}
float fp32_unrounded(float x) { return x; }

// Assumption 11: CUBLAS_COMPUTE_32F_FAST_TF32 rounds every fp32 input to TF32,
// to nearest with ties to even, and the BGRAD sums use the unrounded inputs.
// A's values are chosen so that nearest-even, nearest-away, truncation and
// no rounding give different results, every one exact in fp32.
TEST(CudaMatmul, Tf32RoundsEachInputToNearestEven) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  gt::cuda::GemmOptions options;
  options.allow_tf32 = true;
  gt::cuda::GemmContext gemm(options);
  const cudaStream_t s = stream.get();
  const int64_t M = 64, N = 64, K = 64;
  // 1 + 2^-11 and 1 + 3 * 2^-11 are ties; 1 + 2^-12 and 1 + 5 * 2^-12 are not.
  const float values[4] = {1.f + 0x1p-11f, 1.f + 3 * 0x1p-11f, 1.f + 0x1p-12f, 1.f + 5 * 0x1p-12f};
  std::vector<float> a(M * K), b(K * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) a[i * K + k] = values[(7 * i + 3 * k) % 4];
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) b[k * N + j] = static_cast<float>(1 + (k + 2 * j) % 4);
  auto reference = [&](float (*round)(float)) {
    std::vector<float> ra(a.size());
    for (size_t i = 0; i < a.size(); ++i) ra[i] = round(a[i]);
    return to_float(product(ra, b, M, N, K));
  };
  const auto want = reference(tf32_nearest_even);
  const auto away = reference(tf32_nearest_away), truncated = reference(tf32_truncated),
             unrounded = reference(fp32_unrounded);
  ASSERT_FALSE(all_close(away, want, 0.f, 1e-6f)) << "the inputs do not tell ties apart";
  ASSERT_FALSE(all_close(truncated, want, 0.f, 1e-6f)) << "the inputs do not tell truncation";
  ASSERT_FALSE(all_close(unrounded, want, 0.f, 1e-6f)) << "the inputs do not tell fp32";

  DeviceArray<float> d_a(a, s), d_b(b, s), d_d(nans(M * N), s), d_bias(nans(M), s);
  GemmArgs g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = d_a.get();
  g.B = d_b.get();
  g.D = d_d.get();
  gemm.run(g, s);
  const auto got = d_d.download();
  EXPECT_TRUE(all_close(got, want, 0.f, 1e-6f))
      << "not TF32 with ties to even; it matches "
      << (all_close(got, away, 0.f, 1e-6f)        ? "ties away from zero"
          : all_close(got, truncated, 0.f, 1e-6f) ? "truncation"
          : all_close(got, unrounded, 0.f, 1e-6f) ? "unrounded fp32"
                                                  : "none of the candidates");

  g.epilogue = GemmEpilogue::bgrad_a;
  g.bias = d_bias.get();
  if (!gemm.supported(g)) {
    note_refusal(g);
    return;
  }
  gemm.run(g, s);
  std::vector<double> want_bias(M, 0.0);
  for (int64_t i = 0; i < M * K; ++i) want_bias[i / K] += a[i];
  EXPECT_TRUE(all_close(d_d.download(), want, 0.f, 1e-6f)) << "D with BGRADB";
  EXPECT_TRUE(all_close(d_bias.download(), to_float(want_bias), 0.f, 1e-7f))
      << "the BGRADB sums of the unrounded inputs";
}

// Assumption 13: GemmContext declares each operand's alignment (pointer and
// row stride) to the heuristic, so operands offset by one element, with odd
// strides, get their own plan and correct results, next to aligned ones of
// the same shape.
TEST(CudaMatmul, MisalignedOperandsGetTheirOwnPlans) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  const int64_t M = 7, N = 13, K = 11, lda = K + 1, ldb = N + 1, ldd = N + 1;
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(gt::dtype_name(t));
    const bool b16 = t == DType::bf16;
    auto maybe_round = [&](std::vector<float> v) { return b16 ? gt::test::round_to_bf16(v) : v; };
    const auto a = maybe_round(random_vector(M * lda + 1, 91));
    const auto b = maybe_round(random_vector(K * ldb + 1, 92));
    const auto bias = maybe_round(random_vector(N + 1, 93));
    TypedArray d_a(t, a, s), d_b(t, b, s), d_bias(t, bias, s);
    gt::cuda::GemmContext gemm;
    size_t plans = 0;
    for (GemmEpilogue ep : {GemmEpilogue::none, GemmEpilogue::bias}) {
      for (int64_t off : {0, 1}) {
        SCOPED_TRACE(std::string(gt::cuda::gemm_epilogue_name(ep)) + " offset " +
                     std::to_string(off));
        TypedArray d_d(t, nans(M * ldd + 1), s);
        GemmArgs g;
        g.M = M;
        g.N = N;
        g.K = K;
        g.A = d_a.at(off);
        g.lda = lda;
        g.B = d_b.at(off);
        g.ldb = ldb;
        g.D = d_d.at(off);
        g.ldd = ldd;
        g.ab_type = t;
        g.d_type = t;
        g.epilogue = ep;
        g.bias = ep == GemmEpilogue::bias ? d_bias.at(off) : nullptr;
        ++plans;
        if (!gemm.supported(g)) {
          note_refusal(g);
          continue;
        }
        gemm.run(g, s);
        const auto got = d_d.download();
        std::vector<float> got_dense(M * N), want(M * N);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double v = ep == GemmEpilogue::bias ? bias[off + j] : 0.0;
            for (int64_t k = 0; k < K; ++k)
              v += static_cast<double>(a[off + i * lda + k]) * b[off + k * ldb + j];
            want[i * N + j] = static_cast<float>(v);
            got_dense[i * N + j] = got[off + i * ldd + j];
          }
        EXPECT_TRUE(all_close(got_dense, want, b16 ? 1e-2f : f32_atol(K), b16 ? 1e-2f : 1e-5f));
      }
    }
    EXPECT_EQ(gemm.cached_shapes(), plans) << "one plan per alignment class";
  }
}

// Assumption 12: cuBLASLt takes any GELU aux leading dimension that covers
// the rows. The header asks for a multiple of 8 in the _BIAS/_BGRAD forms, and
// GemmContext keeps to that itself (it refuses other strides before calling
// the library); cuBLASLt 13.0 on an H200 also took 12 for GELU_AUX,
// GELU_AUX_BIAS and DGELU (gpu_check, 2026-12-04), as the emulator now does.
// Each aux epilogue's verdict on both strides is printed.
TEST(CudaMatmul, AuxLeadingDimensionOfAMultipleOf8IsAccepted) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (epilogues_refused_on_purpose()) GTEST_SKIP() << "fused epilogues refused on purpose";
  gt::cuda::CudaStream stream;
  gt::cuda::CublasLtHandle handle;
  const cudaStream_t s = stream.get();
  const int64_t m = 7, n = 5, k = 3;
  DeviceArray<float> d_a(random_vector(m * k, 95), s), d_b(random_vector(k * n, 96), s),
      d_d(m * n, s), d_aux(16 * n, s), d_bias(m, s);
  const std::pair<uint32_t, const char*> epilogues[] = {
      {CUBLASLT_EPILOGUE_GELU_AUX, "GELU_AUX"},
      {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "GELU_AUX_BIAS"},
      {CUBLASLT_EPILOGUE_DGELU, "DGELU"},
      {CUBLASLT_EPILOGUE_DGELU_BGRAD, "DGELU_BGRAD"}};
  int accepted_aligned = 0;
  for (const auto& [epilogue, name] : epilogues)
    for (int64_t ld_aux : {16, 12}) {
      SCOPED_TRACE(std::string(name) + " aux ld " + std::to_string(ld_aux));
      RawLtGemm raw(m, n, k, epilogue);
      raw.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(d_aux.get()));
      raw.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld_aux);
      if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD)
        raw.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(d_bias.get()));
      cublasLtMatmulAlgo_t algo;
      const bool found = raw.heuristic(handle.get(), &algo);
      const bool ran = found && raw.run(handle.get(), &algo, 1.f, d_a.get(), d_b.get(), d_d.get(),
                                        s) == CUBLAS_STATUS_SUCCESS;
      std::printf("[   info   ] %s with aux ld %lld: %s\n", name, static_cast<long long>(ld_aux),
                  ran     ? "accepted"
                  : found ? "refused at the call"
                          : "refused by the heuristic");
      // An epilogue with no algorithm at all for this shape is assumption
      // 14's business; one that has one must take the stride.
      EXPECT_TRUE(ran || !found) << name << " found an algorithm and refused the stride";
      if (ld_aux % 8 == 0) accepted_aligned += ran;
    }
  EXPECT_GT(accepted_aligned, 0) << "no aux epilogue ran with an aligned stride";
  stream.synchronize();
}

}  // namespace
