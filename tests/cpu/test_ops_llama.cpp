// The Llama family's CPU kernels (kernels/cpu/llama_kernels.hpp): RMSNorm,
// the rotary embedding (HF rotate_half) and SwiGLU against double
// references and finite differences; the accumulate/assign contracts; the
// heads RoPE leaves alone; bf16 storage as the fp32 kernel on the bf16
// values, rounded once.
#include <cmath>

#include "kernels/cpu/llama_kernels.hpp"
#include "test_ops_common.hpp"
#include "trainer/model/rope_table.hpp"

namespace gt::test {
namespace {

constexpr float kEps = 1e-5f;

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bf16_from_float(v[i]);
  return b;
}
std::vector<float> widen(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_float(b[i]);
  return v;
}

// ---------------------------------------------------------------- RMSNorm

std::vector<float> rmsnorm(std::vector<float>& x, std::vector<float>& w, int64_t R, int64_t C,
                           std::vector<float>* rstd = nullptr) {
  std::vector<float> out(static_cast<size_t>(R * C)), rs(static_cast<size_t>(R));
  cpu::rmsnorm_forward(f32(out, {R, C}), f32(rs, {R}), f32(x, {R, C}), f32(w, {C}), kEps);
  if (rstd) *rstd = rs;
  return out;
}

TEST(CpuRmsNorm, ForwardMatchesHf) {
  for (auto [R, C] : {std::pair<int64_t, int64_t>{5, 12}, {300, 70}}) {
    std::vector<float> x = random_vector(R * C, 11, -2.f, 2.f),
                       w = random_vector(C, 12, 0.5f, 1.5f);
    std::vector<float> rstd;
    const std::vector<float> out = rmsnorm(x, w, R, C, &rstd);
    std::vector<double> want(static_cast<size_t>(R * C)), want_rs(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < C; ++c) ss += double(x[r * C + c]) * x[r * C + c];
      const double rs = 1.0 / std::sqrt(ss / C + kEps);
      want_rs[r] = rs;
      for (int64_t c = 0; c < C; ++c) want[r * C + c] = x[r * C + c] * rs * w[c];
    }
    EXPECT_TRUE(all_close(out, to_float(want), 1e-5f, 1e-4f));
    EXPECT_TRUE(all_close(rstd, to_float(want_rs), 1e-5f, 1e-4f));
  }
}

TEST(CpuRmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t R = 5, C = 12;
  std::vector<float> x = random_vector(R * C, 21, -2.f, 2.f), w = random_vector(C, 22, 0.5f, 1.5f);
  const std::vector<float> probe = random_vector(R * C, 23);
  std::vector<float> rstd;
  rmsnorm(x, w, R, C, &rstd);
  const float pre_x = -0.5f, pre_w = 0.75f;
  std::vector<float> dinp(static_cast<size_t>(R * C), pre_x), dw(static_cast<size_t>(C), pre_w),
      dout(probe);
  cpu::rmsnorm_backward(f32(dinp, {R, C}), f32(dw, {C}), f32(dout, {R, C}), f32(x, {R, C}),
                        f32(w, {C}), f32(rstd, {R}));
  auto loss = [&] { return weighted_sum(rmsnorm(x, w, R, C), probe); };
  EXPECT_TRUE(grad_close(dinp, plus(numeric_grad(x, loss), pre_x)));
  EXPECT_TRUE(grad_close(dw, plus(numeric_grad(w, loss), pre_w)));
}

TEST(CpuRmsNorm, Bf16IsTheFp32KernelOnBf16ValuesRounded) {
  const int64_t R = 7, C = 40;
  std::vector<float> x = random_vector(R * C, 31, -2.f, 2.f), w = random_vector(C, 32, 0.5f, 1.5f);
  std::vector<uint16_t> xb = to_bf16(x), ob(static_cast<size_t>(R * C));
  std::vector<float> rs(static_cast<size_t>(R)), xw = widen(xb);
  cpu::rmsnorm_forward(bf16_view(ob, {R, C}), f32(rs, {R}), bf16_view(xb, {R, C}), f32(w, {C}),
                       kEps);
  EXPECT_EQ(ob, to_bf16(rmsnorm(xw, w, R, C)));
}

// ---------------------------------------------------------------- RoPE

