// The CpuOps fp8 ops (kernels/ops.hpp, "fp8 GEMMs"), each against the CPU
// twin's scalar kernels (kernels/cpu/fp8_kernels.hpp, tested in
// test_fp8.cpp): fp8_matmul's quantising casts and scaled product against
// fp8_quantize / fp8_quantize_rows and fp8_scaled_gemm, transposed operands,
// accumulation, the bias and a bf16 output; fp8_amax over a tensor, its rows
// and its columns (NaN sticking); scales from amaxes; bias_backward against
// matmul_backward's dbias; and the contract's messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cpu/fp8_kernels.hpp"
#include "test_util.hpp"

namespace gt {
namespace {

using test::all_close;
using test::random_vector;

TensorView v(std::vector<float>& x, std::initializer_list<int64_t> shape) {
  return cpu_f32(x.data(), shape);
}
std::vector<float> transpose(const std::vector<float>& m, int64_t rows, int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

// The twin's result: each operand quantised (one scale, or one power-of-two
// scale per row) and fp8_scaled_gemm.
std::vector<float> twin(const std::vector<float>& a, Fp8Format fa, const std::vector<float>& b,
                        Fp8Format fb, int64_t M, int64_t N, int64_t K, bool rowwise) {
  std::vector<uint8_t> qa(M * K), qb(N * K);
  std::vector<float> sa(rowwise ? M : 1), sb(rowwise ? N : 1), c(M * N);
  if (rowwise) {
    cpu::fp8_quantize_rows(a.data(), M, K, fa, qa.data(), sa.data());
    cpu::fp8_quantize_rows(b.data(), N, K, fb, qb.data(), sb.data());
  } else {
    sa[0] = cpu::fp8_scale_from_amax(cpu::fp8_amax(a.data(), M * K), fa, false);
    sb[0] = cpu::fp8_scale_from_amax(cpu::fp8_amax(b.data(), N * K), fb, false);
    cpu::fp8_quantize(a.data(), M * K, sa[0], fa, qa.data());
    cpu::fp8_quantize(b.data(), N * K, sb[0], fb, qb.data());
  }
  cpu::fp8_scaled_gemm(qa.data(), fa, sa.data(), rowwise, qb.data(), fb, sb.data(), rowwise,
                       c.data(), M, N, K);
  return c;
}

class Fp8Ops : public ::testing::TestWithParam<bool> {  // param: rowwise
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops(1);
  // The op's scales for x (rows, cols): amax then scale, as the layers ask.
  std::vector<float> scales(std::vector<float>& x, int64_t rows, int64_t cols, Fp8Format f) {
    const bool rowwise = GetParam();
    std::vector<float> s(rowwise ? rows : 1);
    ops->fp8_amax(v(s, {int64_t(s.size())}), v(x, {rows, cols}),
                  rowwise ? Fp8Reduce::rows : Fp8Reduce::tensor);
    ops->fp8_scale_from_amax(v(s, {int64_t(s.size())}), v(s, {int64_t(s.size())}), f, rowwise);
    return s;
  }
};

TEST_P(Fp8Ops, MatmulIsTheTwinsQuantisedProduct) {
  const int64_t M = 9, N = 7, K = 20;
  const bool rowwise = GetParam();
  const Fp8Format fa = Fp8Format::e5m2, fb = Fp8Format::e4m3;  // a gradient times a weight
  auto a = random_vector(M * K, 1, -3.f, 3.f), b = random_vector(N * K, 2, -0.5f, 0.5f);
  auto sa = scales(a, M, K, fa), sb = scales(b, N, K, fb);
  const std::vector<float> want = twin(a, fa, b, fb, M, N, K, rowwise);
  Fp8MatmulSpec spec;
  spec.a_format = fa;
  spec.b_format = fb;
  const TensorView SA = v(sa, {int64_t(sa.size())}), SB = v(sb, {int64_t(sb.size())});
  std::vector<float> c(M * N);
  ops->fp8_matmul(v(c, {M, N}), v(a, {M, K}), SA, v(b, {N, K}), SB, {}, spec);
  EXPECT_TRUE(all_close(c, want, 1e-5f, 1e-5f));

  // fp8 is not the fp32 product: the quantisation shows.
  std::vector<float> exact(M * N);
  ops->matmul_forward(v(exact, {M, N}), v(a, {M, K}), v(b, {N, K}), {});
  EXPECT_FALSE(all_close(c, exact, 1e-3f, 1e-3f));

  // The same operands stored transposed, read transposed: the same product.
  auto at = transpose(a, M, K), bt = transpose(b, N, K);
  Fp8MatmulSpec tspec = spec;
  tspec.a_transposed = tspec.b_transposed = true;
  std::vector<float> ct(M * N);
  ops->fp8_matmul(v(ct, {M, N}), v(at, {K, M}), SA, v(bt, {K, N}), SB, {}, tspec);
  EXPECT_TRUE(all_close(ct, c, 0.f, 0.f));

  // Accumulated into what is there.
  std::vector<float> acc = random_vector(M * N, 3), acc0 = acc;
  Fp8MatmulSpec aspec = spec;
  aspec.accumulate = true;
  ops->fp8_matmul(v(acc, {M, N}), v(a, {M, K}), SA, v(b, {N, K}), SB, {}, aspec);
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_FLOAT_EQ(acc[i], acc0[i] + c[i]) << i;

  // A bias, and a bf16 output: the fp32 sum plus the bias, rounded once.
  auto bias = random_vector(N, 4);
  std::vector<uint16_t> out16(M * N);
  TensorView o16 = make_view(out16.data(), DType::bf16, Device::cpu, {M, N});
  ops->fp8_matmul(o16, v(a, {M, K}), SA, v(b, {N, K}), SB, v(bias, {N}), spec);
  std::vector<float> with_bias(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) with_bias[i * N + j] = c[i * N + j] + bias[j];
  EXPECT_EQ(out16, test::to_bf16(with_bias));
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8Ops, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "rowwise" : "tensorwise"; });

TEST(Fp8OpsAmax, OverTheTensorItsRowsAndItsColumns) {
  auto ops = make_cpu_ops(1);
  std::vector<float> x = {1, -5, 2,  //
                          -3, 0.5f, 4};
  std::vector<float> t(1), r(2), c(3);
  ops->fp8_amax(v(t, {1}), v(x, {2, 3}), Fp8Reduce::tensor);
  ops->fp8_amax(v(r, {2}), v(x, {2, 3}), Fp8Reduce::rows);
  ops->fp8_amax(v(c, {3}), v(x, {2, 3}), Fp8Reduce::cols);
  EXPECT_EQ(t, (std::vector<float>{5}));
  EXPECT_EQ(r, (std::vector<float>{5, 4}));
  EXPECT_EQ(c, (std::vector<float>{3, 5, 4}));
  // A NaN makes its slices' amax NaN, and only theirs.
  x[4] = std::numeric_limits<float>::quiet_NaN();
  ops->fp8_amax(v(t, {1}), v(x, {2, 3}), Fp8Reduce::tensor);
  ops->fp8_amax(v(r, {2}), v(x, {2, 3}), Fp8Reduce::rows);
  ops->fp8_amax(v(c, {3}), v(x, {2, 3}), Fp8Reduce::cols);
  EXPECT_TRUE(std::isnan(t[0]));
  EXPECT_EQ(r[0], 5.f);
  EXPECT_TRUE(std::isnan(r[1]));
  EXPECT_EQ(c[0], 3.f);
  EXPECT_TRUE(std::isnan(c[1]));
  EXPECT_EQ(c[2], 4.f);
  // bf16 input: the same amaxes of its values.
  std::vector<float> y = {1, -5, 2, -3, 0.5f, 4};
  auto y16 = test::to_bf16(y);
  ops->fp8_amax(v(c, {3}), make_view(y16.data(), DType::bf16, Device::cpu, {2, 3}),
                Fp8Reduce::cols);
  EXPECT_EQ(c, (std::vector<float>{3, 5, 4}));
}

TEST(Fp8OpsScales, AreTheTwinsFormulaPerElement) {
  auto ops = make_cpu_ops(1);
  std::vector<float> amax = {1.f, 3.f, 0.f, 1000.f}, s(4);
  for (bool pow2 : {false, true})
    for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
      ops->fp8_scale_from_amax(v(s, {4}), v(amax, {4}), f, pow2);
      for (size_t i = 0; i < s.size(); ++i)
        EXPECT_EQ(s[i], cpu::fp8_scale_from_amax(amax[i], f, pow2)) << i;
    }
}

TEST(Fp8OpsBias, BiasBackwardIsMatmulBackwardsDbias) {
  auto ops = make_cpu_ops(1);
  const int64_t R = 37, C = 5, OC = 70;
  auto dout = random_vector(R * OC, 5), x = random_vector(R * C, 6), w = random_vector(OC * C, 7);
  std::vector<float> db(OC, 1.f), want(OC, 1.f), dw(OC * C, 0.f);
  ops->bias_backward(v(db, {OC}), v(dout, {R, OC}));
  ops->matmul_backward({}, v(dw, {OC, C}), v(want, {OC}), v(dout, {R, OC}), v(x, {R, C}),
                       v(w, {OC, C}));
  EXPECT_TRUE(all_close(db, want, 1e-5f, 1e-5f));
}

// A weight quantised once (fp8_quantize with its tensorwise scale, as the
// ZeRO-3 fp8 all-gather does on each shard) and handed to fp8_matmul as
// codes gives the product of handing it the floats, bit for bit, read as
// stored and read transposed.
TEST(Fp8OpsCodes, PreQuantisedCodesGiveTheSameProductBitForBit) {
  auto ops = make_cpu_ops(1);
  const int64_t M = 9, N = 7, K = 20;
  auto a = random_vector(M * K, 31), b = random_vector(N * K, 32, -3.f, 3.f);
  std::vector<float> sa(1), sb(1), am(1);
  ops->fp8_amax(v(am, {1}), v(a, {M, K}), Fp8Reduce::tensor);
  ops->fp8_scale_from_amax(v(sa, {1}), v(am, {1}), Fp8Format::e4m3, false);
  ops->fp8_amax(v(am, {1}), v(b, {N, K}), Fp8Reduce::tensor);
  ops->fp8_scale_from_amax(v(sb, {1}), v(am, {1}), Fp8Format::e4m3, false);
  std::vector<uint8_t> codes(static_cast<size_t>(N * K));
  const TensorView q = make_view(codes.data(), DType::u8, Device::cpu, {N, K});
  ops->fp8_quantize(q, v(b, {N * K}), v(sb, {1}), Fp8Format::e4m3);
  std::vector<uint8_t> want(codes.size());
  cpu::fp8_quantize(b.data(), N * K, sb[0], Fp8Format::e4m3, want.data());
  EXPECT_EQ(codes, want);
  for (bool transposed : {false, true}) {
    SCOPED_TRACE(transposed ? "b read transposed" : "b as stored");
    // Read transposed: b (K, N) as stored, the same values.
    std::vector<float> bt = transposed ? transpose(b, N, K) : b;
    std::vector<uint8_t> ct(codes.size());
    ops->fp8_quantize(make_view(ct.data(), DType::u8, Device::cpu, {static_cast<int64_t>(ct.size())}),
                      v(bt, {N * K}), v(sb, {1}), Fp8Format::e4m3);
    Fp8MatmulSpec spec;
    spec.b_transposed = transposed;
    const std::initializer_list<int64_t> b_shape = {transposed ? K : N, transposed ? N : K};
    std::vector<float> from_floats(M * N), from_codes(M * N);
    ops->fp8_matmul(v(from_floats, {M, N}), v(a, {M, K}), v(sa, {1}), v(bt, b_shape), v(sb, {1}),
                    {}, spec);
    ops->fp8_matmul(v(from_codes, {M, N}), v(a, {M, K}), v(sa, {1}),
                    make_view(ct.data(), DType::u8, Device::cpu, b_shape), v(sb, {1}), {}, spec);
    EXPECT_EQ(from_codes, from_floats);
  }
}

// The producers' row amaxes (Ops: "Row amaxes for an fp8 GEMM's input"):
// max |out| per row as stored (bf16: of the rounded values), NaN sticking
// to its row, the outputs unchanged by taking them. The forward producers
// (norms, SwiGLU, GELU), then the gradients' (rmsnorm_backward's
// accumulated dinp, swiglu_backward's dgu), then add_rmsnorm_forward.
TEST(Fp8ProducerAmax, EachProducerTakesItsOutputsRowAmaxesAsStored) {
  auto ops = make_cpu_ops(1);
  const int64_t R = 9, C = 24;
  for (DType t : {DType::f32, DType::bf16})
    for (int op = 0; op < 8; ++op) {
      SCOPED_TRACE(detail::concat("op ", op, " ", dtype_name(t)));
      // swiglu reads [gate | up]; its backward writes dgu (R, 2C).
      const int64_t in_cols = op == 3 || op == 6 ? 2 * C : C, out_cols = op == 6 ? 2 * C : C;
      // rmsnorm_backward's dinp is fp32 and accumulates.
      const DType out_t = op == 5 ? DType::f32 : t;
      std::vector<float> x = random_vector(R * in_cols, 30 + op, -3.f, 3.f);
      x[static_cast<size_t>(4 * in_cols + 1)] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> x2 = random_vector(R * C, 40), w = random_vector(C, 41, 0.5f, 1.5f);
      std::vector<float> bias = random_vector(C, 42), mean(R), rstd(R);
      std::vector<uint16_t> x16 = test::to_bf16(x), x216 = test::to_bf16(x2);
      auto as = [&](std::vector<float>& f, std::vector<uint16_t>& h, int64_t cols) {
        return t == DType::f32 ? v(f, {R, cols})
                               : make_view(h.data(), DType::bf16, Device::cpu, {R, cols});
      };
      std::vector<float> out(R * out_cols, 0.5f), plain(R * out_cols, 0.5f), res(R * C);
      std::vector<float> amax(R, -1.f), own(R, -1.f), dw(C);
      std::vector<uint16_t> out16(R * out_cols), plain16(R * out_cols), res16(R * C);
      auto run = [&](TensorView o, TensorView a) {
        const TensorView in = as(x, x16, in_cols), in2 = as(x2, x216, C), r = as(res, res16, C);
        switch (op) {
          case 0: return ops->rmsnorm_forward(o, v(rstd, {R}), in, v(w, {C}), 1e-5f, a);
          case 1: return ops->layernorm_forward(o, v(mean, {R}), v(rstd, {R}), in, v(w, {C}),
                                                v(bias, {C}), a);
          case 2:
            return ops->add_layernorm_forward(r, o, v(mean, {R}), v(rstd, {R}), in, in2,
                                              v(w, {C}), v(bias, {C}), a);
          case 3: return ops->swiglu_forward(o, in, a);
          case 4: return ops->gelu_forward(o, in, a);
          case 5:  // d(out) = in2, the norm's input x
            return ops->rmsnorm_backward(o, v(dw, {C}), in2, in, v(w, {C}), v(rstd, {R}), {}, a);
          case 6:  // d(swiglu out) = in2
            return ops->swiglu_backward(o, in2, in, a);
          default:
            return ops->add_rmsnorm_forward(r, o, v(rstd, {R}), in, in2, v(w, {C}), 1e-5f, a);
        }
      };
      auto out_view = [&](std::vector<float>& f, std::vector<uint16_t>& h) {
        return out_t == DType::f32 ? v(f, {R, out_cols})
                                   : make_view(h.data(), DType::bf16, Device::cpu, {R, out_cols});
      };
      std::fill(rstd.begin(), rstd.end(), 0.7f);
      run(out_view(out, out16), v(amax, {R}));
      run(out_view(plain, plain16), {});
      ops->fp8_amax(v(own, {R}), out_view(out, out16), Fp8Reduce::rows);
      // Bit for bit (memcmp: a NaN is equal to itself here).
      EXPECT_TRUE(out_t == DType::f32
                      ? std::memcmp(out.data(), plain.data(), out.size() * sizeof(float)) == 0
                      : out16 == plain16);
      for (int64_t r = 0; r < R; ++r) {
        if (r == 4) {
          EXPECT_TRUE(std::isnan(amax[static_cast<size_t>(r)]));
        } else {
          EXPECT_EQ(amax[static_cast<size_t>(r)], own[static_cast<size_t>(r)]) << r;
          EXPECT_GT(amax[static_cast<size_t>(r)], 0.f) << r;
        }
      }
    }
  // A wrong shape or dtype is named; GELU needs rows to take them of.
  std::vector<float> a(6 * 4), o(6 * 4), s5(5), s6(6);
  EXPECT_NE(test::error_message([&] { ops->gelu_forward(v(o, {6, 4}), v(a, {6, 4}), v(s5, {5})); })
                .find("row_amax must be (6), got (5)"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] { ops->gelu_forward(v(o, {24}), v(a, {24}), v(s6, {6})); })
                .find("out (with row_amax) must be (R, C), got (24)"),
            std::string::npos);
}

