// The emulated cuBLASLt (emulator/src/cublaslt*.cpp) through the raw C API,
// against a naive double-precision reference written here: every epilogue
// the project uses, both transposes of each operand, fp32 and bf16 inputs,
// fp32 and bf16 outputs, beta 0 (with NaN in C) and 1 (also in place), odd
// sizes and padded leading dimensions whose padding must stay untouched.
// Then the refusals: attribute sizes, unemulated attributes, the aux
// leading dimension, operands that do not fit their allocation, misaligned
// pointers, destroyed handles, and the switch that refuses every fused
// epilogue.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emu_cublaslt_util.hpp"
#include "gt_emu/control.hpp"
#include "kernels/core/bf16.hpp"
#include "test_util.hpp"

namespace {

using namespace gt::emu_test;
using gt::test::all_close;

// ---- helpers ---------------------------------------------------------------------

size_t type_size(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }
const char* type_str(cudaDataType_t t) { return t == CUDA_R_16BF ? "bf16" : "fp32"; }

// Values as a matrix of type t holds them (bf16 rounds to nearest even).
float as_type(float v, cudaDataType_t t) { return t == CUDA_R_16BF ? gt::bf16_round(v) : v; }

// The bytes of `v` stored as type t (NaN stays NaN).
std::vector<unsigned char> encode(const std::vector<float>& v, cudaDataType_t t) {
  std::vector<unsigned char> out(v.size() * type_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == CUDA_R_16BF) {
      const uint16_t b = gt::bf16_from_float(v[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    }
  }
  return out;
}

std::vector<float> decode(const std::vector<unsigned char>& bytes, cudaDataType_t t) {
  std::vector<float> out(bytes.size() / type_size(t));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == CUDA_R_16BF) {
      uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      out[i] = gt::bf16_to_float(b);
    } else {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    }
  }
  return out;
}


// ---- the reference ---------------------------------------------------------------

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_grad(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

const char* epilogue_name(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
  }
  return "?";
}
bool reads_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool writes_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA ||
         e == CUBLASLT_EPILOGUE_BGRADB;
}
bool writes_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool reads_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

struct Case {
  int64_t m = 7, n = 5, k = 3;
  bool ta = false, tb = false;
  cudaDataType_t ab = CUDA_R_32F, cd = CUDA_R_32F;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  float alpha = 1.f, beta = 0.f;
  int64_t pad = 0;        // extra rows of every leading dimension
  bool in_place = false;  // C is D
  std::string name() const {
    return std::string(epilogue_name(epilogue)) + " m=" + std::to_string(m) +
           " n=" + std::to_string(n) + " k=" + std::to_string(k) + " ta=" + std::to_string(ta) +
           " tb=" + std::to_string(tb) + " " + type_str(ab) + "->" + type_str(cd) +
           " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta) +
           " pad=" + std::to_string(pad) + (in_place ? " in place" : "");
  }
};

// A column-major matrix on the host: values as its type holds them, NaN in
// the padding rows.
struct HostMatrix {
  int64_t rows, cols, ld;
  std::vector<float> v;
  float at(int64_t r, int64_t c) const { return v[r + c * ld]; }
};
HostMatrix random_matrix(int64_t rows, int64_t cols, int64_t ld, cudaDataType_t t, uint64_t seed,
                         float lo = -1.f, float hi = 1.f) {
  HostMatrix m{rows, cols, ld, std::vector<float>(ld * cols, NAN)};
  const auto r = gt::test::random_vector(rows * cols, seed, lo, hi);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t i = 0; i < rows; ++i) m.v[i + c * ld] = as_type(r[i + c * rows], t);
  return m;
}

