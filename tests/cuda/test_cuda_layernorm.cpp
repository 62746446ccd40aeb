// layernorm_forward / layernorm_backward (kernels/cuda/layernorm.cu) against
// the CPU twin: fp32 forward and backward, bf16 forward (bf16 or fp32
// parameters), backward reading a bf16 input and gradient (bf16 storage), odd C (scalar
// path) and C % 4 == 0 (vector path), row counts that exercise the chunked
// parameter reduction, both forms of the backward (fused, and three kernels
// for very wide rows), accumulation into pre-filled gradients, and bitwise
// run-to-run determinism of the backward.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/layernorm.cuh"
#include "test_util.hpp"

namespace {

using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

struct Case {
  int64_t R;
  int C;
};
// The fused backward keeps 2 x warps x C floats of shared memory: C = 1600
// at 8 warps needs the opt-in above 48 KiB; C = 4000 fits only at 4 warps;
// C = 8200 does not fit, and the three-kernel backward runs.
const Case kCases[] = {{1, 1},      {5, 771},   {64, 768}, {300, 64}, {37, 1600},
                       {1030, 128}, {70001, 8}, {9, 4000}, {3, 8200}};

bool small_case(const Case& c) { return c.R * c.C <= 200000; }

std::string name(const Case& c) {
  return "R=" + std::to_string(c.R) + " C=" + std::to_string(c.C);
}

struct Inputs {
  std::vector<float> inp, weight, bias;
};
Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in;
  // A non-zero mean per row checks the centred (two-pass) variance.
  in.inp = random_vector(c.R * c.C, seed, -2.f, 3.f);
  in.weight = random_vector(c.C, seed + 1, 0.5f, 1.5f);
  in.bias = random_vector(c.C, seed + 2);
  return in;
}

struct ForwardResult {
  std::vector<float> out, mean, rstd;
};
ForwardResult cpu_forward(const Case& c, Inputs in) {
  auto cpu = gt::make_cpu_ops(1);
  ForwardResult r{std::vector<float>(c.R * c.C), std::vector<float>(c.R),
                  std::vector<float>(c.R)};
  cpu->layernorm_forward(gt::cpu_f32(r.out.data(), {c.R, c.C}), gt::cpu_f32(r.mean.data(), {c.R}),
                         gt::cpu_f32(r.rstd.data(), {c.R}),
                         gt::cpu_f32(in.inp.data(), {c.R, c.C}),
                         gt::cpu_f32(in.weight.data(), {c.C}), gt::cpu_f32(in.bias.data(), {c.C}));
  return r;
}

TEST(CudaLayerNorm, ForwardFp32MatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    const Inputs in = make_inputs(c, 100);
    const ForwardResult want = cpu_forward(c, in);

    DeviceArray<float> inp(in.inp, stream.get()), w(in.weight, stream.get()),
        b(in.bias, stream.get());
    DeviceArray<float> out(c.R * c.C, stream.get()), mean(c.R, stream.get()),
        rstd(c.R, stream.get());
    out.poison();
    mean.poison();
    rstd.poison();
    gt::cuda::layernorm_forward(out.get(), mean.get(), rstd.get(), inp.get(), w.get(), b.get(),
                                c.R, c.C, stream.get());
    EXPECT_TRUE(all_close(out.download(), want.out, 1e-5f, 1e-5f)) << "out";
    EXPECT_TRUE(all_close(mean.download(), want.mean, 1e-6f, 1e-5f)) << "mean";
    EXPECT_TRUE(all_close(rstd.download(), want.rstd, 1e-6f, 1e-5f)) << "rstd";

    // Inference form: nothing saved, same out.
    out.poison();
    gt::cuda::layernorm_forward(out.get(), nullptr, nullptr, inp.get(), w.get(), b.get(), c.R,
                                c.C, stream.get());
    EXPECT_TRUE(all_close(out.download(), want.out, 1e-5f, 1e-5f)) << "out without mean/rstd";
  }
}

