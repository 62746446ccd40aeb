#include "kernels/core/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace gt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::i32: return "int32";
    case DType::u8: return "fp8 codes (u8)";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t TensorView::size(int d) const {
  GT_CHECK(d >= 0 && d < ndim, "dim ", d, " of a ", ndim, "-d tensor");
  return shape[d];
}

bool TensorView::contiguous() const {
  int64_t expect = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::string TensorView::shape_str() const {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << shape[i];
  os << ")";
  return os.str();
}

float* TensorView::f32() const {
  GT_CHECK(dtype == DType::f32, "expected fp32, got ", dtype_name(dtype));
  return static_cast<float*>(data);
}

int32_t* TensorView::i32() const {
  GT_CHECK(dtype == DType::i32, "expected int32, got ", dtype_name(dtype));
  return static_cast<int32_t*>(data);
}

TensorView make_view(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape) {
  GT_CHECK(shape.size() <= static_cast<size_t>(kMaxDims));
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

void expect_shape(const TensorView& t, std::initializer_list<int64_t> shape, const char* what) {
  bool ok = t.ndim == static_cast<int>(shape.size()) && t.contiguous();
  int i = 0;
  for (int64_t s : shape) ok = ok && t.shape[i++] == s;
  if (!ok) {
    std::ostringstream want;
    want << "(";
    i = 0;
    for (int64_t s : shape) want << (i++ ? ", " : "") << s;
    want << ")";
    fail("internal shape check: ", what, " expected contiguous ", want.str(), ", got ",
         t.shape_str());
  }
}

HostBuffer::HostBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail("out of host memory allocating ", bytes, " bytes");
  std::memset(p, 0, rounded);
  ptr_.reset(p);
}

void HostBuffer::Free::operator()(void* p) const { std::free(p); }

}  // namespace gt
