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

int64_t LinearPrecision::bytes() const {
  return static_cast<int64_t>(input_.bytes() + grad_.bytes() + weight_.bytes());
}

}  // namespace gt
