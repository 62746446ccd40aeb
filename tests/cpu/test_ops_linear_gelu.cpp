// The GELU-fused linear layers (Ops::matmul_gelu_forward,
// Ops::matmul_backward_dgelu) on the CPU backend. In fp32 they are bit for
// bit the ops they fuse (matmul then gelu; matmul_backward then
// gelu_backward), whose finite-difference checks are in test_ops_matmul.cpp
// and test_ops_gelu.cpp. In bf16 the product is not rounded before GELU and
// each output is rounded once, as cuBLASLt's epilogues do: checked against
// the fp32 ops run on the fp32 product.
#include "kernels/core/bf16.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

constexpr int64_t R = 9, C = 24, OC = 40;

TEST(CpuLinearGelu, Fp32IsMatmulThenGeluBitForBit) {
  auto ops = cpu_ops();
  auto x = random_vector(R * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3);
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    const TensorView bias = with_bias ? f32(b, {OC}) : TensorView{};
    std::vector<float> pre(R * OC), out(R * OC), want_pre(R * OC), want_out(R * OC);
    ops->matmul_gelu_forward(f32(out, {R, OC}), f32(pre, {R, OC}), f32(x, {R, C}), f32(w, {OC, C}),
                             bias);
    ops->matmul_forward(f32(want_pre, {R, OC}), f32(x, {R, C}), f32(w, {OC, C}), bias);
    ops->gelu_forward(f32(want_out, {R, OC}), f32(want_pre, {R, OC}));
    EXPECT_EQ(pre, want_pre);
    EXPECT_EQ(out, want_out);
  }
}

TEST(CpuLinearGelu, Fp32BackwardIsMatmulBackwardThenGeluBackwardBitForBit) {
  auto ops = cpu_ops();
  // The second linear layer: inp (R, C) = gelu(pre), weight (OC, C).
  auto pre = random_vector(R * C, 11, -3.f, 3.f), dout = random_vector(R * OC, 12),
       w = random_vector(OC * C, 13);
  std::vector<float> inp(R * C);
  ops->gelu_forward(f32(inp, {R, C}), f32(pre, {R, C}));
  std::vector<float> dx(R * C, 7.f), dw(OC * C, 0.5f), db(OC, -0.5f);
  std::vector<float> want_dx(R * C), dgelu_out(R * C), want_dw(dw), want_db(db);
  ops->matmul_backward_dgelu(f32(dx, {R, C}), f32(dw, {OC, C}), f32(db, {OC}), f32(dout, {R, OC}),
                             f32(inp, {R, C}), f32(w, {OC, C}), f32(pre, {R, C}));
  ops->matmul_backward(f32(dgelu_out, {R, C}), f32(want_dw, {OC, C}), f32(want_db, {OC}),
                       f32(dout, {R, OC}), f32(inp, {R, C}), f32(w, {OC, C}));
  ops->gelu_backward(f32(want_dx, {R, C}), f32(pre, {R, C}), f32(dgelu_out, {R, C}));
  EXPECT_EQ(dx, want_dx);
  EXPECT_EQ(dw, want_dw);  // accumulated onto 0.5 like matmul_backward's
  EXPECT_EQ(db, want_db);
}

TEST(CpuLinearGelu, Bf16RoundsEachOutputOnceFromTheFp32Product) {
  auto ops = cpu_ops();
  const auto x16 = to_bf16(random_vector(R * C, 21)), w16 = to_bf16(random_vector(OC * C, 22));
  auto x = from_bf16(x16), w = from_bf16(w16), b = random_vector(OC, 23);
  std::vector<uint16_t> xb = x16, wb = w16, pre16(R * OC), out16(R * OC);
  ops->matmul_gelu_forward(bf16_view(out16, {R, OC}), bf16_view(pre16, {R, OC}),
                           bf16_view(xb, {R, C}), bf16_view(wb, {OC, C}), f32(b, {OC}));
  std::vector<float> pre32(R * OC), out32(R * OC);
  ops->matmul_forward(f32(pre32, {R, OC}), f32(x, {R, C}), f32(w, {OC, C}), f32(b, {OC}));
  ops->gelu_forward(f32(out32, {R, OC}), f32(pre32, {R, OC}));  // gelu of the unrounded pre
  EXPECT_EQ(pre16, to_bf16(pre32));
  EXPECT_EQ(out16, to_bf16(out32));

  // Backward: dinp = round((dout @ W) * gelu'(pre)) with pre the stored bf16.
  auto dout16 = to_bf16(random_vector(R * OC, 24));
  auto pre_in16 = to_bf16(random_vector(R * C, 25, -3.f, 3.f));
  std::vector<uint16_t> dx16(R * C), inp16 = x16, w2 = to_bf16(random_vector(OC * C, 26));
  std::vector<float> dw(OC * C, 0.f), db(OC, 0.f), want_dw(dw), want_db(db);
  ops->matmul_backward_dgelu(bf16_view(dx16, {R, C}), f32(dw, {OC, C}), f32(db, {OC}),
                             bf16_view(dout16, {R, OC}), bf16_view(inp16, {R, C}),
                             bf16_view(w2, {OC, C}), bf16_view(pre_in16, {R, C}));
  std::vector<float> g(R * C), want(R * C), pre_in = from_bf16(pre_in16);
  ops->matmul_backward(f32(g, {R, C}), f32(want_dw, {OC, C}), f32(want_db, {OC}),
                       bf16_view(dout16, {R, OC}), bf16_view(inp16, {R, C}),
                       bf16_view(w2, {OC, C}));
  ops->gelu_backward(f32(want, {R, C}), f32(pre_in, {R, C}), f32(g, {R, C}));
  EXPECT_EQ(dx16, to_bf16(want));
  EXPECT_EQ(dw, want_dw);
  EXPECT_EQ(db, want_db);
}

TEST(CpuLinearGelu, RejectsAPreOfAnotherDtypeOrShapeAndAMissingDinp) {
  auto ops = cpu_ops();
  std::vector<float> x(R * C), w(OC * C), out(R * OC), pre(R * OC), dout(R * OC), dw(OC * C);
  std::vector<uint16_t> pre16(R * OC);
  expect_error_containing(
      [&] {
        ops->matmul_gelu_forward(f32(out, {R, OC}), bf16_view(pre16, {R, OC}), f32(x, {R, C}),
                                 f32(w, {OC, C}), {});
      },
      "matmul_gelu_forward pre (out's dtype) must be fp32, got bf16");
  expect_error_containing(
      [&] {
        ops->matmul_gelu_forward(f32(out, {R, OC}), f32(pre, {OC, R}), f32(x, {R, C}),
                                 f32(w, {OC, C}), {});
      },
      "must have the same shape");
  expect_error_containing(
      [&] {
        ops->matmul_backward_dgelu({}, f32(dw, {OC, C}), {}, f32(dout, {R, OC}), f32(x, {R, C}),
                                   f32(w, {OC, C}), f32(x, {R, C}));
      },
      "matmul_backward_dgelu: dinp is required");
}

}  // namespace
}  // namespace gt::test
