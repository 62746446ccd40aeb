// Elementwise helpers the model needs between layers: add (assigns out),
// accumulate (acc += x, the residual-gradient join), zero and copy. add takes
// fp32 or bf16 storage (all three tensors one dtype: fp32_access.hpp; the
// residual adds of the bf16 model); accumulate is fp32 only; zero and copy
// move bytes, so they take any dtype.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fp32_access.hpp"

namespace gt::cpu {

namespace {

void expect_cpu_contiguous(const TensorView& t, const char* what) {
  if (t.device != Device::cpu)
    fail("internal check: ", what, " must be on the cpu, got ", device_name(t.device));
  if (!t.contiguous())
    fail("internal check: ", what, " must be contiguous, got strided ", t.shape_str());
  if (t.data == nullptr && t.numel() > 0) fail("internal check: ", what, " has no data");
}

// Memory-bound copies: split in large chunks so each thread streams its own.
constexpr int64_t kByteChunk = 1 << 20;

}  // namespace

void add(TensorView out, TensorView a, TensorView b) {
  expect_storage_any(out, out.dtype, "add out");
  expect_storage_any(a, out.dtype, "add a (out's dtype)");
  expect_storage_any(b, out.dtype, "add b (out's dtype)");
  expect_same_shape(out, a, "add out", "add a");
  expect_same_shape(out, b, "add out", "add b");
  const int64_t n = out.numel();
  const Fp32In a_in(a), b_in(b);
  Fp32Out o_out(out);
  const float* x = a_in.get();
  const float* y = b_in.get();
  float* o = o_out.get();
#pragma omp parallel for simd if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  o_out.store();
}

void accumulate(TensorView acc, TensorView x) {
  expect_f32_any(acc, "accumulate acc");
  expect_f32_any(x, "accumulate x");
  expect_same_shape(acc, x, "accumulate acc", "accumulate x");
  const int64_t n = acc.numel();
  const float* s = x.f32();
  float* d = acc.f32();
#pragma omp parallel for simd if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}

void zero(TensorView t) {
  expect_cpu_contiguous(t, "zero t");
  const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(t.dtype));
  char* p = static_cast<char*>(t.data);
  const int64_t chunks = (bytes + kByteChunk - 1) / kByteChunk;
#pragma omp parallel for if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kByteChunk, hi = std::min(bytes, lo + kByteChunk);
    std::memset(p + lo, 0, static_cast<size_t>(hi - lo));
  }
}

void copy(TensorView dst, TensorView src) {
  expect_cpu_contiguous(dst, "copy dst");
  expect_cpu_contiguous(src, "copy src");
  expect_same_shape(dst, src, "copy dst", "copy src");
  GT_CHECK(dst.dtype == src.dtype, "copy dst ", dtype_name(dst.dtype), " from src ",
           dtype_name(src.dtype));
  if (dst.data == src.data) return;
  const int64_t bytes = dst.numel() * static_cast<int64_t>(dtype_size(dst.dtype));
  char* d = static_cast<char*>(dst.data);
  const char* s = static_cast<const char*>(src.data);
  const int64_t chunks = (bytes + kByteChunk - 1) / kByteChunk;
#pragma omp parallel for if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kByteChunk, hi = std::min(bytes, lo + kByteChunk);
    std::memcpy(d + lo, s + lo, static_cast<size_t>(hi - lo));
  }
}

}  // namespace gt::cpu

namespace gt::cpu {

void add_bias(TensorView out, TensorView bias) {
  GT_CHECK(out.ndim == 2 && bias.ndim == 1, "add_bias out ", out.shape_str(), " bias ",
           bias.shape_str());
  const int64_t R = out.shape[0], C = out.shape[1];
  expect_f32(out, {R, C}, "add_bias out");
  expect_f32(bias, {C}, "add_bias bias");
  const float* b = bias.f32();
  float* o = out.f32();
#pragma omp parallel for if (R * C >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    float* row = o + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) row[c] += b[c];
  }
}

}  // namespace gt::cpu
