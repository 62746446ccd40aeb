// The emulated cuBLASLt, part 2: the validation the heuristic and
// cublasLtMatmul share, the emulated algorithm (what it records, what it
// lets cublasLtMatmul assume), cublasLtMatmulAlgoGetHeuristic, and
// cublasLtMatmul, which checks every operand against the device allocations
// and queues the GEMM on the stream (computed by cublaslt_compute.cpp in the
// device phase). The behaviours chosen here are listed at the top of
// cublaslt.cpp.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "config.hpp"
#include "cublaslt.hpp"
#include "diagnostics.hpp"
#include "emulator.hpp"

namespace gt::emu::lt {

namespace {

// ---- validation shared by the heuristic and cublasLtMatmul -------------------------

std::string describe(const Layout& l) {
  return std::to_string(l.rows) + "x" + std::to_string(l.cols) + " ld " + std::to_string(l.ld) +
         " " + type_name(l.type);
}

cublasStatus_t check_layout(const std::string& api, const char* name, const Layout& l) {
  const std::string what = std::string("matrix ") + name + " (" + describe(l) + ")";
  if (l.order != CUBLASLT_ORDER_COL)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  what + ": order " + std::to_string(l.order) +
                      " (only CUBLASLT_ORDER_COL is emulated)");
  if (l.batch_count != 1)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  what + ": batch count " + std::to_string(l.batch_count) +
                      " (batches are not emulated)");
  if (!emulated_type(l.type) && !fp8_type(l.type))
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  what + ": only fp32, bf16 and (A, B) fp8 e4m3/e5m2 are emulated");
  if (l.rows == 0 || l.cols == 0)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, what + ": zero-sized GEMMs are not emulated");
  if (l.rows > INT32_MAX || l.cols > INT32_MAX)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, what + ": a dimension exceeds int32");
  if (l.ld < 0 || static_cast<uint64_t>(l.ld) < l.rows)
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                  what + ": the leading dimension must be >= rows (column-major)");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_op(const std::string& api, const char* name, int32_t op) {
  if (op == CUBLAS_OP_N || op == CUBLAS_OP_T) return CUBLAS_STATUS_SUCCESS;
  if (op == CUBLAS_OP_C || op == CUBLAS_OP_CONJG)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  std::string(name) + " = " + std::to_string(op) + " (only N and T are emulated)");
  return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                std::string(name) + " = " + std::to_string(op) + " is not a cublasOperation_t");
}

bool scale_mode_known(int32_t mode) {
  return mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
         mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
}

// The fp8 rules (cublaslt.cpp, assumptions 15-18), for a GEMM with an fp8
// operand.
cublasStatus_t validate_fp8(const std::string& api, const MatmulDesc& d, const Layout& a,
                            const Layout& b, const Layout& c, const Layout& dl) {
  if (!fp8_type(a.type) || !fp8_type(b.type))
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "fp8 needs both A and B in fp8: A is " + type_name(a.type) + ", B is " +
                      type_name(b.type));
  if (a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, "A and B cannot both be CUDA_R_8F_E5M2");
  if (d.compute != CUBLAS_COMPUTE_32F)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, "fp8 needs compute type CUBLAS_COMPUTE_32F");
  if (d.trans_a != CUBLAS_OP_T || d.trans_b != CUBLAS_OP_N)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "fp8 needs the TN layout: A transposed (TRANSA = T) and B not (TRANSB = N)");
  if (!emulated_type(c.type) || !emulated_type(dl.type))
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "fp8 with C " + type_name(c.type) + " and D " + type_name(dl.type) +
                      " (emulated: bf16 or fp32 outputs)");
  if (a.ld % 16 != 0 || b.ld % 16 != 0)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "fp8 leading dimensions must be multiples of 16, A's is " +
                      std::to_string(a.ld) + " and B's " + std::to_string(b.ld));
  if (!scale_mode_known(d.a_scale_mode) || !scale_mode_known(d.b_scale_mode))
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "scale modes " + std::to_string(d.a_scale_mode) + " and " +
                      std::to_string(d.b_scale_mode) +
                      " (emulated: SCALAR_32F and OUTER_VEC_32F)");
  if (d.a_scale_mode != d.b_scale_mode)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, "A and B in different scale modes");
  if (d.a_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F && (!d.a_scale || !d.b_scale))
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                  "OUTER_VEC_32F scaling needs both A_SCALE_POINTER and B_SCALE_POINTER");
  if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "epilogue " + std::to_string(d.epilogue) +
                      " with fp8 operands (emulated: DEFAULT and BIAS)");
  // The bias is D's type; cublasLt.h excepts fp8 kernels with an fp32 (or
  // fp8) D, where a bf16 bias is taken here (assumption 18).
  if (d.epilogue == CUBLASLT_EPILOGUE_BIAS && d.bias_type != -1 && d.bias_type != dl.type &&
      !(dl.type == CUDA_R_32F && d.bias_type == CUDA_R_16BF))
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "bias type " + type_name(d.bias_type) + " with D " + type_name(dl.type) +
                      " and fp8 operands (the bias is D's type; an fp32 D also takes bf16)");
  return CUBLAS_STATUS_SUCCESS;
}