TEST(Fp8OpsContract, NamesWhatIsWrong) {
  auto ops = make_cpu_ops(1);
  std::vector<float> a(6 * 4), b(5 * 3), c(6 * 5), s1(1), s5(5), s6(6), s2(2);
  auto expect_error = [](auto&& f, const char* text) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one naming " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  expect_error([&] { ops->fp8_matmul(v(c, {6, 5}), v(a, {6, 4}), v(s1, {1}), v(b, {5, 3}),
                                     v(s1, {1}), {}, {}); },
               "contract over different lengths 4 and 3");
  std::vector<float> b4(5 * 4);
  expect_error([&] { ops->fp8_matmul(v(c, {6, 5}), v(a, {6, 4}), v(s2, {2}), v(b4, {5, 4}),
                                     v(s1, {1}), {}, {}); },
               "a_scale must be (1) (tensorwise) or (6) (one per row), got (2)");
  Fp8MatmulSpec acc;
  acc.accumulate = true;
  expect_error([&] { ops->fp8_matmul(v(c, {6, 5}), v(a, {6, 4}), v(s6, {6}), v(b4, {5, 4}),
                                     v(s5, {5}), v(s5, {5}), acc); },
               "an accumulated out takes no bias");
  expect_error([&] { ops->fp8_amax(v(s2, {2}), v(a, {6, 4}), Fp8Reduce::rows); },
               "amax must be (6)");
  expect_error([&] { ops->fp8_quantize(v(c, {30}), v(c, {30}), v(s1, {1}), Fp8Format::e4m3); },
               "q must be fp8 codes (u8), got fp32");
  std::vector<uint8_t> q(7);
  expect_error([&] {
    ops->fp8_quantize(make_view(q.data(), DType::u8, Device::cpu, {7}), v(c, {30}), v(s1, {1}),
                      Fp8Format::e4m3);
  }, "q (7) and x (30) differ in size");
}

}  // namespace
}  // namespace gt