// Runs one case on the emulated cuBLASLt and checks D, aux and the bias
// vector against the double reference, and that padding stays untouched.
void check_case(cublasLtHandle_t handle, cudaStream_t stream, const Case& cs) {
  SCOPED_TRACE(cs.name());
  const int64_t m = cs.m, n = cs.n, k = cs.k;
  const uint32_t e = cs.epilogue;
  const int64_t a_rows = cs.ta ? k : m, a_cols = cs.ta ? m : k;
  const int64_t b_rows = cs.tb ? n : k, b_cols = cs.tb ? k : n;
  const HostMatrix A = random_matrix(a_rows, a_cols, a_rows + cs.pad, cs.ab, 1);
  const HostMatrix B = random_matrix(b_rows, b_cols, b_rows + cs.pad, cs.ab, 2);
  // beta == 0: C is all NaN, which must not reach D.
  HostMatrix C = random_matrix(m, n, m + cs.pad, cs.cd, 3);
  if (cs.beta == 0.f) std::fill(C.v.begin(), C.v.end(), NAN);
  const int64_t ldd = m + cs.pad;
  const int64_t ld_aux = (m + 7) / 8 * 8 + (cs.pad ? 8 : 0);
  const cudaDataType_t aux_t = cs.cd, bias_t = cs.cd;  // D's type by default
  const HostMatrix aux_in = random_matrix(m, n, ld_aux, aux_t, 4, -3.f, 3.f);
  const int64_t bias_len = e == CUBLASLT_EPILOGUE_BGRADB ? n : m;
  std::vector<float> bias_in(bias_len, NAN);
  if (reads_bias(e)) {
    bias_in = gt::test::random_vector(bias_len, 5);
    for (float& x : bias_in) x = as_type(x, bias_t);
  }

  // The reference, in double.
  std::vector<double> want_d(m * n), want_aux(m * n), want_bias(bias_len, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double a = cs.ta ? A.at(p, i) : A.at(i, p);
        const double b = cs.tb ? B.at(j, p) : B.at(p, j);
        acc += a * b;
      }
      double v = cs.alpha * acc;
      if (cs.beta != 0.f) v += static_cast<double>(cs.beta) * C.at(i, j);
      if (reads_bias(e)) v += bias_in[i];
      if (writes_aux(e)) {
        want_aux[i + j * m] = v;
        v = gelu(v);
      } else if (reads_aux(e)) {
        v *= gelu_grad(aux_in.at(i, j));
      }
      if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) want_bias[i] += v;
      want_d[i + j * m] = v;
    }
  }
  if (e == CUBLASLT_EPILOGUE_BGRADA)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) want_bias[i] += cs.ta ? A.at(p, i) : A.at(i, p);
  if (e == CUBLASLT_EPILOGUE_BGRADB)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) want_bias[j] += cs.tb ? B.at(j, p) : B.at(p, j);

  // Device side: D starts as NaN (or C, in place), aux as NaN unless read.
  DevMem dA(A.v.size() * type_size(cs.ab)), dB(B.v.size() * type_size(cs.ab));
  DevMem dC(C.v.size() * type_size(cs.cd)), dD(ldd * n * type_size(cs.cd));
  DevMem dAux(ld_aux * n * type_size(aux_t)), dBias(bias_len * type_size(bias_t));
  DevMem workspace(1 << 16);
  dA.upload(encode(A.v, cs.ab));
  dB.upload(encode(B.v, cs.ab));
  dC.upload(encode(C.v, cs.cd));
  HostMatrix d0 = cs.in_place ? C : HostMatrix{m, n, ldd, std::vector<float>(ldd * n, NAN)};
  dD.upload(encode(d0.v, cs.cd));
  std::vector<float> aux0 = reads_aux(e) ? aux_in.v : std::vector<float>(ld_aux * n, NAN);
  dAux.upload(encode(aux0, aux_t));
  dBias.upload(encode(bias_in, bias_t));

  Desc desc;
  const int32_t op_a = cs.ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = cs.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_a));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_b));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, e));
  if (reads_bias(e) || writes_bias(e)) {
    ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, dBias.get()));
  }
  if (reads_aux(e) || writes_aux(e)) {
    ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, dAux.get()));
    ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld_aux));
  }
  Layout la(cs.ab, a_rows, a_cols, A.ld), lb(cs.ab, b_rows, b_cols, B.ld);
  Layout lc(cs.cd, m, n, cs.in_place ? ldd : C.ld), ld(cs.cd, m, n, ldd);
  Pref pref;
  ASSERT_LT_OK(pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{1} << 16));
  cublasLtMatmulHeuristicResult_t r = {};
  int returned = 0;
  ASSERT_LT_OK(cublasLtMatmulAlgoGetHeuristic(handle, desc.d, la.l, lb.l, lc.l, ld.l, pref.p, 1,
                                              &r, &returned));
  ASSERT_EQ(returned, 1);
  const void* c_ptr = cs.in_place ? dD.get() : dC.get();
  ASSERT_LT_OK(cublasLtMatmul(handle, desc.d, &cs.alpha, dA.get(), la.l, dB.get(), lb.l, &cs.beta,
                              c_ptr, lc.l, dD.get(), ld.l, &r.algo, workspace.get(), 1 << 16,
                              stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));

  // fp32 results to 1e-5; bf16 results within one bf16 rounding of the exact value.
  const float rtol = cs.cd == CUDA_R_16BF ? 5e-3f : 1e-5f, atol = 1e-5f;
  auto dense = [&](const std::vector<float>& all, int64_t ld_) {
    std::vector<float> out(m * n);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) out[i + j * m] = all[i + j * ld_];
    return out;
  };
  auto to_float = [](const std::vector<double>& v) {
    return std::vector<float>(v.begin(), v.end());
  };
  const std::vector<float> got_d = decode(dD.download(), cs.cd);
  EXPECT_TRUE(all_close(dense(got_d, ldd), to_float(want_d), atol, rtol)) << "D";
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = m; i < ldd; ++i)
      ASSERT_TRUE(std::isnan(got_d[i + j * ldd])) << "padding of D written at row " << i;
  const std::vector<float> got_aux = decode(dAux.download(), aux_t);
  if (writes_aux(e)) {
    EXPECT_TRUE(all_close(dense(got_aux, ld_aux), to_float(want_aux), atol, rtol)) << "aux";
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = m; i < ld_aux; ++i)
        ASSERT_TRUE(std::isnan(got_aux[i + j * ld_aux])) << "padding of aux written";
  } else {
    EXPECT_EQ(encode(got_aux, aux_t), encode(aux0, aux_t)) << "aux changed";
  }
  const std::vector<float> got_bias = decode(dBias.download(), bias_t);
  if (writes_bias(e)) {
    EXPECT_TRUE(all_close(got_bias, to_float(want_bias), atol, rtol)) << "bias gradient";
  } else {
    EXPECT_EQ(encode(got_bias, bias_t), encode(bias_in, bias_t)) << "bias changed";
  }
}

