// Fp8GemmContext: fp8 GEMMs on cuBLASLt with a per-shape plan cache (see
// matmul_fp8.cuh). Row-major D (M, N) = A (M, K) B (N, K)^T is cuBLASLt's
// column-major D^T (N, M) = op(B') op(A') with B' = our B read transposed
// (TRANSA = T) and A' = our A as it is (TRANSB = N): the "TN" layout fp8
// requires, with no copy. cuBLASLt's A is our B, so its A scale is ours of B.
#include "kernels/cuda/matmul_fp8.cuh"

#include <cublasLt.h>

#include <map>
#include <tuple>

#include "kernels/cuda/cublaslt_objects.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_resources.hpp"

namespace gt::cuda {

namespace {

cudaDataType_t fp8_cuda(Fp8Format f) {
  return f == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

// Largest power of two <= 256 dividing the address and the row stride in
// bytes: the alignment cuBLASLt may assume for this operand (as GemmContext:
// an algorithm chosen for a 256-byte-aligned operand may rely on it, so a
// less aligned one, such as a weight's codes inside a gathered unit, gets
// its own plan).
uint32_t alignment(const void* p, int64_t ld_bytes) {
  uint32_t a = 256;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (a > 1 && (addr % a != 0 || ld_bytes % static_cast<int64_t>(a) != 0)) a /= 2;
  return a;
}

struct Key {
  int64_t M, N, K, lda, ldb, ldd;
  Fp8Format fa, fb;
  DType d;
  bool rowwise, fast_accum, has_a_scale, has_b_scale, has_bias;
  uint32_t align_a, align_b, align_d, align_bias;
  auto tie() const {
    return std::tie(M, N, K, lda, ldb, ldd, fa, fb, d, rowwise, fast_accum, has_a_scale,
                    has_b_scale, has_bias, align_a, align_b, align_d, align_bias);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  MatmulDescPtr desc;
  LayoutPtr a, b, d;
  cublasLtMatmulAlgo_t algo{};
  bool supported = false;  // the heuristic offered an algorithm
};

Fp8GemmArgs validated(Fp8GemmArgs g) {
  if (g.lda == 0) g.lda = g.K;
  if (g.ldb == 0) g.ldb = g.K;
  if (g.ldd == 0) g.ldd = g.N;
  const std::string what = describe(g);
  if (g.M < 0 || g.N < 0 || g.K <= 0) fail("fp8 gemm: sizes in ", what);
  if (g.d_type != DType::bf16 && g.d_type != DType::f32)
    fail("fp8 gemm: D must be bf16 or fp32: ", what);
  if (g.a_format == Fp8Format::e5m2 && g.b_format == Fp8Format::e5m2)
    fail("fp8 gemm: A and B cannot both be e5m2 (cuBLASLt): ", what);
  if (g.lda < g.K || g.ldb < g.K || g.ldd < g.N) fail("fp8 gemm: a row stride below its row: ", what);
  if (g.lda % 16 != 0 || g.ldb % 16 != 0)
    fail("fp8 gemm: the row strides of A and B must be multiples of 16 (cuBLASLt's fp8 rule): ",
         what);
  if (g.M == 0 || g.N == 0) return g;
  if (!g.A || !g.B || !g.D) fail("fp8 gemm: null operand in ", what);
  if (reinterpret_cast<uintptr_t>(g.A) % 16 != 0 || reinterpret_cast<uintptr_t>(g.B) % 16 != 0)
    fail("fp8 gemm: A and B must be 16-byte aligned (cuBLASLt's fp8 rule): ", what);
  if (g.rowwise && (!g.a_scale || !g.b_scale))
    fail("fp8 gemm: rowwise scaling needs both scale vectors: ", what);
  if (g.bias && (g.d_type != DType::bf16 || g.accumulate))
    fail("fp8 gemm: a bias epilogue needs a bf16 D (the bias is D's type) that is assigned, "
         "not accumulated: ", what);
  return g;
}

}  // namespace

std::string describe(const Fp8GemmArgs& g) {
  auto name = [](Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; };
  return ::gt::detail::concat("fp8 gemm M=", g.M, " N=", g.N, " K=", g.K, " ", name(g.a_format),
                              " x ", name(g.b_format), "->", dtype_name(g.d_type),
                              g.rowwise ? " rowwise" : " tensorwise", " lda=", g.lda,
                              " ldb=", g.ldb, " ldd=", g.ldd,
                              g.accumulate ? " accumulate" : "",
                              g.fast_accum ? " fast_accum" : "", g.bias ? " +bias" : "");
}

struct Fp8GemmContext::Impl {
  // Teardown in reverse: plans, then the workspace, then the handle.
  CublasLtHandle handle;
  DeviceBuffer workspace;
  std::map<Key, Plan> plans;

  explicit Impl(size_t ws) : workspace(ws) {}

  Plan& plan_for(const Fp8GemmArgs& g) {
    const int64_t d_bytes = static_cast<int64_t>(dtype_size(g.d_type));
    const Key key{g.M,        g.N,      g.K,        g.lda,          g.ldb,
                  g.ldd,      g.a_format, g.b_format, g.d_type,     g.rowwise,
                  g.fast_accum, g.a_scale != nullptr, g.b_scale != nullptr,
                  g.bias != nullptr, alignment(g.A, g.lda), alignment(g.B, g.ldb),
                  alignment(g.D, g.ldd * d_bytes), alignment(g.bias, 0)};
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    Plan p;
    cublasLtMatmulDesc_t desc = nullptr;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    p.desc.reset(desc);
    auto set = [&](cublasLtMatmulDescAttributes_t a, const auto& v) {
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, a, &v, sizeof v));
    };
    set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T});
    set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N});
    set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(g.fast_accum ? 1 : 0));
    if (g.rowwise) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
      set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
    }
    if (g.bias) {
      set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{CUBLASLT_EPILOGUE_BIAS});
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_16BF});
    }
    set_pointers(desc, g);
    auto layout = [](cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
      cublasLtMatrixLayout_t l = nullptr;
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, static_cast<uint64_t>(rows),
                                              static_cast<uint64_t>(cols), ld));
      return LayoutPtr(l);
    };
    // Column-major: our B (N, K) row-major is (K, N) with ld ldb; our A
    // likewise (K, M); D (M, N) row-major is (N, M) with ld ldd.
    p.a = layout(fp8_cuda(g.b_format), g.K, g.N, g.ldb);
    p.b = layout(fp8_cuda(g.a_format), g.K, g.M, g.lda);
    p.d = layout(g.d_type == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F, g.N, g.M, g.ldd);
    cublasLtMatmulPreference_t pref_raw = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
    PreferencePtr pref(pref_raw);
    const uint64_t ws = workspace.bytes();
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    // Our A and B swap roles in cuBLASLt.
    const uint32_t align_a = key.align_b, align_b = key.align_a, align_cd = key.align_d;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd, sizeof align_cd));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd, sizeof align_cd));
    constexpr int kRequested = 8;
    cublasLtMatmulHeuristicResult_t results[kRequested] = {};
    int returned = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle.get(), desc, p.a.get(), p.b.get(), p.d.get(),
                                       p.d.get(), pref.get(), kRequested, results, &returned);
    // A bias epilogue the library rejects, as NOT_SUPPORTED or otherwise
    // (INVALID_VALUE on some versions, as GemmContext found), is remembered
    // as unsupported: the caller adds the bias itself. A plain GEMM must run.
    if (st != CUBLAS_STATUS_SUCCESS && g.bias) return plans.emplace(key, std::move(p)).first->second;
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) fail("cuBLASLt has no algorithm for ", describe(g));
    CUBLAS_CHECK(st);
    for (int i = 0; i < returned && !p.supported; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= ws) {
        p.algo = results[i].algo;
        p.supported = true;
      }
    if (!p.supported && !g.bias)
      fail("cuBLASLt has no algorithm within the workspace for ", describe(g));
    return plans.emplace(key, std::move(p)).first->second;
  }

  // cuBLASLt's A is our B: its A scale is ours of B, and the other way.
  // The bias runs along cuBLASLt's D rows, our columns.
  static void set_pointers(cublasLtMatmulDesc_t desc, const Fp8GemmArgs& g) {
    const void* a = g.b_scale;
    const void* b = g.a_scale;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a, sizeof a));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b, sizeof b));
    if (g.bias)
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                                  sizeof g.bias));
  }
};