// Checks the configuration and fills everything of `job` that does not come
// from the call's pointers and scalars.
cublasStatus_t validate(const std::string& api, const MatmulDesc& d, const Layout& a,
                        const Layout& b, const Layout& c, const Layout& dl, GemmJob* job) {
  if (d.compute != CUBLAS_COMPUTE_32F && d.compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "compute type " + std::to_string(d.compute) +
                      " (only CUBLAS_COMPUTE_32F and CUBLAS_COMPUTE_32F_FAST_TF32 are emulated)");
  if (d.scale != CUDA_R_32F)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "scale type " + type_name(d.scale) + " (only CUDA_R_32F is emulated)");
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "pointer mode " + std::to_string(d.pointer_mode) +
                      " (only CUBLASLT_POINTER_MODE_HOST is emulated)");
  if (cublasStatus_t st = check_op(api, "CUBLASLT_MATMUL_DESC_TRANSA", d.trans_a)) return st;
  if (cublasStatus_t st = check_op(api, "CUBLASLT_MATMUL_DESC_TRANSB", d.trans_b)) return st;
  if (d.trans_c != CUBLAS_OP_N)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, "CUBLASLT_MATMUL_DESC_TRANSC must be N");
  if (cublasStatus_t st = check_layout(api, "A", a)) return st;
  if (cublasStatus_t st = check_layout(api, "B", b)) return st;
  if (cublasStatus_t st = check_layout(api, "C", c)) return st;
  if (cublasStatus_t st = check_layout(api, "D", dl)) return st;
  if (d.c_scale || d.d_scale || d.amax_d)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "C_SCALE_POINTER, D_SCALE_POINTER and AMAX_D_POINTER are not emulated (they "
                  "serve fp8 outputs)");
  const bool fp8 = fp8_type(a.type) || fp8_type(b.type);
  if (fp8) {
    if (cublasStatus_t st = validate_fp8(api, d, a, b, c, dl)) return st;
  } else {
    if (a.type != b.type)
      return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                    "A is " + type_name(a.type) + " but B is " + type_name(b.type));
    if (d.a_scale || d.b_scale || d.a_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F ||
        d.b_scale_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
      return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                    "A/B scale pointers or modes on a GEMM of " + type_name(a.type) +
                        " operands (they apply to fp8 A and B)");
  }
  if (c.type != dl.type)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "C is " + type_name(c.type) + " but D is " + type_name(dl.type));
  if (a.type == CUDA_R_32F && dl.type == CUDA_R_16BF)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, "fp32 inputs with a bf16 output");
  if (d.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type != CUDA_R_32F)
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "CUBLAS_COMPUTE_32F_FAST_TF32 needs fp32 inputs, A and B are " +
                      type_name(a.type));

  const bool ta = d.trans_a == CUBLAS_OP_T, tb = d.trans_b == CUBLAS_OP_T;
  const int64_t m = static_cast<int64_t>(ta ? a.cols : a.rows);
  const int64_t k = static_cast<int64_t>(ta ? a.rows : a.cols);
  const int64_t kb = static_cast<int64_t>(tb ? b.cols : b.rows);
  const int64_t n = static_cast<int64_t>(tb ? b.rows : b.cols);
  const std::string shapes = "op(A) " + std::to_string(m) + "x" + std::to_string(k) + ", op(B) " +
                             std::to_string(kb) + "x" + std::to_string(n) + ", C " +
                             std::to_string(c.rows) + "x" + std::to_string(c.cols) + ", D " +
                             std::to_string(dl.rows) + "x" + std::to_string(dl.cols);
  if (kb != k || static_cast<int64_t>(c.rows) != m || static_cast<int64_t>(c.cols) != n ||
      static_cast<int64_t>(dl.rows) != m || static_cast<int64_t>(dl.cols) != n)
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE, "inconsistent shapes: " + shapes);

  const uint32_t e = d.epilogue;
  if (!emulated_epilogue(e))
    return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                  "epilogue " + std::to_string(e) +
                      " (emulated: DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, "
                      "BGRADA, BGRADB)");
  *job = GemmJob{};
  job->bias_type = job->aux_type = static_cast<cudaDataType_t>(dl.type);
  if (epilogue_uses_bias(e)) {
    if (!d.bias)
      return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                    "epilogue " + std::to_string(e) + " needs CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    if (d.bias_type != -1) {
      if (!emulated_type(d.bias_type))
        return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, "bias type " + type_name(d.bias_type));
      job->bias_type = static_cast<cudaDataType_t>(d.bias_type);
    }
  }
  if (epilogue_uses_aux(e)) {
    if (!d.aux)
      return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                    "epilogue " + std::to_string(e) +
                        " needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
    if (d.aux_ld < m)
      return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                    "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = " + std::to_string(d.aux_ld) +
                        " must be >= the rows of D (" + std::to_string(m) + ")");
    if (d.aux_type != -1) {
      if (!emulated_type(d.aux_type))
        return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, "aux type " + type_name(d.aux_type));
      job->aux_type = static_cast<cudaDataType_t>(d.aux_type);
    }
    job->aux_ld = d.aux_ld;
  }
  job->m = m;
  job->n = n;
  job->k = k;
  job->trans_a = ta;
  job->trans_b = tb;
  job->tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  job->ab_type = static_cast<cudaDataType_t>(a.type);
  job->b_type = static_cast<cudaDataType_t>(b.type);
  job->a_scale_vec = d.a_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  job->b_scale_vec = d.b_scale_mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  job->lda = a.ld;
  job->ldb = b.ld;
  job->cd_type = static_cast<cudaDataType_t>(dl.type);
  job->ldc = c.ld;
  job->ldd = dl.ld;
  job->epilogue = e;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the emulated algorithm -------------------------------------------------------
