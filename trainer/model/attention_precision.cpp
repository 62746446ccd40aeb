#include "trainer/model/attention_precision.hpp"

#include "trainer/model/linear_precision.hpp"

namespace gt {

AttentionPrecision::AttentionPrecision(Ops& ops, ComputeDType dtype, int64_t max_rows,
                                       int64_t local_channels)
    : ops_(ops), dtype_(dtype), rows_(max_rows), channels_(local_channels) {
  if (dtype_ == ComputeDType::bf16)
    buf_ = ops.allocate(static_cast<size_t>(8 * rows_ * channels_) * dtype_size(DType::bf16));
}

TensorView AttentionPrecision::bf16_like(const TensorView& like, int64_t offset) const {
  return bf16_view_in(buf_, offset, like, "an attention operand");
}

TensorView AttentionPrecision::to_bf16(const TensorView& src, int64_t offset) {
  const TensorView dst = bf16_like(src, offset);
  ops_.cast(dst, src);
  return dst;
}

// Regions of the buffer, in units of rows x channels: qkv [0,3), out [3,4),
// dout [4,5), dqkv [5,8).
void AttentionPrecision::forward(TensorView out, TensorView saved, TensorView qkv, int n_head) {
  if (dtype_ != ComputeDType::bf16) return ops_.attention_forward(out, saved, qkv, n_head);
  const int64_t unit = rows_ * channels_;
  const TensorView qkv16 = to_bf16(qkv, 0);
  const TensorView out16 = bf16_like(out, 3 * unit);
  ops_.attention_forward(out16, saved, qkv16, n_head);
  ops_.cast(out, out16);
}

void AttentionPrecision::backward(TensorView dqkv, TensorView scratch, TensorView dout,
                                  TensorView qkv, TensorView out, TensorView saved, int n_head) {
  if (dtype_ != ComputeDType::bf16)
    return ops_.attention_backward(dqkv, scratch, dout, qkv, out, saved, n_head);
  const int64_t unit = rows_ * channels_;
  // out was widened from the forward's bf16 output: rounding it again is exact.
  const TensorView qkv16 = to_bf16(qkv, 0), out16 = to_bf16(out, 3 * unit),
                   dout16 = to_bf16(dout, 4 * unit);
  const TensorView dqkv16 = bf16_like(dqkv, 5 * unit);
  ops_.attention_backward(dqkv16, scratch, dout16, qkv16, out16, saved, n_head);
  ops_.cast(dqkv, dqkv16);
}

}  // namespace gt
