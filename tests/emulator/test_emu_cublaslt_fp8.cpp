// The emulated cuBLASLt's fp8 GEMMs (emulator/src/cublaslt.cpp, assumptions
// 15-19) against the CPU twin of the fp8 path (kernels/cpu/fp8_kernels.hpp):
// the same codes and scales give the same fp32 result bit for bit
// (tensorwise and outer-vector scaling, e4m3 x e4m3 and the mixed pairs,
// fp32 and bf16 outputs, with and without a bf16 bias through the BIAS
// epilogue, added before D's one rounding). Then every rule the emulator holds a caller to,
// each by a planted misuse it must refuse: the NN layout, e5m2 x e5m2, an
// fp8 operand beside a bf16 one, FAST_TF32, a leading dimension not a
// multiple of 16, a pointer off 16 bytes, a scale in host memory or too
// short for its outer vector, scale pointers on a bf16 GEMM, an fp8 output's
// amax, an epilogue not emulated for fp8, and an fp32 bias beside a bf16 D.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "emu_cublaslt_util.hpp"
#include "kernels/core/bf16.hpp"
#include "kernels/core/fp8.hpp"
#include "kernels/cpu/fp8_kernels.hpp"

namespace {

using namespace gt::emu_test;

gt::Fp8Format format_of(cudaDataType_t t) {
  return t == CUDA_R_8F_E4M3 ? gt::Fp8Format::e4m3 : gt::Fp8Format::e5m2;
}

// One fp8 GEMM in the project's terms: a (M, K) and b (N, K) row-major
// codes, c (M, N) = a b^T scaled; in cuBLASLt's column-major terms that is
// D (N x M, ld N) = op(B_cl)... so the call below passes b as cuBLASLt's A
// (K x N, ld K, transposed) and a as its B (K x M, ld K, not transposed):
// D's column r is row r of c. TN, as fp8 requires.
struct Fp8Case {
  int64_t M = 32, N = 48, K = 64;
  cudaDataType_t a_type = CUDA_R_8F_E4M3, b_type = CUDA_R_8F_E4M3;
  cudaDataType_t d_type = CUDA_R_32F;
  bool rowwise = false;
  bool bias = false;  // the BIAS epilogue, a bf16 bias of N (our columns)
};

class EmuCublasLtFp8 : public EmuCublasLt {
 protected:
  // Quantised operands and their inverse scales (what the scale pointers hold).
  struct Operands {
    std::vector<uint8_t> qa, qb;
    std::vector<float> sa, sb;          // quantisation scales (CPU twin's arguments)
    std::vector<float> inv_a, inv_b;    // 1 / scale: the GEMM's multipliers
    std::vector<uint16_t> bias;         // bf16, N
  };

  Operands quantise(const Fp8Case& cs) {
    std::mt19937 rng(17);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> a(cs.M * cs.K), b(cs.N * cs.K);
    for (float& v : a) v = nd(rng);
    for (float& v : b) v = 0.05f * nd(rng);
    Operands o;
    o.qa.resize(a.size());
    o.qb.resize(b.size());
    const gt::Fp8Format fa = format_of(cs.a_type), fb = format_of(cs.b_type);
    if (cs.rowwise) {
      o.sa.resize(cs.M);
      o.sb.resize(cs.N);
      gt::cpu::fp8_quantize_rows(a.data(), cs.M, cs.K, fa, o.qa.data(), o.sa.data());
      gt::cpu::fp8_quantize_rows(b.data(), cs.N, cs.K, fb, o.qb.data(), o.sb.data());
    } else {
      o.sa = {gt::cpu::fp8_scale_from_amax(gt::cpu::fp8_amax(a.data(), a.size()), fa, false)};
      o.sb = {gt::cpu::fp8_scale_from_amax(gt::cpu::fp8_amax(b.data(), b.size()), fb, false)};
      gt::cpu::fp8_quantize(a.data(), a.size(), o.sa[0], fa, o.qa.data());
      gt::cpu::fp8_quantize(b.data(), b.size(), o.sb[0], fb, o.qb.data());
    }
    for (float s : o.sa) o.inv_a.push_back(1.f / s);
    for (float s : o.sb) o.inv_b.push_back(1.f / s);
    if (cs.bias)
      for (int64_t n = 0; n < cs.N; ++n) o.bias.push_back(gt::bf16_from_float(0.3f * nd(rng)));
    return o;
  }

