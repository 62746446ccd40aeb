// CPU matmul_forward/backward with bf16 operands (the mixed-precision
// combination: inp, weight, dout bf16; out, dinp, dweight, dbias fp32; out
// and dinp bf16 for the bf16-storage model's activations and their gradients) against the fp32
// matmul of the same values rounded to bf16: forward with and without bias, backward with
// dweight/dbias accumulating and the empty outputs skipped, odd shapes; and
// the dtype combinations it rejects.
#include "kernels/core/bf16.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

// One random fp32 tensor with its bf16 bits (by CpuOps::cast) and the fp32
// values of those bits: the reference matmul runs on `rounded`.
struct Operand {
  std::vector<float> rounded;
  std::vector<uint16_t> bits;
  Operand(Ops& ops, int64_t n, uint64_t seed) : rounded(random_vector(n, seed)), bits(n) {
    std::vector<float> x = rounded;
    ops.cast(bf16_view(bits, {n}), f32(x, {n}));
    ops.cast(f32(rounded, {n}), bf16_view(bits, {n}));
  }
};

struct Shape {
  int64_t R, C, OC;
};
const Shape kShapes[] = {{5, 12, 7}, {1, 1, 1}, {130, 33, 150}};  // 150: three dbias blocks

constexpr float kRel = 1e-5f, kAbs = 1e-6f;

TEST(CpuMatmulBf16, ForwardIsTheFp32MatmulOfTheRoundedInputs) {
  auto ops = cpu_ops();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "R=" << s.R << " C=" << s.C << " OC=" << s.OC);
    Operand inp(*ops, s.R * s.C, 1), weight(*ops, s.OC * s.C, 2);
    auto bias = random_vector(s.OC, 3);  // fp32, like out
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(with_bias ? "bias" : "no bias");
      const TensorView b = with_bias ? f32(bias, {s.OC}) : TensorView{};
      std::vector<float> got(s.R * s.OC, 99.f), want(s.R * s.OC, -99.f);
      ops->matmul_forward(f32(got, {s.R, s.OC}), bf16_view(inp.bits, {s.R, s.C}),
                          bf16_view(weight.bits, {s.OC, s.C}), b);
      ops->matmul_forward(f32(want, {s.R, s.OC}), f32(inp.rounded, {s.R, s.C}),
                          f32(weight.rounded, {s.OC, s.C}), b);
      EXPECT_TRUE(all_close(got, want, kAbs, kRel));
    }
  }
}

// The bf16 model's logits: a bf16 out is the fp32 result rounded to nearest
// even, bit for bit.
TEST(CpuMatmulBf16, Bf16OutIsTheFp32ResultRounded) {
  auto ops = cpu_ops();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "R=" << s.R << " C=" << s.C << " OC=" << s.OC);
    Operand inp(*ops, s.R * s.C, 21), weight(*ops, s.OC * s.C, 22);
    auto bias = random_vector(s.OC, 23);
    for (bool with_bias : {true, false}) {
      const TensorView b = with_bias ? f32(bias, {s.OC}) : TensorView{};
      std::vector<float> want(s.R * s.OC);
      std::vector<uint16_t> got(s.R * s.OC, 0xFFFF);
      ops->matmul_forward(f32(want, {s.R, s.OC}), bf16_view(inp.bits, {s.R, s.C}),
                          bf16_view(weight.bits, {s.OC, s.C}), b);
      ops->matmul_forward(bf16_view(got, {s.R, s.OC}), bf16_view(inp.bits, {s.R, s.C}),
                          bf16_view(weight.bits, {s.OC, s.C}), b);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], bf16_from_float(want[i]))
            << "element " << i << (with_bias ? " bias" : "");
    }
  }
}

// bf16 storage's linear layers bring their bias rounded to bf16: a bf16
// bias is its fp32 value, bit for bit, with a bf16 out (and in the fused GELU
// form, whose product is fp32 inside).
TEST(CpuMatmulBf16, ABf16BiasIsItsValueWithABf16Out) {
  auto ops = cpu_ops();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "R=" << s.R << " C=" << s.C << " OC=" << s.OC);
    Operand inp(*ops, s.R * s.C, 31), weight(*ops, s.OC * s.C, 32), bias(*ops, s.OC, 33);
    const TensorView x = bf16_view(inp.bits, {s.R, s.C}), w = bf16_view(weight.bits, {s.OC, s.C});
    std::vector<uint16_t> got(s.R * s.OC, 0xFFFF), want(s.R * s.OC, 0);
    ops->matmul_forward(bf16_view(got, {s.R, s.OC}), x, w, bf16_view(bias.bits, {s.OC}));
    ops->matmul_forward(bf16_view(want, {s.R, s.OC}), x, w, f32(bias.rounded, {s.OC}));
    EXPECT_EQ(got, want);
    std::vector<uint16_t> got_pre(got.size()), want_pre(got.size());
    ops->matmul_gelu_forward(bf16_view(got, {s.R, s.OC}), bf16_view(got_pre, {s.R, s.OC}), x, w,
                             bf16_view(bias.bits, {s.OC}));
    ops->matmul_gelu_forward(bf16_view(want, {s.R, s.OC}), bf16_view(want_pre, {s.R, s.OC}), x, w,
                             f32(bias.rounded, {s.OC}));
    EXPECT_EQ(got, want) << "gelu";
    EXPECT_EQ(got_pre, want_pre) << "gelu pre";
  }
}

