// CPU matmul_forward/backward (out = inp @ W^T + b, W (OC,C)) against a
// double reference and finite differences: dinp assigned, dweight and dbias
// accumulated, empty dinp/dbias skipped.
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

struct MatmulCase {
  int64_t R, C, OC;
  std::vector<float> inp, weight, bias, w;
  MatmulCase(int64_t r, int64_t c, int64_t oc, uint64_t seed)
      : R(r), C(c), OC(oc), inp(random_vector(r * c, seed)),
        weight(random_vector(oc * c, seed + 1)), bias(random_vector(oc, seed + 2)),
        w(random_vector(r * oc, seed + 3)) {}
  std::vector<float> forward(Ops& ops, bool with_bias) {
    std::vector<float> out(R * OC, 99.f);  // garbage: forward must overwrite
    ops.matmul_forward(f32(out, {R, OC}), f32(inp, {R, C}), f32(weight, {OC, C}),
                       with_bias ? f32(bias, {OC}) : TensorView{});
    return out;
  }
  std::vector<double> reference(bool with_bias) const {
    std::vector<double> out(R * OC);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t o = 0; o < OC; ++o) {
        double s = with_bias ? bias[o] : 0.0;
        for (int64_t c = 0; c < C; ++c)
          s += static_cast<double>(inp[r * C + c]) * weight[o * C + c];
        out[r * OC + o] = s;
      }
    return out;
  }
};

TEST(CpuMatmul, ForwardMatchesReference) {
  auto ops = cpu_ops();
  for (auto [r, c, oc] : {std::tuple<int64_t, int64_t, int64_t>{5, 12, 7}, {130, 33, 150}}) {
    SCOPED_TRACE(testing::Message() << "R=" << r << " C=" << c << " OC=" << oc);
    MatmulCase k(r, c, oc, 80);
    EXPECT_TRUE(all_close(k.forward(*ops, true), to_float(k.reference(true)), 1e-5f, 1e-4f));
    EXPECT_TRUE(all_close(k.forward(*ops, false), to_float(k.reference(false)), 1e-5f, 1e-4f));
  }
}

TEST(CpuMatmul, BackwardMatchesFiniteDifferences) {
  auto ops = cpu_ops();
  MatmulCase k(5, 12, 7, 90);
  const float pre_w = 0.5f, pre_b = -1.5f;
  std::vector<float> dinp(k.R * k.C, 123.f);  // assigned: the pre-fill must vanish
  std::vector<float> dw(k.OC * k.C, pre_w), db(k.OC, pre_b), dout(k.w);
  ops->matmul_backward(f32(dinp, {k.R, k.C}), f32(dw, {k.OC, k.C}), f32(db, {k.OC}),
                       f32(dout, {k.R, k.OC}), f32(k.inp, {k.R, k.C}),
                       f32(k.weight, {k.OC, k.C}));
  auto loss = [&] { return weighted_sum(k.forward(*ops, true), k.w); };
  EXPECT_TRUE(grad_close(dinp, numeric_grad(k.inp, loss)));
  EXPECT_TRUE(grad_close(dw, plus(numeric_grad(k.weight, loss), pre_w)));
  EXPECT_TRUE(grad_close(db, plus(numeric_grad(k.bias, loss), pre_b)));
}

TEST(CpuMatmul, BackwardMatchesReferenceAndSkipsEmptyOutputs) {
  auto ops = cpu_ops();
  MatmulCase k(130, 33, 150, 100);  // dbias spans three column blocks
  std::vector<double> rdx(k.R * k.C, 0.0), rdw(k.OC * k.C, 1.0), rdb(k.OC, 2.0);
  for (int64_t r = 0; r < k.R; ++r)
    for (int64_t o = 0; o < k.OC; ++o) {
      const double g = k.w[r * k.OC + o];
      rdb[o] += g;
      for (int64_t c = 0; c < k.C; ++c) {
        rdx[r * k.C + c] += g * k.weight[o * k.C + c];
        rdw[o * k.C + c] += g * k.inp[r * k.C + c];
      }
    }
  std::vector<float> dinp(k.R * k.C, 5.f), dw(k.OC * k.C, 1.f), db(k.OC, 2.f);
  ops->matmul_backward(f32(dinp, {k.R, k.C}), f32(dw, {k.OC, k.C}), f32(db, {k.OC}),
                       f32(k.w, {k.R, k.OC}), f32(k.inp, {k.R, k.C}),
                       f32(k.weight, {k.OC, k.C}));
  EXPECT_TRUE(all_close(dinp, to_float(rdx), 1e-4f, 1e-4f));
  EXPECT_TRUE(all_close(dw, to_float(rdw), 1e-4f, 1e-4f));
  EXPECT_TRUE(all_close(db, to_float(rdb), 1e-4f, 1e-4f));

  // Without dinp and dbias only dweight moves (accumulating a second time).
  ops->matmul_backward(TensorView{}, f32(dw, {k.OC, k.C}), TensorView{}, f32(k.w, {k.R, k.OC}),
                       f32(k.inp, {k.R, k.C}), f32(k.weight, {k.OC, k.C}));
  for (size_t i = 0; i < rdw.size(); ++i) rdw[i] = 2.0 * rdw[i] - 1.0;
  EXPECT_TRUE(all_close(dw, to_float(rdw), 1e-4f, 1e-4f));
}

TEST(CpuMatmul, RejectsMismatchedShapes) {
  auto ops = cpu_ops();
  MatmulCase k(5, 12, 7, 110);
  std::vector<float> out(5 * 8);
  EXPECT_THROW(ops->matmul_forward(f32(out, {5, 8}), f32(k.inp, {5, 12}),
                                   f32(k.weight, {7, 12}), f32(k.bias, {7})),
               Error);
  EXPECT_THROW(ops->matmul_forward(f32(out, {5, 7}), f32(k.inp, {5, 12}),
                                   f32(k.weight, {7, 12}), f32(k.bias, {5})),
               Error);
}

}  // namespace
}  // namespace gt::test