// data[0] marks it as ours, data[1] fingerprints the configuration it was
// chosen for (types, transposes, epilogue), data[2] holds the alignments of
// A, B, C, D it may assume (16 bits each), data[3] those of bias and aux.
constexpr uint64_t kAlgoMagic = 0x676d652d4c746c41ull;  // "gme-LtlA"

uint64_t fingerprint(const GemmJob& j) {
  return static_cast<uint64_t>(j.ab_type) | static_cast<uint64_t>(j.cd_type) << 8 |
         static_cast<uint64_t>(j.bias_type) << 16 | static_cast<uint64_t>(j.aux_type) << 24 |
         static_cast<uint64_t>(j.epilogue) << 32 | static_cast<uint64_t>(j.trans_a) << 48 |
         static_cast<uint64_t>(j.trans_b) << 49 | static_cast<uint64_t>(j.tf32) << 50 |
         static_cast<uint64_t>(j.b_type) << 51 | static_cast<uint64_t>(j.a_scale_vec) << 59 |
         static_cast<uint64_t>(j.b_scale_vec) << 60;
}

// The largest power of two <= 256 dividing the address.
uint32_t address_alignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && addr % a != 0) a /= 2;
  return a;
}

enum Operand { kA, kB, kC, kD, kBias, kAux, kAScale, kBScale, kOperands };
const char* const kOperandNames[kOperands] = {"A", "B", "C", "D", "bias", "aux",
                                              "A's scale", "B's scale"};