TEST(CudaLayerNorm, ForwardBf16MatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    Inputs in = make_inputs(c, 200);
    in.inp = gt::test::round_to_bf16(in.inp);
    in.weight = gt::test::round_to_bf16(in.weight);
    in.bias = gt::test::round_to_bf16(in.bias);
    const ForwardResult want = cpu_forward(c, in);

    DeviceArray<uint16_t> inp(gt::test::to_bf16(in.inp), stream.get()),
        w(gt::test::to_bf16(in.weight), stream.get()), b(gt::test::to_bf16(in.bias), stream.get());
    DeviceArray<uint16_t> out(c.R * c.C, stream.get());
    DeviceArray<float> mean(c.R, stream.get()), rstd(c.R, stream.get());
    out.poison();
    mean.poison();
    rstd.poison();
    auto bf = [](const DeviceArray<uint16_t>& a) {
      return reinterpret_cast<__nv_bfloat16*>(a.get());
    };
    gt::cuda::layernorm_forward(bf(out), mean.get(), rstd.get(), bf(inp), bf(w), bf(b), c.R, c.C,
                                stream.get());
    EXPECT_TRUE(all_close(gt::test::from_bf16(out.download()), want.out, 1e-2f, 1e-2f)) << "out";
    // Statistics are fp32 math on the same (bf16-exact) inputs.
    EXPECT_TRUE(all_close(mean.download(), want.mean, 1e-6f, 1e-5f)) << "mean";
    EXPECT_TRUE(all_close(rstd.download(), want.rstd, 1e-6f, 1e-5f)) << "rstd";
  }
}

// bf16 storage (kernels/ops.hpp): bf16 activations in and out, the model's
// fp32 parameters read as they are. The CPU twin runs the fp32 op on the bf16
// values; a bf16 output may differ from it by one rounding step.
TEST(CudaLayerNorm, ForwardBf16WithFp32ParametersMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    Inputs in = make_inputs(c, 250);
    in.inp = gt::test::round_to_bf16(in.inp);
    const ForwardResult want = cpu_forward(c, in);

    DeviceArray<uint16_t> inp(gt::test::to_bf16(in.inp), stream.get());
    DeviceArray<float> w(in.weight, stream.get()), b(in.bias, stream.get());
    DeviceArray<uint16_t> out(c.R * c.C, stream.get());
    DeviceArray<float> mean(c.R, stream.get()), rstd(c.R, stream.get());
    out.poison();
    mean.poison();
    rstd.poison();
    auto bf = [](const DeviceArray<uint16_t>& a) {
      return reinterpret_cast<__nv_bfloat16*>(a.get());
    };
    gt::cuda::layernorm_forward(bf(out), mean.get(), rstd.get(), bf(inp), w.get(), b.get(), c.R,
                                c.C, stream.get());
    EXPECT_TRUE(all_close(gt::test::from_bf16(out.download()), gt::test::round_to_bf16(want.out),
                          1e-2f, 8e-3f))
        << "out";
    EXPECT_TRUE(all_close(mean.download(), want.mean, 1e-6f, 1e-5f)) << "mean";
    EXPECT_TRUE(all_close(rstd.download(), want.rstd, 1e-6f, 1e-5f)) << "rstd";
  }
}

