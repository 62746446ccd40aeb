// bf16 storage on the CPU backend (kernels/ops.hpp, "bf16 storage"): the ops
// the bf16 model runs on bf16 activations (LayerNorm forward and backward,
// GELU forward and backward, add) are, bit for bit, the fp32 op on the bf16
// values with every bf16 output rounded to nearest even once. The fp32 ops
// themselves are checked against references and finite differences in
// test_ops_layernorm.cpp, test_ops_gelu.cpp and test_ops_elementwise.cpp;
// here only the storage is under test, so equality is exact. Also the dtype
// combinations each op rejects.
#include "kernels/core/bf16.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

// A random tensor as bf16 bits and as the fp32 values of those bits.
struct Bf16Tensor {
  std::vector<uint16_t> bits;
  std::vector<float> values;
  Bf16Tensor(int64_t n, uint64_t seed, float scale = 1.f) : bits(n), values(n) {
    std::vector<float> x = random_vector(n, seed);
    for (int64_t i = 0; i < n; ++i) {
      bits[i] = bf16_from_float(scale * x[i]);
      values[i] = bf16_to_float(bits[i]);
    }
  }
};

// Every element of `got` (bf16 bits) is `want` (fp32) rounded.
::testing::AssertionResult rounded_equal(const std::vector<uint16_t>& got,
                                         const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size";
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != bf16_from_float(want[i]))
      return ::testing::AssertionFailure()
             << "element " << i << ": got bits " << got[i] << ", want " << want[i] << " rounded ("
             << bf16_from_float(want[i]) << ")";
  return ::testing::AssertionSuccess();
}

// Rows with a large mean, so a bf16 input really differs from its fp32 source.
const int64_t kR = 37, kC = 70;

TEST(CpuBf16Storage, LayerNormForwardIsTheFp32OpOnBf16ValuesRounded) {
  auto ops = cpu_ops();
  Bf16Tensor x(kR * kC, 1, 3.f);
  auto w = random_vector(kC, 2), b = random_vector(kC, 3);
  std::vector<float> want(kR * kC), mean(kR), rstd(kR), mean16(kR, -1.f), rstd16(kR, -1.f);
  std::vector<uint16_t> got(kR * kC, 0xFFFF);
  ops->layernorm_forward(f32(want, {kR, kC}), f32(mean, {kR}), f32(rstd, {kR}),
                         f32(x.values, {kR, kC}), f32(w, {kC}), f32(b, {kC}));
  ops->layernorm_forward(bf16_view(got, {kR, kC}), f32(mean16, {kR}), f32(rstd16, {kR}),
                         bf16_view(x.bits, {kR, kC}), f32(w, {kC}), f32(b, {kC}));
  EXPECT_TRUE(rounded_equal(got, want));
  EXPECT_EQ(mean16, mean);  // statistics stay fp32, unrounded
  EXPECT_EQ(rstd16, rstd);
}