// ---- numerics --------------------------------------------------------------------

const uint32_t kEpilogues[] = {
    CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,        CUBLASLT_EPILOGUE_GELU_AUX,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD,
    CUBLASLT_EPILOGUE_BGRADA,  CUBLASLT_EPILOGUE_BGRADB};

TEST_F(EmuCublasLt, EveryEpilogueTransposeTypeAndBetaMatchesTheReference) {
  for (uint32_t e : kEpilogues)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (cudaDataType_t ab : {CUDA_R_32F, CUDA_R_16BF})
          for (cudaDataType_t cd : {CUDA_R_32F, CUDA_R_16BF}) {
            if (ab == CUDA_R_32F && cd == CUDA_R_16BF) continue;  // not a cuBLASLt combination
            for (float beta : {0.f, 1.f})
              for (int64_t pad : {0, 3}) {
                Case cs;
                cs.epilogue = e;
                cs.ta = ta;
                cs.tb = tb;
                cs.ab = ab;
                cs.cd = cd;
                cs.beta = beta;
                cs.alpha = beta == 0.f ? 1.f : 0.75f;
                cs.pad = pad;
                cs.in_place = beta != 0.f && pad == 0;
                check_case(handle_, stream_, cs);
                if (HasFatalFailure()) return;
              }
          }
}

