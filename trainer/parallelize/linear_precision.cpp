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

namespace {
// A `dtype` view shaped like `like` (contiguous) at the start of `buf`;
// throws naming `what` when it does not fit.
TensorView view_in(const Buffer& buf, const TensorView& like, DType dtype, const char* what) {
  GT_CHECK(like.contiguous() && like.numel() * int64_t(dtype_size(dtype)) <= int64_t(buf.bytes()),
           dtype_name(dtype), " copy of ", what, " ", like.shape_str(), " does not fit its ",
           buf.bytes(), "-byte buffer");
  TensorView v = like;
  v.data = buf.data();
  v.dtype = dtype;
  return v;
}
}  // namespace

TensorView LinearPrecision::cast_into(const Buffer& buf, const TensorView& src, const char* what) {
  // Already bf16 (the LM head's dlogits): the GEMM reads it as it is.
  if (dtype_ != ComputeDType::bf16 || src.dtype == DType::bf16) return src;
  const TensorView dst = view_in(buf, src, DType::bf16, what);
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
  const TensorView wide = view_in(bias_f32_, rounded, DType::f32, "a GEMM bias");
  ops_.cast(wide, rounded);
  return wide;
}

int64_t LinearPrecision::bytes() const {
  return static_cast<int64_t>(input_.bytes() + grad_.bytes() + weight_.bytes() + bias_.bytes() +
                              bias_f32_.bytes());
}

}  // namespace gt
