// Host-side fp8 <-> fp32 conversion on raw bits, header-only: the CPU twin
// of the fp8 GEMMs' quantisation (the OCP 8-bit formats Hopper's tensor
// cores and cuBLASLt take, CUDA's __nv_fp8_e4m3 and __nv_fp8_e5m2, torch's
// float8_e4m3fn and float8_e5m2).
//
//   e4m3 ("e4m3fn"): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits. No
//     infinity: S.1111.111 (0x7F, 0xFF) is NaN, so the largest finite value
//     is S.1111.110 = 1.75 x 2^8 = 448. Subnormals: m/8 x 2^-6.
//   e5m2: 1 sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like:
//     S.11111.00 is +-inf, S.11111.{01,10,11} NaN; largest finite
//     1.75 x 2^15 = 57344. Subnormals: m/4 x 2^-14.
//
// fp32 -> fp8 rounds to nearest, ties to even (cvt.rn on sm_89+). What lies
// past the largest finite value depends on the saturation:
//   * Fp8Saturation::finite (cvt.rn.satfinite, the only mode PTX offers for
//     fp8, and torchao's clamp-then-cast; the scaled GEMM path uses it):
//     every finite value beyond it and +-inf become +-max (448 / 57344).
//   * Fp8Saturation::none (CUDA's __NV_NOSAT, torch's unscaled .to()): a
//     value that rounds past the largest finite one becomes e5m2's +-inf,
//     and e4m3's NaN (it has no infinity); +-inf becomes e5m2's +-inf and
//     e4m3's NaN.
//   "Rounds past" is RNE's: e4m3 values up to 464 (448 plus half its last
//   step, the tie going to 448's even mantissa) stay 448; e5m2's tie at
//   61440 goes to the even neighbour 65536, which is past 57344.
// Every NaN becomes the canonical 0x7F (0.1111.111 in e4m3, 0.11111.11 in
// e5m2), sign and payload dropped, in either mode, as CUDA's conversion does
// (cuda_fp8.hpp canonicalises a float NaN first; tests/cuda/test_cuda_fp8.cpp
// holds the device to this on every hard value). Overflow keeps the sign
// (0xFF is e4m3's negative NaN, 0xFC e5m2's -inf). Signed zeros keep
// their sign; subnormal fp8 results are kept (no flush to zero).
// fp8 -> fp32 is exact (every fp8 value is a float).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace gt {

enum class Fp8Format { e4m3, e5m2 };
enum class Fp8Saturation { finite, none };

// The format's shape: exponent bias, mantissa bits, largest finite value.
struct Fp8Spec {
  int bias;
  int mantissa_bits;
  int max_exponent;  // unbiased exponent of the largest finite value
  float max_finite;
};

inline const char* fp8_format_name(Fp8Format f) {
  return f == Fp8Format::e4m3 ? "e4m3" : "e5m2";
}

constexpr Fp8Spec fp8_spec(Fp8Format f) {
  return f == Fp8Format::e4m3 ? Fp8Spec{7, 3, 8, 448.f} : Fp8Spec{15, 2, 15, 57344.f};
}

inline float fp8_to_float(uint8_t code, Fp8Format f) {
  const Fp8Spec s = fp8_spec(f);
  const bool negative = (code & 0x80) != 0;
  const int exp_bits = f == Fp8Format::e4m3 ? 4 : 5;
  const int e = (code >> s.mantissa_bits) & ((1 << exp_bits) - 1);
  const int m = code & ((1 << s.mantissa_bits) - 1);
  const int top = (1 << exp_bits) - 1;
  float v;
  if (f == Fp8Format::e4m3 && e == top && m == (1 << s.mantissa_bits) - 1) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (f == Fp8Format::e5m2 && e == top) {
    v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {  // subnormal: m x 2^(1 - bias - mantissa_bits)
    v = std::ldexp(static_cast<float>(m), 1 - s.bias - s.mantissa_bits);
  } else {
    v = std::ldexp(static_cast<float>((1 << s.mantissa_bits) + m), e - s.bias - s.mantissa_bits);
  }
  return negative ? -v : v;
}

inline uint8_t fp8_from_float(float x, Fp8Format f, Fp8Saturation sat) {
  const Fp8Spec s = fp8_spec(f);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const uint8_t max_code = f == Fp8Format::e4m3 ? 0x7E : 0x7B;
  const uint8_t overflow = sat == Fp8Saturation::finite ? static_cast<uint8_t>(sign | max_code)
                           : f == Fp8Format::e5m2        ? static_cast<uint8_t>(sign | 0x7C)
                                                         : static_cast<uint8_t>(sign | 0x7F);
  if (std::isnan(x)) return 0x7F;  // the canonical NaN
  if (std::isinf(x)) return overflow;
  const double a = std::fabs(static_cast<double>(x));  // exact; scalings by 2^k stay exact
  const int M = s.mantissa_bits;
  const int min_exponent = 1 - s.bias;  // of the smallest normal
  int e;
  std::frexp(a, &e);  // a = fr x 2^e, fr in [0.5, 1): the leading bit is 2^(e-1)
  e -= 1;
  if (a == 0.0 || e < min_exponent) {
    // Subnormal range: a multiple of 2^(min_exponent - M), rounded to even
    // (nearbyint under the default rounding mode). A result of 2^M is the
    // smallest normal, whose code is the same bits.
    const double q = std::nearbyint(std::ldexp(a, M - min_exponent));
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  double q = std::nearbyint(std::ldexp(a, M - e));  // in [2^M, 2^(M+1)]
  if (q == std::ldexp(1.0, M + 1)) {  // rounded up into the next binade
    q /= 2;
    e += 1;
  }
  const int mantissa = static_cast<int>(q) - (1 << M);
  const bool past_max = e > s.max_exponent ||
                        (f == Fp8Format::e4m3 && e == s.max_exponent && mantissa == (1 << M) - 1);
  if (past_max) return overflow;
  return static_cast<uint8_t>(sign | ((e + s.bias) << M) | mantissa);
}

// The largest power of two <= s, on the float's bits u, for a positive
// finite s (else u unchanged: zero, negatives, inf and NaN): the mantissa
// bits cleared, or a subnormal's highest set bit kept. Exact, with no libm
// call (log2f differs by an ulp between host and device, which near a
// power of two would move the floor); constexpr integer code, so the CUDA
// kernels (kernels/cuda/fp8.cu) call this same function and round rowwise
// scales exactly as the CPU twin does.
constexpr uint32_t pow2_floor_bits(uint32_t u) {
  const uint32_t exponent = u & 0x7F800000u;
  if ((u & 0x80000000u) != 0 || u == 0 || exponent == 0x7F800000u) return u;
  if (exponent != 0) return u & 0xFF800000u;
  uint32_t top = 0x00400000u;
  while ((u & top) == 0) top >>= 1;
  return top;
}

inline float pow2_floor(float s) {
  uint32_t u;
  std::memcpy(&u, &s, sizeof u);
  u = pow2_floor_bits(u);
  std::memcpy(&s, &u, sizeof s);
  return s;
}

// x rounded to the nearest value of the format, as a float.
inline float fp8_round(float x, Fp8Format f, Fp8Saturation sat) {
  return fp8_to_float(fp8_from_float(x, f, sat), f);
}

}  // namespace gt