TEST_F(EmuCublasLt, LargerOddShapesMatchTheReference) {
  const int64_t shapes[][3] = {{1, 1, 1}, {33, 17, 65}, {16, 40, 129}};
  for (const auto& s : shapes)
    for (uint32_t e : kEpilogues)
      for (cudaDataType_t ab : {CUDA_R_32F, CUDA_R_16BF}) {
        Case cs;
        cs.m = s[0];
        cs.n = s[1];
        cs.k = s[2];
        cs.epilogue = e;
        cs.ta = true;
        cs.ab = ab;
        cs.cd = ab;
        cs.beta = 1.f;
        cs.alpha = 1.f;
        cs.in_place = true;
        check_case(handle_, stream_, cs);
        if (HasFatalFailure()) return;
      }
}

// FAST_TF32 rounds fp32 inputs to 10 mantissa bits, ties to even: 1 + 2^-11
// is a tie between 1 and 1 + 2^-10 (-> 1), 1 + 3 * 2^-11 one between
// 1 + 2^-10 and 1 + 2^-9 (-> 1 + 2^-9); 1 + 2^-12 rounds down. The BGRADB
// sums see the unrounded values. All sums here are exact in fp32.
TEST_F(EmuCublasLt, FastTf32RoundsInputsToNearestEven) {
  const float x[3] = {1.f + 0x1p-11f, 1.f + 3 * 0x1p-11f, 1.f + 0x1p-12f};
  const float rounded[3] = {1.f, 1.f + 0x1p-9f, 1.f};
  // A (1 x 3) = x, B (3 x 1) = x: D = sum x^2 after rounding; BGRADB of B = sum x.
  std::vector<float> host(x, x + 3);
  DevMem dA(12), dB(12), dD(4), dBias(4);
  dA.upload(encode(host, CUDA_R_32F));
  dB.upload(encode(host, CUDA_R_32F));
  Desc desc(CUBLAS_COMPUTE_32F_FAST_TF32);
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BGRADB}));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, dBias.get()));
  Layout la(CUDA_R_32F, 1, 3, 1), lb(CUDA_R_32F, 3, 1, 3), ld(CUDA_R_32F, 1, 1, 1);
  cublasLtMatmulAlgo_t algo;
  ASSERT_LT_OK(heuristic(desc, la, lb, ld, ld, &algo));
  const float alpha = 1.f, beta = 0.f;
  ASSERT_LT_OK(cublasLtMatmul(handle_, desc.d, &alpha, dA.get(), la.l, dB.get(), lb.l, &beta,
                              dD.get(), ld.l, dD.get(), ld.l, &algo, nullptr, 0, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  float want = 0.f, want_bias = 0.f;
  for (int i = 0; i < 3; ++i) {
    want += rounded[i] * rounded[i];
    want_bias += x[i];
  }
  EXPECT_EQ(decode(dD.download(), CUDA_R_32F)[0], want);
  EXPECT_EQ(decode(dBias.download(), CUDA_R_32F)[0], want_bias);

  Layout lb16(CUDA_R_16BF, 3, 1, 3), la16(CUDA_R_16BF, 1, 3, 1);
  EXPECT_EQ(heuristic(desc, la16, lb16, ld, ld, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "TF32 with bf16 inputs";
}

// BIAS_DATA_TYPE and EPILOGUE_AUX_DATA_TYPE override D's type.
TEST_F(EmuCublasLt, BiasAndAuxDataTypeAttributesOverrideDsType) {
  const int64_t m = 8, n = 3, k = 2;
  const auto a = gt::test::random_vector(m * k, 7), b = gt::test::random_vector(k * n, 8);
  std::vector<float> bias = gt::test::random_vector(m, 9);
  for (float& v : bias) v = gt::bf16_round(v);
  DevMem dA(m * k * 4), dB(k * n * 4), dD(m * n * 4), dAux(m * n * 2), dBias(m * 2);
  dA.upload(encode(a, CUDA_R_32F));
  dB.upload(encode(b, CUDA_R_32F));
  dBias.upload(encode(bias, CUDA_R_16BF));
  Desc desc;
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_GELU_AUX_BIAS}));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, dBias.get()));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, dAux.get()));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{m}));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_16BF}));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t{CUDA_R_16BF}));
  Layout la(CUDA_R_32F, m, k, m), lb(CUDA_R_32F, k, n, k), ld(CUDA_R_32F, m, n, m);
  cublasLtMatmulAlgo_t algo;
  ASSERT_LT_OK(heuristic(desc, la, lb, ld, ld, &algo));
  const float alpha = 1.f, beta = 0.f;
  ASSERT_LT_OK(cublasLtMatmul(handle_, desc.d, &alpha, dA.get(), la.l, dB.get(), lb.l, &beta,
                              dD.get(), ld.l, dD.get(), ld.l, &algo, nullptr, 0, stream_));
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  std::vector<float> want_d(m * n), want_aux(m * n);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double v = bias[i];
      for (int64_t p = 0; p < k; ++p) v += static_cast<double>(a[i + p * m]) * b[p + j * k];
      want_aux[i + j * m] = static_cast<float>(v);
      want_d[i + j * m] = static_cast<float>(gelu(v));
    }
  EXPECT_TRUE(all_close(decode(dD.download(), CUDA_R_32F), want_d, 1e-5f, 1e-5f)) << "D";
  EXPECT_TRUE(all_close(decode(dAux.download(), CUDA_R_16BF), want_aux, 1e-5f, 5e-3f)) << "aux";
}