// The residual add fused in front: res = a + b exactly as the add op rounds
// it, then the LayerNorm of res; fp32, and bf16 storage with fp32 parameters.
TEST(CudaLayerNorm, AddLayerNormForwardIsTheAddThenTheLayerNorm) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  auto bf = [](const DeviceArray<uint16_t>& a) {
    return reinterpret_cast<__nv_bfloat16*>(a.get());
  };
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(bf16 ? "bf16" : "fp32");
      Inputs in = make_inputs(c, 260);
      auto a = random_vector(c.R * c.C, 270, -2.f, 3.f), b = random_vector(c.R * c.C, 271);
      if (bf16) {
        a = gt::test::round_to_bf16(a);
        b = gt::test::round_to_bf16(b);
      }
      std::vector<float> res(c.R * c.C);
      for (size_t i = 0; i < res.size(); ++i) res[i] = a[i] + b[i];
      if (bf16) res = gt::test::round_to_bf16(res);
      in.inp = res;
      const ForwardResult want = cpu_forward(c, in);

      DeviceArray<float> w(in.weight, s), bias(in.bias, s), mean(c.R, s), rstd(c.R, s);
      mean.poison();
      rstd.poison();
      std::vector<float> got_res, got_out;
      if (bf16) {
        DeviceArray<uint16_t> da(gt::test::to_bf16(a), s), db(gt::test::to_bf16(b), s),
            dres(c.R * c.C, s), dout(c.R * c.C, s);
        dres.poison();
        dout.poison();
        gt::cuda::add_layernorm_forward(bf(dres), bf(dout), mean.get(), rstd.get(), bf(da), bf(db),
                                        w.get(), bias.get(), c.R, c.C, s);
        got_res = gt::test::from_bf16(dres.download());
        got_out = gt::test::from_bf16(dout.download());
      } else {
        DeviceArray<float> da(a, s), db(b, s), dres(c.R * c.C, s), dout(c.R * c.C, s);
        dres.poison();
        dout.poison();
        gt::cuda::add_layernorm_forward(dres.get(), dout.get(), mean.get(), rstd.get(), da.get(),
                                        db.get(), w.get(), bias.get(), c.R, c.C, s);
        got_res = dres.download();
        got_out = dout.download();
      }
      EXPECT_TRUE(gt::test::bitwise_equal(got_res, res)) << "res";
      if (bf16)
        EXPECT_TRUE(all_close(got_out, gt::test::round_to_bf16(want.out), 1e-2f, 8e-3f)) << "out";
      else
        EXPECT_TRUE(all_close(got_out, want.out, 1e-5f, 1e-5f)) << "out";
      EXPECT_TRUE(all_close(mean.download(), want.mean, 1e-6f, 1e-5f)) << "mean";
      EXPECT_TRUE(all_close(rstd.download(), want.rstd, 1e-6f, 1e-5f)) << "rstd";
    }
  }
}

