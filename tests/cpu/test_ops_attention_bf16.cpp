// CPU attention_forward/backward on bf16 views (qkv, out, dout, dqkv bf16;
// saved and scratch fp32): exactly the fp32 attention of the bf16 values,
// rounded to nearest even, bit for bit, over odd shapes (T = 1, 7, 37 and
// 131 across the 128-row block, head sizes 8, 16, 24, B = 1 and 3) on one and
// two threads; every bf16 output written; and the dtype mixes it rejects.
#include <cstdint>
#include <cstring>

#include "kernels/core/bf16.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

// Bit patterns, so -0 vs +0 and NaN would not slip through a float ==.
std::vector<uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

struct Shape {
  int64_t B, T, NH, hs;
};
// T = 131 crosses the CPU kernel's 128-row block; T = 1 is a single key.
const Shape kShapes[] = {
    {1, 7, 2, 8}, {3, 37, 3, 16}, {1, 131, 2, 24}, {3, 1, 1, 8}, {3, 20, 1, 24}};
const int kThreadCounts[] = {1, 2};

// One random case: qkv and dout as bf16 bits and as the fp32 values of those bits.
struct Bf16Case {
  int64_t B, T, NH, C;
  std::vector<uint16_t> qkv16, dout16;
  std::vector<float> qkv, dout;
  Bf16Case(const Shape& s, uint64_t seed)
      : B(s.B),
        T(s.T),
        NH(s.NH),
        C(s.NH * s.hs),
        qkv16(to_bf16(random_vector(B * T * 3 * C, seed, -2.f, 2.f))),
        dout16(to_bf16(random_vector(B * T * C, seed + 1))),
        qkv(from_bf16(qkv16)),
        dout(from_bf16(dout16)) {}
  int64_t att_elems() const { return B * NH * T * T; }
};

std::string describe(int threads, const Shape& s) {
  return "threads=" + std::to_string(threads) + " B=" + std::to_string(s.B) +
         " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
         " hs=" + std::to_string(s.hs);
}

TEST(CpuAttentionBf16, ForwardIsTheRoundedFp32ForwardOfTheRoundedQkv) {
  for (int threads : kThreadCounts)
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(describe(threads, s));
      auto ops = cpu_ops(threads);
      Bf16Case k(s, 500);
      const int64_t B = k.B, T = k.T, C = k.C, nh = k.NH;
      std::vector<float> want_out(B * T * C), want_att(k.att_elems(), 42.f);
      ops->attention_forward(f32(want_out, {B, T, C}), f32(want_att, {k.att_elems()}),
                             f32(k.qkv, {B, T, 3 * C}), static_cast<int>(nh));

      std::vector<uint16_t> out16(B * T * C, kBf16CanonicalNaN);  // every entry must be written
      std::vector<float> att(k.att_elems(), -42.f);
      ops->attention_forward(bf16_view(out16, {B, T, C}), f32(att, {k.att_elems()}),
                             bf16_view(k.qkv16, {B, T, 3 * C}), static_cast<int>(nh));
      EXPECT_EQ(out16, to_bf16(want_out)) << "out";
      EXPECT_EQ(float_bits(att), float_bits(want_att)) << "saved probabilities";
    }
  cpu_ops();
}