// ---- refusals --------------------------------------------------------------------

TEST_F(EmuCublasLt, StatusStringsAreTheEnumNames) {
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
}

TEST_F(EmuCublasLt, AttributeSizesMustMatchAndUnemulatedAttributesAreRefusedLoudly) {
  Desc desc;
  const int64_t wide = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t narrow = 8;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &narrow,
                                           sizeof narrow),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  Layout l(CUDA_R_32F, 4, 4, 4);
  EXPECT_EQ(
      cublasLtMatrixLayoutSetAttribute(l.l, CUBLASLT_MATRIX_LAYOUT_LD, &narrow, sizeof narrow),
      CUBLAS_STATUS_INVALID_VALUE);
  Pref pref;
  EXPECT_EQ(pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, int32_t{1024}),
            CUBLAS_STATUS_INVALID_VALUE);

  ::testing::internal::CaptureStderr();
  const cublasStatus_t st = desc.set(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, int32_t{4});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(st, CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_NE(err.find("gt-emu: error:"), std::string::npos) << err;
  EXPECT_NE(err.find("attribute " + std::to_string(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET)),
            std::string::npos)
      << err;
  EXPECT_EQ(pref.set(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, 1.f), CUBLAS_STATUS_NOT_SUPPORTED);

  // Get: the size query, then the value.
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{24}));
  size_t written = 0;
  ASSERT_LT_OK(cublasLtMatmulDescGetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, nullptr,
                                              0, &written));
  EXPECT_EQ(written, sizeof(int64_t));
  int64_t ld = 0;
  ASSERT_LT_OK(cublasLtMatmulDescGetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                              sizeof ld, &written));
  EXPECT_EQ(ld, 24);
}

