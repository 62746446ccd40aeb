// CpuOps::cast and the host bf16 rule (kernels/core/bf16.hpp): fp32 -> bf16
// rounding on chosen bit patterns (ties to even, overflow to inf, subnormals,
// signed zero, every kind of NaN) and on random bit patterns against an
// independent nearest-value reference; bf16 -> fp32 -> bf16 the identity over
// all 65536 patterns; odd sizes through both the serial and the OpenMP loop;
// same-dtype copies; bad views rejected with a message.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "kernels/core/bf16.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// fp32 -> bf16 bits through CpuOps::cast.
std::vector<uint16_t> cast_to_bf16(Ops& ops, std::vector<float> x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> out(x.size(), 0xDEAD);
  ops.cast(bf16_view(out, {n}), f32(x, {n}));
  return out;
}

// The nearest bf16 to a finite x by comparing distances in double: the two
// bf16 neighbours are x's high half truncated toward zero and the next one
// out; a tie goes to the one with an even last bit. Written from the
// definition, not from the bit trick under test.
uint16_t nearest_bf16_reference(float x) {
  const uint16_t lo = static_cast<uint16_t>(to_bits(x) >> 16);  // toward zero
  const uint16_t hi = static_cast<uint16_t>(lo + 1);             // away from zero
  const double vlo = bf16_to_float(lo);
  // Above the largest finite bf16 the next value out is inf; the rounding
  // boundary sits where the next binade would start, at +-2^128.
  const double vhi = std::isinf(bf16_to_float(hi)) ? std::copysign(std::ldexp(1.0, 128), x)
                                                   : static_cast<double>(bf16_to_float(hi));
  const double dlo = std::fabs(x - vlo), dhi = std::fabs(vhi - x);  // exact in double
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

struct BitCase {
  uint32_t in;
  uint16_t want;
  const char* what;
};

const BitCase kBitCases[] = {
    {0x3F800000, 0x3F80, "1.0 exact"},
    {0x3F807FFF, 0x3F80, "just below the tie: down"},
    {0x3F808000, 0x3F80, "tie, kept half even: stays"},
    {0x3F808001, 0x3F81, "just above the tie: up"},
    {0x3F818000, 0x3F82, "tie, kept half odd: up to even"},
    {0xBF808000, 0xBF80, "negative tie, even: stays"},
    {0xBF818000, 0xBF82, "negative tie, odd: away from zero to even"},
    {0x3FFF8000, 0x4000, "tie carrying into the exponent"},
    {0x00000000, 0x0000, "+0"},
    {0x80000000, 0x8000, "-0 keeps its sign"},
    {0x7F800000, 0x7F80, "+inf"},
    {0xFF800000, 0xFF80, "-inf"},
    {0x7F7F0000, 0x7F7F, "largest finite bf16"},
    {0x7F7F7FFF, 0x7F7F, "just below the overflow boundary"},
    {0x7F7F8000, 0x7F80, "overflow boundary (tie, odd): inf"},
    {0x7F7FFFFF, 0x7F80, "FLT_MAX: inf"},
    {0xFF7FFFFF, 0xFF80, "-FLT_MAX: -inf"},
    {0x00800000, 0x0080, "smallest normal"},
    {0x007FFFFF, 0x0080, "largest subnormal rounds up to the smallest normal"},
    {0x00000001, 0x0000, "smallest subnormal: to +0"},
    {0x80000001, 0x8000, "smallest negative subnormal: to -0"},
    {0x00008000, 0x0000, "subnormal tie, even: to 0"},
    {0x00008001, 0x0001, "subnormal above the tie: smallest bf16 subnormal"},
    {0x00018000, 0x0002, "subnormal tie, odd: up"},
    {0x7FC00000, kBf16CanonicalNaN, "quiet NaN"},
    {0xFFC00000, kBf16CanonicalNaN, "negative quiet NaN: sign dropped"},
    {0x7F800001, kBf16CanonicalNaN, "signalling NaN whose payload truncation would be inf"},
    {0x7FFFFFFF, kBf16CanonicalNaN, "NaN with all payload bits"},
    {0xFF800001, kBf16CanonicalNaN, "negative signalling NaN"},
};

TEST(CpuCast, Fp32ToBf16OnChosenBitPatterns) {
  auto ops = cpu_ops();
  std::vector<float> x;
  for (const BitCase& c : kBitCases) x.push_back(from_bits(c.in));
  const auto got = cast_to_bf16(*ops, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const BitCase& c = kBitCases[i];
    EXPECT_EQ(got[i], c.want) << c.what << ": 0x" << std::hex << c.in;
    EXPECT_EQ(bf16_from_float(from_bits(c.in)), c.want) << c.what << ": 0x" << std::hex << c.in;
  }
  EXPECT_TRUE(std::isnan(bf16_to_float(kBf16CanonicalNaN)));
}

TEST(CpuCast, Fp32ToBf16MatchesTheNearestValueOnRandomBits) {
  auto ops = cpu_ops();
  std::mt19937 rng(2024);
  std::vector<float> x;
  while (x.size() < (1u << 16)) {  // every exponent, both signs, no NaN
    const float f = from_bits(static_cast<uint32_t>(rng()));
    if (!std::isnan(f)) x.push_back(f);
  }
  // Ties are rare among random bits: make one in eight of them a tie.
  for (size_t i = 0; i < x.size(); i += 8)
    if (!std::isinf(x[i])) x[i] = from_bits((to_bits(x[i]) & 0xFFFF0000u) | 0x8000u);
  const auto got = cast_to_bf16(*ops, x);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(x[i])) {
      ASSERT_EQ(got[i], static_cast<uint16_t>(to_bits(x[i]) >> 16));
      continue;
    }
    ASSERT_EQ(got[i], nearest_bf16_reference(x[i]))
        << "i=" << i << " x=" << x[i] << " bits 0x" << std::hex << to_bits(x[i]);
  }
}

