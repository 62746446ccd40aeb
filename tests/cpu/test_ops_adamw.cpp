// CPU adamw_update against torch.optim.AdamW for three steps (a hand-worked
// two-element case and a double-precision replay of torch's update on a
// large segment), the multi-run form against one call per run, and sum_squares against a double
// sum, bitwise stable across thread counts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/core/bf16.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

Ops::AdamWParams hparams(int64_t t) {
  Ops::AdamWParams p;
  p.lr = 0.1f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-8f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.5f;
  p.t = t;
  return p;
}

TEST(CpuAdamW, ThreeStepsMatchHandWorkedTorchAdamW) {
  // torch.optim.AdamW(lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
  // with the gradients below scaled by 0.5 (clip factor). Step 1 by hand:
  // p = 1 * (1 - 0.01) = 0.99; m = 0.025, v = 6.25e-5; m_hat = 0.25,
  // sqrt(v_hat) = 0.25, so p = 0.99 - 0.1 * 1 = 0.89. Steps 2-3 likewise.
  auto ops = cpu_ops();
  std::vector<float> param{1.f, -0.5f}, m(2, 0.f), v(2, 0.f);
  const std::vector<std::vector<float>> grads{{0.5f, 0.1f}, {-0.3f, 0.2f}, {0.2f, -0.4f}};
  const std::vector<std::vector<float>> want_p{
      {0.890000004f, -0.594999980f}, {0.861950201f, -0.685568171f}, {0.818587932f, -0.659333045f}};
  const std::vector<std::vector<float>> want_m{{0.025f, 0.005f}, {0.0075f, 0.0145f},
                                               {0.01675f, -0.00695f}};
  const std::vector<std::vector<float>> want_v{
      {6.25e-05f, 2.5e-06f}, {8.49375e-05f, 1.24975e-05f}, {9.48525625e-05f, 5.24850025e-05f}};
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> g = grads[t - 1];
    ops->adamw_update(f32(param, {2}), f32(g, {2}), f32(m, {2}), f32(v, {2}), hparams(t));
    EXPECT_TRUE(all_close(param, want_p[t - 1], 1e-6f, 1e-6f)) << "step " << t;
    EXPECT_TRUE(all_close(m, want_m[t - 1], 1e-9f, 1e-5f)) << "step " << t;
    // AdamWParams carries beta2 as float: 1 - 0.999f is 1.3e-5 away from
    // torch's double 1 - 0.999, which shows in v (it cancels in v_hat).
    EXPECT_TRUE(all_close(v, want_v[t - 1], 1e-12f, 3e-5f)) << "step " << t;
  }
}

TEST(CpuAdamW, ThreeStepsMatchDoubleReplayOnLargeSegment) {
  auto ops = cpu_ops();
  const int64_t n = 40001;  // parallel path
  std::vector<float> param = random_vector(n, 800), m(n, 0.f), v(n, 0.f);
  std::vector<double> rp(param.begin(), param.end()), rm(n, 0.0), rv(n, 0.0);
  for (int64_t t = 1; t <= 3; ++t) {
    const Ops::AdamWParams p = hparams(t);
    std::vector<float> g = random_vector(n, 810 + t, -2.f, 2.f);
    ops->adamw_update(f32(param, {n}), f32(g, {n}), f32(m, {n}), f32(v, {n}), p);
    // The betas as the interface hands them over (float), in double maths.
    const double b1 = p.beta1, b2 = p.beta2;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g[i]) * p.grad_scale;
      rp[i] *= 1 - static_cast<double>(p.lr) * p.weight_decay;
      rm[i] = b1 * rm[i] + (1 - b1) * gi;
      rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
      rp[i] -= p.lr / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + p.eps);
    }
    EXPECT_TRUE(all_close(param, to_float(rp), 1e-6f, 1e-5f)) << "step " << t;
    EXPECT_TRUE(all_close(m, to_float(rm), 1e-7f, 1e-5f)) << "step " << t;
    EXPECT_TRUE(all_close(v, to_float(rv), 1e-9f, 1e-5f)) << "step " << t;
  }
}

TEST(CpuAdamW, RejectsMismatchedSegmentsAndStepZero) {
  auto ops = cpu_ops();
  std::vector<float> p(8), g(8), m(8), v(7);
  EXPECT_THROW(ops->adamw_update(f32(p, {8}), f32(g, {8}), f32(m, {8}), f32(v, {7}), hparams(1)),
               Error);
  std::vector<float> v8(8);
  EXPECT_THROW(ops->adamw_update(f32(p, {8}), f32(g, {8}), f32(m, {8}), f32(v8, {8}), hparams(0)),
               Error);
}