TEST_F(EmuCublasLt, DestroyedAndForgedHandlesAreRefused) {
  cublasLtMatmulDesc_t d = nullptr;
  ASSERT_LT_OK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  ASSERT_LT_OK(cublasLtMatmulDescDestroy(d));
  EXPECT_EQ(cublasLtMatmulDescDestroy(d), CUBLAS_STATUS_INVALID_VALUE);
  const int32_t op = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op),
            CUBLAS_STATUS_INVALID_VALUE);
  // A layout handle is not a matmul descriptor.
  Layout l(CUDA_R_32F, 4, 4, 4);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(reinterpret_cast<cublasLtMatmulDesc_t>(l.l),
                                           CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op),
            CUBLAS_STATUS_INVALID_VALUE);
  Desc desc;
  cublasLtMatmulAlgo_t algo;
  cublasLtMatmulHeuristicResult_t r;
  int returned = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(reinterpret_cast<cublasLtHandle_t>(&algo), desc.d, l.l,
                                           l.l, l.l, l.l, nullptr, 1, &r, &returned),
            CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_F(EmuCublasLt, UnsupportedConfigurationsAreRefused) {
  Desc desc;
  cublasLtMatmulAlgo_t algo;
  Layout a32(CUDA_R_32F, 4, 4, 4), d16(CUDA_R_16BF, 4, 4, 4), a16(CUDA_R_16BF, 4, 4, 4);
  EXPECT_EQ(heuristic(desc, a32, a32, d16, d16, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "fp32 inputs, bf16 output";
  EXPECT_EQ(heuristic(desc, a32, a16, a32, a32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "A and B of different types";
  Layout wrong_k(CUDA_R_32F, 5, 4, 5);
  EXPECT_EQ(heuristic(desc, a32, wrong_k, a32, a32, &algo), CUBLAS_STATUS_INVALID_VALUE)
      << "inconsistent k";
  Layout short_ld(CUDA_R_32F, 4, 4, 3);
  EXPECT_EQ(heuristic(desc, short_ld, a32, a32, a32, &algo), CUBLAS_STATUS_INVALID_VALUE)
      << "ld < rows";
  Layout row_major(CUDA_R_32F, 4, 4, 4);
  const int32_t order = CUBLASLT_ORDER_ROW;
  ASSERT_LT_OK(cublasLtMatrixLayoutSetAttribute(row_major.l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order,
                                                sizeof order));
  EXPECT_EQ(heuristic(desc, row_major, a32, a32, a32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "row-major order";
  Desc relu;
  ASSERT_LT_OK(relu.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_RELU}));
  EXPECT_EQ(heuristic(relu, a32, a32, a32, a32, &algo), CUBLAS_STATUS_NOT_SUPPORTED) << "RELU";
  Desc bias_missing;
  ASSERT_LT_OK(bias_missing.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BIAS}));
  EXPECT_EQ(heuristic(bias_missing, a32, a32, a32, a32, &algo), CUBLAS_STATUS_INVALID_VALUE)
      << "BIAS without a bias pointer";
  Desc device_mode;
  ASSERT_LT_OK(device_mode.set(CUBLASLT_MATMUL_DESC_POINTER_MODE,
                               int32_t{CUBLASLT_POINTER_MODE_DEVICE}));
  EXPECT_EQ(heuristic(device_mode, a32, a32, a32, a32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "device pointer mode";
}

// Assumption 12: the aux stride must cover D's rows, and any stride that does
// is taken (the H200's cuBLASLt 13.0 took 12 for m = 7).
TEST_F(EmuCublasLt, AuxLeadingDimensionMustCoverTheRows) {
  const int64_t m = 7, n = 5, k = 3;
  DevMem dA(m * k * 4), dB(k * n * 4), dD(m * n * 4), dAux(16 * n * 4);
  Layout la(CUDA_R_32F, m, k, m), lb(CUDA_R_32F, k, n, k), ld(CUDA_R_32F, m, n, m);
  for (int64_t aux_ld : {int64_t{12}, int64_t{4}}) {
    SCOPED_TRACE("aux ld " + std::to_string(aux_ld));
    const cublasStatus_t want = aux_ld >= m ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    Desc desc;
    ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_GELU_AUX}));
    ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, dAux.get()));
    ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld));
    cublasLtMatmulAlgo_t algo;
    EXPECT_EQ(heuristic(desc, la, lb, ld, ld, &algo), want);
    const float alpha = 1.f, beta = 0.f;
    EXPECT_EQ(cublasLtMatmul(handle_, desc.d, &alpha, dA.get(), la.l, dB.get(), lb.l, &beta,
                             dD.get(), ld.l, dD.get(), ld.l, nullptr, nullptr, 0, stream_),
              want);
  }
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
}

