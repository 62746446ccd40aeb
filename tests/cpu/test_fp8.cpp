// fp8 conversion (kernels/core/fp8.hpp): every one of the 256 codes of each
// format decoded against values derived by hand from the format's fields,
// the hard encodings named one by one (ties to even, subnormals, signed
// zero, the band between the largest finite value and the next step,
// overflow, infinities and NaN in both saturation modes), and encoding
// checked against a brute-force nearest-code search over every midpoint
// between neighbouring codes and a sweep of random floats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/core/fp8.hpp"
#include "kernels/cpu/fp8_kernels.hpp"

namespace gt {
namespace {

constexpr Fp8Format kE4 = Fp8Format::e4m3;
constexpr Fp8Format kE5 = Fp8Format::e5m2;
constexpr Fp8Saturation kSat = Fp8Saturation::finite;
constexpr Fp8Saturation kNoSat = Fp8Saturation::none;

// The value of a code from its fields, written out per format as a reader
// of the OCP spec would (independent of fp8_to_float's shared arithmetic).
double e4m3_by_hand(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

double e5m2_by_hand(int code) {
  const int s = code >> 7, e = (code >> 2) & 31, m = code & 3;
  if (e == 31) return m == 0 ? (s ? -INFINITY : INFINITY) : std::nan("");
  const double mag =
      e == 0 ? (m / 4.0) * std::pow(2.0, -14) : (1.0 + m / 4.0) * std::pow(2.0, e - 15);
  return s ? -mag : mag;
}

TEST(Fp8, DecodesEveryCodeAsItsFieldsSay) {
  for (int c = 0; c < 256; ++c) {
    const double e4 = e4m3_by_hand(c), e5 = e5m2_by_hand(c);
    const float g4 = fp8_to_float(static_cast<uint8_t>(c), kE4);
    const float g5 = fp8_to_float(static_cast<uint8_t>(c), kE5);
    if (std::isnan(e4)) EXPECT_TRUE(std::isnan(g4)) << "e4m3 code " << c;
    else EXPECT_EQ(static_cast<double>(g4), e4) << "e4m3 code " << c;
    if (std::isnan(e5)) EXPECT_TRUE(std::isnan(g5)) << "e5m2 code " << c;
    else EXPECT_EQ(static_cast<double>(g5), e5) << "e5m2 code " << c;
  }
  // Landmarks, written as numbers.
  EXPECT_EQ(fp8_to_float(0x38, kE4), 1.0f);
  EXPECT_EQ(fp8_to_float(0x7E, kE4), 448.0f);
  EXPECT_EQ(fp8_to_float(0xFE, kE4), -448.0f);
  EXPECT_EQ(fp8_to_float(0x01, kE4), 0.001953125f);  // 2^-9, the smallest subnormal
  EXPECT_EQ(fp8_to_float(0x08, kE4), 0.015625f);     // 2^-6, the smallest normal
  EXPECT_TRUE(std::isnan(fp8_to_float(0x7F, kE4)));
  EXPECT_TRUE(std::isnan(fp8_to_float(0xFF, kE4)));
  EXPECT_EQ(fp8_to_float(0x3C, kE5), 1.0f);
  EXPECT_EQ(fp8_to_float(0x7B, kE5), 57344.0f);
  EXPECT_EQ(fp8_to_float(0x01, kE5), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_to_float(0x04, kE5), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_to_float(0x7C, kE5), INFINITY);
  EXPECT_EQ(fp8_to_float(0xFC, kE5), -INFINITY);
  for (uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF})
    EXPECT_TRUE(std::isnan(fp8_to_float(c, kE5))) << int(c);
  // Signed zero.
  EXPECT_FALSE(std::signbit(fp8_to_float(0x00, kE4)));
  EXPECT_TRUE(std::signbit(fp8_to_float(0x80, kE4)));
  EXPECT_TRUE(std::signbit(fp8_to_float(0x80, kE5)));
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (Fp8Format f : {kE4, kE5})
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_to_float(static_cast<uint8_t>(c), f);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(fp8_from_float(v, f, kSat), c) << (f == kE4 ? "e4m3 " : "e5m2 ") << c;
      EXPECT_EQ(fp8_from_float(v, f, kNoSat), c) << (f == kE4 ? "e4m3 " : "e5m2 ") << c;
    }
}

TEST(Fp8, HardEncodings) {
  // Ties to even: 1 + 1/16 lies between 1 (mantissa 000) and 1.125 (001).
  EXPECT_EQ(fp8_from_float(1.0625f, kE4, kSat), 0x38);
  EXPECT_EQ(fp8_from_float(1.1875f, kE4, kSat), 0x3A);  // between 001 and 010: to 010
  EXPECT_EQ(fp8_from_float(1.125f, kE5, kSat), 0x3C);   // between 1 and 1.25: to 1
  // Subnormal ties: half the smallest subnormal goes to (signed) zero;
  // 1.5 of it to 2 of it.
  EXPECT_EQ(fp8_from_float(std::ldexp(1.f, -10), kE4, kSat), 0x00);
  EXPECT_EQ(fp8_from_float(-std::ldexp(1.f, -10), kE4, kSat), 0x80);
  EXPECT_EQ(fp8_from_float(3 * std::ldexp(1.f, -10), kE4, kSat), 0x02);
  EXPECT_EQ(fp8_from_float(std::ldexp(1.f, -17), kE5, kSat), 0x00);
  // Just below the smallest normal rounds up into it: 2^-6 - 2^-12.
  EXPECT_EQ(fp8_from_float(std::ldexp(1.f, -6) - std::ldexp(1.f, -12), kE4, kSat), 0x08);
  // Tiny values and signed zeros.
  EXPECT_EQ(fp8_from_float(1e-30f, kE4, kSat), 0x00);
  EXPECT_EQ(fp8_from_float(-0.0f, kE4, kSat), 0x80);
  EXPECT_EQ(fp8_from_float(-0.0f, kE5, kNoSat), 0x80);

  // Between e4m3's largest finite value (448) and the next step (480, whose
  // code would be the NaN): up to 464 rounds to 448 (the tie to its even
  // mantissa), beyond it is overflow: 448 saturated, NaN unsaturated.
  EXPECT_EQ(fp8_from_float(449.f, kE4, kNoSat), 0x7E);
  EXPECT_EQ(fp8_from_float(464.f, kE4, kNoSat), 0x7E);
  EXPECT_EQ(fp8_from_float(464.25f, kE4, kNoSat), 0x7F);
  EXPECT_EQ(fp8_from_float(464.25f, kE4, kSat), 0x7E);
  EXPECT_EQ(fp8_from_float(1e6f, kE4, kSat), 0x7E);
  EXPECT_EQ(fp8_from_float(-1e6f, kE4, kSat), 0xFE);
  EXPECT_EQ(fp8_from_float(-1e6f, kE4, kNoSat), 0xFF);
  // e5m2: 57344 + half its step (4096) is a tie whose even neighbour is
  // 65536, past the largest finite value: infinity unsaturated.
  EXPECT_EQ(fp8_from_float(61439.f, kE5, kNoSat), 0x7B);
  EXPECT_EQ(fp8_from_float(61440.f, kE5, kNoSat), 0x7C);
  EXPECT_EQ(fp8_from_float(61440.f, kE5, kSat), 0x7B);
  EXPECT_EQ(fp8_from_float(-1e9f, kE5, kNoSat), 0xFC);
  EXPECT_EQ(fp8_from_float(-1e9f, kE5, kSat), 0xFB);

  // Infinities: e4m3 has none (NaN unsaturated, +-448 saturated); e5m2
  // keeps them unsaturated.
  EXPECT_EQ(fp8_from_float(INFINITY, kE4, kNoSat), 0x7F);
  EXPECT_EQ(fp8_from_float(-INFINITY, kE4, kNoSat), 0xFF);
  EXPECT_EQ(fp8_from_float(INFINITY, kE4, kSat), 0x7E);
  EXPECT_EQ(fp8_from_float(-INFINITY, kE4, kSat), 0xFE);
  EXPECT_EQ(fp8_from_float(INFINITY, kE5, kNoSat), 0x7C);
  EXPECT_EQ(fp8_from_float(-INFINITY, kE5, kNoSat), 0xFC);
  EXPECT_EQ(fp8_from_float(INFINITY, kE5, kSat), 0x7B);
  // NaN stays NaN in both modes, as the canonical 0x7F whatever its sign
  // (CUDA's rule; CudaFp8.ConversionIsTheCpuRuleOnEveryHardValue).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Fp8Saturation s : {kSat, kNoSat}) {
    EXPECT_EQ(fp8_from_float(nan, kE4, s), 0x7F);
    EXPECT_EQ(fp8_from_float(-nan, kE4, s), 0x7F);
    EXPECT_EQ(fp8_from_float(nan, kE5, s), 0x7F);
    EXPECT_EQ(fp8_from_float(-nan, kE5, s), 0x7F);
  }
}

