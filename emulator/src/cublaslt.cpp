// The emulated cuBLASLt (the calls kernels/cuda/matmul.cpp's GemmContext
// makes), part 1: the objects behind the opaque handles (a registry refuses
// destroyed or forged ones), their create/destroy and attribute get/set
// entry points with the library's size checks, and the status names.
// cublaslt_matmul.cpp validates, answers the heuristic and queues
// cublasLtMatmul; cublaslt_compute.cpp does the arithmetic. Anything not
// emulated is refused loudly: one "gt-emu: error:" line naming it, then
// CUBLAS_STATUS_NOT_SUPPORTED.
//
// Assumptions the cuBLASLt documentation leaves open (cublasLt.h's comments
// are the spec). Each names the test in tests/cuda/test_cuda_matmul.cpp that
// checks it against the real library when a GPU is present:
//  1. Order of the epilogue terms: D = act(alpha * op(A)op(B) + beta * C + bias),
//     the bias (BIAS, GELU_AUX_BIAS) indexed by the row i of D (length m,
//     broadcast over columns), added after the beta term and before the
//     activation. Checked by ForwardFp32MatchesCpu (bias over D's rows),
//     GeluBiasEpilogueMatchesCpuMatmulThenGelu (bias before GELU) and
//     EpiloguesApplyToAlphaABPlusBetaCPlusBias (alpha, beta and bias together).
//  2. beta == 0 does not read C (NaN in C does not propagate); C may be D itself
//     when both have the same layout (in place). Checked by ForwardFp32MatchesCpu
//     (D = C poisoned with NaN, beta 0) and BackwardFp32AccumulatesLikeCpuFused-
//     AndUnfusedBiasGrad (beta 1 in place).
//  3. GELU is the tanh approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))),
//     and DGELU multiplies by the derivative of that same approximation (not of
//     the erf GELU). Evaluated here in fp32 with std::tanh. Checked by
//     GeluEpiloguesUseTheTanhApproximation.
//  4. GELU_AUX(_BIAS): aux holds the whole pre-activation, alpha*AB + beta*C
//     (+ bias), rounded to the aux type; D = gelu of the unrounded fp32
//     pre-activation. Checked by GeluBiasEpilogueMatchesCpuMatmulThenGelu (aux
//     = AB + bias), EpiloguesApplyToAlphaABPlusBetaCPlusBias (beta != 0) and
//     EpiloguesWithBf16InputsKeepBiasAndAuxInDsType (bf16 aux, to bf16 accuracy).
//  5. DGELU(_BGRAD): D = (alpha*AB + beta*C) * gelu'(aux), aux read in its type.
//     Checked by DgeluBgradEpilogueMatchesCpu and
//     EpiloguesApplyToAlphaABPlusBetaCPlusBias (alpha and beta != 1, 0).
//  6. DGELU_BGRAD's bias gradient is bias[i] = sum over the columns j of the
//     final (post-DGELU) D[i][j], summed in fp32 before D is rounded to its
//     type, and it is ASSIGNED, not accumulated. Checked by
//     DgeluBgradEpilogueMatchesCpu (sums of the post-DGELU values into a
//     NaN-poisoned vector) and EpiloguesWithBf16InputsKeepBiasAndAuxInDsType
//     (bf16 D; unrounded vs rounded sums agree only to bf16 accuracy there).
//  7. BGRADA / BGRADB: bias[i] = sum_p op(A)[i][p] (length m) / bias[j] = sum_p
//     op(B)[p][j] (length n): plain sums of the inputs as stored, not scaled by
//     alpha, independent of beta and C, ASSIGNED (not accumulated); D itself is
//     the plain alpha*AB + beta*C. Checked by BackwardFp32AccumulatesLikeCpu-
//     FusedAndUnfusedBiasGrad and BackwardBf16MatchesCpu (BGRADB through
//     CudaOps), and BiasGradientEpiloguesAreAssignedAndNotScaledByAlpha
//     (BGRADB with alpha 2, beta 1, a NaN-poisoned vector; BGRADA through the
//     raw API).
//  8. Default types: the bias vector, the bias gradient and the GELU aux matrix
//     have D's type (also for bf16 inputs with an fp32 D), unless
//     BIAS_DATA_TYPE / EPILOGUE_AUX_DATA_TYPE say otherwise (CUDA_R_32F or
//     CUDA_R_16BF here). Checked by ForwardBf16MatchesCpuWithBf16AndFp32Outputs
//     (fp32 bias with bf16 inputs), BackwardBf16MatchesCpu (fp32 bias gradient
//     with bf16 inputs) and EpiloguesWithBf16InputsKeepBiasAndAuxInDsType (aux
//     and bias in fp32 and in bf16 with bf16 inputs). The overrides are not used
//     by the project: only tests/emulator covers them.
//  9. Precision: bf16 inputs convert exactly, products and the accumulator are
//     fp32 (nothing wider), alpha, beta, bias and the epilogue are applied in
//     fp32, and each output (D, aux, bias gradient) is rounded once to its type
//     with round-to-nearest-even (__float2bfloat16_rn). Checked by
//     ForwardBf16MatchesCpuWithBf16AndFp32Outputs and BackwardBf16MatchesCpu.
// 10. Order: each element sums its k products in increasing k (the library's
//     order differs, so the tests compare within a tolerance); a fixed plan is
//     bitwise repeatable. Checked by ForwardFp32MatchesCpu and
//     BackwardFp32AccumulatesLikeCpuFusedAndUnfusedBiasGrad (repeatability).
// 11. CUBLAS_COMPUTE_32F_FAST_TF32 always rounds every fp32 element of op(A)
//     and op(B) to TF32 (10-bit mantissa, round to nearest, ties to even)
//     before multiplying; C, bias, aux and the BGRAD sums use the unrounded
//     values. Checked by Tf32RoundsEachInputToNearestEven.
// 12. EPILOGUE_AUX_LD must be >= m, checked by the heuristic and by
//     cublasLtMatmul, refused with INVALID_VALUE. Not a multiple of 8: the
//     header asks for one for the _BIAS/_BGRAD forms, but cuBLASLt 13.0 on an
//     H200 took 12 for GELU_AUX, GELU_AUX_BIAS and DGELU (gpu_check,
//     2026-12-04); GemmContext keeps to the header's rule on its own.
//     Checked by AuxLeadingDimensionOfAMultipleOf8IsAccepted, which prints
//     each aux epilogue's verdict on a stride of 12.
// 13. Alignment: an algorithm from the heuristic may rely on A, B, C and D
//     being aligned to the preference's MIN_ALIGNMENT_*_BYTES (default 256), and
//     on the bias and aux pointers being at least as aligned as the ones in the
//     descriptor at heuristic time (up to 256 bytes); every pointer must be
//     aligned to its element size. cublasLtMatmul refuses a violation with
//     INVALID_VALUE; with algo == NULL only element alignment is required.
//     Checked by MisalignedOperandsGetTheirOwnPlans (offset pointers and odd
//     strides with their own preferences give correct results).
// 14. The heuristic offers one algorithm (workspace 0, wavesCount 1) for every
//     emulated configuration, including every epilogue with bf16 or fp32 D; the
//     real library may refuse some, and callers must fall back (run the tests
//     with GT_EMU_CUBLASLT_REFUSE_EPILOGUES=1 for that path).
//     EpiloguesWithBf16InputsKeepBiasAndAuxInDsType and
//     EpiloguesApplyToAlphaABPlusBetaCPlusBias print the combinations a GPU refuses.
//
// fp8 (CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2 A and B), as the cuBLASLt documentation
// states its requirements for fp8 kernels, and where it is silent the most
// conservative reading (a GPU run of tests/cuda/test_cuda_fp8_gemm.cpp, once
// written, settles each):
// 15. Layout and types: "TN" only (TRANSA = T, TRANSB = N, so both operands
//     are K-contiguous), compute type 32F (not FAST_TF32), scale type 32F;
//     A and B both fp8 and not both e5m2; C and D bf16 or fp32 (an fp8 D,
//     with its D scale and amax, is not emulated and refused). Anything
//     else with an fp8 operand: NOT_SUPPORTED.
// 16. Alignment: A and B 16-byte aligned, their leading dimensions
//     multiples of 16 elements (the tensor cores' requirement for 8-bit
//     types); a violation is NOT_SUPPORTED from the heuristic (no
//     algorithm) and INVALID_VALUE from cublasLtMatmul for a pointer.
// 17. Scales: A_SCALE_POINTER and B_SCALE_POINTER are device pointers to
//     fp32 values that multiply the product: D = alpha * (sa * sb) *
//     sum_k a b + beta * C (+ bias), the factor (alpha * (sa * sb)) formed
//     first, in fp32. SCALAR_32F mode: one value (null pointer: 1).
//     OUTER_VEC_32F: m values for A (one per row of D) and n for B (one per
//     column), both operands in that mode with non-null pointers. Scale
//     pointers or modes on a GEMM without fp8 operands: INVALID_VALUE.
// 18. Epilogues with fp8 operands: DEFAULT and BIAS only here; others
//     NOT_SUPPORTED as not emulated for fp8. The bias is D's type
//     (cublasLt.h on CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: the output's type,
//     but for fp8 kernels with an fp32 or fp8 D), so a bf16 D takes a bf16
//     bias only; an fp32 D takes fp32 or bf16 (the exception's details are
//     in the online documentation, not the header: the wider reading).
// 19. FAST_ACCUM is taken and does not change the arithmetic: the emulator
//     accumulates in fp32 in k order, as for every type (Hopper's fast
//     accumulation keeps fewer bits in its partial sums; how many is not
//     documented, so a GPU's forward GEMM can differ by more than fp32
//     rounding from the emulator's).
//
// Not emulated (refused with NOT_SUPPORTED): batches, orders other than
// column-major, pointer modes other than host, compute types other than 32F and
// 32F_FAST_TF32, types other than fp32, bf16 and (as A and B) fp8 e4m3/e5m2,
// zero-sized GEMMs, the epilogues not listed in cublaslt.hpp, and every
// attribute not handled below.
#include "cublaslt.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "diagnostics.hpp"
#include "emulator.hpp"

