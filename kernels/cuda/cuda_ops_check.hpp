// Private to kernels/cuda/cuda_ops*.cpp: the argument checks every CudaOps
// method runs before it enqueues anything (each message starts
// "CudaOps::<op>: " and names the tensor), and small view helpers.
// Host-only header.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string>

#include "kernels/core/error.hpp"
#include "kernels/core/tensor.hpp"

namespace gt::cuda_ops_detail {

using bf16 = __nv_bfloat16;

template <typename T>
T* ptr(const TensorView& t) {
  return static_cast<T*>(t.data);
}

inline std::string dtype_list(std::initializer_list<DType> ok) {
  std::string s;
  for (DType d : ok) s += (s.empty() ? "" : " or ") + std::string(dtype_name(d));
  return s;
}

// Argument checks for one op; every message starts "CudaOps::<op>: ". The
// shapes were checked by the Ops entry point (kernels/ops_entry.hpp, in the
// same words); these are what this backend decides: where a view lives, its
// dtype and its layout.
struct Check {
  const char* op;

  void tensor(const TensorView& t, const char* what, std::initializer_list<DType> ok) const {
    device_and_dtype(t, what, ok);
    if (!t.contiguous())
      fail("CudaOps::", op, ": ", what, " must be contiguous, got a strided ", t.shape_str());
    if (t.data == nullptr && t.numel() > 0) fail("CudaOps::", op, ": ", what, " has no data");
  }
  // A view of any strides, for the ops whose entry point checked the layout
  // they need (the attention blocks' and cast_rows' contiguous rows).
  void strided(const TensorView& t, const char* what, std::initializer_list<DType> ok) const {
    device_and_dtype(t, what, ok);
    if (t.data == nullptr && t.numel() > 0) fail("CudaOps::", op, ": ", what, " has no data");
  }
  void device_and_dtype(const TensorView& t, const char* what,
                        std::initializer_list<DType> ok) const {
    if (t.device != Device::cuda)
      fail("CudaOps::", op, ": ", what, " must be a cuda tensor, got a ", device_name(t.device),
           " one");
    if (std::find(ok.begin(), ok.end(), t.dtype) == ok.end())
      fail("CudaOps::", op, ": ", what, " must be ", dtype_list(ok), ", got ",
           dtype_name(t.dtype));
  }
  int to_int(int64_t v, const char* what) const {
    if (v < 0 || v > INT_MAX) fail("CudaOps::", op, ": ", what, " = ", v, " is out of range");
    return static_cast<int>(v);
  }
};

constexpr std::initializer_list<DType> kF32 = {DType::f32};
constexpr std::initializer_list<DType> kF32Bf16 = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kI32 = {DType::i32};

// A producer op's optional row amaxes (Ops: "Row amaxes for an fp8 GEMM's
// input"): the device pointer, or nullptr when none is asked for.
inline float* optional_row_amax(const Check& c, const TensorView& row_amax) {
  if (row_amax.empty()) return nullptr;
  c.tensor(row_amax, "row_amax", kF32);
  return row_amax.f32();
}

}  // namespace gt::cuda_ops_detail