TEST(CpuAdamW, RunsInOneCallEqualOneCallPerRunBitForBit) {
  // Whole parameters (P) against shard-like state (S): the offsets differ,
  // decay differs per run, gaps stay untouched, and the bf16 copy is the
  // rounded parameter wherever a run wrote one.
  auto ops = cpu_ops();
  const int64_t P = 50000, S = 45000;
  const std::vector<AdamWRun> runs = {{5, 0, 20000, true},
                                      {20010, 20001, 17000, false},
                                      {40000, 37001, 1, true},
                                      {45000, 37010, 4990, false}};
  const std::vector<float> p0 = random_vector(P, 820), g = random_vector(S, 821, -2.f, 2.f),
                           m0 = random_vector(S, 822, -0.1f, 0.1f),
                           v0 = random_vector(S, 823, 0.f, 0.01f);
  std::vector<float> p = p0, m = m0, v = v0, gg = g;
  std::vector<uint16_t> p16(P, 0xFFFF);
  ops->adamw_update_runs(f32(p, {P}), f32(gg, {S}), f32(m, {S}), f32(v, {S}),
                         make_view(p16.data(), DType::bf16, Device::cpu, {P}), TensorView{}, runs,
                         hparams(2));
  std::vector<float> want_p = p0, want_m = m0, want_v = v0;
  std::vector<bool> covered(P, false);
  for (const auto& r : runs) {
    Ops::AdamWParams hp = hparams(2);
    if (!r.decay) hp.weight_decay = 0.f;
    std::vector<float> rp(want_p.begin() + r.param, want_p.begin() + r.param + r.n),
        rg(g.begin() + r.state, g.begin() + r.state + r.n),
        rm(want_m.begin() + r.state, want_m.begin() + r.state + r.n),
        rv(want_v.begin() + r.state, want_v.begin() + r.state + r.n);
    ops->adamw_update(f32(rp, {r.n}), f32(rg, {r.n}), f32(rm, {r.n}), f32(rv, {r.n}), hp);
    std::copy(rp.begin(), rp.end(), want_p.begin() + r.param);
    std::copy(rm.begin(), rm.end(), want_m.begin() + r.state);
    std::copy(rv.begin(), rv.end(), want_v.begin() + r.state);
    for (int64_t i = 0; i < r.n; ++i) covered[static_cast<size_t>(r.param + i)] = true;
  }
  EXPECT_TRUE(p == want_p && m == want_m && v == want_v) << "runs differ from per-run calls";
  for (int64_t i = 0; i < P; ++i)
    ASSERT_EQ(p16[static_cast<size_t>(i)], covered[static_cast<size_t>(i)]
                                               ? bf16_from_float(p[static_cast<size_t>(i)])
                                               : uint16_t{0xFFFF})
        << "bf16 copy at " << i;
}

TEST(CpuAdamW, RejectsOverlappingAndOutOfRangeRuns) {
  auto ops = cpu_ops();
  std::vector<float> p(64), g(64), m(64), v(64);
  auto call = [&](std::vector<AdamWRun> runs) {
    return error_message([&] {
      ops->adamw_update_runs(f32(p, {64}), f32(g, {64}), f32(m, {64}), f32(v, {64}), TensorView{},
                             TensorView{}, runs, hparams(1));
    });
  };
  EXPECT_NE(call({{0, 0, 10, true}, {9, 20, 5, true}}).find("overlap in the parameter buffer"),
            std::string::npos);
  EXPECT_NE(call({{0, 0, 10, true}, {20, 5, 5, true}}).find("overlap in the gradient/moment"),
            std::string::npos);
  EXPECT_NE(call({{60, 0, 10, true}}).find("ends past the parameter buffer's 64"),
            std::string::npos);
  EXPECT_NE(call({{0, 0, -1, true}}).find("none may be negative"), std::string::npos);
}

TEST(CpuAdamW, ADeviceScaleMultipliesTheGradientAndANonFiniteOneSkips) {
  auto ops = cpu_ops();
  const int64_t n = 1000;
  const std::vector<float> p0 = random_vector(n, 830), g = random_vector(n, 831),
                           m0 = random_vector(n, 832, -0.1f, 0.1f),
                           v0 = random_vector(n, 833, 0.f, 0.01f);
  // scale 0.5 through the tensor == grad_scale 0.5 (x 1 is exact).
  std::vector<float> pa = p0, ma = m0, va = v0, ga = g, half{0.5f};
  ops->adamw_update_runs(f32(pa, {n}), f32(ga, {n}), f32(ma, {n}), f32(va, {n}), TensorView{},
                         f32(half, {1}), {{0, 0, n, true}}, hparams(3));
  std::vector<float> pb = p0, mb = m0, vb = v0, gb = g;
  Ops::AdamWParams hp = hparams(3);
  hp.grad_scale = 0.5f * hp.grad_scale;  // hparams' own 0.5 times the tensor's
  ops->adamw_update(f32(pb, {n}), f32(gb, {n}), f32(mb, {n}), f32(vb, {n}), hp);
  EXPECT_TRUE(all_close(pa, pb, 0.f, 1e-6f) && all_close(ma, mb, 0.f, 1e-6f));
  EXPECT_NE(pa, p0);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> p = p0, m = m0, v = v0, gg = g, scale{bad};
    std::vector<uint16_t> p16(n, 0xFFFF);
    ops->adamw_update_runs(f32(p, {n}), f32(gg, {n}), f32(m, {n}), f32(v, {n}),
                           make_view(p16.data(), DType::bf16, Device::cpu, {n}), f32(scale, {1}),
                           {{0, 0, n, true}}, hparams(3));
    EXPECT_TRUE(p == p0 && m == m0 && v == v0) << "scale " << bad << " must skip the step";
    EXPECT_TRUE(std::all_of(p16.begin(), p16.end(), [](uint16_t b) { return b == 0xFFFF; }));
  }
}