TEST(CpuBf16Storage, LayerNormBackwardReadsBf16InputAndAccumulatesFp32) {
  auto ops = cpu_ops();
  Bf16Tensor x(kR * kC, 11, 2.f);
  auto w = random_vector(kC, 12), b = random_vector(kC, 13), dy = random_vector(kR * kC, 14);
  std::vector<float> out(kR * kC), mean(kR), rstd(kR);
  ops->layernorm_forward(f32(out, {kR, kC}), f32(mean, {kR}), f32(rstd, {kR}),
                         f32(x.values, {kR, kC}), f32(w, {kC}), f32(b, {kC}));
  // Pre-filled: every output accumulates.
  std::vector<float> dx(kR * kC, 0.25f), dw(kC, 1.f), db(kC, -1.f);
  std::vector<float> dx16(dx), dw16(dw), db16(db);
  ops->layernorm_backward(f32(dx, {kR, kC}), f32(dw, {kC}), f32(db, {kC}), f32(dy, {kR, kC}),
                          f32(x.values, {kR, kC}), f32(w, {kC}), f32(mean, {kR}), f32(rstd, {kR}),
                          {});
  ops->layernorm_backward(f32(dx16, {kR, kC}), f32(dw16, {kC}), f32(db16, {kC}), f32(dy, {kR, kC}),
                          bf16_view(x.bits, {kR, kC}), f32(w, {kC}), f32(mean, {kR}),
                          f32(rstd, {kR}), {});
  EXPECT_EQ(dx16, dx);
  EXPECT_EQ(dw16, dw);
  EXPECT_EQ(db16, db);

  // A bf16 output gradient too (a GEMM's bf16 dinp: the model's dln at tp = 1).
  Bf16Tensor g(kR * kC, 15);
  std::vector<float> want_dx(kR * kC, 0.25f), want_dw(kC, 1.f), want_db(kC, -1.f);
  std::vector<float> got_dx(want_dx), got_dw(want_dw), got_db(want_db);
  ops->layernorm_backward(f32(want_dx, {kR, kC}), f32(want_dw, {kC}), f32(want_db, {kC}),
                          f32(g.values, {kR, kC}), f32(x.values, {kR, kC}), f32(w, {kC}),
                          f32(mean, {kR}), f32(rstd, {kR}), {});
  ops->layernorm_backward(f32(got_dx, {kR, kC}), f32(got_dw, {kC}), f32(got_db, {kC}),
                          bf16_view(g.bits, {kR, kC}), bf16_view(x.bits, {kR, kC}), f32(w, {kC}),
                          f32(mean, {kR}), f32(rstd, {kR}), {});
  EXPECT_EQ(got_dx, want_dx);
  EXPECT_EQ(got_dw, want_dw);
  EXPECT_EQ(got_db, want_db);

  // The rounded copy of the accumulated dinp, written in the same call
  // (the next GEMM's bf16 operand); the fp32 results do not change.
  std::vector<float> copy_dx(kR * kC, 0.25f), copy_dw(kC, 1.f), copy_db(kC, -1.f);
  std::vector<uint16_t> copy16(kR * kC, 0xFFFF);
  ops->layernorm_backward(f32(copy_dx, {kR, kC}), f32(copy_dw, {kC}), f32(copy_db, {kC}),
                          bf16_view(g.bits, {kR, kC}), bf16_view(x.bits, {kR, kC}), f32(w, {kC}),
                          f32(mean, {kR}), f32(rstd, {kR}), bf16_view(copy16, {kR, kC}));
  EXPECT_EQ(copy_dx, want_dx);
  EXPECT_EQ(copy16, to_bf16(want_dx));
  std::vector<float> wrong(kR * kC);
  EXPECT_NE(error_message([&] {
              ops->layernorm_backward(f32(copy_dx, {kR, kC}), f32(copy_dw, {kC}),
                                      f32(copy_db, {kC}), f32(dy, {kR, kC}),
                                      f32(x.values, {kR, kC}), f32(w, {kC}), f32(mean, {kR}),
                                      f32(rstd, {kR}), f32(wrong, {kR, kC}));
            }).find("layernorm dinp_bf16: expected bf16"),
            std::string::npos);
}

// The fused residual add + LayerNorm is, bit for bit, add then
// layernorm_forward, in fp32 and in bf16 storage.
TEST(CpuBf16Storage, AddLayerNormForwardIsAddThenLayerNorm) {
  auto ops = cpu_ops();
  Bf16Tensor a(kR * kC, 41, 2.f), b(kR * kC, 42);
  auto w = random_vector(kC, 43), bias = random_vector(kC, 44);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    std::vector<float> res(kR * kC), out(kR * kC), mean(kR), rstd(kR);
    std::vector<float> res2(res), out2(out), mean2(mean), rstd2(rstd);
    std::vector<uint16_t> r16(kR * kC), o16(kR * kC), r16b(r16), o16b(o16);
    auto act = [&](std::vector<float>& f, std::vector<uint16_t>& h) {
      return bf16 ? bf16_view(h, {kR, kC}) : f32(f, {kR, kC});
    };
    std::vector<float> af = a.values, bf = b.values;
    std::vector<uint16_t> ah = a.bits, bh = b.bits;
    ops->add(act(res, r16), act(af, ah), act(bf, bh));
    ops->layernorm_forward(act(out, o16), f32(mean, {kR}), f32(rstd, {kR}), act(res, r16),
                           f32(w, {kC}), f32(bias, {kC}));
    ops->add_layernorm_forward(act(res2, r16b), act(out2, o16b), f32(mean2, {kR}), f32(rstd2, {kR}),
                               act(af, ah), act(bf, bh), f32(w, {kC}), f32(bias, {kC}));
    EXPECT_EQ(res2, res);
    EXPECT_EQ(out2, out);
    EXPECT_EQ(r16b, r16);
    EXPECT_EQ(o16b, o16);
    EXPECT_EQ(mean2, mean);
    EXPECT_EQ(rstd2, rstd);
  }
}