// A column-major operand needs (cols - 1) * ld + rows elements: exactly that
// much is enough, one element less is refused before anything is queued.
TEST_F(EmuCublasLt, OperandsMustFitTheirAllocationExactly) {
  const int64_t m = 5, n = 4, k = 3, lda = 8;
  const size_t a_bytes = ((k - 1) * lda + m) * 4;
  DevMem exact(a_bytes), small(a_bytes - 4), dB(k * n * 4), dD(m * n * 4), dBias(m * 4);
  std::vector<float> a(a_bytes / 4, 1.f), b(k * n, 1.f);
  exact.upload(encode(a, CUDA_R_32F));
  dB.upload(encode(b, CUDA_R_32F));
  Desc desc;
  Layout la(CUDA_R_32F, m, k, lda), lb(CUDA_R_32F, k, n, k), ld(CUDA_R_32F, m, n, m);
  cublasLtMatmulAlgo_t algo;
  Pref pref;  // no alignment promises beyond the element size
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    ASSERT_LT_OK(pref.set(attr, uint32_t{4}));
  ASSERT_LT_OK(heuristic(desc, la, lb, ld, ld, &algo, pref.p));
  const float alpha = 1.f, beta = 0.f;
  auto matmul = [&](const void* A, const void* D, const void* ws, size_t ws_bytes) {
    return cublasLtMatmul(handle_, desc.d, &alpha, A, la.l, dB.get(), lb.l, &beta, D, ld.l,
                          const_cast<void*>(D), ld.l, &algo, const_cast<void*>(ws), ws_bytes,
                          stream_);
  };
  EXPECT_EQ(matmul(exact.get(), dD.get(), nullptr, 0), CUBLAS_STATUS_SUCCESS);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(matmul(small.get(), dD.get(), nullptr, 0), CUBLAS_STATUS_INVALID_VALUE);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("allocation"), std::string::npos) << err;
  EXPECT_EQ(matmul(exact.get(), dD.at(4), nullptr, 0), CUBLAS_STATUS_INVALID_VALUE) << "D overruns";
  std::vector<float> host(m * n);
  EXPECT_EQ(matmul(exact.get(), host.data(), nullptr, 0), CUBLAS_STATUS_INVALID_VALUE)
      << "D in host memory";
  EXPECT_EQ(matmul(exact.get(), dD.get(), dBias.get(), 1024), CUBLAS_STATUS_INVALID_VALUE)
      << "workspace larger than its allocation";
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
  const std::vector<float> d = decode(dD.download(), CUDA_R_32F);
  for (float x : d) EXPECT_EQ(x, 3.f);  // only the first call ran

  // The BGRADB vector has n elements, the BIAS vector m.
  Desc bgrad;
  ASSERT_LT_OK(bgrad.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BGRADB}));
  DevMem bias_n(n * 4);
  ASSERT_LT_OK(bgrad.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_n.get()));
  EXPECT_EQ(cublasLtMatmul(handle_, bgrad.d, &alpha, exact.get(), la.l, dB.get(), lb.l, &beta,
                           dD.get(), ld.l, dD.get(), ld.l, nullptr, nullptr, 0, stream_),
            CUBLAS_STATUS_SUCCESS);
  Desc bias;
  ASSERT_LT_OK(bias.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BIAS}));
  ASSERT_LT_OK(bias.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_n.get()));  // n < m elements
  EXPECT_EQ(cublasLtMatmul(handle_, bias.d, &alpha, exact.get(), la.l, dB.get(), lb.l, &beta,
                           dD.get(), ld.l, dD.get(), ld.l, nullptr, nullptr, 0, stream_),
            CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
}