TEST(CpuMatmulBf16, BackwardIsTheFp32BackwardOfTheRoundedInputsAndAccumulates) {
  auto ops = cpu_ops();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "R=" << s.R << " C=" << s.C << " OC=" << s.OC);
    Operand inp(*ops, s.R * s.C, 11), weight(*ops, s.OC * s.C, 12), dout(*ops, s.R * s.OC, 13);
    // Pre-filled: dinp is assigned, dweight and dbias accumulate.
    std::vector<float> dinp(s.R * s.C, 123.f), dw(s.OC * s.C, 0.5f), db(s.OC, -1.5f);
    std::vector<float> want_dinp(dinp), want_dw(dw), want_db(db);
    for (int pass = 0; pass < 2; ++pass) {  // the second pass accumulates onto the first
      ops->matmul_backward(f32(dinp, {s.R, s.C}), f32(dw, {s.OC, s.C}), f32(db, {s.OC}),
                           bf16_view(dout.bits, {s.R, s.OC}), bf16_view(inp.bits, {s.R, s.C}),
                           bf16_view(weight.bits, {s.OC, s.C}));
      ops->matmul_backward(f32(want_dinp, {s.R, s.C}), f32(want_dw, {s.OC, s.C}),
                           f32(want_db, {s.OC}), f32(dout.rounded, {s.R, s.OC}),
                           f32(inp.rounded, {s.R, s.C}), f32(weight.rounded, {s.OC, s.C}));
    }
    EXPECT_TRUE(all_close(dinp, want_dinp, kAbs, kRel)) << "dinp";
    EXPECT_TRUE(all_close(dw, want_dw, kAbs, kRel)) << "dweight";
    EXPECT_TRUE(all_close(db, want_db, kAbs, kRel)) << "dbias";

    // Without dinp and dbias only dweight moves.
    const std::vector<float> db_before = db;
    ops->matmul_backward(TensorView{}, f32(dw, {s.OC, s.C}), TensorView{},
                         bf16_view(dout.bits, {s.R, s.OC}), bf16_view(inp.bits, {s.R, s.C}),
                         bf16_view(weight.bits, {s.OC, s.C}));
    ops->matmul_backward(TensorView{}, f32(want_dw, {s.OC, s.C}), TensorView{},
                         f32(dout.rounded, {s.R, s.OC}), f32(inp.rounded, {s.R, s.C}),
                         f32(weight.rounded, {s.OC, s.C}));
    EXPECT_TRUE(all_close(dw, want_dw, kAbs, kRel)) << "dweight, third pass";
    EXPECT_EQ(db, db_before);
  }
}

// The bf16 model's activation gradients: a bf16 dinp is the fp32 dinp
// rounded to nearest even, bit for bit; dweight and dbias are unchanged.
TEST(CpuMatmulBf16, Bf16DinpIsTheFp32DinpRounded) {
  auto ops = cpu_ops();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "R=" << s.R << " C=" << s.C << " OC=" << s.OC);
    Operand inp(*ops, s.R * s.C, 31), weight(*ops, s.OC * s.C, 32), dout(*ops, s.R * s.OC, 33);
    std::vector<float> want(s.R * s.C), dw(s.OC * s.C, 0.f), db(s.OC, 0.f);
    std::vector<float> dw2(dw), db2(db);
    std::vector<uint16_t> got(s.R * s.C, 0xFFFF);
    ops->matmul_backward(f32(want, {s.R, s.C}), f32(dw, {s.OC, s.C}), f32(db, {s.OC}),
                         bf16_view(dout.bits, {s.R, s.OC}), bf16_view(inp.bits, {s.R, s.C}),
                         bf16_view(weight.bits, {s.OC, s.C}));
    ops->matmul_backward(bf16_view(got, {s.R, s.C}), f32(dw2, {s.OC, s.C}), f32(db2, {s.OC}),
                         bf16_view(dout.bits, {s.R, s.OC}), bf16_view(inp.bits, {s.R, s.C}),
                         bf16_view(weight.bits, {s.OC, s.C}));
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], bf16_from_float(want[i])) << "element " << i;
    EXPECT_EQ(dw2, dw);
    EXPECT_EQ(db2, db);
  }
}

