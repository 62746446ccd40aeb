// The formulas stated in op_costs.hpp, one function per op. Bytes are
// counted in elements (f = 4-byte floats or int32) and multiplied once.
#include "trainer/profile/op_costs.hpp"

#include <algorithm>

namespace gt {

namespace op_cost {
namespace {
constexpr double kF = 4.0;  // bytes per fp32 / int32 element
OpCost cost(double flops, double elems) { return {flops, kF * elems}; }
double d(int64_t x) { return static_cast<double>(x); }
// The features of qkv: NH query heads and KV key and value heads each
// (kv_heads 0: NH, multi-head attention).
double qkv_width(int64_t NH, int64_t hs, int64_t kv_heads) {
  return d(NH + 2 * (kv_heads > 0 ? kv_heads : NH)) * d(hs);
}
}  // namespace

OpCost matmul_forward(int64_t R, int64_t C, int64_t OC, bool bias, int64_t in_bytes,
                      int64_t out_bytes) {
  // reads inp, weight (and bias); writes out.
  return {2.0 * d(R) * d(C) * d(OC), (d(R) * d(C) + d(OC) * d(C)) * d(in_bytes) +
                                         (bias ? kF * d(OC) : 0.0) + d(R) * d(OC) * d(out_bytes)};
}

OpCost matmul_backward(int64_t R, int64_t C, int64_t OC, bool dinp, bool dbias, int64_t in_bytes,
                       int64_t dinp_bytes) {
  const double gemm = 2.0 * d(R) * d(C) * d(OC);
  // reads dout and inp; dweight read + written; dinp needs weight read, dinp written.
  double bytes = (d(R) * d(OC) + d(R) * d(C)) * d(in_bytes) + 2.0 * kF * d(OC) * d(C);
  if (dinp) bytes += d(OC) * d(C) * d(in_bytes) + d(R) * d(C) * d(dinp_bytes);
  if (dbias) bytes += 2.0 * kF * d(OC);
  return {dinp ? 2.0 * gemm : gemm, bytes};
}

OpCost matmul_gelu_forward(int64_t R, int64_t C, int64_t OC, bool bias, int64_t in_bytes,
                           int64_t out_bytes) {
  OpCost c = matmul_forward(R, C, OC, bias, in_bytes, out_bytes);
  c.bytes += d(R) * d(OC) * d(out_bytes);  // out besides pre; neither is read back
  return c;
}

OpCost matmul_backward_dgelu(int64_t R, int64_t C, int64_t OC, bool dbias, int64_t in_bytes,
                             int64_t dinp_bytes) {
  OpCost c = matmul_backward(R, C, OC, true, dbias, in_bytes, dinp_bytes);
  c.bytes += d(R) * d(C) * d(dinp_bytes);  // pre read by the epilogue
  return c;
}

OpCost fp8_matmul(int64_t M, int64_t N, int64_t K, int64_t a_bytes, int64_t b_bytes,
                  int64_t out_bytes, bool accumulate, int64_t bias_bytes,
                  int64_t scale_elems) {
  // each operand: read at its size, written and read again as fp8 (1 byte).
  const double b_elem = b_bytes == 1 ? 1.0 : d(b_bytes + 2);  // codes: the GEMM's read only
  const double operands = d(M) * d(K) * d(a_bytes + 2) + d(N) * d(K) * b_elem;
  const double out = d(M) * d(N) * d(out_bytes) * (accumulate ? 2.0 : 1.0);
  return {2.0 * d(M) * d(N) * d(K),
          operands + out + d(N) * d(bias_bytes) + kF * d(scale_elems)};
}

OpCost fp8_quantize(int64_t n, int64_t x_bytes) {
  return {d(n), d(n) * d(x_bytes + 1) + kF};
}

OpCost fp8_amax(int64_t R, int64_t C, int64_t x_bytes, int64_t amax_elems) {
  return {d(R) * d(C), d(R) * d(C) * d(x_bytes) + kF * d(amax_elems)};
}

OpCost fp8_scale_from_amax(int64_t n) { return cost(d(n), 2.0 * d(n)); }

OpCost bias_backward(int64_t R, int64_t OC, int64_t dout_bytes) {
  return {d(R) * d(OC), d(R) * d(OC) * d(dout_bytes) + 2.0 * kF * d(OC)};
}

OpCost grouped_matmul_forward(int64_t N, int64_t C, int64_t OC, int64_t G, int64_t elem_bytes) {
  // reads inp, every group's weight, offsets; writes out.
  return {2.0 * d(N) * d(C) * d(OC),
          (d(N) * d(C) + d(G) * d(OC) * d(C) + d(N) * d(OC)) * d(elem_bytes) + kF * d(G + 1)};
}

OpCost grouped_matmul_backward(int64_t N, int64_t C, int64_t OC, int64_t G, bool dinp,
                               int64_t elem_bytes) {
  const double gemm = 2.0 * d(N) * d(C) * d(OC);
  // reads dout, inp, offsets; dweight read + written; dinp needs weight read, dinp written.
  double bytes = (d(N) * d(OC) + d(N) * d(C)) * d(elem_bytes) +
                 kF * (2.0 * d(G) * d(OC) * d(C) + d(G + 1));
  if (dinp) bytes += (d(G) * d(OC) * d(C) + d(N) * d(C)) * d(elem_bytes);
  return {dinp ? 2.0 * gemm : gemm, bytes};
}

OpCost attention_forward(int64_t B, int64_t NH, int64_t T, int64_t hs, int64_t saved_elems,
                         int64_t act_bytes, int64_t kv_heads) {
  const double C = d(NH) * d(hs), QKV = qkv_width(NH, hs, kv_heads);
  // Q K^T and P V: 2 * (2 T^2 hs) per (b, h).
  const double flops = 4.0 * d(B) * d(NH) * d(T) * d(T) * d(hs);
  return {flops, (d(B) * d(T) * QKV + d(B) * d(T) * C) * d(act_bytes) + kF * d(saved_elems)};
}

OpCost attention_backward(int64_t B, int64_t NH, int64_t T, int64_t hs, int64_t saved_elems,
                          int64_t act_bytes, int64_t kv_heads) {
  const double C = d(NH) * d(hs), QKV = qkv_width(NH, hs, kv_heads);
  // dP = dY V^T, dQ = dS K, dK = dS^T Q, dV = P^T dY: 4 * (2 T^2 hs).
  const double flops = 8.0 * d(B) * d(NH) * d(T) * d(T) * d(hs);
  // reads dout (B,T,C), qkv (B,T,QKV), out (B,T,C), saved; writes dqkv (B,T,QKV).
  return {flops, d(B) * d(T) * (C + QKV + C + QKV) * d(act_bytes) + kF * d(saved_elems)};
}

double attention_backward_kernel_extra_bytes(int64_t B, int64_t NH, int64_t T, int64_t hs,
                                             int64_t saved_elems, int64_t scratch_elems,
                                             int64_t act_bytes) {
  const double C = d(NH) * d(hs);
  return (3.0 * C + 2.0 * C) * d(B) * d(T) * d(act_bytes) +
         kF * (3.0 * d(scratch_elems) + d(saved_elems));
}

double attention_tc_kernel_extra_flops(int64_t B, int64_t NH, int64_t T, int64_t hs,
                                       bool backward) {
  const double product = 2.0 * d(B) * d(NH) * d(T) * d(T) * d(hs);  // one T x T x hs product
  return backward ? 2.0 * product : 0.0;
}

double causal_pairs(int64_t Tq, int64_t Tk, int64_t q_pos, int64_t k_pos) {
  // Query row i sees clamp(q_pos - k_pos + 1 + i, 0, Tk) keys: the sum of
  // clamp(x, 0, Tk) over x = a .. a + Tq - 1 with a = q_pos - k_pos + 1, as
  // upto(last) - upto(a - 1), upto(n) being the sum over every x <= n.
  const double K = d(Tk);
  auto upto = [K](double n) {
    if (n <= 0) return 0.0;
    if (n <= K) return n * (n + 1) / 2;
    return K * (K + 1) / 2 + (n - K) * K;
  };
  if (Tq <= 0 || Tk <= 0) return 0.0;
  const double a = d(q_pos) - d(k_pos) + 1;
  return upto(a + d(Tq) - 1) - upto(a - 1);
}

OpCost attention_block_forward(int64_t B, int64_t NH, int64_t KV, int64_t hs, int64_t Tq,
                               int64_t Tk, int64_t q_pos, int64_t k_pos, bool accumulate,
                               int64_t act_bytes) {
  const double pairs = causal_pairs(Tq, Tk, q_pos, k_pos);
  const double q = d(B) * d(Tq) * d(NH) * d(hs), kv = d(B) * d(Tk) * d(KV) * d(hs);
  const double rows = d(B) * d(NH) * d(Tq);
  const double outputs = accumulate ? 2.0 : 1.0;  // out and lse read too when merging
  return {4.0 * d(B) * d(NH) * d(hs) * pairs,
          (q + 2.0 * kv) * d(act_bytes) + kF * outputs * (q + rows)};
}

OpCost attention_block_backward(int64_t B, int64_t NH, int64_t KV, int64_t hs, int64_t Tq,
                                int64_t Tk, int64_t q_pos, int64_t k_pos, int64_t act_bytes) {
  const double pairs = causal_pairs(Tq, Tk, q_pos, k_pos);
  const double q = d(B) * d(Tq) * d(NH) * d(hs), kv = d(B) * d(Tk) * d(KV) * d(hs);
  const double rows = d(B) * d(NH) * d(Tq);
  // reads dout, q, k, v, lse, delta; dq, dk, dv read and written.
  return {10.0 * d(B) * d(NH) * d(hs) * pairs,
          (2.0 * q + 2.0 * kv) * d(act_bytes) + kF * (2.0 * rows + 2.0 * (q + 2.0 * kv))};
}

OpCost attention_row_dot(int64_t B, int64_t T, int64_t NH, int64_t hs, int64_t dout_bytes,
                         int64_t out_bytes) {
  const double n = d(B) * d(T) * d(NH) * d(hs);
  return {2.0 * n, n * d(dout_bytes + out_bytes) + kF * d(B) * d(NH) * d(T)};
}

OpCost cast_rows(int64_t rows, int64_t cols, int64_t src_bytes, int64_t dst_bytes) {
  return cast(rows * cols, src_bytes, dst_bytes);
}

OpCost layernorm_forward(int64_t R, int64_t C, int64_t act_bytes, int64_t param_bytes) {
  // reads inp, weight, bias; writes out, mean, rstd.
  return {8.0 * d(R) * d(C),
          2.0 * d(R) * d(C) * d(act_bytes) + 2.0 * d(C) * d(param_bytes) + kF * 2.0 * d(R)};
}

OpCost add_layernorm_forward(int64_t R, int64_t C, int64_t act_bytes, int64_t param_bytes) {
  // the add (1/element) and the LayerNorm's 8; a, b read, res and out written.
  return {9.0 * d(R) * d(C),
          4.0 * d(R) * d(C) * d(act_bytes) + 2.0 * d(C) * d(param_bytes) + kF * 2.0 * d(R)};
}

OpCost layernorm_backward(int64_t R, int64_t C, int64_t inp_bytes, int64_t dout_bytes,
                          int64_t copy_bytes) {
  // reads dout, inp, weight, mean, rstd; dinp, dweight, dbias read + written;
  // the rounded copy of dinp written.
  return {19.0 * d(R) * d(C), d(R) * d(C) * d(inp_bytes + dout_bytes + copy_bytes) +
                                  kF * (d(C) + 2.0 * d(R) + 2.0 * d(R) * d(C) + 4.0 * d(C))};
}

OpCost gelu_forward(int64_t n, int64_t b) { return {9.0 * d(n), 2.0 * d(n) * d(b)}; }
OpCost gelu_backward(int64_t n, int64_t b) { return {20.0 * d(n), 3.0 * d(n) * d(b)}; }

OpCost add(int64_t n, int64_t b) { return {d(n), 3.0 * d(n) * d(b)}; }
OpCost accumulate(int64_t n) { return cost(d(n), 3.0 * d(n)); }
OpCost add_bias(int64_t R, int64_t C) { return cost(d(R) * d(C), 2.0 * d(R) * d(C) + d(C)); }
OpCost zero(int64_t n, int64_t elem_bytes) { return {0.0, d(n) * d(elem_bytes)}; }
OpCost copy(int64_t n, int64_t elem_bytes) { return {0.0, 2.0 * d(n) * d(elem_bytes)}; }
OpCost cast(int64_t n, int64_t src_bytes, int64_t dst_bytes) {
  return {0.0, d(n) * (d(src_bytes) + d(dst_bytes))};
}

// (R, V) logit passes of lb bytes per element plus `small` fp32 row values.
OpCost logit_cost(double flops, double logit_elems, int64_t lb, double small) {
  return {flops, logit_elems * d(lb) + kF * small};
}

OpCost softmax_cross_entropy(int64_t R, int64_t V, bool dlogits, int64_t lb) {
  // reads logits, targets; writes losses (+ dlogits).
  const double flops = (dlogits ? 5.0 : 4.0) * d(R) * d(V);
  return logit_cost(flops, d(R) * d(V) * (dlogits ? 2.0 : 1.0), lb, 2.0 * d(R));
}

OpCost cross_entropy_shard_max(int64_t R, int64_t V, int64_t lb) {
  return logit_cost(d(R) * d(V), d(R) * d(V), lb, d(R));
}

OpCost cross_entropy_shard_sums(int64_t R, int64_t V, int64_t lb) {
  // reads logits, targets, row_max; writes sumexp, target_logit.
  return logit_cost(3.0 * d(R) * d(V), d(R) * d(V), lb, 4.0 * d(R));
}

OpCost cross_entropy_shard_finish(int64_t R, int64_t V, bool dlogits, int64_t lb) {
  // reads targets, row_max, sumexp, target_logit (+ logits); writes losses (+ dlogits).
  if (!dlogits) return cost(0.0, 4.0 * d(R) + d(R));
  return logit_cost(3.0 * d(R) * d(V), 2.0 * d(R) * d(V), lb, 5.0 * d(R));
}

OpCost sum_squares(int64_t n) { return cost(2.0 * d(n), d(n)); }
OpCost clip_scale() { return cost(4.0, 3.0); }
OpCost adamw(int64_t n, bool bf16_copy) {
  // reads param, grad, m, v; writes param, m, v (fp32) and the bf16 copy.
  return {15.0 * d(n), kF * 7.0 * d(n) + (bf16_copy ? 2.0 * d(n) : 0.0)};
}

OpCost embedding_forward(int64_t B, int64_t T, int64_t C, int64_t V) {
  const double N = d(B) * d(T);
  // reads tokens, the wte rows used, wpe rows 0..T; writes out.
  return cost(N * d(C), N + std::min(N, d(V)) * d(C) + d(T) * d(C) + N * d(C));
}

OpCost embedding_backward(int64_t B, int64_t T, int64_t C, int64_t V) {
  const double N = d(B) * d(T);
  // reads dout, tokens; the dwte rows used and dwpe rows 0..T read + written.
  return cost(2.0 * N * d(C),
              N * d(C) + N + 2.0 * std::min(N, d(V)) * d(C) + 2.0 * d(T) * d(C));
}

OpCost token_embedding_forward(int64_t N, int64_t C, int64_t V_shard) {
  return cost(0.0, d(N) + std::min(d(N), d(V_shard)) * d(C) + d(N) * d(C));
}

OpCost token_embedding_backward(int64_t N, int64_t C, int64_t V_shard) {
  return cost(d(N) * d(C), d(N) * d(C) + d(N) + 2.0 * std::min(d(N), d(V_shard)) * d(C));
}

OpCost position_embedding_forward(int64_t N, int64_t C, int64_t T) {
  // out read + written, the wpe rows used read.
  return cost(d(N) * d(C), 2.0 * d(N) * d(C) + std::min(d(N), d(T)) * d(C));
}

OpCost position_embedding_backward(int64_t N, int64_t C, int64_t T) {
  return cost(d(N) * d(C), d(N) * d(C) + 2.0 * std::min(d(N), d(T)) * d(C));
}

}  // namespace op_cost
}  // namespace gt
