// The arithmetic of the emulated cuBLASLt: one GEMM and its epilogue, run as
// a queued stream task in the device phase (cublaslt.cpp validates and
// queues; the rules chosen here are listed and numbered at the top of
// cublaslt.cpp as "Assumptions the cuBLASLt documentation leaves open").
//
// Shape of the computation: op(A) and op(B) are first converted to dense
// fp32 arrays (bf16 exactly; with FAST_TF32 each value rounded to TF32), so
// the inner loop is a plain fp32 multiply-add over contiguous memory that
// the compiler vectorises across rows of D while each element still sums in
// k order. The epilogue then runs per element in fp32, and every output is
// rounded once to its storage type.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cublaslt.hpp"

namespace gt::emu::lt {

namespace {

float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The device's rounding (the kernels' own __float2bfloat16_rn).
uint16_t float_to_bf16_bits(float f) {
  const __nv_bfloat16 h = __float2bfloat16_rn(f);
  uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}

// fp32 -> TF32 (10 explicit mantissa bits), round to nearest, ties to even;
// a carry into the exponent is the right answer; inf and NaN pass through.
float round_to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7F800000u) == 0x7F800000u) return x;
  u += 0xFFFu + ((u >> 13) & 1u);
  u &= ~0x1FFFu;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// An fp8 code's value, from its fields (the OCP formats: e4m3 with bias 7
// and no infinity, S.1111.111 its NaN; e5m2 with bias 15, IEEE-like). The
// emulator's own decoding, independent of the project's kernels/core/fp8.hpp
// that the CPU twin uses, so a shared mistake cannot hide.
float fp8_value(uint8_t code, cudaDataType_t t) {
  const bool e4m3 = t == CUDA_R_8F_E4M3;
  const int mbits = e4m3 ? 3 : 2, ebits = e4m3 ? 4 : 5, bias = e4m3 ? 7 : 15;
  const int e = (code >> mbits) & ((1 << ebits) - 1), m = code & ((1 << mbits) - 1);
  const float sign = (code & 0x80) ? -1.f : 1.f;
  if (e4m3 && e == 15 && m == 7) return std::nanf("");
  if (!e4m3 && e == 31) return m == 0 ? sign * INFINITY : std::nanf("");
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), 1 - bias - mbits);
  return sign * std::ldexp(static_cast<float>(m + (1 << mbits)), e - bias - mbits);
}

float load(const void* p, cudaDataType_t t, int64_t i) {
  if (t == CUDA_R_16BF) return bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

void store(void* p, cudaDataType_t t, int64_t i, float v) {
  if (t == CUDA_R_16BF)
    static_cast<uint16_t*>(p)[i] = float_to_bf16_bits(v);
  else
    static_cast<float*>(p)[i] = v;
}

// out[o * inner + q] = X[o * ld_outer + q * ld_inner] as fp32, for o < outer,
// q < inner: the gather that lays op(A) and op(B) out densely.
template <typename T>
void gather(const T* x, int64_t ld_outer, int64_t ld_inner, int64_t outer, int64_t inner,
            float* out) {
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = x + o * ld_outer;
    float* dst = out + o * inner;
    if constexpr (std::is_same_v<T, float>) {
      for (int64_t q = 0; q < inner; ++q) dst[q] = src[q * ld_inner];
    } else {
      for (int64_t q = 0; q < inner; ++q) dst[q] = bf16_bits_to_float(src[q * ld_inner]);
    }
  }
}

void gather_any(const void* x, cudaDataType_t t, int64_t ld_outer, int64_t ld_inner,
                int64_t outer, int64_t inner, float* out) {
  if (t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2) {
    float table[256];
    for (int c = 0; c < 256; ++c) table[c] = fp8_value(static_cast<uint8_t>(c), t);
    const auto* codes = static_cast<const uint8_t*>(x);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t q = 0; q < inner; ++q)
        out[o * inner + q] = table[codes[o * ld_outer + q * ld_inner]];
  } else if (t == CUDA_R_16BF)
    gather(static_cast<const uint16_t*>(x), ld_outer, ld_inner, outer, inner, out);
  else
    gather(static_cast<const float*>(x), ld_outer, ld_inner, outer, inner, out);
}

// GELU, tanh approximation, and its derivative (computed in fp32).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

float gelu(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.f + std::tanh(u));
}

