// The CPU twin of the fp8 GEMM path: amax, scales, quantisation and the
// scaled GEMM (kernels/cpu/fp8_kernels.hpp says what each computes).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fp8_kernels.hpp"

namespace gt::cpu {

namespace {

// The format's 256 values as floats: decoding is a table lookup.
std::vector<float> decode_table(Fp8Format f) {
  std::vector<float> t(256);
  for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = fp8_to_float(static_cast<uint8_t>(c), f);
  return t;
}

}  // namespace

float fp8_amax(const float* x, int64_t n) {
  GT_CHECK(n >= 0 && (x != nullptr || n == 0), "fp8_amax: ", n, " elements");
  float m = 0.f;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) nan = true;
    m = std::max(m, std::fabs(x[i]));
  }
  return nan ? std::nanf("") : m;
}

float fp8_scale_from_amax(float amax, Fp8Format f, bool pow2) {
  const double clamped = std::max(static_cast<double>(amax), 1e-12);
  float s = static_cast<float>(static_cast<double>(fp8_spec(f).max_finite) / clamped);
  if (pow2) s = pow2_floor(s);
  return s;
}

void fp8_quantize(const float* x, int64_t n, float scale, Fp8Format f, uint8_t* q) {
  GT_CHECK(n >= 0 && ((x != nullptr && q != nullptr) || n == 0), "fp8_quantize: ", n,
           " elements");
#pragma omp parallel for if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) q[i] = fp8_from_float(x[i] * scale, f, Fp8Saturation::finite);
}

void fp8_quantize_rows(const float* x, int64_t rows, int64_t cols, Fp8Format f, uint8_t* q,
                       float* scales) {
  GT_CHECK(rows >= 0 && cols >= 0, "fp8_quantize_rows: (", rows, ", ", cols, ")");
  for (int64_t r = 0; r < rows; ++r) {
    scales[r] = fp8_scale_from_amax(fp8_amax(x + r * cols, cols), f, true);
    fp8_quantize(x + r * cols, cols, scales[r], f, q + r * cols);
  }
}

void fp8_scaled_gemm(const uint8_t* a_q, Fp8Format fa, const float* a_scales, bool a_rowwise,
                     const uint8_t* b_q, Fp8Format fb, const float* b_scales, bool b_rowwise,
                     float* c, int64_t M, int64_t N, int64_t K) {
  GT_CHECK(M >= 0 && N >= 0 && K >= 0, "fp8_scaled_gemm: M=", M, " N=", N, " K=", K);
  const std::vector<float> da = decode_table(fa), db = decode_table(fb);
#pragma omp parallel for if (M * N * K >= kParallelMin)
  for (int64_t m = 0; m < M; ++m) {
    const float sa = a_rowwise ? a_scales[m] : a_scales[0];
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.f;
      for (int64_t k = 0; k < K; ++k)
        acc += da[a_q[m * K + k]] * db[b_q[n * K + k]];
      const float sb = b_rowwise ? b_scales[n] : b_scales[0];
      // The inverse scales multiply the sum, as cuBLASLt's scale pointers do.
      c[m * N + n] = acc * ((1.f / sa) * (1.f / sb));
    }
  }
}

}  // namespace gt::cpu