TEST(CpuCast, Bf16ToFp32IsExactAndRoundTripsEveryPattern) {
  auto ops = cpu_ops();
  const int64_t n = 1 << 16;  // above kParallelMin: the OpenMP loop
  std::vector<uint16_t> all(n), back(n, 0);
  for (int64_t i = 0; i < n; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(n, -1.f);
  ops->cast(f32(wide, {n}), bf16_view(all, {n}));
  ops->cast(bf16_view(back, {n}), f32(wide, {n}));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(to_bits(wide[i]), static_cast<uint32_t>(i) << 16) << "i=" << i;
    const bool nan = (i & 0x7FFF) > 0x7F80;
    ASSERT_EQ(back[i], nan ? kBf16CanonicalNaN : all[i]) << "i=" << i;
  }
}

TEST(CpuCast, OddSizesAndShapesMatchTheScalarRule) {
  auto ops = cpu_ops();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{(1 << 14) + 3},
                    int64_t{(1 << 16) + 5}}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    auto x = random_vector(n, 40 + n, -300.f, 300.f);
    x[0] = 1e30f;  // large values keep their relative precision
    if (n > 1) x[1] = -2e-38f;
    std::vector<uint16_t> b(n, 0xDEAD);
    std::vector<float> back(n, -1.f);
    ops->cast(bf16_view(b, {n}), f32(x, {n}));
    ops->cast(f32(back, {n}), bf16_view(b, {n}));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(b[i], bf16_from_float(x[i])) << "i=" << i;
      ASSERT_EQ(back[i], bf16_round(x[i])) << "i=" << i;
      // Round to nearest: within half a bf16 ulp (8 significant bits) of a
      // normal x, 2^(exponent - 8).
      if (x[i] != 0.f) {
        ASSERT_LE(std::fabs(back[i] - x[i]), std::ldexp(1.f, std::ilogb(x[i]) - 8)) << "i=" << i;
      }
    }
  }
  // Any shape, as long as both agree: (3, 5) and (2, 3, 4).
  auto x = random_vector(24, 9);
  std::vector<uint16_t> b(24);
  ops->cast(make_view(b.data(), DType::bf16, Device::cpu, {2, 3, 4}), f32(x, {2, 3, 4}));
  for (int i = 0; i < 24; ++i) EXPECT_EQ(b[i], bf16_from_float(x[i]));
  std::vector<float> y(15);
  ops->cast(f32(y, {3, 5}), make_view(b.data(), DType::bf16, Device::cpu, {3, 5}));
  for (int i = 0; i < 15; ++i) EXPECT_EQ(y[i], bf16_to_float(b[i]));
}

TEST(CpuCast, SameDtypeIsACopy) {
  auto ops = cpu_ops();
  auto x = random_vector(33, 5);
  std::vector<float> y(33, 0.f);
  ops->cast(f32(y, {33}), f32(x, {33}));
  EXPECT_EQ(y, x);  // not rounded
  std::vector<uint16_t> a{0x3F80, 0x7FC0, 0xFFC1, 0x0001, 0x8000}, b(5, 0);
  ops->cast(bf16_view(b, {5}), bf16_view(a, {5}));
  EXPECT_EQ(b, a);  // bits kept, NaN payloads included
}

TEST(CpuCast, RejectsBadViews) {
  auto ops = cpu_ops();
  std::vector<float> x(12, 1.f), y(12);
  std::vector<uint16_t> b(12);
  std::vector<int32_t> n(12);
  expect_error_containing([&] { ops->cast(bf16_view(b, {3, 4}), f32(x, {4, 3})); },
                          "cast dst");
  expect_error_containing([&] { ops->cast(bf16_view(b, {12}), i32(n, {12})); },
                          "cast src must be fp32 or bf16, got int32");
  expect_error_containing([&] { ops->cast(i32(n, {12}), f32(x, {12})); },
                          "cast dst must be fp32 or bf16, got int32");
  TensorView dev = bf16_view(b, {12});
  dev.device = Device::cuda;
  expect_error_containing([&] { ops->cast(dev, f32(x, {12})); }, "cast dst must be on the cpu");
  TensorView strided = f32(x, {6});
  strided.strides[0] = 2;
  expect_error_containing([&] { ops->cast(bf16_view(b, {6}), strided); },
                          "cast src must be contiguous");
}

}  // namespace
}  // namespace gt::test