TEST(CpuBf16Storage, GeluForwardAndBackwardAreTheFp32OpsRounded) {
  auto ops = cpu_ops();
  const int64_t n = 3 * 16384 + 5;  // several OpenMP chunks and a tail
  Bf16Tensor x(n, 21, 3.f), dy(n, 22);
  std::vector<float> y(n), dx(n);
  std::vector<uint16_t> y16(n, 0xFFFF), dx16(n, 0xFFFF);
  ops->gelu_forward(f32(y, {n}), f32(x.values, {n}));
  ops->gelu_forward(bf16_view(y16, {n}), bf16_view(x.bits, {n}));
  EXPECT_TRUE(rounded_equal(y16, y));
  ops->gelu_backward(f32(dx, {n}), f32(x.values, {n}), f32(dy.values, {n}));
  ops->gelu_backward(bf16_view(dx16, {n}), bf16_view(x.bits, {n}), bf16_view(dy.bits, {n}));
  EXPECT_TRUE(rounded_equal(dx16, dx));
}

TEST(CpuBf16Storage, AddIsTheFp32SumRoundedOnceAndMayAlias) {
  auto ops = cpu_ops();
  const int64_t n = 40000;
  Bf16Tensor a(n, 31, 4.f), b(n, 32);
  std::vector<float> want(n);
  std::vector<uint16_t> got(n, 0xFFFF);
  ops->add(f32(want, {n}), f32(a.values, {n}), f32(b.values, {n}));
  ops->add(bf16_view(got, {n}), bf16_view(a.bits, {n}), bf16_view(b.bits, {n}));
  EXPECT_TRUE(rounded_equal(got, want));
  // out aliasing an input (the residual stream updated in place).
  ops->add(bf16_view(a.bits, {n}), bf16_view(a.bits, {n}), bf16_view(b.bits, {n}));
  EXPECT_EQ(a.bits, got);
}

TEST(CpuBf16Storage, RejectsMixedActivationDtypes) {
  auto ops = cpu_ops();
  const int64_t R = 2, C = 4, n = R * C;
  std::vector<float> x(n), y(n), z(n), w(C), b(C), mean(R), rstd(R);
  std::vector<uint16_t> x16(n), y16(n), w16(C);
  expect_error_containing(
      [&] {
        ops->layernorm_forward(f32(y, {R, C}), f32(mean, {R}), f32(rstd, {R}),
                               bf16_view(x16, {R, C}), f32(w, {C}), f32(b, {C}));
      },
      "layernorm out (inp's dtype) must be bf16, got fp32");
  expect_error_containing(
      [&] {
        ops->layernorm_forward(bf16_view(y16, {R, C}), f32(mean, {R}), f32(rstd, {R}),
                               bf16_view(x16, {R, C}), bf16_view(w16, {C}), f32(b, {C}));
      },
      "layernorm weight must be fp32, got bf16");
  expect_error_containing(
      [&] {
        ops->layernorm_backward(bf16_view(y16, {R, C}), f32(w, {C}), f32(b, {C}), f32(x, {R, C}),
                                f32(z, {R, C}), f32(w, {C}), f32(mean, {R}), f32(rstd, {R}), {});
      },
      "layernorm dinp must be fp32, got bf16");
  expect_error_containing([&] { ops->gelu_forward(f32(y, {n}), bf16_view(x16, {n})); },
                          "gelu out (inp's dtype) must be bf16, got fp32");
  expect_error_containing(
      [&] { ops->gelu_backward(bf16_view(y16, {n}), bf16_view(x16, {n}), f32(z, {n})); },
      "gelu dout (inp's dtype) must be bf16, got fp32");
  expect_error_containing([&] { ops->add(bf16_view(y16, {n}), bf16_view(x16, {n}), f32(z, {n})); },
                          "add b (out's dtype) must be bf16, got fp32");
}

}  // namespace
}  // namespace gt::test
