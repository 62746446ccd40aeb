// Host-side bf16 <-> fp32 conversion on raw bits, header-only, for the CPU
// backend (kernels/cpu/cast.cpp, the bf16 matmul operands) and the tests.
//
// It computes bit for bit what the CUDA backend's __float2bfloat16_rn
// (cvt.rn.bf16.f32 on sm_80+, the same rule in cuda_bf16.hpp's fallback)
// and __bfloat162float compute:
//   * fp32 -> bf16 rounds to nearest, ties to even, on the 16 dropped bits.
//     Finite values past the largest bf16 round to +-inf, +-inf stay +-inf,
//     subnormals are kept (no flush to zero), -0 stays -0.
//   * Every NaN becomes the canonical bf16 NaN 0x7FFF (sign and payload
//     dropped, as CUDA does; torch writes 0x7FC0, also a NaN).
//   * bf16 -> fp32 is exact: the 16 bits become the high half of the float.
#pragma once

#include <cstdint>
#include <cstring>

namespace gt {

// CUDA's canonical bf16 NaN (CUDART_NAN_BF16).
constexpr uint16_t kBf16CanonicalNaN = 0x7FFF;

inline uint16_t bf16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return kBf16CanonicalNaN;
  // Adding 0x7FFF rounds up exactly when the dropped half is above 0x8000;
  // adding the kept half's lowest bit on top breaks the tie at 0x8000 toward
  // an even result. A carry into the exponent is the right answer (the next
  // binade, or inf past the largest finite bf16). No overflow of u: the
  // largest non-NaN input 0xFF800000 (-inf) + 0x8000 stays below 2^32.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// f rounded to the nearest bf16, as a float (NaN stays NaN).
inline float bf16_round(float f) { return bf16_to_float(bf16_from_float(f)); }

}  // namespace gt