  // Runs the GEMM on the emulated device; returns c (M, N) as fp32.
  std::vector<float> run(const Fp8Case& cs, const Operands& o) {
    const int64_t M = cs.M, N = cs.N, K = cs.K;
    DevMem dA(o.qa.size()), dB(o.qb.size()), dSa(o.inv_a.size() * 4), dSb(o.inv_b.size() * 4);
    const size_t out_size = cs.d_type == CUDA_R_16BF ? 2 : 4;
    DevMem dD(M * N * out_size);
    dA.upload(std::vector<unsigned char>(o.qa.begin(), o.qa.end()));
    dB.upload(std::vector<unsigned char>(o.qb.begin(), o.qb.end()));
    auto bytes = [](const std::vector<float>& v) {
      std::vector<unsigned char> b(v.size() * 4);
      std::memcpy(b.data(), v.data(), b.size());
      return b;
    };
    dSa.upload(bytes(o.inv_a));
    dSb.upload(bytes(o.inv_b));
    // cuBLASLt's A is our b (K x N col-major = b row-major), B is our a.
    Desc desc;
    EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N}), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(dSb.get())),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(dSa.get())),
              CUBLAS_STATUS_SUCCESS);
    if (cs.rowwise) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode), CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode), CUBLAS_STATUS_SUCCESS);
    }
    EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t{1}), CUBLAS_STATUS_SUCCESS);
    // cuBLASLt's D has N rows (our columns): the bias runs along them.
    DevMem dBias(std::max<size_t>(o.bias.size() * 2, 2));
    if (cs.bias) {
      std::vector<unsigned char> b(o.bias.size() * 2);
      std::memcpy(b.data(), o.bias.data(), b.size());
      dBias.upload(b);
      EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BIAS}),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(dBias.get())),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_16BF}),
                CUBLAS_STATUS_SUCCESS);
    }
    Layout la(cs.b_type, K, N, K), lb(cs.a_type, K, M, K), ld(cs.d_type, N, M, N);
    cublasLtMatmulAlgo_t algo;
    EXPECT_EQ(heuristic(desc, la, lb, ld, ld, &algo), CUBLAS_STATUS_SUCCESS);
    const float alpha = 1.f, beta = 0.f;
    EXPECT_EQ(cublasLtMatmul(handle_, desc.d, &alpha, dB.get(), la.l, dA.get(), lb.l, &beta,
                             dD.get(), ld.l, dD.get(), ld.l, &algo, nullptr, 0, stream_),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const std::vector<unsigned char> raw = dD.download();
    std::vector<float> c(M * N);
    for (int64_t i = 0; i < M * N; ++i) {
      if (cs.d_type == CUDA_R_16BF) {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        c[i] = gt::bf16_to_float(h);
      } else {
        std::memcpy(&c[i], raw.data() + 4 * i, 4);
      }
    }
    return c;
  }

  // The CPU twin's result, rounded as D's type rounds it.
  std::vector<float> twin(const Fp8Case& cs, const Operands& o) {
    std::vector<float> c(cs.M * cs.N);
    gt::cpu::fp8_scaled_gemm(o.qa.data(), format_of(cs.a_type), o.sa.data(), cs.rowwise,
                             o.qb.data(), format_of(cs.b_type), o.sb.data(), cs.rowwise,
                             c.data(), cs.M, cs.N, cs.K);
    if (cs.bias)
      for (int64_t m = 0; m < cs.M; ++m)
        for (int64_t n = 0; n < cs.N; ++n) c[m * cs.N + n] += gt::bf16_to_float(o.bias[n]);
    if (cs.d_type == CUDA_R_16BF)
      for (float& v : c) v = gt::bf16_round(v);
    return c;
  }
};

