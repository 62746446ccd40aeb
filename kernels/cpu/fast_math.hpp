// A vectorisable exp for the CPU backend's elementwise loops (GELU,
// softmax, cross-entropy). glibc's expf/tanhf are scalar calls unless -ffast-math is on, and
// GELU's tanh alone was a fifth of a training step. These are plain
// arithmetic on floats and int bit patterns, so GCC vectorises them inside
// `#pragma omp simd` loops at the baseline ISA, and they give the same bits
// on every x86-64 machine and thread count (no -ffast-math reassociation).
//
// Accuracy (checked by tests/cpu/test_fast_math.cpp over the whole range):
// relative error < 2e-7 (about 2 ulp) for x in [-87, 88]; inputs are clamped
// to [-87.3, 88.3], so the result is always finite and positive.
#pragma once

#include <cstdint>
#include <cstring>

namespace gt::cpu {

inline float fast_exp(float x) {
  // Cephes expf: x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-6
  // polynomial, 2^n built in the exponent bits.
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  // Round to nearest by the 1.5*2^23 trick (no floor/rint, which need SSE4.1).
  const float n = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return e * scale;
}

}  // namespace gt::cpu
