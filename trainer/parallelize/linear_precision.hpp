// LinearPrecision: the precision of the model's GEMM operands under
// runtime.dtype, in one place.
//
//   fp32  the GEMMs read their fp32 operands as they are.
//   bf16  the model stores its activations in bf16 (trainer/model/gpt.hpp,
//         "Precision"), so most GEMM inputs and output gradients are bf16
//         already and are used as they are, without a copy. What is fp32 is
//         rounded to bf16 (nearest even) here: the weights, unless the
//         parameter store keeps their bf16 copy (ParameterStore::
//         keeps_bf16_params: whole parameters, where AdamW writes it; then
//         weight() passes that copy through) — otherwise the fp32 master copy
//         is cast once per linear layer call, before its chunks — and the
//         residual stream's fp32 gradient where a row-parallel layer's
//         backward reads it. The GEMM accumulates in fp32.
//         Biases are rounded to bf16 like the weights (as torch.autocast's
//         linear does) and added in fp32 before the output's one rounding:
//         the GEMM epilogue reads the bf16 vector (the store's copy, or
//         one cast here), which cuBLASLt runs far faster than an fp32 bias
//         with a bf16 output (gpu_bench's epilogue rows: 0.138 against
//         0.105 ms for c_attn at 124M on an H200); a bias added after a sum
//         across tp ranks gets the same values widened to fp32.
//
// The bf16 copies live in buffers of this backend's memory, each reused by
// every call: the weight, the bias (and its fp32 widening), the input rows
// and the output-gradient rows (cast per chunk, just before its GEMM); a
// buffer the precision never needs is empty. A returned view is valid until the next call for the
// same operand; ops run in call order, so a cast and the GEMM reading it never race.
#pragma once

#include <cstdint>

#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"

namespace gt {

class LinearPrecision {
 public:
  // The most elements any one GEMM call's input rows, output-gradient rows
  // and weight hold as bf16 copies (0: never copied).
  // max_bias: the most bias elements cast to bf16 in one call;
  // max_bias_f32: the most widened back to fp32 (a bias added after a sum).
  struct Sizes {
    int64_t max_input = 0, max_grad = 0, max_weight = 0, max_bias = 0, max_bias_f32 = 0;
    // What a LinearPrecision of these sizes allocates in bf16 (the max_*
    // copies, bias_f32 widened to fp32 once); the activation plans count it.
    int64_t bf16_bytes() const {
      return (max_input + max_grad + max_weight + max_bias) * 2 + max_bias_f32 * 4;
    }
  };
  LinearPrecision(Ops& ops, ComputeDType dtype, const Sizes& sizes);

  ComputeDType dtype() const { return dtype_; }
  // The weight as the GEMMs read it (fp32: `w` itself).
  TensorView weight(const TensorView& w);
  // The bias as the GEMM epilogue adds it: bf16 (rounded, unless it is the
  // store's bf16 copy already) in bf16; `b` itself in fp32 or when empty.
  TensorView bias(const TensorView& b);
  // The same values in fp32, for a bias added to an fp32 sum (the
  // row-parallel layer under tp): bf16(b) widened; `b` itself in fp32.
  TensorView bias_as_f32(const TensorView& b);
  // Input rows / output-gradient rows as the GEMM reads them.
  TensorView input(const TensorView& x) { return cast_into(input_, x, "a GEMM input"); }
  TensorView grad(const TensorView& dout) {
    return cast_into(grad_, dout, "a GEMM output gradient");
  }
  // Bytes of the bf16 buffers (0 in fp32), for the memory figures.
  int64_t bytes() const;

 private:
  TensorView cast_into(const Buffer& buf, const TensorView& src, const char* what);
  Ops& ops_;
  ComputeDType dtype_;
  Buffer input_, grad_, weight_, bias_;  // bf16 copies (empty in fp32)
  Buffer bias_f32_;                      // bias_'s values widened (tp > 1)
};

}  // namespace gt