cublasLtMatmulAlgo_t make_algo(const GemmJob& j, const MatmulDesc& d, const Preference& p) {
  cublasLtMatmulAlgo_t algo;
  std::memset(&algo, 0, sizeof algo);
  algo.data[0] = kAlgoMagic;
  algo.data[1] = fingerprint(j);
  // No algorithm needs more than 256 bytes (the documented default).
  for (int i = 0; i < 4; ++i)
    algo.data[2] |= static_cast<uint64_t>(std::min(p.align[i], 256u)) << (16 * i);
  const uint32_t bias = epilogue_uses_bias(j.epilogue) ? address_alignment(d.bias) : 1;
  const uint32_t aux = epilogue_uses_aux(j.epilogue) ? address_alignment(d.aux) : 1;
  algo.data[3] = bias | static_cast<uint64_t>(aux) << 16;
  return algo;
}

uint32_t algo_alignment(const cublasLtMatmulAlgo_t& algo, Operand o) {
  if (o >= kAScale) return 1;  // scales: their element size only
  const uint64_t word = o < kBias ? algo.data[2] : algo.data[3];
  const int shift = 16 * (o < kBias ? o : o - kBias);
  return static_cast<uint32_t>((word >> shift) & 0xFFFF);
}

bool refuses_epilogue(const MatmulDesc& d) {
  return config().cublaslt_refuse_epilogues && d.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
}

// Checks that [p, p + bytes) lies in one device allocation on the stream's
// device and that p has the alignment the algorithm may assume.
cublasStatus_t check_operand(const std::string& api, Operand o, const void* p, size_t bytes,
                             uint32_t align, int device) {
  const std::string name = kOperandNames[o];
  if (!p) return refuse(api, CUBLAS_STATUS_INVALID_VALUE, name + " is null");
  if (reinterpret_cast<uintptr_t>(p) % align != 0)
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                  name + " at " + address(p) + " is " + std::to_string(address_alignment(p)) +
                      "-byte aligned, the algorithm assumes " + std::to_string(align) +
                      " (its element size, the preference's MIN_ALIGNMENT, or the pointer's "
                      "alignment at heuristic time)");
  const Allocation* a = device_range(p, bytes);
  if (!a) {
    const Allocation* any = Emulator::get().memory.find(p);
    if (any && !any->pinned) {
      const auto left = any->base + any->bytes - static_cast<const unsigned char*>(p);
      return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                    name + " needs " + std::to_string(bytes) + " bytes from " + address(p) +
                        " but its device allocation of " + std::to_string(any->bytes) +
                        " bytes ends " + std::to_string(left) + " bytes after it");
    }
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                  name + " at " + address(p) + " is not device memory (host memory, or freed)");
  }
  if (a->device != device)
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                  name + " lies on device " + std::to_string(a->device) +
                      " but the stream belongs to device " + std::to_string(device));
  return CUBLAS_STATUS_SUCCESS;
}

// Bytes of a column-major rows x cols matrix: the last column needs only `rows` elements.
size_t span_bytes(int64_t rows, int64_t cols, int64_t ld, int64_t type) {
  return static_cast<size_t>((cols - 1) * ld + rows) * type_size(type);
}

bool is_device_memory(const void* p) {
  const Allocation* a = Emulator::get().memory.find(p);
  return a && !a->pinned;
}

// The live objects behind a call's handles, or the refusal (reported).
cublasStatus_t live_objects(const std::string& api, cublasLtHandle_t handle,
                            cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
                            cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc,
                            cublasLtMatrixLayout_t d_desc, const MatmulDesc** d, const Layout** a,
                            const Layout** b, const Layout** c, const Layout** dl) {
  if (!lookup<Context>(handle))
    return refuse(api, CUBLAS_STATUS_NOT_INITIALIZED, "not a live cuBLASLt handle");
  *d = lookup<MatmulDesc>(desc);
  *a = lookup<Layout>(a_desc);
  *b = lookup<Layout>(b_desc);
  *c = lookup<Layout>(c_desc);
  *dl = lookup<Layout>(d_desc);
  if (!*d || !*a || !*b || !*c || !*dl)
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                  "the matmul descriptor or a layout is not a live descriptor");
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

}  // namespace gt::emu::lt