// An algorithm may assume the alignments the preference promised (and the
// bias pointer's at heuristic time); without an algorithm only element
// alignment counts.
TEST_F(EmuCublasLt, AlgorithmsHoldThePointersToTheAlignmentThePreferencePromised) {
  const int64_t m = 4, n = 4, k = 4;
  DevMem dA(m * k * 4 + 256), dB(k * n * 4), dD(m * n * 4), dBias(m * 4 + 256);
  std::vector<float> ones(m * k + 64, 1.f);
  dA.upload(encode(ones, CUDA_R_32F));
  dB.upload(encode(std::vector<float>(k * n, 1.f), CUDA_R_32F));
  dBias.upload(encode(std::vector<float>(m + 64, 0.f), CUDA_R_32F));
  Desc desc;
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BIAS}));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, dBias.get()));
  Layout la(CUDA_R_32F, m, k, m), lb(CUDA_R_32F, k, n, k), ld(CUDA_R_32F, m, n, m);
  cublasLtMatmulAlgo_t algo;
  ASSERT_LT_OK(heuristic(desc, la, lb, ld, ld, &algo));  // default preference: 256 bytes
  const float alpha = 1.f, beta = 0.f;
  auto matmul = [&](const void* A, const cublasLtMatmulAlgo_t* al) {
    return cublasLtMatmul(handle_, desc.d, &alpha, A, la.l, dB.get(), lb.l, &beta, dD.get(), ld.l,
                          dD.get(), ld.l, al, nullptr, 0, stream_);
  };
  EXPECT_EQ(matmul(dA.get(), &algo), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(matmul(dA.at(4), &algo), CUBLAS_STATUS_INVALID_VALUE) << "A 4-byte aligned";
  EXPECT_EQ(matmul(dA.at(4), nullptr), CUBLAS_STATUS_SUCCESS) << "no algorithm";
  EXPECT_EQ(matmul(dA.at(2), nullptr), CUBLAS_STATUS_INVALID_VALUE) << "A not element-aligned";
  // The bias pointer was 256-byte aligned at heuristic time.
  void* shifted = dBias.at(4);
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, shifted));
  EXPECT_EQ(matmul(dA.get(), &algo), CUBLAS_STATUS_INVALID_VALUE) << "bias less aligned";
  // An algorithm chosen for another epilogue is refused.
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_DEFAULT}));
  EXPECT_EQ(matmul(dA.get(), &algo), CUBLAS_STATUS_INVALID_VALUE) << "other epilogue";
  cublasLtMatmulAlgo_t forged = {};
  EXPECT_EQ(matmul(dA.get(), &forged), CUBLAS_STATUS_INVALID_VALUE) << "forged algorithm";
  ASSERT_CUDA(cudaStreamSynchronize(stream_));
}

TEST_F(EmuCublasLt, RefuseEpiloguesSwitchMakesTheHeuristicRefuseFusedEpilogues) {
  const int64_t m = 8, n = 4, k = 2;
  DevMem dBias(m * 4), dAux(m * n * 4);
  Layout la(CUDA_R_32F, m, k, m), lb(CUDA_R_32F, k, n, k), ld(CUDA_R_32F, m, n, m);
  cublasLtMatmulAlgo_t algo;
  {
    RefuseEpilogues refuse(true);
    for (uint32_t e : kEpilogues) {
      SCOPED_TRACE(epilogue_name(e));
      Desc desc;
      ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, e));
      ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, dBias.get()));
      ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, dAux.get()));
      ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{m}));
      EXPECT_EQ(heuristic(desc, la, lb, ld, ld, &algo),
                e == CUBLASLT_EPILOGUE_DEFAULT ? CUBLAS_STATUS_SUCCESS
                                               : CUBLAS_STATUS_NOT_SUPPORTED);
    }
  }
  Desc desc;
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BIAS}));
  ASSERT_LT_OK(desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, dBias.get()));
  EXPECT_EQ(heuristic(desc, la, lb, ld, ld, &algo), CUBLAS_STATUS_SUCCESS) << "switch restored";
}

}  // namespace