// HF's table for head size D: inv_freq_i = theta^(-2i/D); (pos, [cos | sin]).
std::vector<float> table(int T, int64_t D, double theta = 10000.0) {
  std::vector<float> t(static_cast<size_t>(T * D));
  for (int p = 0; p < T; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = p * std::pow(theta, -2.0 * i / D);
      t[p * D + i] = static_cast<float>(std::cos(a));
      t[p * D + D / 2 + i] = static_cast<float>(std::sin(a));
    }
  return t;
}

TEST(CpuRope, ForwardIsHfRotateHalfOnTheRotatedHeadsOnly) {
  const int64_t N = 6, H = 4, D = 8;  // heads 0-2 rotated (q, k), head 3 (v) not
  const int T = 3, rot = 3;
  const int64_t first_row = 4;  // rows 0.. are positions 1, 2, 0, 1, 2, 0
  std::vector<float> cs = table(5, D), x = random_vector(N * H * D, 41), y = x;
  cpu::rope_forward(f32(y, {N, H, D}), f32(cs, {5, D}), rot, first_row, T);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t pos = (first_row + n) % T;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < D; ++i) {
        const float* xh = &x[static_cast<size_t>((n * H + h) * D)];
        double want = xh[i];
        if (h < rot) {
          // q * cos + rotate_half(q) * sin, cos/sin repeated over both halves.
          const int64_t j = i % (D / 2);
          const double a = pos * std::pow(10000.0, -2.0 * j / D);
          const double rotated = i < D / 2 ? -xh[i + D / 2] : xh[i - D / 2];
          want = xh[i] * std::cos(a) + rotated * std::sin(a);
        }
        ASSERT_NEAR(y[static_cast<size_t>((n * H + h) * D + i)], want, 1e-5)
            << "row " << n << " head " << h << " channel " << i;
      }
  }
}

TEST(CpuRope, BackwardIsTheTransposeAndMatchesFiniteDifferences) {
  const int64_t N = 4, H = 3, D = 6;
  const int T = 4, rot = 2;
  std::vector<float> cs = table(T, D), x = random_vector(N * H * D, 51);
  const std::vector<float> probe = random_vector(N * H * D, 52);
  auto fwd = [&] {
    std::vector<float> y = x;
    cpu::rope_forward(f32(y, {N, H, D}), f32(cs, {T, D}), rot, 1, T);
    return y;
  };
  std::vector<float> g = probe;
  cpu::rope_backward(f32(g, {N, H, D}), f32(cs, {T, D}), rot, 1, T);
  EXPECT_TRUE(grad_close(g, numeric_grad(x, [&] { return weighted_sum(fwd(), probe); })));
  // A rotation: backward undoes forward.
  std::vector<float> back = fwd();
  cpu::rope_backward(f32(back, {N, H, D}), f32(cs, {T, D}), rot, 1, T);
  EXPECT_TRUE(all_close(back, x, 1e-6f, 1e-5f));
}

TEST(CpuRope, RejectsAnOddHeadSizeAndTooFewPositions) {
  std::vector<float> x(2 * 1 * 5), cs5(4 * 5), x6(2 * 6), cs6(2 * 6);
  expect_error_containing(
      [&] {
        cpu::rope_forward(f32(x, {2, 1, 5}), f32(cs5, {4, 5}), 1, 0, 2);
      },
      "must be even");
  expect_error_containing(
      [&] {
        cpu::rope_forward(f32(x6, {2, 1, 6}), f32(cs6, {2, 6}), 1, 0, 3);
      },
      "rope T 3 outside the table's 2 positions");
}

// ---------------------------------------------------------------- SwiGLU

std::vector<float> swiglu(std::vector<float>& gu, int64_t R, int64_t F) {
  std::vector<float> out(static_cast<size_t>(R * F));
  cpu::swiglu_forward(f32(out, {R, F}), f32(gu, {R, 2 * F}));
  return out;
}

