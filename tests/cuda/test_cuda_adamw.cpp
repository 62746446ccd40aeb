// adamw_update_runs (kernels/cuda/adamw.cu) against the CPU twin, through
// CudaOps: one run at aligned (vector path) and offset-by-one (scalar path)
// starts, odd n, first and late steps (bias correction), with and without
// the bf16 parameter copy; then many runs in one launch, with parameter and
// state offsets that differ (ZeRO-1/2), decayed and undecayed runs, runs
// crossing chunk boundaries, and gaps that must stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "test_util.hpp"

namespace {

using gt::AdamWRun;
using gt::DType;
using gt::test::all_close;
using gt::test::dev_view;
using gt::test::DeviceArray;
using gt::test::random_vector;

gt::Ops::AdamWParams hparams(int64_t t) {
  gt::Ops::AdamWParams p{};
  p.lr = 3e-4f;
  p.beta1 = 0.9f;
  p.beta2 = 0.95f;
  p.eps = 1e-8f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.7f;
  p.t = t;
  return p;
}

// Runs `runs` over random buffers of param_len / state_len on the CPU twin
// and on CudaOps, and compares every element of every buffer.
// scale: the device factor (clip_scale's output); 0 passes none.
void expect_matches_cpu(int64_t param_len, int64_t state_len, const std::vector<AdamWRun>& runs,
                        int64_t t, bool bf16_copy, float scale = 0.f) {
  gt::CudaOps ops;
  const cudaStream_t s = ops.stream();
  auto cpu = gt::make_cpu_ops(1);
  const auto param0 = random_vector(param_len, 1);
  const auto grad = random_vector(state_len, 2);
  const auto m0 = random_vector(state_len, 3, -0.1f, 0.1f);
  const auto v0 = random_vector(state_len, 4, 0.f, 0.01f);
  std::vector<float> want_p = param0, want_m = m0, want_v = v0, g = grad;
  std::vector<uint16_t> want16(static_cast<size_t>(param_len), 0xFFFF);
  std::vector<float> scale_host{scale};
  cpu->adamw_update_runs(
      gt::cpu_f32(want_p.data(), {param_len}), gt::cpu_f32(g.data(), {state_len}),
      gt::cpu_f32(want_m.data(), {state_len}), gt::cpu_f32(want_v.data(), {state_len}),
      bf16_copy ? gt::make_view(want16.data(), DType::bf16, gt::Device::cpu, {param_len})
                : gt::TensorView{},
      scale != 0.f ? gt::cpu_f32(scale_host.data(), {1}) : gt::TensorView{}, runs, hparams(t));

  DeviceArray<float> d_p(param0, s), d_g(grad, s), d_m(m0, s), d_v(v0, s);
  DeviceArray<uint16_t> d_p16(param_len, s);
  DeviceArray<float> d_scale(scale_host, s);
  d_p16.poison();
  ops.adamw_update_runs(
      dev_view(d_p, DType::f32, {param_len}), dev_view(d_g, DType::f32, {state_len}),
      dev_view(d_m, DType::f32, {state_len}), dev_view(d_v, DType::f32, {state_len}),
      bf16_copy ? dev_view(d_p16, DType::bf16, {param_len}) : gt::TensorView{},
      scale != 0.f ? dev_view(d_scale, DType::f32, {1}) : gt::TensorView{}, runs, hparams(t));
  if (std::isnan(scale)) {  // a skipped step: nothing may change
    EXPECT_TRUE(d_p.download() == param0 && d_m.download() == m0 && d_v.download() == v0)
        << "a NaN scale must leave every buffer untouched";
  }
  const auto got_p = d_p.download();
  EXPECT_TRUE(all_close(got_p, want_p, 1e-6f, 1e-5f)) << "param";
  EXPECT_TRUE(all_close(d_m.download(), want_m, 1e-7f, 1e-5f)) << "m";
  EXPECT_TRUE(all_close(d_v.download(), want_v, 1e-9f, 1e-5f)) << "v";
  EXPECT_TRUE(d_g.download() == grad) << "grad must be read only";
  // Outside the runs nothing moved: the CPU twin left those elements as they
  // were, and the comparisons above are elementwise over whole buffers.
  const auto got16 = d_p16.download();
  std::vector<bool> covered(static_cast<size_t>(param_len), false);
  for (const auto& r : runs)
    for (int64_t i = 0; i < r.n; ++i) covered[static_cast<size_t>(r.param + i)] = true;
  for (int64_t i = 0; i < param_len; ++i) {
    const uint16_t want = bf16_copy && !std::isnan(scale) && covered[static_cast<size_t>(i)]
                              ? gt::test::to_bf16({got_p[static_cast<size_t>(i)]})[0]
                              : uint16_t{0xFFFF};
    ASSERT_EQ(got16[static_cast<size_t>(i)], want)
        << "bf16 copy at " << i << (covered[static_cast<size_t>(i)] ? " (in a run)" : " (a gap)");
  }
}

TEST(CudaAdamW, OneRunMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    int64_t n, offset, t;
    bool bf16_copy;
  };
  const Case cases[] = {{1, 0, 1, true},          {7, 0, 2, false},      {1000, 0, 1, true},
                        {1000003, 0, 1000, true}, {1000003, 1, 3, true}, {4099, 3, 10, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE("n=" + std::to_string(c.n) + " offset=" + std::to_string(c.offset) +
                 " t=" + std::to_string(c.t) + (c.bf16_copy ? " +bf16" : ""));
    expect_matches_cpu(c.n + c.offset, c.n + c.offset, {{c.offset, c.offset, c.n, true}}, c.t,
                       c.bf16_copy);
  }
}

TEST(CudaAdamW, ManyRunsInOneLaunchMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  // Parameters whole (20000), state a shard-like 15000; offsets chosen so
  // some runs start unaligned, one spans several 4096-element chunks, one is
  // a single element, one is empty, and gaps lie between them.
  const std::vector<AdamWRun> runs = {{3, 0, 5000, true},      {5010, 5003, 4097, false},
                                      {12000, 10000, 1, true}, {13001, 10004, 4900, false},
                                      {19000, 14990, 0, true}, {18000, 14992, 8, true}};
  for (const bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "+bf16" : "fp32 only");
    expect_matches_cpu(20000, 15000, runs, 4, bf16);
  }
  SCOPED_TRACE("a device clip factor");
  expect_matches_cpu(20000, 15000, runs, 4, true, 0.37f);
  SCOPED_TRACE("a NaN device factor: the skipped step");
  expect_matches_cpu(20000, 15000, runs, 4, true, std::numeric_limits<float>::quiet_NaN());
}

TEST(CudaAdamW, RejectsOverlappingOrOutOfRangeRuns) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps ops;
  DeviceArray<float> a(64, ops.stream()), b(64, ops.stream()), c(64, ops.stream()),
      d(64, ops.stream());
  auto call = [&](std::vector<AdamWRun> runs) {
    return gt::test::error_message([&] {
      ops.adamw_update_runs(dev_view(a, DType::f32, {64}), dev_view(b, DType::f32, {64}),
                            dev_view(c, DType::f32, {64}), dev_view(d, DType::f32, {64}),
                            gt::TensorView{}, gt::TensorView{}, runs, hparams(1));
    });
  };
  EXPECT_NE(call({{0, 0, 10, true}, {9, 20, 5, true}}).find("overlap in the parameter buffer"),
            std::string::npos);
  EXPECT_NE(call({{0, 0, 10, true}, {20, 5, 5, true}}).find("overlap in the gradient/moment"),
            std::string::npos);
  EXPECT_NE(call({{60, 0, 10, true}}).find("ends past the parameter buffer's 64"),
            std::string::npos);
}

}  // namespace
