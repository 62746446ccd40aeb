// fp8 GEMMs on cuBLASLt (issue 31): D (M, N) = (A B^T) x a_scale[m] x
// b_scale[n], A (M, K) and B (N, K) row-major fp8 codes (both K-contiguous:
// cuBLASLt's fp8 kernels take the "TN" layout only), fp32 accumulation, D
// bf16 or fp32. CPU twin: kernels/cpu/fp8_kernels.hpp's fp8_scaled_gemm,
// which takes the quantisation scales; here the scale pointers hold their
// inverses (the multipliers cuBLASLt applies), as fp8_scales() writes them.
//
// Invariants:
//   * a_scale / b_scale: device fp32, one value (tensorwise) or M / N
//     values (rowwise: cuBLASLt's outer-vector scaling); both operands in
//     the same mode. null: 1.
//   * lda, ldb: row strides in elements (0: K), multiples of 16, and A and B
//     16-byte aligned (the library's fp8 rule; refused here by name).
//   * D ASSIGNED (beta 0), or with `accumulate` added to (beta 1, C = D);
//     ldd its row stride (0: N).
//   * fast_accum: Hopper's faster, less precise accumulation (torchao turns
//     it on for the forward GEMM only).
//   * bias: (N) bf16 added to every row of D before its one rounding, by
//     cuBLASLt's BIAS epilogue; only with D bf16 (the bias is D's type) and
//     not accumulating. The library may have no algorithm for it:
//     supported() says so before run(), and the caller adds the bias
//     itself (CudaOps::fp8_matmul's fp32 scratch and fp8_epilogue).
//   * Plans are cached per shape, configuration and operand alignment (up to
//     256 bytes), like GemmContext's.
//
// Host-only header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/core/fp8.hpp"
#include "kernels/core/tensor.hpp"

namespace gt::cuda {

struct Fp8GemmArgs {
  int64_t M = 0, N = 0, K = 0;
  const uint8_t* A = nullptr;
  Fp8Format a_format = Fp8Format::e4m3;
  int64_t lda = 0;
  const uint8_t* B = nullptr;
  Fp8Format b_format = Fp8Format::e4m3;
  int64_t ldb = 0;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool rowwise = false;
  void* D = nullptr;
  DType d_type = DType::bf16;
  int64_t ldd = 0;
  bool accumulate = false;
  bool fast_accum = false;
  const void* bias = nullptr;  // bf16 (N), or null
};

std::string describe(const Fp8GemmArgs& g);

class Fp8GemmContext {
 public:
  explicit Fp8GemmContext(size_t workspace_bytes = size_t{32} << 20);
  ~Fp8GemmContext();
  Fp8GemmContext(const Fp8GemmContext&) = delete;
  Fp8GemmContext& operator=(const Fp8GemmContext&) = delete;

  // Whether cuBLASLt has an algorithm for the GEMM (a plain one always
  // does, or run() throws; one with a bias may not). Throws on a broken rule.
  bool supported(const Fp8GemmArgs& g);
  // Throws gt::Error naming the GEMM when the arguments break a rule above
  // or cuBLASLt has no algorithm for it.
  void run(const Fp8GemmArgs& g, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gt::cuda
