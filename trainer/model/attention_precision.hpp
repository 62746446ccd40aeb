// AttentionPrecision: the precision attention runs in under runtime.dtype.
//
//   fp32  attention reads and writes the model's fp32 activations directly.
//   bf16  qkv (and in backward the output and its gradient) are rounded to
//         bf16 into reused buffers, the backend's attention runs on bf16
//         views (math in fp32, bf16 in and out, its saved row statistics
//         fp32: kernels/ops.hpp), and the results are widened back into the
//         model's fp32 activations. On a GPU this is what lets attention run on
//         the tensor cores; the activations the model keeps stay fp32.
//
// The bf16 buffers (qkv, out, dout, dqkv of one layer's (B,T,·) rows) live in
// this backend's memory and are reused by every layer: ops run in call order.
#pragma once

#include <cstdint>

#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"

namespace gt {

class AttentionPrecision {
 public:
  // max_rows: B*T of the largest micro-batch; local_channels: C/tp.
  AttentionPrecision(Ops& ops, ComputeDType dtype, int64_t max_rows, int64_t local_channels);

  // Ops::attention_forward / attention_backward with fp32 (B,T,3C')/(B,T,C')
  // views, in this precision.
  void forward(TensorView out, TensorView saved, TensorView qkv, int n_head);
  void backward(TensorView dqkv, TensorView scratch, TensorView dout, TensorView qkv,
                TensorView out, TensorView saved, int n_head);
  int64_t bytes() const { return static_cast<int64_t>(buf_.bytes()); }

 private:
  // A bf16 copy of `src` at element `offset` of the buffer, same shape.
  TensorView to_bf16(const TensorView& src, int64_t offset);
  TensorView bf16_like(const TensorView& like, int64_t offset) const;
  Ops& ops_;
  ComputeDType dtype_;
  int64_t rows_ = 0, channels_ = 0;
  Buffer buf_;  // bf16: qkv (3), out (1), dout (1), dqkv (3) x rows x channels
};

}  // namespace gt
