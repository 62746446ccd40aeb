// The LM head's GEMMs (bf16 operands and logits, fp32 weight gradient),
// too large to recompute on the host at GPT-2's shape, checked on samples in
// double precision (sampled_gemm_check.hpp): at a small shape where the
// emulated device runs it, with the checker shown to catch a transposed
// operand, and at 16384 x 50304 x 768 on a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "sampled_gemm_check.hpp"
#include "test_util.hpp"

namespace {

using gt::DType;
using gt::test::dev_view;
using gt::test::DeviceArray;
using gt::test::random_vector;

// The LM head at (R, V, C) on random bf16 inputs through CudaOps, dwte from
// zero and dx poisoned first; checked by check_lm_head_samples.
gt::test::LmHeadReports run_lm_head(int64_t R, int64_t V, int64_t C, int rows, int cols) {
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  DeviceArray<uint16_t> x(gt::test::to_bf16(random_vector(R * C, 61)), s),
      w(gt::test::to_bf16(random_vector(V * C, 62, -0.05f, 0.05f)), s), logits(R * V, s),
      dx(R * C, s);
  DeviceArray<float> dw(std::vector<float>(V * C, 0.f), s);
  logits.poison();
  dx.poison();
  const auto bf = [](const DeviceArray<uint16_t>& a, int64_t r, int64_t c) {
    return dev_view(a, DType::bf16, {r, c});
  };
  ops.matmul_forward(bf(logits, R, V), bf(x, R, C), bf(w, V, C), gt::TensorView{});
  ops.matmul_backward(bf(dx, R, C), dev_view(dw, DType::f32, {V, C}), gt::TensorView{},
                      bf(logits, R, V), bf(x, R, C), bf(w, V, C));
  ops.synchronize();
  return gt::test::check_lm_head_samples(x.get(), w.get(), logits.get(), dx.get(), dw.get(), R, V,
                                         C, rows, cols);
}

// The checker itself, where the emulated device runs it: a small LM head
// passes, and the same samples read through a wrong operand layout fail.
TEST(CudaLmHead, SampledDoubleCheckPassesAndCatchesAWrongOperand) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const gt::test::LmHeadReports r = run_lm_head(96, 200, 64, 8, 8);
  EXPECT_TRUE(r.forward.ok()) << r.forward.describe();
  EXPECT_TRUE(r.dinp.ok()) << r.dinp.describe();
  EXPECT_TRUE(r.dweight.ok()) << r.dweight.describe();
  EXPECT_EQ(r.forward.samples, 64);

  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  const int64_t R = 32, V = 48, C = 40;
  DeviceArray<uint16_t> x(gt::test::to_bf16(random_vector(R * C, 71)), s),
      w(gt::test::to_bf16(random_vector(V * C, 72)), s), out(R * V, s);
  ops.matmul_forward(dev_view(out, DType::bf16, {R, V}), dev_view(x, DType::bf16, {R, C}),
                     dev_view(w, DType::bf16, {V, C}), gt::TensorView{});
  ops.synchronize();
  using M = gt::test::StridedDeviceMatrix;
  const M xm{x.get(), DType::bf16, C, 1}, om{out.get(), DType::bf16, V, 1};
  // wte read as if it were stored (C, V) rather than (V, C): a transpose bug.
  const M wrong{w.get(), DType::bf16, V, 1};
  const auto bad = gt::test::check_gemm_samples(xm, wrong, om, R, V, C, 4, 4, 1);
  EXPECT_FALSE(bad.ok()) << bad.describe();
  EXPECT_GT(bad.worst_ratio, 10.0) << bad.describe();
}

// GPT-2 124M's LM head at B=16, T=1024 over the padded vocabulary (16384 x
// 50304 x 768): forward, dinp and dweight on 256 samples each. A real GPU only.
TEST(CudaLmHead, GemmsMatchDoubleOnSamplesAtProductionShape) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (const char* why = gt::test::production_shapes_skipped()) GTEST_SKIP() << why;
  const gt::test::LmHeadReports r = run_lm_head(16384, 50304, 768, 16, 16);
  EXPECT_TRUE(r.forward.ok()) << r.forward.describe();
  EXPECT_TRUE(r.dinp.ok()) << r.dinp.describe();
  EXPECT_TRUE(r.dweight.ok()) << r.dweight.describe();
  std::cout << "[          ] LM head forward: " << r.forward.describe() << "\n"
            << "[          ] LM head dinp:    " << r.dinp.describe() << "\n"
            << "[          ] LM head dweight: " << r.dweight.describe() << "\n";
}

}  // namespace