Fp8GemmContext::Fp8GemmContext(size_t workspace_bytes)
    : impl_(std::make_unique<Impl>(workspace_bytes)) {}
Fp8GemmContext::~Fp8GemmContext() = default;

bool Fp8GemmContext::supported(const Fp8GemmArgs& args) {
  const Fp8GemmArgs g = validated(args);
  if (g.M == 0 || g.N == 0) return true;
  return impl_->plan_for(g).supported;
}

void Fp8GemmContext::run(const Fp8GemmArgs& args, cudaStream_t stream) {
  const Fp8GemmArgs g = validated(args);
  if (g.M == 0 || g.N == 0) return;
  Plan& p = impl_->plan_for(g);
  if (!p.supported) fail("cuBLASLt has no algorithm for ", describe(g));
  Impl::set_pointers(p.desc.get(), g);
  const float alpha = 1.f, beta = g.accumulate ? 1.f : 0.f;
  CUBLAS_CHECK(cublasLtMatmul(impl_->handle.get(), p.desc.get(), &alpha, g.B, p.a.get(), g.A,
                              p.b.get(), &beta, g.D, p.d.get(), g.D, p.d.get(), &p.algo,
                              impl_->workspace.data(), impl_->workspace.bytes(), stream));
}

}  // namespace gt::cuda