// The nearest finite code by search, ties to the even code (its last
// mantissa bit 0); past the largest finite value: saturated.
uint8_t nearest_by_search(float x, Fp8Format f) {
  int best = -1;
  double best_d = INFINITY;
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_to_float(static_cast<uint8_t>(c), f);
    if (!std::isfinite(v) || std::signbit(v) != std::signbit(x)) continue;
    const double d = std::fabs(static_cast<double>(x) - v);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8, EncodingIsTheNearestCodeTiesToEven) {
  std::mt19937 rng(11);
  for (Fp8Format f : {kE4, kE5}) {
    const float max = fp8_spec(f).max_finite;
    std::vector<float> xs;
    // Every midpoint between neighbouring positive codes, and a float
    // either side of it, both signs.
    for (int c = 0; c + 1 < 256; ++c) {
      const float a = fp8_to_float(static_cast<uint8_t>(c), f);
      const float b = fp8_to_float(static_cast<uint8_t>(c + 1), f);
      if (!std::isfinite(a) || !std::isfinite(b) || a < 0 || b <= a) continue;
      const float mid = (a + b) / 2;  // exact: fp8 values need few bits
      for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)})
        xs.insert(xs.end(), {x, -x});
    }
    // Random magnitudes over the whole range, log-uniform.
    std::uniform_real_distribution<float> lg(-20.f, std::log2(max));
    for (int i = 0; i < 20000; ++i) {
      const float x = std::exp2(lg(rng));
      xs.insert(xs.end(), {x, -x});
    }
    for (float x : xs) {
      if (std::fabs(x) > max) continue;  // the overflow band is HardEncodings'
      ASSERT_EQ(fp8_from_float(x, f, kSat), nearest_by_search(x, f))
          << (f == kE4 ? "e4m3 " : "e5m2 ") << x;
    }
  }
}