TEST(CpuSwiGlu, ForwardBackwardAndBf16) {
  const int64_t R = 5, F = 9;
  std::vector<float> gu = random_vector(R * 2 * F, 61, -4.f, 4.f);
  const std::vector<float> probe = random_vector(R * F, 62);
  const std::vector<float> out = swiglu(gu, R, F);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < F; ++i) {
      const double g = gu[r * 2 * F + i], u = gu[r * 2 * F + F + i];
      ASSERT_NEAR(out[r * F + i], g / (1 + std::exp(-g)) * u, 1e-5);
    }
  std::vector<float> dgu(static_cast<size_t>(R * 2 * F), 99.f), dout = probe;  // assigned
  cpu::swiglu_backward(f32(dgu, {R, 2 * F}), f32(dout, {R, F}), f32(gu, {R, 2 * F}));
  EXPECT_TRUE(
      grad_close(dgu, numeric_grad(gu, [&] { return weighted_sum(swiglu(gu, R, F), probe); })));

  std::vector<uint16_t> gub = to_bf16(gu), ob(static_cast<size_t>(R * F));
  std::vector<float> guw = widen(gub);
  cpu::swiglu_forward(bf16_view(ob, {R, F}), bf16_view(gub, {R, 2 * F}));
  EXPECT_EQ(ob, to_bf16(swiglu(guw, R, F)));
}

// ---------------------------------------------------------------- Ops entries

// Through the Ops interface: the entry checks the shared contract once and
// names the backend and op; the result is the kernel's.
TEST(LlamaOps, EntriesCheckTheContractAndRunTheKernels) {
  auto ops = cpu_ops(1);
  const int64_t R = 3, F = 4;
  std::vector<float> gu = random_vector(R * 2 * F, 71), out(static_cast<size_t>(R * F));
  ops->swiglu_forward(f32(out, {R, F}), f32(gu, {R, 2 * F}));
  EXPECT_EQ(out, swiglu(gu, R, F));
  std::vector<float> odd(2 * 3 * 5), cs(4 * 5), rs(3), w(4), x(3 * 4), y(3 * 4);
  expect_error_containing(
      [&] {
        ops->rope_forward(f32(odd, {2, 3, 5}), f32(cs, {4, 5}), 1, 0, 2);
      },
      "CpuOps::rope_forward: the head size 5 must be even");
  expect_error_containing(
      [&] {
        ops->rmsnorm_forward(f32(y, {3, 4}), f32(rs, {3}), f32(x, {3, 4}), f32(w, {4}), 0.f);
      },
      "CpuOps::rmsnorm_forward: eps must be > 0");
  std::vector<uint16_t> y16(3 * 4);
  expect_error_containing(
      [&] {
        ops->add_rmsnorm_forward(f32(y, {3, 4}), bf16_view(y16, {3, 4}), f32(rs, {3}),
                                 f32(x, {3, 4}), f32(x, {3, 4}), f32(w, {4}), 1e-5f);
      },
      "CpuOps::add_rmsnorm_forward: out must be fp32 (a's dtype), got bf16");
  expect_error_containing(
      [&] {
        ops->swiglu_forward(f32(out, {R, F}), f32(odd, {2, 15}));
      },
      "CpuOps::swiglu_forward: gu must be (R, 2F), got (2, 15)");
}

// ---------------------------------------------------------------- the table

TEST(RopeTable, UnscaledIsThetaToTheMinus2iOverD) {
  ModelConfig m;
  m.arch = ModelArch::llama;
  m.n_embd = 32;
  m.n_head = 4;  // D = 8
  m.rope_theta = 10000.0;
  const std::vector<float> t = rope_cos_sin(m, 5);
  EXPECT_TRUE(all_close(t, table(5, 8), 1e-6f, 1e-5f));
}

// Llama 3.1 (factor 8, low 1, high 4, original 8192, theta 500000, D 128):
// short wavelengths kept, long ones divided by 8, the band between smoothly
// interpolated and monotone.
TEST(RopeTable, Llama31ScalingKeepsHighStretchesLowAndBlendsBetween) {
  ModelConfig m;
  m.arch = ModelArch::llama;
  m.n_embd = 4096;
  m.n_head = 32;
  ModelConfig scaled = m;
  scaled.rope_scaling.factor = 8;
  const std::vector<float> base = rope_inv_freq(m), f = rope_inv_freq(scaled);
  ASSERT_EQ(f.size(), 64u);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const double wavelen = 2 * M_PI / base[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(f[i], base[i]) << i;
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(f[i], base[i] / 8) << i;
      ++divided;
    } else {
      EXPECT_LT(f[i], base[i]) << i;
      EXPECT_GT(f[i], base[i] / 8) << i;
      ++blended;
    }
    if (i > 0) {
      EXPECT_LT(f[i], f[i - 1]) << i;  // still monotone
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

}  // namespace
}  // namespace gt::test