// The backward against the CPU twin, reading an fp32 or (bf16 storage) a
// bf16 input and output gradient; every output accumulates and is fp32.
void check_backward(const Case& c, bool bf16_inp, bool bf16_dout, cudaStream_t stream) {
  Inputs in = make_inputs(c, bf16_inp ? 350 : 300);
  if (bf16_inp) in.inp = gt::test::round_to_bf16(in.inp);
  const ForwardResult fwd = cpu_forward(c, in);
  auto dout = random_vector(c.R * c.C, 310);
  if (bf16_dout) dout = gt::test::round_to_bf16(dout);
  std::vector<uint16_t> dout16 = gt::test::to_bf16(dout);
  // Pre-filled gradients: every output accumulates, so an unwritten
  // element keeps its old value and fails against the CPU sum.
  const auto dinp0 = random_vector(c.R * c.C, 311);
  const auto dw0 = random_vector(c.C, 312), db0 = random_vector(c.C, 313);

  // The CPU twin on the same input (its bf16 path equals its fp32 op on these
  // values: tests/cpu/test_ops_bf16_storage.cpp).
  std::vector<float> want_dinp = dinp0, want_dw = dw0, want_db = db0;
  std::vector<float> mean = fwd.mean, rstd = fwd.rstd;
  std::vector<uint16_t> inp16 = gt::test::to_bf16(in.inp);
  const gt::TensorView cpu_inp =
      bf16_inp ? gt::make_view(inp16.data(), gt::DType::bf16, gt::Device::cpu, {c.R, c.C})
               : gt::cpu_f32(in.inp.data(), {c.R, c.C});
  auto cpu = gt::make_cpu_ops(1);
  const gt::TensorView cpu_dout =
      bf16_dout ? gt::make_view(dout16.data(), gt::DType::bf16, gt::Device::cpu, {c.R, c.C})
                : gt::cpu_f32(dout.data(), {c.R, c.C});
  cpu->layernorm_backward(gt::cpu_f32(want_dinp.data(), {c.R, c.C}),
                          gt::cpu_f32(want_dw.data(), {c.C}), gt::cpu_f32(want_db.data(), {c.C}),
                          cpu_dout, cpu_inp, gt::cpu_f32(in.weight.data(), {c.C}),
                          gt::cpu_f32(mean.data(), {c.R}), gt::cpu_f32(rstd.data(), {c.R}), {});

  DeviceArray<float> d_dout(dout, stream), d_inp(in.inp, stream), d_w(in.weight, stream),
      d_mean(fwd.mean, stream), d_rstd(fwd.rstd, stream);
  DeviceArray<uint16_t> d_inp16(inp16, stream), d_dout16(dout16, stream);
  DeviceArray<float> d_dinp(dinp0, stream), d_dw(dw0, stream), d_db(db0, stream);
  DeviceArray<float> scratch(gt::cuda::layernorm_backward_scratch_floats(c.R, c.C), stream);
  scratch.poison();  // the kernels must write every partial they read
  __nv_bfloat16* copy = nullptr;  // the rounded copy of dinp, from the second run on
  auto with = [&](const auto* g, const auto* x) {
    gt::cuda::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), g, x, d_w.get(),
                                 d_mean.get(), d_rstd.get(), c.R, c.C, scratch.get(), copy, stream);
  };
  const auto* g16 = reinterpret_cast<const __nv_bfloat16*>(d_dout16.get());
  const auto* x16 = reinterpret_cast<const __nv_bfloat16*>(d_inp16.get());
  auto run = [&] {
    if (bf16_dout && bf16_inp)
      with(g16, x16);
    else if (bf16_dout)
      with(g16, d_inp.get());
    else if (bf16_inp)
      with(d_dout.get(), x16);
    else
      with(d_dout.get(), d_inp.get());
  };
  run();
  const auto dinp = d_dinp.download(), dw = d_dw.download(), db = d_db.download();
  // Parameter gradients sum over R rows in a different order than the CPU.
  const float param_atol = 1e-5f + 1e-6f * static_cast<float>(c.R);
  EXPECT_TRUE(all_close(dinp, want_dinp, 1e-5f, 1e-5f)) << "dinp";
  EXPECT_TRUE(all_close(dw, want_dw, param_atol, 1e-5f)) << "dweight";
  EXPECT_TRUE(all_close(db, want_db, param_atol, 1e-5f)) << "dbias";

  // Same inputs, same starting gradients -> bit-identical results; writing
  // the bf16 copy of dinp changes none of them, and the copy is dinp rounded.
  d_dinp.upload(dinp0);
  d_dw.upload(dw0);
  d_db.upload(db0);
  DeviceArray<uint16_t> d_copy(c.R * c.C, stream);
  d_copy.poison();
  copy = reinterpret_cast<__nv_bfloat16*>(d_copy.get());
  run();
  EXPECT_TRUE(gt::test::bitwise_equal(d_dinp.download(), dinp)) << "dinp not deterministic";
  EXPECT_TRUE(d_copy.download() == gt::test::to_bf16(dinp)) << "the bf16 copy of dinp";
  EXPECT_TRUE(gt::test::bitwise_equal(d_dw.download(), dw)) << "dweight not deterministic";
  EXPECT_TRUE(gt::test::bitwise_equal(d_db.download(), db)) << "dbias not deterministic";
}

TEST(CudaLayerNorm, BackwardFp32AccumulatesLikeCpuAndIsDeterministic) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    check_backward(c, false, false, stream.get());
  }
}

TEST(CudaLayerNorm, BackwardReadingBf16InputOrGradientMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    for (auto [x16, g16] :
         {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      SCOPED_TRACE(name(c) + (x16 ? " bf16 inp" : "") + (g16 ? " bf16 dout" : ""));
      check_backward(c, x16, g16, stream.get());
    }
  }
}

}  // namespace
