// Private to kernels/cpu: the CPU kernels of the Llama family's ops (the
// forwarders in cpu_ops.cpp call them; semantics in kernels/ops.hpp). Shapes
// with R rows, C channels, F the MLP width, D the head size.
// bf16 storage, as the GPT-2 ops: the activations may be bf16 (fp32 math on
// the widened values, outputs rounded once: fp32_access.hpp); parameters,
// statistics and accumulated gradients are fp32.
#pragma once

#include "kernels/cpu/cpu_kernels.hpp"

namespace gt::cpu {

// RMSNorm (HF LlamaRMSNorm): out = inp * rstd * weight, rstd = 1 / sqrt(
// mean(inp^2) + eps) per row, saved for backward. inp, out (R, C) fp32 or
// bf16 together; rstd (R) and weight (C) fp32.
void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps);
// dinp (R, C) fp32 ACCUMULATES (the residual stream); dweight (C)
// ACCUMULATES; dout and inp fp32 or bf16. The dweight reduction runs per
// channel block in row order: bitwise deterministic for any thread count.
// dinp_bf16, unless empty: (R, C) bf16 assigned the accumulated dinp
// rounded to nearest even.
void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                      TensorView weight, TensorView rstd, TensorView dinp_bf16 = {});

// Rotary embedding in place, HF's rotate_half convention: for each row n
// (position (first_row + n) % T) and each of the first `rot_heads` heads of
// qk (N, H, D), with c = cos_sin[pos, i], s = cos_sin[pos, D/2 + i] for i <
// D/2:  x[i], x[i + D/2] <- x[i] c - x[i + D/2] s, x[i + D/2] c + x[i] s.
// The other heads (v in a packed q|k|v row) are left alone. qk fp32 or bf16;
// cos_sin (max_T, D) fp32. backward applies the transpose (the rotation by
// -angle) to the gradient, in place.
void rope_forward(TensorView qk, TensorView cos_sin, int rot_heads, int64_t first_row, int T);
void rope_backward(TensorView dqk, TensorView cos_sin, int rot_heads, int64_t first_row, int T);

// SwiGLU: out (R, F) = silu(gate) * up with gu (R, 2F) holding [gate | up]
// per row (one GEMM's output). fp32 or bf16, all tensors alike.
void swiglu_forward(TensorView out, TensorView gu);
// dgu (R, 2F) ASSIGNED: [dout * up * silu'(gate) | dout * silu(gate)].
void swiglu_backward(TensorView dgu, TensorView dout, TensorView gu);

}  // namespace gt::cpu