// ---- The scaled path: amax, scales, quantisation, the scaled GEMM -------------------

TEST(Fp8Scaled, ScalesFollowTorchaosFormula) {
  EXPECT_EQ(cpu::fp8_scale_from_amax(2.f, kE4, false), 224.f);
  EXPECT_EQ(cpu::fp8_scale_from_amax(2.f, kE5, false), 28672.f);
  EXPECT_EQ(cpu::fp8_scale_from_amax(3.f, kE4, false), static_cast<float>(448.0 / 3.0));
  // Rowwise rounds down to a power of two: 448 / 3 = 149.3 -> 128.
  EXPECT_EQ(cpu::fp8_scale_from_amax(3.f, kE4, true), 128.f);
  EXPECT_EQ(cpu::fp8_scale_from_amax(1.75f, kE4, true), 256.f);  // 448 / 1.75 = 256 exactly
  EXPECT_EQ(pow2_floor(1.f), 1.f);
  EXPECT_EQ(pow2_floor(0.75f), 0.5f);
  EXPECT_EQ(pow2_floor(std::ldexp(3.f, -140)), std::ldexp(1.f, -139));  // a subnormal
  // An all-zero tensor: amax clamped to 1e-12, a finite scale.
  EXPECT_EQ(cpu::fp8_scale_from_amax(0.f, kE4, false), static_cast<float>(448.0 / 1e-12));
  const float x[] = {0.5f, -7.f, 3.f};
  EXPECT_EQ(cpu::fp8_amax(x, 3), 7.f);
  const float with_nan[] = {1.f, std::nanf(""), 2.f};
  EXPECT_TRUE(std::isnan(cpu::fp8_amax(with_nan, 3)));
}

