#include "trainer/parallelize/linear_precision.hpp"

#include "kernels/core/error.hpp"

namespace gt {

LinearPrecision::LinearPrecision(Ops& ops, ComputeDType dtype, const Sizes& sizes)
    : ops_(ops), dtype_(dtype) {
  if (dtype_ != ComputeDType::bf16) return;
  const size_t b = dtype_size(DType::bf16);
  input_ = ops.allocate(static_cast<size_t>(sizes.max_input) * b);
  grad_ = ops.allocate(static_cast<size_t>(sizes.max_grad) * b);
  weight_ = ops.allocate(static_cast<size_t>(sizes.max_weight) * b);
  bias_ = ops.allocate(static_cast<size_t>(sizes.max_bias) * b);
  bias_f32_ = ops.allocate(static_cast<size_t>(sizes.max_bias_f32) * dtype_size(DType::f32));
}

TensorView bf16_view_in(const Buffer& buf, int64_t offset, const TensorView& like,
                        const char* what) {
  GT_CHECK(like.contiguous() &&
               (offset + like.numel()) * int64_t(dtype_size(DType::bf16)) <= int64_t(buf.bytes()),
           "bf16 copy of ", what, " ", like.shape_str(), " at element ", offset,
           " does not fit its ", buf.bytes(), "-byte buffer");
  TensorView v = like;
  v.data = static_cast<uint16_t*>(buf.data()) + offset;
  v.dtype = DType::bf16;
  return v;
}

TensorView LinearPrecision::cast_into(const Buffer& buf, const TensorView& src, const char* what) {
  // Already bf16 (the LM head's dlogits): the GEMM reads it as it is.
  if (dtype_ != ComputeDType::bf16 || src.dtype == DType::bf16) return src;
  const TensorView dst = bf16_view_in(buf, 0, src, what);
  ops_.cast(dst, src);
  return dst;
}

TensorView LinearPrecision::weight(const TensorView& w) {
  return cast_into(weight_, w, "a GEMM weight");
}

TensorView LinearPrecision::bias(const TensorView& b) {
  if (b.empty()) return b;
  return cast_into(bias_, b, "a GEMM bias");
}

TensorView LinearPrecision::bias_as_f32(const TensorView& b) {
  if (dtype_ != ComputeDType::bf16 || b.empty()) return b;
  const TensorView rounded = bias(b);
  GT_CHECK(b.contiguous() &&
               rounded.numel() * int64_t(dtype_size(DType::f32)) <= int64_t(bias_f32_.bytes()),
           "the fp32 bias ", b.shape_str(), " does not fit its ", bias_f32_.bytes(),
           "-byte buffer");
  TensorView wide = rounded;
  wide.data = bias_f32_.data();
  wide.dtype = DType::f32;
  ops_.cast(wide, rounded);
  return wide;
}

int64_t LinearPrecision::bytes() const {
  return static_cast<int64_t>(input_.bytes() + grad_.bytes() + weight_.bytes() + bias_.bytes() +
                              bias_f32_.bytes());
}

}  // namespace gt
