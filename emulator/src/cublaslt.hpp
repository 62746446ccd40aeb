// What the three parts of the emulated cuBLASLt share: cublaslt.cpp (the
// objects behind the opaque handles, their attributes, status names),
// cublaslt_matmul.cpp (validation, the heuristic and cublasLtMatmul, which
// fills a GemmJob and queues it) and cublaslt_compute.cpp (runs a GemmJob in
// the device phase). Nothing else includes this header.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace gt::emu::lt {

// ---- the objects behind the opaque handles -----------------------------------------
// Each handle is a pointer to one of these, cast to the opaque type.

struct Context {};

struct MatmulDesc {
  int32_t compute = CUBLAS_COMPUTE_32F;
  int32_t scale = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N, trans_c = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t aux_type = -1;   // -1: D's type
  int32_t bias_type = -1;  // -1: D's type
  // fp8 (cublaslt.cpp, assumptions 15-19): device pointers to the scales
  // that multiply op(A) op(B) (null: 1), their modes
  // (cublasLtMatmulMatrixScale_t), fast accumulation; C and D scales and
  // D's amax are for fp8 outputs, which are not emulated (refused if set).
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  const void* c_scale = nullptr;
  const void* d_scale = nullptr;
  void* amax_d = nullptr;
  int32_t a_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t b_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int8_t fast_accum = 0;
};

struct Layout {
  uint32_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // meaningless with one matrix, so any value is accepted
};

struct Preference {
  uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D (the documented defaults)
};

enum class Kind { context, desc, layout, preference };
template <typename T>
constexpr Kind kind_of();
template <>
inline constexpr Kind kind_of<Context>() { return Kind::context; }
template <>
inline constexpr Kind kind_of<MatmulDesc>() { return Kind::desc; }
template <>
inline constexpr Kind kind_of<Layout>() { return Kind::layout; }
template <>
inline constexpr Kind kind_of<Preference>() { return Kind::preference; }

// Every live object: a destroyed or forged handle is refused, never dereferenced.
std::map<const void*, Kind>& registry();

// The live object of type T behind handle h, or nullptr.
template <typename T>
T* lookup(const void* h) {
  auto it = registry().find(h);
  if (!h || it == registry().end() || it->second != kind_of<T>()) return nullptr;
  return static_cast<T*>(const_cast<void*>(h));
}

// ---- shared helpers (cublaslt.cpp) --------------------------------------------------

const char* status_name(cublasStatus_t s);
// Reports why a call fails (one "gt-emu: error:" line) and returns the status.
cublasStatus_t refuse(const std::string& api, cublasStatus_t st, const std::string& why);
std::string type_name(int64_t t);
inline bool emulated_type(int64_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }
// The 8-bit float types A and B may have (cuBLASLt's fp8 kernels, sm_89+).
inline bool fp8_type(int64_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
inline size_t type_size(int64_t t) {
  return fp8_type(t) ? 1 : t == CUDA_R_16BF ? 2 : 4;
}

// ---- the job the deferred task runs -------------------------------------------------

// Which epilogues read or write the bias vector and the GELU aux matrix.
inline bool epilogue_uses_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA ||
         e == CUBLASLT_EPILOGUE_BGRADB;
}
inline bool epilogue_uses_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
inline bool emulated_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || epilogue_uses_bias(e) || epilogue_uses_aux(e);
}

// One validated GEMM in cuBLASLt's column-major terms: D (m x n) =
// epilogue(alpha * op(A) (m x k) op(B) (k x n) + beta * C). Element (r, c) of
// a matrix X lies at X[r + c * ldx]. Everything is copied out of the
// descriptors at call time: the caller may destroy them before the task runs.
struct GemmJob {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool tf32 = false;  // CUBLAS_COMPUTE_32F_FAST_TF32: round fp32 inputs to TF32 first
  cudaDataType_t ab_type = CUDA_R_32F;  // A's type (and B's, but for fp8)
  cudaDataType_t b_type = CUDA_R_32F;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  cudaDataType_t cd_type = CUDA_R_32F;
  const void* c = nullptr;  // not read when beta == 0
  int64_t ldc = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  float alpha = 1.f, beta = 0.f;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;  // length m (n for BGRADB)
  cudaDataType_t bias_type = CUDA_R_32F;
  void* aux = nullptr;  // m x n, leading dimension aux_ld
  cudaDataType_t aux_type = CUDA_R_32F;
  int64_t aux_ld = 0;
  // fp8: scales of op(A)'s rows (m of them with outer-vector scaling, else
  // one) and of op(B)'s columns (n, else one); null: 1.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool a_scale_vec = false, b_scale_vec = false;
};

// Computes the job; device memory must be accessible (the device phase).
void run_gemm(const GemmJob& job);

}  // namespace gt::emu::lt
