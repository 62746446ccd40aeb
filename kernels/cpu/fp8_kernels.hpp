// The CPU twin of the fp8 GEMM path (runtime.fp8, issue 31): the scales
// torchao's float8 recipes compute from an amax, the quantisation to e4m3 /
// e5m2 with those scales (round to nearest even, saturated to the format's
// largest finite value: kernels/core/fp8.hpp), and the scaled GEMM a fp8
// cuBLASLt matmul computes, in fp32. A CUDA fp8 path is checked against
// these bit for bit in its quantisation and to fp32 rounding in its GEMM.
//
// Conventions, as cuBLASLt's fp8 matmul has them:
//   * a quantised tensor q holds x x scale: `scale` maps the tensor into the
//     format's range, and the GEMM multiplies its result by the inverse
//     scales (cuBLASLt's A/B scale pointers hold those inverses);
//   * both GEMM operands are K-contiguous (the "TN" layout the library
//     requires for fp8): a (M, K) and b (N, K) row-major, c (M, N) = a b^T.
// Tensorwise: one scale per tensor, format max / amax (amax clamped to
// 1e-12, computed in double and rounded to fp32, as torchao's
// amax_to_scale). Rowwise: one scale per row of each operand (its
// non-contracted dimension), the same formula rounded down to a power of
// two (torchao's round_scales_to_power_of_2), so scaling is exact.
#pragma once

#include <cstdint>

#include "kernels/core/fp8.hpp"
#include "kernels/ops.hpp"

namespace gt::cpu {

// The largest |x| of x[0, n); 0 for n = 0. NaN propagates (a NaN amax is a
// non-finite step, which the trainer skips).
float fp8_amax(const float* x, int64_t n);

// format max / max(amax, 1e-12) in fp32; rounded down to a power of two
// when pow2 (rowwise).
float fp8_scale_from_amax(float amax, Fp8Format f, bool pow2);

// q[i] = fp8(x[i] x scale), saturated.
void fp8_quantize(const float* x, int64_t n, float scale, Fp8Format f, uint8_t* q);

// Rowwise: each row of x (rows, cols) scaled by its own power-of-two scale
// (written to scales[rows]) and quantised.
void fp8_quantize_rows(const float* x, int64_t rows, int64_t cols, Fp8Format f, uint8_t* q,
                       float* scales);

// c (M, N) = (a_q b_q^T) / (a_scale[m] b_scale[n]) with fp32 accumulation in
// k order: a_q (M, K) and b_q (N, K) codes of formats fa and fb;
// a_scales holds M scales when a_rowwise, else one (likewise b). Assigns c.
void fp8_scaled_gemm(const uint8_t* a_q, Fp8Format fa, const float* a_scales, bool a_rowwise,
                     const uint8_t* b_q, Fp8Format fb, const float* b_scales, bool b_rowwise,
                     float* c, int64_t M, int64_t N, int64_t K);

// ---- The CpuOps fp8 ops on tensors (kernels/ops.hpp states them) ----
// fp32 or bf16 inputs are read as fp32 (fp32_access.hpp).
void fp8_amax_op(TensorView amax, TensorView x, Fp8Reduce over);
// A producer op's row amaxes (Ops: "Row amaxes for an fp8 GEMM's input"):
// row_amax (R) = max |out[r, :]| of out (R, C) as stored; nothing when
// row_amax is empty. The CPU twin reads the stored output back (a second
// pass; the CUDA kernels fold it into the producer's own pass).
void output_row_amax(TensorView row_amax, TensorView out);
void fp8_scale_from_amax_op(TensorView scale, TensorView amax, Fp8Format format, bool pow2);
// Each operand quantised with its scales and decoded back (exact: every fp8
// value is a float), one sgemm over the decoded values, the inverse scales
// and the bias applied to the fp32 sums: fp8_scaled_gemm's function with
// BLAS's summation order.
// b may be u8 codes (already quantised with b_scale): decoded as they are.
void fp8_matmul(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                TensorView b_scale, TensorView bias, const Fp8MatmulSpec& spec);
// q (u8) = fp8(x x scale[0]), saturated (fp8_quantize with the tensor's scale).
void fp8_quantize_op(TensorView q, TensorView x, TensorView scale, Fp8Format format);
void bias_backward(TensorView dbias, TensorView dout);

}  // namespace gt::cpu