TEST(Fp8Scaled, QuantisationUsesTheWholeRangeAndSaturates) {
  const std::vector<float> x = {-3.f, 1.f, 0.f, 2.9f, 1e-9f};
  std::vector<uint8_t> q(x.size());
  const float scale = cpu::fp8_scale_from_amax(cpu::fp8_amax(x.data(), 5), kE4, false);
  cpu::fp8_quantize(x.data(), 5, scale, kE4, q.data());
  EXPECT_EQ(q[0], 0xFE);  // the amax lands on -448
  EXPECT_EQ(q[2], 0x00);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(q[i], fp8_from_float(x[i] * scale, kE4, kSat)) << i;
  // A scale too large for a value saturates instead of overflowing to NaN.
  cpu::fp8_quantize(x.data(), 1, scale * 4, kE4, q.data());
  EXPECT_EQ(q[0], 0xFE);
}

TEST(Fp8Scaled, RowwiseScalesArePowersOfTwoPerRow) {
  const std::vector<float> x = {1.f, -2.f, 0.5f,   // amax 2 -> 448 / 2 = 224 -> 128
                                100.f, 3.f, 0.f};  // amax 100 -> 4.48 -> 4
  std::vector<uint8_t> q(6);
  float scales[2];
  cpu::fp8_quantize_rows(x.data(), 2, 3, kE4, q.data(), scales);
  EXPECT_EQ(scales[0], 128.f);
  EXPECT_EQ(scales[1], 4.f);
  EXPECT_EQ(fp8_to_float(q[1], kE4), -256.f);  // exact: a power-of-two scale
  EXPECT_EQ(fp8_to_float(q[3], kE4), 384.f);   // 400: a tie of 384 and 416, to the even 384
}

// The scaled GEMM is the fp32 product of the decoded codes over the scales:
// against a double reference of the same codes, to fp32 rounding; against
// the unquantised fp32 product, within what e4m3 / e5m2 rounding allows.
TEST(Fp8Scaled, ScaledGemmIsTheDequantisedProduct) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t M = 7, N = 5, K = 64;
  std::vector<float> a(M * K), b(N * K);
  for (float& v : a) v = nd(rng);
  for (float& v : b) v = 0.01f * nd(rng);  // a gradient's scale
  for (bool rowwise : {false, true}) {
    const Fp8Format fb = rowwise ? kE4 : kE5;  // tensorwise: e5m2 for the gradient side
    std::vector<uint8_t> qa(a.size()), qb(b.size());
    std::vector<float> sa(M), sb(N);
    if (rowwise) {
      cpu::fp8_quantize_rows(a.data(), M, K, kE4, qa.data(), sa.data());
      cpu::fp8_quantize_rows(b.data(), N, K, fb, qb.data(), sb.data());
    } else {
      sa[0] = cpu::fp8_scale_from_amax(cpu::fp8_amax(a.data(), M * K), kE4, false);
      sb[0] = cpu::fp8_scale_from_amax(cpu::fp8_amax(b.data(), N * K), fb, false);
      cpu::fp8_quantize(a.data(), M * K, sa[0], kE4, qa.data());
      cpu::fp8_quantize(b.data(), N * K, sb[0], fb, qb.data());
    }
    std::vector<float> c(M * N);
    cpu::fp8_scaled_gemm(qa.data(), kE4, sa.data(), rowwise, qb.data(), fb, sb.data(), rowwise,
                         c.data(), M, N, K);
    double worst_rel_to_exact = 0, err2 = 0, ref2 = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double codes = 0, exact = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          codes += double(fp8_to_float(qa[m * K + k], kE4)) * fp8_to_float(qb[n * K + k], fb);
          exact += double(a[m * K + k]) * b[n * K + k];
          mag += std::fabs(double(a[m * K + k]) * b[n * K + k]);
        }
        const double want = codes / (double(sa[rowwise ? m : 0]) * sb[rowwise ? n : 0]);
        const double got = c[m * N + n];
        EXPECT_NEAR(got, want, 1e-5 * mag + 1e-30) << "row " << m << " col " << n;
        worst_rel_to_exact = std::max(worst_rel_to_exact, std::fabs(got - exact) / mag);
        err2 += (got - exact) * (got - exact);
        ref2 += exact * exact;
      }
    // One e4m3 step is 2^-3 relative (half of it per rounding), e5m2's 2^-2:
    // each product's error is bounded by their sum, and the RMS error of a
    // 64-term sum is far smaller.
    EXPECT_LT(worst_rel_to_exact, 0.0625 + (rowwise ? 0.0625 : 0.125)) << rowwise;
    EXPECT_LT(std::sqrt(err2 / ref2), 0.1) << rowwise;
  }
}

}  // namespace
}  // namespace gt
