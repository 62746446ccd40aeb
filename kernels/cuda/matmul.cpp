// GemmContext: row-major GEMMs on cuBLASLt with a per-shape plan cache (see
// matmul.cuh for the invariants). Host code only: compiled by the C++
// compiler, it enqueues cuBLASLt kernels on the caller's stream.
//
// Every cuBLASLt descriptor is owned by a unique_ptr with its destroy
// function as deleter; a plan (descriptor, three layouts, chosen algorithm)
// lives in the cache until the context goes.
#include "kernels/cuda/matmul.cuh"

#include <cublasLt.h>

#include <map>
#include <tuple>

#include "kernels/cuda/cublaslt_objects.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_resources.hpp"

namespace gt::cuda {

namespace {

bool uses_bias(GemmEpilogue e) {
  return e == GemmEpilogue::bias || e == GemmEpilogue::gelu_bias ||
         e == GemmEpilogue::dgelu_bgrad || e == GemmEpilogue::bgrad_a;
}
bool uses_aux(GemmEpilogue e) {
  return e == GemmEpilogue::gelu || e == GemmEpilogue::gelu_bias || e == GemmEpilogue::dgelu ||
         e == GemmEpilogue::dgelu_bgrad;
}

cublasLtEpilogue_t to_cublaslt(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::gelu: return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::gelu_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::dgelu_bgrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    // Row-major A is cuBLASLt's B (the operands swap, see Impl::plan_for).
    case GemmEpilogue::bgrad_a: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

cudaDataType_t to_cuda(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// Largest power of two <= 256 dividing the address and the row stride in
// bytes: the alignment cuBLASLt may assume for this operand.
uint32_t alignment(const void* p, int64_t ld_bytes) {
  uint32_t a = 256;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (a > 1 && (addr % a != 0 || ld_bytes % static_cast<int64_t>(a) != 0)) a /= 2;
  return a;
}

struct Key {
  bool ta, tb, tf32;
  int64_t M, N, K, lda, ldb, ldd, ld_aux;
  DType ab, d;
  GemmEpilogue ep;
  bool fp32_bias;
  uint32_t align_a, align_b, align_d, align_bias, align_aux;
  auto tie() const {
    return std::tie(ta, tb, tf32, M, N, K, lda, ldb, ldd, ld_aux, ab, d, ep, fp32_bias, align_a,
                    align_b, align_d, align_bias, align_aux);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  bool supported = false;
  MatmulDescPtr desc;
  LayoutPtr a, b, d;  // cuBLASLt's A (= our B), B (= our A), C = D
  cublasLtMatmulAlgo_t algo{};
};

// Fills the packed strides and throws on anything cuBLASLt would reject
// with a less helpful message.
GemmArgs validated(GemmArgs g) {
  const std::string what = describe(g);
  if (g.M < 0 || g.N < 0 || g.K < 0) fail("gemm: negative size in ", what);
  if (g.ab_type == DType::i32 || g.d_type == DType::i32)
    fail("gemm: int32 operands are not supported: ", what);
  if (g.ab_type == DType::f32 && g.d_type == DType::bf16)
    fail("gemm: fp32 inputs with a bf16 output are not supported: ", what);
  const int64_t a_cols = g.trans_a ? g.M : g.K, b_cols = g.trans_b ? g.K : g.N;
  if (g.lda == 0) g.lda = a_cols;
  if (g.ldb == 0) g.ldb = b_cols;
  if (g.ldd == 0) g.ldd = g.N;
  if (g.lda < a_cols || g.ldb < b_cols || g.ldd < g.N)
    fail("gemm: a row stride is smaller than the row: ", describe(g));
  if (g.M == 0 || g.N == 0) return g;
  if (g.K == 0) fail("gemm: K = 0 is not supported: ", what);
  if (!g.A || !g.B || !g.D) fail("gemm: null operand in ", what);
  if (uses_bias(g.epilogue) && !g.bias)
    fail("gemm: epilogue ", gemm_epilogue_name(g.epilogue), " needs a bias vector: ", what);
  if (uses_aux(g.epilogue)) {
    if (!g.aux) fail("gemm: epilogue ", gemm_epilogue_name(g.epilogue), " needs aux: ", what);
    if (g.ld_aux == 0) g.ld_aux = g.N;
    if (g.ld_aux < g.N || g.ld_aux % 8 != 0)
      fail("gemm: the GELU aux row stride ", g.ld_aux,
           " must be >= N and a multiple of 8 (cuBLASLt): ", what);
  } else {
    g.ld_aux = 0;
  }
  return g;
}

}  // namespace

const char* gemm_epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::none: return "none";
    case GemmEpilogue::bias: return "bias";
    case GemmEpilogue::gelu: return "gelu";
    case GemmEpilogue::gelu_bias: return "gelu_bias";
    case GemmEpilogue::dgelu: return "dgelu";
    case GemmEpilogue::dgelu_bgrad: return "dgelu_bgrad";
    case GemmEpilogue::bgrad_a: return "bgrad_a";
  }
  return "?";
}

std::string describe(const GemmArgs& g) {
  return ::gt::detail::concat("gemm M=", g.M, " N=", g.N, " K=", g.K, " trans_a=", g.trans_a,
                              " trans_b=", g.trans_b, " lda=", g.lda, " ldb=", g.ldb,
                              " ldd=", g.ldd, " ", dtype_name(g.ab_type), "->",
                              dtype_name(g.d_type), " epilogue=", gemm_epilogue_name(g.epilogue),
                              g.fp32_bias ? " (fp32 bias)" : "", " beta=", g.beta);
}

struct GemmContext::Impl {
  // Declared in teardown order (reverse): plans go first, then the workspace,
  // then the handle they were created with.
  GemmOptions options;
  CublasLtHandle handle;
  DeviceBuffer workspace;
  std::map<Key, Plan> plans;

