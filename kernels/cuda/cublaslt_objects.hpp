// RAII owners of the cuBLASLt descriptors a GEMM plan holds (matmul.cpp's
// GemmContext, matmul_fp8.cpp's Fp8GemmContext): each destroyed with its own
// function, an error logged, never thrown, from a destructor.
// Host-only header.
#pragma once

#include <cublasLt.h>

#include <memory>

#include "kernels/cuda/cuda_check.hpp"

namespace gt::cuda {

struct MatmulDescDestroy {
  void operator()(cublasLtMatmulDesc_t d) const noexcept {
    CUBLAS_LOG_ERROR(cublasLtMatmulDescDestroy(d));
  }
};
struct LayoutDestroy {
  void operator()(cublasLtMatrixLayout_t l) const noexcept {
    CUBLAS_LOG_ERROR(cublasLtMatrixLayoutDestroy(l));
  }
};
struct PreferenceDestroy {
  void operator()(cublasLtMatmulPreference_t p) const noexcept {
    CUBLAS_LOG_ERROR(cublasLtMatmulPreferenceDestroy(p));
  }
};
using MatmulDescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, MatmulDescDestroy>;
using LayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDestroy>;
using PreferencePtr = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDestroy>;

}  // namespace gt::cuda