float gelu_grad(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float t = std::tanh(u);
  const float du = kSqrt2OverPi * (1.f + 3.f * kCubic * x * x);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du;
}

}  // namespace

void run_gemm(const GemmJob& j) {
  const int64_t m = j.m, n = j.n, k = j.k;
  // ap[p * m + i] = op(A)[i][p]: column p of op(A) is contiguous.
  //   op N: A is m x k, op(A)[i][p] = A[i + p * lda]
  //   op T: A is k x m, op(A)[i][p] = A[p + i * lda]
  std::vector<float> ap(static_cast<size_t>(m * k));
  if (!j.trans_a)
    gather_any(j.a, j.ab_type, j.lda, 1, k, m, ap.data());
  else
    gather_any(j.a, j.ab_type, 1, j.lda, k, m, ap.data());
  // bj[c * k + p] = op(B)[p][c]: column c of op(B) is contiguous.
  //   op N: B is k x n, op(B)[p][c] = B[p + c * ldb]
  //   op T: B is n x k, op(B)[p][c] = B[c + p * ldb]
  std::vector<float> bj(static_cast<size_t>(k * n));
  if (!j.trans_b)
    gather_any(j.b, j.b_type, j.ldb, 1, n, k, bj.data());
  else
    gather_any(j.b, j.b_type, 1, j.ldb, n, k, bj.data());

  // The bias-gradient epilogues reduce the operands as stored (before any
  // TF32 rounding), in k order, in fp32.
  if (j.epilogue == CUBLASLT_EPILOGUE_BGRADA) {
    std::vector<float> sum(static_cast<size_t>(m), 0.f);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t i = 0; i < m; ++i) sum[i] += ap[p * m + i];
    for (int64_t i = 0; i < m; ++i) store(j.bias, j.bias_type, i, sum[i]);
  } else if (j.epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    for (int64_t c = 0; c < n; ++c) {
      float sum = 0.f;
      for (int64_t p = 0; p < k; ++p) sum += bj[c * k + p];
      store(j.bias, j.bias_type, c, sum);
    }
  }
  if (j.tf32) {
    for (float& v : ap) v = round_to_tf32(v);
    for (float& v : bj) v = round_to_tf32(v);
  }

  const uint32_t e = j.epilogue;
  const bool add_bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool gelu_fwd = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool gelu_bwd = e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  const bool dgelu_bgrad = e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  std::vector<float> bias(add_bias ? m : 0);
  for (int64_t i = 0; add_bias && i < m; ++i) bias[i] = load(j.bias, j.bias_type, i);
  std::vector<float> bgrad(dgelu_bgrad ? m : 0, 0.f);

  std::vector<float> acc(static_cast<size_t>(m));
  for (int64_t c = 0; c < n; ++c) {
    std::fill(acc.begin(), acc.end(), 0.f);
    const float* bcol = bj.data() + c * k;
    for (int64_t p = 0; p < k; ++p) {
      const float b = bcol[p];
      const float* acol = ap.data() + p * m;
      float* out = acc.data();
      for (int64_t i = 0; i < m; ++i) out[i] += acol[i] * b;
    }
    // fp8 scales (assumption 17): alpha * (sa * sb), formed first.
    const float sb = j.b_scale ? j.b_scale[j.b_scale_vec ? c : 0] : 1.f;
    for (int64_t i = 0; i < m; ++i) {
      const float sa = j.a_scale ? j.a_scale[j.a_scale_vec ? i : 0] : 1.f;
      const bool scaled = j.a_scale || j.b_scale;
      float v = scaled ? (j.alpha * (sa * sb)) * acc[i] : j.alpha * acc[i];
      // beta == 0 does not read C: it may hold NaN.
      if (j.beta != 0.f) v += j.beta * load(j.c, j.cd_type, i + c * j.ldc);
      if (add_bias) v += bias[i];
      if (gelu_fwd) {
        store(j.aux, j.aux_type, i + c * j.aux_ld, v);
        v = gelu(v);
      } else if (gelu_bwd) {
        v *= gelu_grad(load(j.aux, j.aux_type, i + c * j.aux_ld));
        if (dgelu_bgrad) bgrad[i] += v;
      }
      store(j.d, j.cd_type, i + c * j.ldd, v);
    }
  }
  for (int64_t i = 0; dgelu_bgrad && i < m; ++i) store(j.bias, j.bias_type, i, bgrad[i]);
}

}  // namespace gt::emu::lt