  explicit Impl(const GemmOptions& o) : options(o), workspace(o.workspace_bytes) {}

  Key key_for(const GemmArgs& g) const {
    const int64_t ab = static_cast<int64_t>(dtype_size(g.ab_type));
    const int64_t d = static_cast<int64_t>(dtype_size(g.d_type));
    Key k{};
    k.ta = g.trans_a;
    k.tb = g.trans_b;
    k.tf32 = options.allow_tf32 && g.ab_type == DType::f32;
    k.M = g.M;
    k.N = g.N;
    k.K = g.K;
    k.lda = g.lda;
    k.ldb = g.ldb;
    k.ldd = g.ldd;
    k.ld_aux = g.ld_aux;
    k.ab = g.ab_type;
    k.d = g.d_type;
    k.ep = g.epilogue;
    k.fp32_bias = uses_bias(g.epilogue) && g.fp32_bias && g.d_type != DType::f32;
    k.align_a = alignment(g.A, g.lda * ab);
    k.align_b = alignment(g.B, g.ldb * ab);
    k.align_d = alignment(g.D, g.ldd * d);
    k.align_bias = uses_bias(g.epilogue) ? alignment(g.bias, 0) : 0;
    k.align_aux = uses_aux(g.epilogue) ? alignment(g.aux, g.ld_aux * d) : 0;
    return k;
  }