TEST(CpuAttentionBf16, BackwardIsTheRoundedFp32BackwardOfTheRoundedInputs) {
  for (int threads : kThreadCounts)
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(describe(threads, s));
      auto ops = cpu_ops(threads);
      Bf16Case k(s, 600);
      const int64_t B = k.B, T = k.T, C = k.C, n_att = k.att_elems();
      const int nh = static_cast<int>(k.NH);

      // fp32 reference on the bf16 values.
      std::vector<float> out(B * T * C), att(n_att), scratch(n_att, 5.f);
      ops->attention_forward(f32(out, {B, T, C}), f32(att, {n_att}), f32(k.qkv, {B, T, 3 * C}), nh);
      std::vector<float> want_dqkv(B * T * 3 * C, 77.f);
      ops->attention_backward(f32(want_dqkv, {B, T, 3 * C}), f32(scratch, {n_att}),
                              f32(k.dout, {B, T, C}), f32(k.qkv, {B, T, 3 * C}),
                              f32(out, {B, T, C}), f32(att, {n_att}), nh);

      // bf16 forward then backward, as the model will chain them.
      std::vector<uint16_t> out16(B * T * C);
      std::vector<float> att16(n_att), scratch16(n_att, -5.f);
      ops->attention_forward(bf16_view(out16, {B, T, C}), f32(att16, {n_att}),
                             bf16_view(k.qkv16, {B, T, 3 * C}), nh);
      std::vector<uint16_t> dqkv16(B * T * 3 * C, kBf16CanonicalNaN);  // assigned: all written
      ops->attention_backward(bf16_view(dqkv16, {B, T, 3 * C}), f32(scratch16, {n_att}),
                              bf16_view(k.dout16, {B, T, C}), bf16_view(k.qkv16, {B, T, 3 * C}),
                              bf16_view(out16, {B, T, C}), f32(att16, {n_att}), nh);
      EXPECT_EQ(dqkv16, to_bf16(want_dqkv)) << "dqkv";
    }
  cpu_ops();
}

TEST(CpuAttentionBf16, Bf16ResultsAreCloseToTheFp32OnesOnTheSameInputs) {
  // The rounding is the only difference: out and dqkv within half a bf16 ulp
  // (the unit roundoff 2^-8, relative; bf16 keeps 8 significant bits) of the
  // fp32 results, so nothing but the final rounding was lost.
  auto ops = cpu_ops();
  const Shape s{2, 33, 2, 16};
  Bf16Case k(s, 700);
  const int64_t B = k.B, T = k.T, C = k.C, n_att = k.att_elems();
  const int nh = static_cast<int>(k.NH);
  std::vector<float> out(B * T * C), att(n_att), scratch(n_att), dqkv(B * T * 3 * C);
  ops->attention_forward(f32(out, {B, T, C}), f32(att, {n_att}), f32(k.qkv, {B, T, 3 * C}), nh);
  ops->attention_backward(f32(dqkv, {B, T, 3 * C}), f32(scratch, {n_att}), f32(k.dout, {B, T, C}),
                          f32(k.qkv, {B, T, 3 * C}), f32(out, {B, T, C}), f32(att, {n_att}), nh);
  std::vector<uint16_t> out16(B * T * C), dqkv16(B * T * 3 * C);
  ops->attention_forward(bf16_view(out16, {B, T, C}), f32(att, {n_att}),
                         bf16_view(k.qkv16, {B, T, 3 * C}), nh);
  ops->attention_backward(bf16_view(dqkv16, {B, T, 3 * C}), f32(scratch, {n_att}),
                          bf16_view(k.dout16, {B, T, C}), bf16_view(k.qkv16, {B, T, 3 * C}),
                          bf16_view(out16, {B, T, C}), f32(att, {n_att}), nh);
  EXPECT_TRUE(all_close(from_bf16(out16), out, 0.f, 1.f / 256)) << "out";
  EXPECT_TRUE(all_close(from_bf16(dqkv16), dqkv, 0.f, 1.f / 256)) << "dqkv";
}

