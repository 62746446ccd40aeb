// GEMMs on cuBLASLt: one row-major GEMM description (GemmArgs) and the
// context that runs it (GemmContext), which owns the cuBLASLt handle, the
// workspace and the per-shape heuristic cache. CPU twin: Ops::matmul_forward /
// matmul_backward (kernels/cpu/matmul.cpp) and, for the fused GELU epilogues,
// Ops::matmul_gelu_forward / matmul_backward_dgelu (kernels/cpu/linear_gelu.cpp).
//
// Invariants:
//   * Row-major everywhere: D (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * D,
//     op(X) = X^T when trans_x. lda/ldb/ldd are row strides in elements (0 means
//     packed). Internally the product is handed to cuBLASLt (column-major) as
//     D^T = op(B)^T op(A)^T, so no data is ever transposed or copied.
//   * beta = 0 ASSIGNS D (D is not read, may hold NaN); beta = 1 ACCUMULATES
//     (parameter gradients).
//   * dtypes: A and B share ab_type (f32 or bf16); D is f32 or bf16; compute is
//     always fp32 (CUBLAS_COMPUTE_32F; with fp32 inputs and allow_tf32 the
//     TF32 tensor-core mode CUBLAS_COMPUTE_32F_FAST_TF32). bf16 inputs with an
//     fp32 D are allowed (fp32 gradient accumulation of bf16 activations).
//     The bias / bias-gradient vector and the GELU aux matrix have D's dtype
//     (cuBLASLt's rule for non-fp8 GEMMs), except a bias read as fp32 with a
//     bf16 D (fp32_bias: BIAS_DATA_TYPE, the bf16 model's fp32 biases).
//   * Epilogues, in row-major terms (the cuBLASLt name in brackets):
//       bias         D = AB + bias[j]                       bias (N), read   [BIAS]
//       gelu         D = gelu(AB), aux = AB                 aux (M,N)        [GELU_AUX]
//       gelu_bias    D = gelu(AB + bias[j]), aux = AB + bias                 [GELU_AUX_BIAS]
//       dgelu        D = AB * gelu'(aux)                    aux (M,N), read  [DGELU]
//       dgelu_bgrad  dgelu, and bias[j] = sum_i D[i][j]     bias (N), ASSIGNED [DGELU_BGRAD]
//       bgrad_a      D = AB, and bias[i] = sum_k op(A)[i][k] bias (M), ASSIGNED [BGRADB]
//     (bgrad_a is the linear layer's dbias: dweight = dout^T inp with A = dout.)
//     cuBLASLt's GELU is the tanh approximation, like ours. The aux row stride
//     must be a multiple of 8 elements (cuBLASLt's rule). The bias-gradient
//     epilogues ASSIGN the vector: a caller that accumulates adds it itself.
//   * Heuristics are cached per GEMM shape: the key is (trans_a, trans_b, M, N,
//     K, strides, dtypes, epilogue, TF32, and the alignment class of every
//     pointer, because cuBLASLt picks kernels by alignment). The first call of
//     a shape asks cuBLASLt's heuristic and keeps the fastest algorithm; later
//     calls reuse it, so a shape always runs the same kernel, and cuBLAS
//     results are bitwise reproducible run to run for a fixed algorithm on one
//     GPU model.
//   * Workspace: one device buffer of options.workspace_bytes, allocated at
//     construction and never grown; algorithms that need more are not chosen.
//     The context is for one stream at a time (the workspace is shared): not
//     thread-safe, like everything in CudaOps.
//   * Nothing here allocates device memory after construction.
//
// Host-only header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/core/tensor.hpp"

namespace gt::cuda {

enum class GemmEpilogue { none, bias, gelu, gelu_bias, dgelu, dgelu_bgrad, bgrad_a };
const char* gemm_epilogue_name(GemmEpilogue e);

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  const void* A = nullptr;
  int64_t lda = 0;  // row stride of A as stored: K (no trans) or M (trans) when packed
  const void* B = nullptr;
  int64_t ldb = 0;  // row stride of B as stored: N (no trans) or K (trans) when packed
  void* D = nullptr;
  int64_t ldd = 0;  // row stride of D: N when packed
  DType ab_type = DType::f32;
  DType d_type = DType::f32;
  float alpha = 1.f, beta = 0.f;
  GemmEpilogue epilogue = GemmEpilogue::none;
  void* bias = nullptr;  // bias (read) or bias gradient (written), D's dtype
  bool fp32_bias = false;  // the bias is fp32 whatever D's dtype (bf16 storage)
  void* aux = nullptr;   // GELU pre-activation (M,N), D's dtype
  int64_t ld_aux = 0;    // row stride of aux: N when packed
};

// "gemm M=.. N=.. K=.. ta=.. tb=.. bf16->fp32 epilogue=.." for error messages and logs.
std::string describe(const GemmArgs& g);

struct GemmOptions {
  size_t workspace_bytes = size_t{32} << 20;  // NVIDIA's recommendation for Hopper
  bool allow_tf32 = false;                    // fp32 GEMMs on TF32 tensor cores
};

class GemmContext {
 public:
  explicit GemmContext(const GemmOptions& options = {});
  ~GemmContext();
  GemmContext(GemmContext&&) noexcept;
  GemmContext& operator=(GemmContext&&) noexcept;
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  // Runs the GEMM on `stream`. Throws gt::Error naming the GEMM when the
  // arguments are inconsistent or cuBLASLt has no algorithm for it.
  void run(const GemmArgs& g, cudaStream_t stream);
  // Whether cuBLASLt has an algorithm for this GEMM (the answer is cached
  // like a plan). Arguments are validated as for run().
  bool supported(const GemmArgs& g);
  // Number of cached shapes (plans and known-unsupported shapes).
  size_t cached_shapes() const;
  const GemmOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gt::cuda