TEST_F(EmuCublasLtFp8, ScaledGemmsMatchTheCpuTwinBitForBit) {
  for (cudaDataType_t d : {CUDA_R_32F, CUDA_R_16BF})
    for (bool rowwise : {false, true})
      for (bool bias : {false, true})
      for (auto [ta, tb] : {std::pair{CUDA_R_8F_E4M3, CUDA_R_8F_E4M3},
                            std::pair{CUDA_R_8F_E4M3, CUDA_R_8F_E5M2},
                            std::pair{CUDA_R_8F_E5M2, CUDA_R_8F_E4M3}}) {
        Fp8Case cs;
        cs.a_type = ta;
        cs.b_type = tb;
        cs.d_type = d;
        cs.rowwise = rowwise;
        cs.bias = bias;
        const Operands o = quantise(cs);
        const std::vector<float> got = run(cs, o), want = twin(cs, o);
        ASSERT_EQ(got.size(), want.size());
        int wrong = 0;
        for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
        EXPECT_EQ(wrong, 0) << (rowwise ? "rowwise " : "tensorwise ") << ta << " x " << tb
                            << " -> " << d << (bias ? " +bias" : "") << ": first " << got[0]
                            << " vs " << want[0];
      }
}

// ---- the rules, each by a planted misuse -------------------------------------------

TEST_F(EmuCublasLtFp8, LayoutTypeAndEpilogueRulesAreEnforced) {
  cublasLtMatmulAlgo_t algo;
  const int64_t K = 32, N = 16, M = 16;
  Layout e4(CUDA_R_8F_E4M3, K, N, K), e4b(CUDA_R_8F_E4M3, K, M, K);
  Layout e5(CUDA_R_8F_E5M2, K, N, K), e5b(CUDA_R_8F_E5M2, K, M, K);
  Layout bf(CUDA_R_16BF, K, M, K), d32(CUDA_R_32F, N, M, N);
  auto tn = [](Desc& d) {
    EXPECT_EQ(d.set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(d.set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N}), CUBLAS_STATUS_SUCCESS);
  };
  Desc good;
  tn(good);
  EXPECT_EQ(heuristic(good, e4, e4b, d32, d32, &algo), CUBLAS_STATUS_SUCCESS);

  Desc nn;  // the default N, N
  Layout e4_nn(CUDA_R_8F_E4M3, N, K, N);
  EXPECT_EQ(heuristic(nn, e4_nn, e4b, d32, d32, &algo), CUBLAS_STATUS_NOT_SUPPORTED) << "NN";
  EXPECT_EQ(heuristic(good, e5, e5b, d32, d32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "e5m2 x e5m2";
  EXPECT_EQ(heuristic(good, e4, bf, d32, d32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "fp8 x bf16";
  Desc tf32(CUBLAS_COMPUTE_32F_FAST_TF32);
  tn(tf32);
  EXPECT_EQ(heuristic(tf32, e4, e4b, d32, d32, &algo), CUBLAS_STATUS_NOT_SUPPORTED) << "TF32";
  Layout odd_ld(CUDA_R_8F_E4M3, K, N, K + 8), odd_ldb(CUDA_R_8F_E4M3, K, M, K + 8);
  EXPECT_EQ(heuristic(good, odd_ld, e4b, d32, d32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "lda not a multiple of 16";
  EXPECT_EQ(heuristic(good, e4, odd_ldb, d32, d32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "ldb not a multiple of 16";
  Layout d8(CUDA_R_8F_E4M3, N, M, N);
  EXPECT_EQ(heuristic(good, e4, e4b, d8, d8, &algo), CUBLAS_STATUS_NOT_SUPPORTED) << "fp8 D";
  Desc gelu;
  tn(gelu);
  DevMem aux(N * M * 4);
  ASSERT_LT_OK(gelu.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_GELU_AUX}));
  ASSERT_LT_OK(gelu.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.get()));
  ASSERT_LT_OK(gelu.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{N}));
  EXPECT_EQ(heuristic(gelu, e4, e4b, d32, d32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "GELU_AUX with fp8";
  // The bias is D's type: bf16 beside a bf16 D; an fp32 bias there is refused.
  Layout dbf(CUDA_R_16BF, N, M, N);
  DevMem bias(N * 4);
  for (int32_t bias_type : {int32_t{CUDA_R_16BF}, int32_t{CUDA_R_32F}}) {
    Desc biased;
    tn(biased);
    ASSERT_LT_OK(biased.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BIAS}));
    ASSERT_LT_OK(biased.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.get())));
    ASSERT_LT_OK(biased.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type));
    EXPECT_EQ(heuristic(biased, e4, e4b, dbf, dbf, &algo),
              bias_type == CUDA_R_16BF ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED)
        << "bias type " << bias_type << " with a bf16 D";
  }
  Desc amax;
  tn(amax);
  DevMem amax_out(4);
  ASSERT_LT_OK(amax.set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, amax_out.get()));
  EXPECT_EQ(heuristic(amax, e4, e4b, d32, d32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "D's amax";
  Desc mixed_modes;
  tn(mixed_modes);
  ASSERT_LT_OK(mixed_modes.set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                               int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F}));
  EXPECT_EQ(heuristic(mixed_modes, e4, e4b, d32, d32, &algo), CUBLAS_STATUS_NOT_SUPPORTED)
      << "A outer-vector, B scalar";
  Desc vec_without_pointers;
  tn(vec_without_pointers);
  for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE})
    ASSERT_LT_OK(
        vec_without_pointers.set(attr, int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F}));
  EXPECT_EQ(heuristic(vec_without_pointers, e4, e4b, d32, d32, &algo),
            CUBLAS_STATUS_INVALID_VALUE)
      << "outer-vector scaling without scale pointers";

  // Scale pointers on a bf16 GEMM: they apply to fp8 operands only.
  Desc bf_scaled;
  DevMem one(4);
  ASSERT_LT_OK(bf_scaled.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                             static_cast<const void*>(one.get())));
  Layout bfa(CUDA_R_16BF, N, K, N), bfb(CUDA_R_16BF, K, M, K);
  EXPECT_EQ(heuristic(bf_scaled, bfa, bfb, d32, d32, &algo), CUBLAS_STATUS_INVALID_VALUE)
      << "scale pointer on bf16 operands";
}