using gt::emu::Emulator;
using gt::emu::Lock;
namespace lt = gt::emu::lt;

extern "C" {
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle,
                                              cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a_desc,
                                              cublasLtMatrixLayout_t b_desc,
                                              cublasLtMatrixLayout_t c_desc,
                                              cublasLtMatrixLayout_t d_desc,
                                              cublasLtMatmulPreference_t preference,
                                              int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  Lock lock(Emulator::get().mu);
  const std::string api = "cublasLtMatmulAlgoGetHeuristic";
  if (returned) *returned = 0;
  const lt::MatmulDesc* d = nullptr;
  const lt::Layout *a = nullptr, *b = nullptr, *c = nullptr, *dl = nullptr;
  if (const cublasStatus_t st =
          lt::live_objects(api, handle, desc, a_desc, b_desc, c_desc, d_desc, &d, &a, &b, &c, &dl))
    return st;
  lt::Preference defaults;
  const lt::Preference* p = preference ? lt::lookup<lt::Preference>(preference) : &defaults;
  if (!p) return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE, "not a live preference");
  if (requested <= 0 || !results || !returned)
    return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                      "requestedAlgoCount must be > 0 with a result array and a count pointer");
  // The switch makes callers' unfused fallbacks run (no report: it is asked for).
  if (lt::refuses_epilogue(*d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  lt::GemmJob job;
  if (cublasStatus_t st = lt::validate(api, *d, *a, *b, *c, *dl, &job)) return st;
  if (p->search_mode != CUBLASLT_SEARCH_BEST_FIT)
    return lt::refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                      "search mode " + std::to_string(p->search_mode) + " is not emulated");
  for (int i = 0; i < 4; ++i) {
    const uint32_t al = p->align[i];
    if (al == 0 || (al & (al - 1)) != 0)
      return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                        std::string("MIN_ALIGNMENT_") + lt::kOperandNames[i] + "_BYTES = " +
                            std::to_string(al) + " is not a power of two");
  }
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].algo = lt::make_algo(job, *d, *p);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t a_desc,
                              const void* B, cublasLtMatrixLayout_t b_desc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c_desc, void* D,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  Emulator& e = Emulator::get();
  Lock lock(e.mu);
  const std::string api = "cublasLtMatmul";
  if (gt::emu::sticky_error() != cudaSuccess)
    return lt::refuse(api, CUBLAS_STATUS_EXECUTION_FAILED, "the device has faulted earlier");
  const lt::MatmulDesc* d = nullptr;
  const lt::Layout *a = nullptr, *b = nullptr, *c = nullptr, *dl = nullptr;
  if (const cublasStatus_t st =
          lt::live_objects(api, handle, desc, a_desc, b_desc, c_desc, d_desc, &d, &a, &b, &c, &dl))
    return st;
  if (!alpha || !beta) return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE, "null alpha or beta");
  if (lt::is_device_memory(alpha) || lt::is_device_memory(beta))
    return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                      "alpha or beta points to device memory, but the pointer mode is HOST");
  // Without an algorithm the library runs its heuristic itself, switch included.
  if (!algo && lt::refuses_epilogue(*d))
    return lt::refuse(api, CUBLAS_STATUS_NOT_SUPPORTED,
                      "GT_EMU_CUBLASLT_REFUSE_EPILOGUES: no algorithm for a fused epilogue");
  lt::GemmJob job;
  if (cublasStatus_t st = lt::validate(api, *d, *a, *b, *c, *dl, &job)) return st;

  // fp8 operands: 16-byte aligned (assumption 16).
  const bool fp8 = lt::fp8_type(job.ab_type);
  uint32_t align[lt::kOperands] = {
      fp8 ? 16u : static_cast<uint32_t>(lt::type_size(job.ab_type)),
      fp8 ? 16u : static_cast<uint32_t>(lt::type_size(job.b_type)),
      static_cast<uint32_t>(lt::type_size(job.cd_type)),
      static_cast<uint32_t>(lt::type_size(job.cd_type)),
      static_cast<uint32_t>(lt::type_size(job.bias_type)),
      static_cast<uint32_t>(lt::type_size(job.aux_type)),
      4u, 4u};
  if (algo) {
    if (algo->data[0] != lt::kAlgoMagic)
      return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                        "the algorithm was not returned by cublasLtMatmulAlgoGetHeuristic");
    if (algo->data[1] != lt::fingerprint(job))
      return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                        "the algorithm was chosen for other types, transposes or epilogue");
    for (int o = 0; o < lt::kOperands; ++o)
      align[o] = std::max(align[o], lt::algo_alignment(*algo, static_cast<lt::Operand>(o)));
  }

  CUstream_st* s = gt::emu::stream_for(stream, "cublasLtMatmul");
  if (!s) return CUBLAS_STATUS_INVALID_VALUE;  // reported by stream_for
  job.alpha = *static_cast<const float*>(alpha);
  job.beta = *static_cast<const float*>(beta);
  job.a = A;
  job.b = B;
  job.c = C;
  job.d = D;
  job.bias = d->bias;
  job.aux = d->aux;
  job.a_scale = static_cast<const float*>(d->a_scale);
  job.b_scale = static_cast<const float*>(d->b_scale);

  const int64_t m = job.m, n = job.n;
  auto check = [&](lt::Operand o, const void* p, size_t bytes) {
    return lt::check_operand(api, o, p, bytes, align[o], s->device);
  };
  if (auto st = check(lt::kA, A, lt::span_bytes(a->rows, a->cols, a->ld, a->type))) return st;
  if (auto st = check(lt::kB, B, lt::span_bytes(b->rows, b->cols, b->ld, b->type))) return st;
  // C is only read when beta != 0 (it may then be null); checked whenever given.
  if (C || job.beta != 0.f)
    if (auto st = check(lt::kC, C, lt::span_bytes(m, n, c->ld, c->type))) return st;
  if (auto st = check(lt::kD, D, lt::span_bytes(m, n, dl->ld, dl->type))) return st;
  if (C == D && c->ld != dl->ld)
    return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                      "C and D are the same memory with different leading dimensions");
  if (lt::epilogue_uses_bias(job.epilogue)) {
    const int64_t len = job.epilogue == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    if (auto st = check(lt::kBias, job.bias, len * lt::type_size(job.bias_type))) return st;
  }
  if (lt::epilogue_uses_aux(job.epilogue))
    if (auto st = check(lt::kAux, job.aux, lt::span_bytes(m, n, job.aux_ld, job.aux_type)))
      return st;
  // Scales are device memory: one fp32 value, or one per row of D (A's) and
  // per column (B's) under outer-vector scaling.
  if (job.a_scale)
    if (auto st = check(lt::kAScale, job.a_scale, (job.a_scale_vec ? m : 1) * sizeof(float)))
      return st;
  if (job.b_scale)
    if (auto st = check(lt::kBScale, job.b_scale, (job.b_scale_vec ? n : 1) * sizeof(float)))
      return st;
  if (workspace_bytes > 0) {
    if (!workspace)
      return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                        "a null workspace of " + std::to_string(workspace_bytes) + " bytes");
    const gt::emu::Allocation* w = gt::emu::device_range(workspace, workspace_bytes);
    if (!w || w->device != s->device)
      return lt::refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                        "the workspace's " + std::to_string(workspace_bytes) +
                            " bytes are not one device allocation on the stream's device");
  }

  const std::string what = "cublasLtMatmul m=" + std::to_string(m) + " n=" + std::to_string(n) +
                           " k=" + std::to_string(job.k) +
                           " epilogue=" + std::to_string(job.epilogue);
  e.streams.enqueue_task(s, what, [job] { lt::run_gemm(job); });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
