// cast: fp32 <-> bf16 (and same-dtype copies) on the host, bit for bit what
// the CUDA backend's cast kernels write (the rounding rule lives in
// kernels/core/bf16.hpp), so a mixed-precision model run on CpuOps sees the
// same bf16 values as on CudaOps. Also the bf16 <-> fp32 conversions the CPU
// matmul and cross-entropy use for bf16 operands and results.
#include <cstdint>
#include <cstring>

#include "kernels/core/bf16.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace gt::cpu {

namespace {

void expect_float_view(const TensorView& t, const char* what) {
  GT_CHECK(t.device == Device::cpu, what, " must be on the cpu, got ", device_name(t.device));
  GT_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16, what, " must be fp32 or bf16, got ",
           dtype_name(t.dtype));
  GT_CHECK(t.contiguous(), what, " must be contiguous, got strided ", t.shape_str());
  GT_CHECK(t.data != nullptr || t.numel() == 0, what, " has no data");
}

}  // namespace

void widen_bf16(float* dst, const uint16_t* src, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void narrow_to_bf16(uint16_t* dst, const float* src, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_from_float(src[i]);
}

void cast(TensorView dst, TensorView src) {
  expect_float_view(dst, "cast dst");
  expect_float_view(src, "cast src");
  expect_same_shape(dst, src, "cast dst", "cast src");
  if (dst.dtype == src.dtype) {
    copy(dst, src);
    return;
  }
  const int64_t n = src.numel();
  if (src.dtype == DType::f32) {
    narrow_to_bf16(static_cast<uint16_t*>(dst.data), src.f32(), n);
  } else {
    widen_bf16(dst.f32(), static_cast<const uint16_t*>(src.data), n);
  }
}

void cast_rows(TensorView dst, TensorView src) {
  GT_CHECK(dst.ndim == 2 && src.ndim == 2, "cast_rows: dst ", dst.shape_str(), " and src ",
           src.shape_str(), " must be (rows, cols)");
  expect_same_shape(dst, src, "cast_rows dst", "cast_rows src");
  for (const TensorView* t : {&dst, &src}) {
    GT_CHECK(t->device == Device::cpu, "cast_rows: a view on ", device_name(t->device));
    GT_CHECK(t->dtype == DType::f32 || t->dtype == DType::bf16,
             "cast_rows: fp32 or bf16 views only, got ", dtype_name(t->dtype));
  }
  const int64_t rows = dst.shape[0], cols = dst.shape[1];
  const int64_t ld_dst = dst.strides[0], ld_src = src.strides[0];
  const size_t ed = dtype_size(dst.dtype), es = dtype_size(src.dtype);
  auto* d = static_cast<char*>(dst.data);
  const auto* s = static_cast<const char*>(src.data);
#pragma omp parallel for if (rows * cols >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    void* out = d + static_cast<size_t>(r * ld_dst) * ed;
    const void* in = s + static_cast<size_t>(r * ld_src) * es;
    if (dst.dtype == src.dtype)
      std::memcpy(out, in, static_cast<size_t>(cols) * ed);
    else if (src.dtype == DType::f32)
      for (int64_t c = 0; c < cols; ++c)
        static_cast<uint16_t*>(out)[c] = bf16_from_float(static_cast<const float*>(in)[c]);
    else
      for (int64_t c = 0; c < cols; ++c)
        static_cast<float*>(out)[c] = bf16_to_float(static_cast<const uint16_t*>(in)[c]);
  }
}

}  // namespace gt::cpu