namespace gt::emu::lt {

std::map<const void*, Kind>& registry() {
  static auto* r = new std::map<const void*, Kind>;  // never destroyed: usable at exit
  return *r;
}

const char* status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t refuse(const std::string& api, cublasStatus_t st, const std::string& why) {
  report("error", api + ": " + why + " -> " + status_name(st));
  return st;
}

std::string type_name(int64_t t) {
  if (t == CUDA_R_32F) return "CUDA_R_32F";
  if (t == CUDA_R_16BF) return "CUDA_R_16BF";
  if (t == CUDA_R_8F_E4M3) return "CUDA_R_8F_E4M3";
  if (t == CUDA_R_8F_E5M2) return "CUDA_R_8F_E5M2";
  return "cudaDataType " + std::to_string(t);
}

namespace {

// ---- attributes: where each emulated one lives, and its size -----------------------

struct Field {
  void* p = nullptr;  // nullptr: not emulated
  size_t size = 0;
};
template <typename T>
Field field_of(T& v) {
  return {&v, sizeof v};
}

Field field(MatmulDesc& d, int a) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return field_of(d.compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return field_of(d.scale);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return field_of(d.pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA: return field_of(d.trans_a);
    case CUBLASLT_MATMUL_DESC_TRANSB: return field_of(d.trans_b);
    case CUBLASLT_MATMUL_DESC_TRANSC: return field_of(d.trans_c);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return field_of(d.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field_of(d.bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return field_of(d.aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return field_of(d.aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return field_of(d.aux_type);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field_of(d.bias_type);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return field_of(d.a_scale);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return field_of(d.b_scale);
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: return field_of(d.c_scale);
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: return field_of(d.d_scale);
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: return field_of(d.amax_d);
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE: return field_of(d.a_scale_mode);
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: return field_of(d.b_scale_mode);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return field_of(d.fast_accum);
  }
  return {};
}

Field field(Layout& l, int a) {
  switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return field_of(l.type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return field_of(l.order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return field_of(l.rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return field_of(l.cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return field_of(l.ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return field_of(l.batch_count);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return field_of(l.batch_stride);
  }
  return {};
}

Field field(Preference& p, int a) {
  switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return field_of(p.search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return field_of(p.max_workspace);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return field_of(p.align[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return field_of(p.align[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return field_of(p.align[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return field_of(p.align[3]);
  }
  return {};
}

template <typename T>
cublasStatus_t set_attribute(const std::string& api, const void* h, int attr, const void* buf,
                             size_t size) {
  Lock lock(Emulator::get().mu);
  T* obj = lookup<T>(h);
  if (!obj) return refuse(api, CUBLAS_STATUS_INVALID_VALUE, "not a live descriptor " + address(h));
  const Field f = field(*obj, attr);
  const std::string name = "attribute " + std::to_string(attr);
  if (!f.p) return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, name + " is not emulated");
  if (!buf) return refuse(api, CUBLAS_STATUS_INVALID_VALUE, name + ": null buffer");
  if (size != f.size)
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                  name + " takes " + std::to_string(f.size) + " bytes, got " +
                      std::to_string(size));
  std::memcpy(f.p, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

// The documented protocol: size 0 asks for the size (in *written).
template <typename T>
cublasStatus_t get_attribute(const std::string& api, const void* h, int attr, void* buf,
                             size_t size, size_t* written) {
  Lock lock(Emulator::get().mu);
  T* obj = lookup<T>(h);
  if (!obj) return refuse(api, CUBLAS_STATUS_INVALID_VALUE, "not a live descriptor " + address(h));
  const Field f = field(*obj, attr);
  const std::string name = "attribute " + std::to_string(attr);
  if (!f.p) return refuse(api, CUBLAS_STATUS_NOT_SUPPORTED, name + " is not emulated");
  if (size == 0) {
    if (!written)
      return refuse(api, CUBLAS_STATUS_INVALID_VALUE, name + ": size 0 without sizeWritten");
    *written = f.size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf || size != f.size)
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                  name + " holds " + std::to_string(f.size) + " bytes, asked for " +
                      std::to_string(size) + (buf ? "" : " into a null buffer"));
  std::memcpy(buf, f.p, size);
  if (written) *written = size;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T, typename H>
cublasStatus_t create(const char* api, H* out) {
  if (!out) return refuse(api, CUBLAS_STATUS_INVALID_VALUE, "null output pointer");
  T* obj = new T;
  registry()[obj] = kind_of<T>();
  *out = reinterpret_cast<H>(obj);
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t destroy(const char* api, const void* h) {
  if (!h) return CUBLAS_STATUS_SUCCESS;  // like free(nullptr)
  T* obj = lookup<T>(h);
  if (!obj)
    return refuse(api, CUBLAS_STATUS_INVALID_VALUE,
                  address(h) + " is not a live object of this kind (destroyed twice?)");
  registry().erase(h);
  delete obj;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

}  // namespace gt::emu::lt

// ---- the C entry points -----------------------------------------------------------

using gt::emu::Emulator;
using gt::emu::Lock;
namespace lt = gt::emu::lt;

extern "C" {

const char* cublasGetStatusName(cublasStatus_t s) { return lt::status_name(s); }
// The project prints this in its errors; the enum's name says the most.
const char* cublasGetStatusString(cublasStatus_t s) { return lt::status_name(s); }
const char* cublasLtGetStatusName(cublasStatus_t s) { return lt::status_name(s); }
const char* cublasLtGetStatusString(cublasStatus_t s) { return lt::status_name(s); }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  Emulator& e = Emulator::get();
  Lock lock(e.mu);
  if (e.device_count() == 0)
    return lt::refuse("cublasLtCreate", CUBLAS_STATUS_NOT_INITIALIZED, "no device is visible");
  return lt::create<lt::Context>("cublasLtCreate", handle);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  Lock lock(Emulator::get().mu);
  if (!handle) return lt::refuse("cublasLtDestroy", CUBLAS_STATUS_NOT_INITIALIZED, "null handle");
  return lt::destroy<lt::Context>("cublasLtDestroy", handle);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  Lock lock(Emulator::get().mu);
  const cublasStatus_t st = lt::create<lt::MatmulDesc>("cublasLtMatmulDescCreate", desc);
  if (st == CUBLAS_STATUS_SUCCESS) {
    lt::MatmulDesc* d = lt::lookup<lt::MatmulDesc>(*desc);
    d->compute = compute;
    d->scale = scale;
  }
  return st;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  Lock lock(Emulator::get().mu);
  return lt::destroy<lt::MatmulDesc>("cublasLtMatmulDescDestroy", desc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  return lt::set_attribute<lt::MatmulDesc>("cublasLtMatmulDescSetAttribute", desc, attr, buf,
                                           size);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, void* buf,
                                              size_t size, size_t* written) {
  return lt::get_attribute<lt::MatmulDesc>("cublasLtMatmulDescGetAttribute", desc, attr, buf,
                                           size, written);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  Lock lock(Emulator::get().mu);
  const cublasStatus_t st = lt::create<lt::Layout>("cublasLtMatrixLayoutCreate", layout);
  if (st == CUBLAS_STATUS_SUCCESS) {
    lt::Layout* l = lt::lookup<lt::Layout>(*layout);
    l->type = static_cast<uint32_t>(type);
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
  }
  return st;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  Lock lock(Emulator::get().mu);
  return lt::destroy<lt::Layout>("cublasLtMatrixLayoutDestroy", layout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  return lt::set_attribute<lt::Layout>("cublasLtMatrixLayoutSetAttribute", layout, attr, buf,
                                       size);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                size_t size, size_t* written) {
  return lt::get_attribute<lt::Layout>("cublasLtMatrixLayoutGetAttribute", layout, attr, buf,
                                       size, written);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  Lock lock(Emulator::get().mu);
  return lt::create<lt::Preference>("cublasLtMatmulPreferenceCreate", pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  Lock lock(Emulator::get().mu);
  return lt::destroy<lt::Preference>("cublasLtMatmulPreferenceDestroy", pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  return lt::set_attribute<lt::Preference>("cublasLtMatmulPreferenceSetAttribute", pref, attr,
                                           buf, size);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    void* buf, size_t size, size_t* written) {
  return lt::get_attribute<lt::Preference>("cublasLtMatmulPreferenceGetAttribute", pref, attr,
                                           buf, size, written);
}

}  // extern "C"