TEST(CpuAttentionBf16, RejectsMixedDtypesNamingOpAndTensor) {
  auto ops = cpu_ops();
  const int64_t B = 1, T = 3, C = 8, n_att = 2 * T * T;
  const int nh = 2;
  std::vector<float> qkv(B * T * 3 * C, 0.5f), out(B * T * C), dout(B * T * C), dqkv(B * T * 3 * C),
      att(n_att), scratch(n_att);
  std::vector<uint16_t> qkv16(qkv.size()), out16(out.size()), dout16(dout.size()),
      dqkv16(dqkv.size()), att16(n_att), scratch16(n_att);
  std::vector<int32_t> qkv_i(qkv.size());
  const auto QKV = [&] { return f32(qkv, {B, T, 3 * C}); };
  const auto QKV16 = [&] { return bf16_view(qkv16, {B, T, 3 * C}); };
  const auto OUT = [&] { return f32(out, {B, T, C}); };
  const auto OUT16 = [&] { return bf16_view(out16, {B, T, C}); };
  const auto DOUT = [&] { return f32(dout, {B, T, C}); };
  const auto DOUT16 = [&] { return bf16_view(dout16, {B, T, C}); };
  const auto DQKV = [&] { return f32(dqkv, {B, T, 3 * C}); };
  const auto DQKV16 = [&] { return bf16_view(dqkv16, {B, T, 3 * C}); };
  const auto ATT = [&] { return f32(att, {n_att}); };
  const auto SCRATCH = [&] { return f32(scratch, {n_att}); };

  // forward
  expect_error_containing([&] { ops->attention_forward(OUT(), ATT(), QKV16(), nh); },
                          "attention_forward: out is fp32 but qkv is bf16");
  expect_error_containing([&] { ops->attention_forward(OUT16(), ATT(), QKV(), nh); },
                          "attention_forward: out is bf16 but qkv is fp32");
  expect_error_containing(
      [&] { ops->attention_forward(OUT16(), bf16_view(att16, {n_att}), QKV16(), nh); },
      "attention_forward: saved must be fp32");
  expect_error_containing(
      [&] {
        ops->attention_forward(OUT(), ATT(), i32(qkv_i, {B, T, 3 * C}), nh);
      },
      "attention_forward: qkv must be fp32 or bf16, got int32");

  // backward: dqkv, dout, qkv and out share qkv's dtype; saved and scratch fp32
  expect_error_containing(
      [&] { ops->attention_backward(DQKV(), SCRATCH(), DOUT16(), QKV16(), OUT16(), ATT(), nh); },
      "attention_backward: dqkv is fp32 but qkv is bf16");
  expect_error_containing(
      [&] { ops->attention_backward(DQKV16(), SCRATCH(), DOUT(), QKV16(), OUT16(), ATT(), nh); },
      "attention_backward: dout is fp32 but qkv is bf16");
  expect_error_containing(
      [&] { ops->attention_backward(DQKV16(), SCRATCH(), DOUT16(), QKV16(), OUT(), ATT(), nh); },
      "attention_backward: out is fp32 but qkv is bf16");
  expect_error_containing(
      [&] { ops->attention_backward(DQKV(), SCRATCH(), DOUT(), QKV16(), OUT(), ATT(), nh); },
      "attention_backward: dqkv is fp32 but qkv is bf16");
  expect_error_containing(
      [&] { ops->attention_backward(DQKV16(), SCRATCH(), DOUT16(), QKV(), OUT16(), ATT(), nh); },
      "attention_backward: dqkv is bf16 but qkv is fp32");
  expect_error_containing(
      [&] { ops->attention_backward(DQKV(), SCRATCH(), DOUT(), QKV(), OUT16(), ATT(), nh); },
      "attention_backward: out is bf16 but qkv is fp32");
  expect_error_containing(
      [&] {
        ops->attention_backward(DQKV16(), bf16_view(scratch16, {n_att}), DOUT16(), QKV16(), OUT16(),
                                ATT(), nh);
      },
      "attention_backward: scratch must be fp32");
  expect_error_containing(
      [&] {
        ops->attention_backward(DQKV16(), SCRATCH(), DOUT16(), QKV16(), OUT16(),
                                bf16_view(att16, {n_att}), nh);
      },
      "attention_backward: saved must be fp32");

  // Nothing was written by the rejected calls.
  for (float v : out) EXPECT_EQ(v, 0.f);
  for (uint16_t v : out16) EXPECT_EQ(v, 0u);
  for (float v : dqkv) EXPECT_EQ(v, 0.f);
  for (uint16_t v : dqkv16) EXPECT_EQ(v, 0u);
  for (float v : att) EXPECT_EQ(v, 0.f);
}

}  // namespace
}  // namespace gt::test