  // The pointers cuBLASLt reads from the descriptor (also at heuristic time,
  // for their alignment).
  static void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const GemmArgs& g) {
    if (uses_bias(g.epilogue)) {
      void* bias = g.bias;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof(bias)));
    }
    if (uses_aux(g.epilogue)) {
      void* aux = g.aux;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                  &aux, sizeof(aux)));
    }
  }

  Plan& plan_for(const GemmArgs& g) {
    const Key key = key_for(g);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;

    Plan p;
    // Column-major view: D^T (N,M) = op(B)^T (N,K) op(A)^T (K,M). cuBLASLt's
    // A is our B, its B is our A, and each keeps its own transpose flag.
    const cublasComputeType_t compute =
        key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t desc = nullptr;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
    p.desc.reset(desc);
    const int32_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int32_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a,
                                                sizeof(op_a)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b,
                                                sizeof(op_b)));
    const uint32_t epilogue = to_cublaslt(g.epilogue);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                sizeof(epilogue)));
    if (uses_aux(g.epilogue)) {
      const int64_t ld_aux = g.ld_aux;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                  &ld_aux, sizeof(ld_aux)));
    }
    if (key.fp32_bias) {  // otherwise the bias has D's type (cuBLASLt's default)
      const int32_t bias_type = CUDA_R_32F;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                  &bias_type, sizeof(bias_type)));
    }
    set_epilogue_pointers(desc, g);

    // Stored row-major (rows, cols, ld) is column-major (cols, rows, ld).
    auto layout = [](DType t, int64_t rows, int64_t cols, int64_t ld) {
      cublasLtMatrixLayout_t l = nullptr;
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, to_cuda(t), static_cast<uint64_t>(cols),
                                              static_cast<uint64_t>(rows), ld));
      return LayoutPtr(l);
    };
    p.a = g.trans_b ? layout(g.ab_type, g.N, g.K, g.ldb) : layout(g.ab_type, g.K, g.N, g.ldb);
    p.b = g.trans_a ? layout(g.ab_type, g.K, g.M, g.lda) : layout(g.ab_type, g.M, g.K, g.lda);
    p.d = layout(g.d_type, g.M, g.N, g.ldd);

    cublasLtMatmulPreference_t pref_raw = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_raw));
    PreferencePtr pref(pref_raw);
    const uint64_t ws = workspace.bytes();
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // Our A and B swap roles in cuBLASLt.
    const uint32_t align_a = key.align_b, align_b = key.align_a, align_cd = key.align_d;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd, sizeof(align_cd)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd, sizeof(align_cd)));

    constexpr int kRequested = 8;
    cublasLtMatmulHeuristicResult_t results[kRequested] = {};
    int returned = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle.get(), desc, p.a.get(), p.b.get(), p.d.get(),
                                       p.d.get(), pref.get(), kRequested, results, &returned);
    // NOT_SUPPORTED means "no heuristic for this configuration": an
    // unsupported shape, remembered as such. A fused epilogue the library
    // rejects in any other way (INVALID_VALUE on some versions) is remembered
    // as unsupported too: callers fall back to the plain GEMM plus our kernel.
    // For a plain GEMM anything else is an error.
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED &&
        key.ep == GemmEpilogue::none)
      CUBLAS_CHECK(st);
    if (st == CUBLAS_STATUS_SUCCESS) {
      for (int i = 0; i < returned; ++i) {  // ordered fastest first
        if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= ws) {
          p.algo = results[i].algo;
          p.supported = true;
          break;
        }
      }
    }
    return plans.emplace(key, std::move(p)).first->second;
  }
};

GemmContext::GemmContext(const GemmOptions& options) : impl_(std::make_unique<Impl>(options)) {}
GemmContext::~GemmContext() = default;
GemmContext::GemmContext(GemmContext&&) noexcept = default;
GemmContext& GemmContext::operator=(GemmContext&&) noexcept = default;

size_t GemmContext::cached_shapes() const { return impl_->plans.size(); }
const GemmOptions& GemmContext::options() const { return impl_->options; }

bool GemmContext::supported(const GemmArgs& args) {
  const GemmArgs g = validated(args);
  if (g.M == 0 || g.N == 0) return true;
  return impl_->plan_for(g).supported;
}

void GemmContext::run(const GemmArgs& args, cudaStream_t stream) {
  const GemmArgs g = validated(args);
  if (g.M == 0 || g.N == 0) return;
  Plan& p = impl_->plan_for(g);
  if (!p.supported) fail("cuBLASLt has no algorithm for ", describe(g));
  Impl::set_epilogue_pointers(p.desc.get(), g);
  const float alpha = g.alpha, beta = g.beta;
  CUBLAS_CHECK(cublasLtMatmul(impl_->handle.get(), p.desc.get(), &alpha, g.B, p.a.get(), g.A,
                              p.b.get(), &beta, g.D, p.d.get(), g.D, p.d.get(), &p.algo,
                              impl_->workspace.data(), impl_->workspace.bytes(), stream));
}

}  // namespace gt::cuda
