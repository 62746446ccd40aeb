// CPU layernorm_forward/backward against a double reference (PyTorch
// semantics: eps 1e-5, biased variance) and finite differences; dinp,
// dweight and dbias all accumulate.
#include <cmath>

#include "test_ops_common.hpp"

namespace gt::test {
namespace {

struct LayerNormCase {
  int64_t R, C;
  std::vector<float> inp, weight, bias, w;
  LayerNormCase(int64_t r, int64_t c, uint64_t seed)
      : R(r), C(c), inp(random_vector(r * c, seed, -2.f, 2.f)),
        weight(random_vector(c, seed + 1, 0.5f, 1.5f)), bias(random_vector(c, seed + 2)),
        w(random_vector(r * c, seed + 3)) {
    // A row with a large common offset checks the variance is centred.
    for (int64_t j = 0; j < c; ++j) inp[j] += 30.f;
  }
  void forward(Ops& ops, std::vector<float>& out, std::vector<float>& mean,
               std::vector<float>& rstd) {
    out.assign(R * C, 0.f);
    mean.assign(R, 0.f);
    rstd.assign(R, 0.f);
    ops.layernorm_forward(f32(out, {R, C}), f32(mean, {R}), f32(rstd, {R}), f32(inp, {R, C}),
                          f32(weight, {C}), f32(bias, {C}));
  }
};

void reference(const LayerNormCase& k, std::vector<double>& out, std::vector<double>& mean,
               std::vector<double>& rstd) {
  out.assign(k.R * k.C, 0.0);
  mean.assign(k.R, 0.0);
  rstd.assign(k.R, 0.0);
  for (int64_t r = 0; r < k.R; ++r) {
    double m = 0.0, v = 0.0;
    for (int64_t c = 0; c < k.C; ++c) m += k.inp[r * k.C + c];
    m /= k.C;
    for (int64_t c = 0; c < k.C; ++c) v += (k.inp[r * k.C + c] - m) * (k.inp[r * k.C + c] - m);
    v /= k.C;  // biased, like torch.nn.LayerNorm
    const double rs = 1.0 / std::sqrt(v + 1e-5);
    for (int64_t c = 0; c < k.C; ++c)
      out[r * k.C + c] = (k.inp[r * k.C + c] - m) * rs * k.weight[c] + k.bias[c];
    mean[r] = m;
    rstd[r] = rs;
  }
}

TEST(CpuLayerNorm, ForwardMatchesReference) {
  auto ops = cpu_ops();
  for (auto [r, c] : {std::pair<int64_t, int64_t>{5, 12}, {300, 70}}) {  // serial and parallel
    SCOPED_TRACE(testing::Message() << "R=" << r << " C=" << c);
    LayerNormCase k(r, c, 40);
    std::vector<float> out, mean, rstd;
    k.forward(*ops, out, mean, rstd);
    std::vector<double> ro, rm, rr;
    reference(k, ro, rm, rr);
    EXPECT_TRUE(all_close(out, to_float(ro), 1e-5f, 1e-4f));
    EXPECT_TRUE(all_close(mean, to_float(rm), 1e-5f, 1e-5f));
    EXPECT_TRUE(all_close(rstd, to_float(rr), 1e-5f, 1e-4f));
  }
}

TEST(CpuLayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  auto ops = cpu_ops();
  LayerNormCase k(5, 12, 50);
  std::vector<float> out, mean, rstd;
  k.forward(*ops, out, mean, rstd);
  const float pre_x = -0.5f, pre_w = 0.75f, pre_b = 2.f;
  std::vector<float> dinp(k.R * k.C, pre_x), dw(k.C, pre_w), db(k.C, pre_b), dout(k.w);
  ops->layernorm_backward(f32(dinp, {k.R, k.C}), f32(dw, {k.C}), f32(db, {k.C}),
                          f32(dout, {k.R, k.C}), f32(k.inp, {k.R, k.C}), f32(k.weight, {k.C}),
                          f32(mean, {k.R}), f32(rstd, {k.R}), {});
  auto loss = [&] {
    std::vector<float> o, m, s;
    k.forward(*ops, o, m, s);
    return weighted_sum(o, k.w);
  };
  EXPECT_TRUE(grad_close(dinp, plus(numeric_grad(k.inp, loss), pre_x)));
  EXPECT_TRUE(grad_close(dw, plus(numeric_grad(k.weight, loss), pre_w)));
  EXPECT_TRUE(grad_close(db, plus(numeric_grad(k.bias, loss), pre_b)));
}

TEST(CpuLayerNorm, BackwardMatchesReferenceOnLargeInput) {
  // Large enough for the parallel row loop and several channel blocks.
  auto ops = cpu_ops();
  LayerNormCase k(300, 130, 60);
  std::vector<float> out, mean, rstd;
  k.forward(*ops, out, mean, rstd);
  std::vector<float> dinp(k.R * k.C, 1.f), dw(k.C, 0.f), db(k.C, 0.f), dout(k.w);
  ops->layernorm_backward(f32(dinp, {k.R, k.C}), f32(dw, {k.C}), f32(db, {k.C}),
                          f32(dout, {k.R, k.C}), f32(k.inp, {k.R, k.C}), f32(k.weight, {k.C}),
                          f32(mean, {k.R}), f32(rstd, {k.R}), {});
  std::vector<double> ro, rm, rr;
  reference(k, ro, rm, rr);
  std::vector<double> rdx(k.R * k.C, 1.0), rdw(k.C, 0.0), rdb(k.C, 0.0);
  for (int64_t r = 0; r < k.R; ++r) {
    double sg = 0.0, sgn = 0.0;
    for (int64_t c = 0; c < k.C; ++c) {
      const double n = (k.inp[r * k.C + c] - rm[r]) * rr[r];
      const double g = static_cast<double>(dout[r * k.C + c]) * k.weight[c];
      sg += g;
      sgn += g * n;
      rdw[c] += dout[r * k.C + c] * n;
      rdb[c] += dout[r * k.C + c];
    }
    for (int64_t c = 0; c < k.C; ++c) {
      const double n = (k.inp[r * k.C + c] - rm[r]) * rr[r];
      const double g = static_cast<double>(dout[r * k.C + c]) * k.weight[c];
      rdx[r * k.C + c] += rr[r] * (g - sg / k.C - n * sgn / k.C);
    }
  }
  EXPECT_TRUE(all_close(dinp, to_float(rdx), 1e-4f, 1e-3f));
  EXPECT_TRUE(all_close(dw, to_float(rdw), 1e-4f, 1e-4f));
  EXPECT_TRUE(all_close(db, to_float(rdb), 1e-4f, 1e-4f));
}

TEST(CpuLayerNorm, RejectsMismatchedShapes) {
  auto ops = cpu_ops();
  LayerNormCase k(5, 12, 70);
  std::vector<float> out(5 * 12), mean(5), rstd(5), short_w(11);
  EXPECT_THROW(ops->layernorm_forward(f32(out, {5, 12}), f32(mean, {5}), f32(rstd, {5}),
                                      f32(k.inp, {5, 12}), f32(short_w, {11}), f32(k.bias, {12})),
               Error);
}

}  // namespace
}  // namespace gt::test