TEST(CpuMatmulBf16, BackwardMatchesADoubleReference) {
  // The same gradients from first principles, so the fp32 comparison above
  // cannot hide a shared mistake: dinp = dout @ W, dW += dout^T @ inp,
  // db += column sums of dout, all on the bf16 values.
  auto ops = cpu_ops();
  const int64_t R = 9, C = 10, OC = 11;
  Operand inp(*ops, R * C, 21), weight(*ops, OC * C, 22), dout(*ops, R * OC, 23);
  std::vector<double> rdx(R * C, 0.0), rdw(OC * C, 1.0), rdb(OC, 2.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < OC; ++o) {
      const double g = dout.rounded[r * OC + o];
      rdb[o] += g;
      for (int64_t c = 0; c < C; ++c) {
        rdx[r * C + c] += g * weight.rounded[o * C + c];
        rdw[o * C + c] += g * inp.rounded[r * C + c];
      }
    }
  std::vector<float> dinp(R * C, 5.f), dw(OC * C, 1.f), db(OC, 2.f);
  ops->matmul_backward(f32(dinp, {R, C}), f32(dw, {OC, C}), f32(db, {OC}),
                       bf16_view(dout.bits, {R, OC}), bf16_view(inp.bits, {R, C}),
                       bf16_view(weight.bits, {OC, C}));
  EXPECT_TRUE(all_close(dinp, to_float(rdx), 1e-5f, 1e-5f));
  EXPECT_TRUE(all_close(dw, to_float(rdw), 1e-5f, 1e-5f));
  EXPECT_TRUE(all_close(db, to_float(rdb), 1e-5f, 1e-5f));
}

TEST(CpuMatmulBf16, RejectsMixedOperandsAndBf16Results) {
  auto ops = cpu_ops();
  const int64_t R = 3, C = 4, OC = 5;
  std::vector<uint16_t> x16(R * C), w16(OC * C), dy16(R * OC), out16(R * OC), dx16(R * C),
      dw16(OC * C), db16(OC);
  std::vector<float> x(R * C), w(OC * C), dy(R * OC), out(R * OC), dx(R * C), dw(OC * C),
      db(OC);
  std::vector<int32_t> xi(R * C);

  // forward
  expect_error_containing(
      [&] { ops->matmul_forward(f32(out, {R, OC}), bf16_view(x16, {R, C}), f32(w, {OC, C}), {}); },
      "matmul_forward: weight is fp32 but inp is bf16");
  expect_error_containing(
      [&] { ops->matmul_forward(f32(out, {R, OC}), f32(x, {R, C}), bf16_view(w16, {OC, C}), {}); },
      "matmul_forward: weight is bf16 but inp is fp32");
  expect_error_containing(
      [&] {
        ops->matmul_forward(bf16_view(out16, {R, OC}), f32(x, {R, C}), f32(w, {OC, C}), {});
      },
      "matmul_forward: out must be fp32 on the CPU backend, got bf16");
  expect_error_containing(
      [&] {
        ops->matmul_forward(f32(out, {R, OC}), bf16_view(x16, {R, C}), bf16_view(w16, {OC, C}),
                            bf16_view(db16, {OC}));
      },
      "matmul_forward: bias must be fp32 on the CPU backend, got bf16");
  expect_error_containing(
      [&] { ops->matmul_forward(f32(out, {R, OC}), i32(xi, {R, C}), f32(w, {OC, C}), {}); },
      "matmul_forward: inp must be fp32 or bf16, got int32");

  // backward: every result stays fp32, every operand shares inp's dtype
  auto backward = [&](TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                      TensorView inp, TensorView weight) {
    ops->matmul_backward(dinp, dweight, dbias, dout, inp, weight);
  };
  const TensorView X = bf16_view(x16, {R, C}), W = bf16_view(w16, {OC, C}),
                   DY = bf16_view(dy16, {R, OC});
  expect_error_containing([&] { backward(f32(dx, {R, C}), f32(dw, {OC, C}), f32(db, {OC}),
                                         f32(dy, {R, OC}), X, W); },
                          "matmul_backward: dout is fp32 but inp is bf16");
  expect_error_containing([&] { backward(f32(dx, {R, C}), f32(dw, {OC, C}), f32(db, {OC}), DY,
                                         X, f32(w, {OC, C})); },
                          "matmul_backward: weight is fp32 but inp is bf16");
  expect_error_containing([&] { backward(f32(dx, {R, C}), bf16_view(dw16, {OC, C}),
                                         f32(db, {OC}), DY, X, W); },
                          "matmul_backward: dweight must be fp32 on the CPU backend, got bf16");
  expect_error_containing(
      [&] {
        backward(bf16_view(dx16, {R, C}), f32(dw, {OC, C}), f32(db, {OC}), f32(dy, {R, OC}),
                 f32(x, {R, C}), f32(w, {OC, C}));
      },
      "matmul_backward: dinp must be fp32 on the CPU backend, got bf16");
  expect_error_containing([&] { backward(f32(dx, {R, C}), f32(dw, {OC, C}),
                                         bf16_view(db16, {OC}), DY, X, W); },
                          "matmul_backward: dbias must be fp32 on the CPU backend, got bf16");
  // Nothing was written by the rejected calls.
  for (float v : dw) EXPECT_EQ(v, 0.f);
  for (float v : out) EXPECT_EQ(v, 0.f);
}

}  // namespace
}  // namespace gt::test