TEST_F(EmuCublasLtFp8, PointersAndScalesAreChecked) {
  const int64_t K = 32, N = 16, M = 16;
  DevMem dA(K * N + 64), dB(K * M), dD(N * M * 4), scale(4), short_vec(4 * (M - 1));
  Layout la(CUDA_R_8F_E4M3, K, N, K), lb(CUDA_R_8F_E4M3, K, M, K), ld(CUDA_R_32F, N, M, N);
  const float alpha = 1.f, beta = 0.f;
  auto call = [&](Desc& d, const void* a) {
    return cublasLtMatmul(handle_, d.d, &alpha, a, la.l, dB.get(), lb.l, &beta, dD.get(), ld.l,
                          dD.get(), ld.l, nullptr, nullptr, 0, stream_);
  };
  auto tn = [](Desc& d) {
    EXPECT_EQ(d.set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(d.set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N}), CUBLAS_STATUS_SUCCESS);
  };
  Desc plain;
  tn(plain);
  EXPECT_EQ(call(plain, dA.get()), CUBLAS_STATUS_SUCCESS) << "no scales: both 1";
  EXPECT_EQ(call(plain, dA.at(8)), CUBLAS_STATUS_INVALID_VALUE) << "A off 16 bytes";
  EXPECT_EQ(call(plain, dA.at(16)), CUBLAS_STATUS_SUCCESS) << "A 16-byte aligned";

  Desc host_scale;
  tn(host_scale);
  static float on_host = 1.f;
  ASSERT_LT_OK(host_scale.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                              static_cast<const void*>(&on_host)));
  EXPECT_EQ(call(host_scale, dA.get()), CUBLAS_STATUS_INVALID_VALUE) << "a scale in host memory";

  Desc vec;
  tn(vec);
  for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE})
    ASSERT_LT_OK(vec.set(attr, int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F}));
  ASSERT_LT_OK(vec.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(scale.get())));
  ASSERT_LT_OK(
      vec.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(short_vec.get())));
  // cuBLASLt's A has n = 16 columns of D... its scale vector needs N floats;
  // one float is too short, as is B's of M - 1.
  EXPECT_EQ(call(vec, dA.get()), CUBLAS_STATUS_INVALID_VALUE) << "outer vectors too short";
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
}

}  // namespace
