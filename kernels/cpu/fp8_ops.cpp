// The CpuOps fp8 ops on tensors (fp8_kernels.hpp, "The CpuOps fp8 ops"):
// amax over a tensor, its rows or its columns; scales from amaxes; the
// scaled GEMM with its quantising casts; and the bias gradient alone.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fp32_access.hpp"
#include "kernels/cpu/fp8_kernels.hpp"

namespace gt::cpu {

namespace {

// |v| folded into a running amax, a NaN sticking (std::max drops it).
inline float fold_amax(float m, float v) {
  return std::isnan(m) || std::isnan(v) ? std::nanf("") : std::max(m, std::fabs(v));
}

// op(x) (rows, K) quantised with its scales (one, or one per row) and decoded
// back into q: the values the fp8 GEMM multiplies. x is (rows, K), or (K,
// rows) read transposed.
void quantize_decoded(const float* x, bool transposed, int64_t rows, int64_t K,
                      const float* scales, bool per_row, Fp8Format f, std::vector<float>& q) {
  float decode[256];
  for (int c = 0; c < 256; ++c) decode[c] = fp8_to_float(static_cast<uint8_t>(c), f);
  q.resize(static_cast<size_t>(rows * K));
#pragma omp parallel for if (rows * K >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float s = per_row ? scales[r] : scales[0];
    for (int64_t k = 0; k < K; ++k) {
      const float v = transposed ? x[k * rows + r] : x[r * K + k];
      q[static_cast<size_t>(r * K + k)] = decode[fp8_from_float(v * s, f, Fp8Saturation::finite)];
    }
  }
}

// Codes already quantised, decoded into q as (rows, K): `codes` is (rows,
// K), or (K, rows) read transposed.
void decode_codes(const uint8_t* codes, bool transposed, int64_t rows, int64_t K, Fp8Format f,
                  std::vector<float>& q) {
  float decode[256];
  for (int c = 0; c < 256; ++c) decode[c] = fp8_to_float(static_cast<uint8_t>(c), f);
  q.resize(static_cast<size_t>(rows * K));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k)
      q[static_cast<size_t>(r * K + k)] = decode[transposed ? codes[k * rows + r] : codes[r * K + k]];
}

}  // namespace

void fp8_quantize_op(TensorView q, TensorView x, TensorView scale, Fp8Format format) {
  const Fp32In in(x);
  fp8_quantize(in.get(), x.numel(), scale.f32()[0], format, static_cast<uint8_t*>(q.data));
}

void fp8_amax_op(TensorView amax, TensorView x, Fp8Reduce over) {
  const int64_t R = x.shape[0], C = x.shape[1];
  const Fp32In in(x);
  const float* v = in.get();
  float* out = amax.f32();
  switch (over) {
    case Fp8Reduce::tensor: {
      float m = 0.f;
      for (int64_t i = 0; i < R * C; ++i) m = fold_amax(m, v[i]);
      out[0] = m;
      break;
    }
    case Fp8Reduce::rows:
#pragma omp parallel for if (R * C >= kParallelMin)
      for (int64_t r = 0; r < R; ++r) {
        float m = 0.f;
        for (int64_t c = 0; c < C; ++c) m = fold_amax(m, v[r * C + c]);
        out[r] = m;
      }
      break;
    case Fp8Reduce::cols:
      std::fill(out, out + C, 0.f);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) out[c] = fold_amax(out[c], v[r * C + c]);
      break;
  }
}

void output_row_amax(TensorView row_amax, TensorView out) {
  if (row_amax.empty()) return;
  fp8_amax_op(row_amax, out, Fp8Reduce::rows);
}

void fp8_scale_from_amax_op(TensorView scale, TensorView amax, Fp8Format format, bool pow2) {
  const float* a = amax.f32();
  float* s = scale.f32();
  for (int64_t i = 0; i < amax.numel(); ++i) s[i] = fp8_scale_from_amax(a[i], format, pow2);
}

void fp8_matmul(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                TensorView b_scale, TensorView bias, const Fp8MatmulSpec& spec) {
  const int64_t M = out.shape[0], N = out.shape[1];
  const int64_t K = a.shape[spec.a_transposed ? 0 : 1];
  GT_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX, "fp8_matmul: (", M, ", ", N,
           ", ", K, ") exceeds BLAS's int extents");
  std::vector<float> qa, qb;
  {
    const Fp32In av(a);
    quantize_decoded(av.get(), spec.a_transposed, M, K, a_scale.f32(), a_scale.numel() > 1,
                     spec.a_format, qa);
  }
  if (b.dtype == DType::u8) {
    decode_codes(static_cast<const uint8_t*>(b.data), spec.b_transposed, N, K, spec.b_format, qb);
  } else {
    const Fp32In bv(b);
    quantize_decoded(bv.get(), spec.b_transposed, N, K, b_scale.f32(), b_scale.numel() > 1,
                     spec.b_format, qb);
  }
  std::vector<float> acc(static_cast<size_t>(M * N));
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, qa.data(), k, qb.data(), k,
              0.f, acc.data(), n);
  const float* sa = a_scale.f32();
  const float* sb = b_scale.f32();
  const bool a_rows = a_scale.numel() > 1, b_rows = b_scale.numel() > 1;
  std::optional<Fp32In> bias_in;
  if (!bias.empty()) bias_in.emplace(bias);
  const float* bv = bias_in ? bias_in->get() : nullptr;
  Fp32Out o(out, spec.accumulate);
  float* y = o.get();
#pragma omp parallel for if (M * N >= kParallelMin)
  for (int64_t i = 0; i < M; ++i) {
    const float inv_a = 1.f / (a_rows ? sa[i] : sa[0]);
    for (int64_t j = 0; j < N; ++j) {
      // The inverse scales multiply the sum, as cuBLASLt's scale pointers do.
      float v = acc[static_cast<size_t>(i * N + j)] * (inv_a * (1.f / (b_rows ? sb[j] : sb[0])));
      if (bv) v += bv[j];
      y[i * N + j] = spec.accumulate ? y[i * N + j] + v : v;
    }
  }
  o.store();
}

void bias_backward(TensorView dbias, TensorView dout) {
  const int64_t R = dout.shape[0], OC = dout.shape[1];
  const Fp32In in(dout);
  const float* dy = in.get();
  float* db = dbias.f32();
  std::vector<float> acc(static_cast<size_t>(OC), 0.f);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < OC; ++j) acc[static_cast<size_t>(j)] += dy[i * OC + j];
  for (int64_t j = 0; j < OC; ++j) db[j] += acc[static_cast<size_t>(j)];
}

}  // namespace gt::cpu