TEST(CpuSumSquaresRuns, SumsTheRunsInDoubleAndRoundsOnce) {
  auto ops = cpu_ops();
  const int64_t n = 100003;
  std::vector<float> x = random_vector(n, 840, -3.f, 3.f), out{-1.f};
  const std::vector<AdamWRun> runs = {
      {0, 5, 40000, true}, {0, 40010, 1, false}, {0, 50000, 50003, true}, {0, 99999, 0, true}};
  double want = 0.0;
  for (const auto& r : runs)
    for (int64_t i = 0; i < r.n; ++i) want += double(x[r.state + i]) * x[r.state + i];
  ops->sum_squares_runs(f32(out, {1}), f32(x, {n}), runs);
  EXPECT_NEAR(out[0], want, 1e-7 * want);
  ops->sum_squares_runs(f32(out, {1}), f32(x, {n}), {});
  EXPECT_EQ(out[0], 0.f) << "no runs: nothing counted";
  EXPECT_NE(
      error_message([&] {
        ops->sum_squares_runs(f32(out, {1}), f32(x, {n}), {{0, 0, 10, true}, {0, 5, 10, true}});
      }).find("overlap in the summed buffer"),
      std::string::npos);
}

TEST(CpuClipScale, IsClipGradNormsFactorOrNaNWhenAnythingIsNotFinite) {
  auto ops = cpu_ops();
  std::vector<float> scale{0.f};
  auto clip = [&](float sq, float loss_check, float max_norm) {
    std::vector<float> stats{sq, loss_check};
    ops->clip_scale(f32(scale, {1}), f32(stats, {2}), max_norm);
    return scale[0];
  };
  // norm 4 > max 1: 1 / (4 + 1e-6); norm 0.5 < 1: 1 (clamped); max_norm 0: no clipping.
  EXPECT_EQ(clip(16.f, 3.f, 1.f), 1.f / (4.f + 1e-6f));
  EXPECT_EQ(clip(0.25f, 3.f, 1.f), 1.f);
  EXPECT_EQ(clip(1e6f, 3.f, 0.f), 1.f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  EXPECT_TRUE(std::isnan(clip(inf, 3.f, 1.f)));
  EXPECT_TRUE(std::isnan(clip(nan, 3.f, 1.f)));
  EXPECT_TRUE(std::isnan(clip(16.f, inf, 1.f))) << "a non-finite loss skips the step too";
  EXPECT_TRUE(std::isnan(clip(16.f, nan, 0.f)));
}

TEST(CpuSumSquares, MatchesDoubleSum) {
  auto ops = cpu_ops();
  for (int64_t n : {int64_t{37}, int64_t{100003}}) {
    std::vector<float> x = random_vector(n, 900, -3.f, 3.f);
    double ref = 0.0;
    for (float xi : x) ref += static_cast<double>(xi) * xi;
    EXPECT_NEAR(ops->sum_squares(f32(x, {n})), ref, 1e-12 * ref) << "n=" << n;
  }
  std::vector<float> x = random_vector(60, 901);
  double ref = 0.0;
  for (float xi : x) ref += static_cast<double>(xi) * xi;
  EXPECT_NEAR(ops->sum_squares(f32(x, {3, 4, 5})), ref, 1e-12 * ref);  // any shape
}

TEST(CpuSumSquares, IsBitwiseStableAcrossThreadCounts) {
  const int64_t n = 1000003;
  std::vector<float> x = random_vector(n, 910, -1e3f, 1e3f);
  const double a = cpu_ops(0)->sum_squares(f32(x, {n}));
  const double b = cpu_ops(1)->sum_squares(f32(x, {n}));
  const double c = cpu_ops(0)->sum_squares(f32(x, {n}));
  EXPECT_EQ(std::memcmp(&a, &b, sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(&a, &c, sizeof(double)), 0);
}

}  // namespace
}  // namespace gt::test
