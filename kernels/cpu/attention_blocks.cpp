// Attention over blocks (context parallelism) on the CPU: the reference the
// CUDA kernels are tested against. Contract: Ops::attention_block_* in
// kernels/ops.hpp.
//
// Per (batch, query head), as sgemm on the strided views (q, k, v, out and
// the gradients are read and written in place through their row strides;
// bf16 inputs are widened once per call into contiguous fp32 copies):
//   forward   S = scale Q K^T (Tq, Tk) in scratch; per row the block's max m,
//             l = sum exp(S - m) over the keys the row sees and lse_b = m +
//             log l; the merged lse' (= lse_b without accumulate); then
//             P = exp(S - lse'), so that out' = e^(lse - lse') out + P V is
//             the merge of ops.hpp in one product (P V added with beta 1
//             after the old rows are scaled).
//   backward  per (batch, key/value head), over its group's query heads in
//             order (the only writers of its dk and dv, so no two threads
//             share an output and sums run in a fixed order):
//             P = exp(scale Q K^T - lse) on the seen keys, dP = dO V^T,
//             dS = P o (dP - delta), dq += scale dS K, dk += scale dS^T Q,
//             dv += P^T dO.
// The causal mask is by position: row i sees keys [0, visible(i)). Results
// are bitwise deterministic run to run (fixed orders, no atomics).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <omp.h>

#include "kernels/core/bf16.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fast_math.hpp"

namespace gt::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A 3-D tensor as fp32 rows: base pointer and batch / row strides in floats.
struct Rows {
  const float* p = nullptr;
  int64_t sb = 0, st = 0;
  const float* row(int64_t b, int64_t t) const { return p + b * sb + t * st; }
};

// fp32 views as they are; bf16 widened (exactly) into `buf`, contiguous.
Rows fp32_rows(const TensorView& t, std::vector<float>& buf) {
  if (t.dtype == DType::f32) return {t.f32(), t.strides[0], t.strides[1]};
  const int64_t B = t.shape[0], T = t.shape[1], W = t.shape[2];
  buf.resize(static_cast<size_t>(B * T * W));
  const auto* src = static_cast<const uint16_t*>(t.data);
#pragma omp parallel for collapse(2) if (B * T * W >= kParallelMin)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      widen_bf16(buf.data() + (b * T + i) * W, src + b * t.strides[0] + i * t.strides[1], W);
  return {buf.data(), T * W, W};
}

void expect_cpu(const TensorView& t, const char* what) {
  GT_CHECK(t.device == Device::cpu, "attention block ", what, " must be on the cpu, got ",
           device_name(t.device));
}

struct Block {
  int64_t B, Tq, Tk;
  int NH, KV, hs, group;
  float scale;
  int64_t q_pos, k_pos;
  // Query row i sees keys [0, visible(i)).
  int64_t visible(int64_t i) const {
    return std::clamp<int64_t>(q_pos + i - k_pos + 1, 0, Tk);
  }
};

Block block_of(const TensorView& q, const TensorView& k, int n_head, int n_kv_head, int64_t q_pos,
               int64_t k_pos) {
  Block d;
  d.B = q.shape[0];
  d.Tq = q.shape[1];
  d.Tk = k.shape[1];
  d.NH = n_head;
  d.KV = n_kv_head;
  d.group = n_head / n_kv_head;
  d.hs = static_cast<int>(q.shape[2] / n_head);
  d.scale = 1.f / std::sqrt(static_cast<float>(d.hs));
  d.q_pos = q_pos;
  d.k_pos = k_pos;
  return d;
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

// One (batch, head) per thread (single-threaded sgemm inside, as in
// attention.cpp) once there are enough of them to go round.
bool pairs_in_parallel(int64_t pairs) { return pairs >= 2 * omp_get_max_threads(); }

// log(e^a + e^b) without overflow; -inf when both are.
float log_add_exp(float a, float b) {
  const float m = std::max(a, b);
  if (m == kNegInf) return kNegInf;
  return m + std::log(std::exp(a - m) + std::exp(b - m));
}

}  // namespace

void attention_block_forward(TensorView out, TensorView lse, TensorView scratch, TensorView q,
                             TensorView k, TensorView v, int64_t q_pos, int64_t k_pos, int n_head,
                             int n_kv_head, bool accumulate) {
  for (const TensorView* t : {&out, &lse, &scratch, &q, &k, &v})
    expect_cpu(*t, t == &out ? "out" : t == &lse ? "lse" : t == &scratch ? "scratch" : "q/k/v");
  const Block d = block_of(q, k, n_head, n_kv_head, q_pos, k_pos);
  if (d.B == 0 || d.Tq == 0) return;
  std::vector<float> qb, kb, vb;
  const Rows Q = fp32_rows(q, qb), K = fp32_rows(k, kb), V = fp32_rows(v, vb);
  float* O = out.f32();
  float* L = lse.f32();
  const int64_t osb = out.strides[0], ost = out.strides[1];
  const int64_t lsb = lse.strides[0], lsh = lse.strides[1];
  const int64_t TT = d.Tq * d.Tk;

#pragma omp parallel for schedule(dynamic) if (pairs_in_parallel(d.B * d.NH))
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
    const int64_t b = bh / d.NH;
    const int h = static_cast<int>(bh % d.NH), g = h / d.group;
    float* S = scratch.f32() + bh * 2 * TT;               // (Tq, Tk)
    float* o = O + b * osb + static_cast<int64_t>(h) * d.hs;  // (Tq, hs), ld ost
    float* l = L + b * lsb + h * lsh;                      // (Tq)
    if (d.Tk > 0)
      gemm(CblasNoTrans, CblasTrans, d.Tq, d.Tk, d.hs, d.scale, Q.row(b, 0) + h * d.hs, Q.st,
           K.row(b, 0) + g * d.hs, K.st, 0.f, S, d.Tk);
    for (int64_t i = 0; i < d.Tq; ++i) {
      float* row = S + i * d.Tk;
      const int64_t n = d.visible(i);
      float lse_b = kNegInf;
      if (n > 0) {
        float mx = row[0];
        for (int64_t j = 1; j < n; ++j) mx = std::max(mx, row[j]);
        float sum = 0.f;
        for (int64_t j = 0; j < n; ++j) sum += fast_exp(row[j] - mx);
        lse_b = mx + std::log(sum);
      }
      const float old = accumulate ? l[i] : kNegInf;
      const float merged = accumulate ? log_add_exp(old, lse_b) : lse_b;
      // The old rows' share of the merge; 0 where there were none.
      if (accumulate) {
        const float keep = old == kNegInf ? 0.f : std::exp(old - merged);
        float* orow = o + i * ost;
        for (int c = 0; c < d.hs; ++c) orow[c] *= keep;
      }
      l[i] = merged;
      for (int64_t j = 0; j < n; ++j) row[j] = fast_exp(row[j] - merged);
      for (int64_t j = n; j < d.Tk; ++j) row[j] = 0.f;
    }
    // out (+)= P V: P already carries the merge's weight of this block.
    if (d.Tk > 0)
      gemm(CblasNoTrans, CblasNoTrans, d.Tq, d.hs, d.Tk, 1.f, S, d.Tk, V.row(b, 0) + g * d.hs,
           V.st, accumulate ? 1.f : 0.f, o, ost);
    else if (!accumulate)
      for (int64_t i = 0; i < d.Tq; ++i) std::fill(o + i * ost, o + i * ost + d.hs, 0.f);
  }
}

void attention_block_backward(TensorView dq, TensorView dk, TensorView dv, TensorView scratch,
                              TensorView dout, TensorView q, TensorView k, TensorView v,
                              TensorView lse, TensorView delta, int64_t q_pos, int64_t k_pos,
                              int n_head, int n_kv_head) {
  for (const TensorView* t : {&dq, &dk, &dv, &scratch, &dout, &q, &k, &v, &lse, &delta})
    expect_cpu(*t, "tensor");
  const Block d = block_of(q, k, n_head, n_kv_head, q_pos, k_pos);
  if (d.B == 0 || d.Tq == 0 || d.Tk == 0) return;
  std::vector<float> qb, kb, vb, dob;
  const Rows Q = fp32_rows(q, qb), K = fp32_rows(k, kb), V = fp32_rows(v, vb),
             dO = fp32_rows(dout, dob);
  const int64_t TT = d.Tq * d.Tk;
  const float* L = lse.f32();
  const float* D = delta.f32();

#pragma omp parallel for schedule(dynamic) if (pairs_in_parallel(d.B * d.KV))
  for (int64_t bg = 0; bg < d.B * d.KV; ++bg) {
    const int64_t b = bg / d.KV;
    const int g = static_cast<int>(bg % d.KV);
    float* dkp = dk.f32() + b * dk.strides[0] + static_cast<int64_t>(g) * d.hs;
    float* dvp = dv.f32() + b * dv.strides[0] + static_cast<int64_t>(g) * d.hs;
    const float* kp = K.row(b, 0) + g * d.hs;
    const float* vp = V.row(b, 0) + g * d.hs;
    for (int gi = 0; gi < d.group; ++gi) {
      const int h = g * d.group + gi;
      float* P = scratch.f32() + (b * d.NH + h) * 2 * TT;  // (Tq, Tk)
      float* dS = P + TT;                                   // (Tq, Tk)
      const float* qp = Q.row(b, 0) + h * d.hs;
      const float* dop = dO.row(b, 0) + h * d.hs;
      const float* lr = L + b * lse.strides[0] + h * lse.strides[1];
      const float* dr = D + b * delta.strides[0] + h * delta.strides[1];
      float* dqp = dq.f32() + b * dq.strides[0] + static_cast<int64_t>(h) * d.hs;
      gemm(CblasNoTrans, CblasTrans, d.Tq, d.Tk, d.hs, d.scale, qp, Q.st, kp, K.st, 0.f, P, d.Tk);
      // dP = dO V^T
      gemm(CblasNoTrans, CblasTrans, d.Tq, d.Tk, d.hs, 1.f, dop, dO.st, vp, V.st, 0.f, dS, d.Tk);
      for (int64_t i = 0; i < d.Tq; ++i) {
        float* p = P + i * d.Tk;
        float* ds = dS + i * d.Tk;
        // The global lse: -inf only for a query that sees no key at all.
        const int64_t n = lr[i] == kNegInf ? 0 : d.visible(i);
        for (int64_t j = 0; j < n; ++j) {
          p[j] = fast_exp(p[j] - lr[i]);
          ds[j] = p[j] * (ds[j] - dr[i]);
        }
        for (int64_t j = n; j < d.Tk; ++j) p[j] = ds[j] = 0.f;
      }
      // dq += scale dS K;  dk += scale dS^T Q;  dv += P^T dO
      gemm(CblasNoTrans, CblasNoTrans, d.Tq, d.hs, d.Tk, d.scale, dS, d.Tk, kp, K.st, 1.f, dqp,
           dq.strides[1]);
      gemm(CblasTrans, CblasNoTrans, d.Tk, d.hs, d.Tq, d.scale, dS, d.Tk, qp, Q.st, 1.f, dkp,
           dk.strides[1]);
      gemm(CblasTrans, CblasNoTrans, d.Tk, d.hs, d.Tq, 1.f, P, d.Tk, dop, dO.st, 1.f, dvp,
           dv.strides[1]);
    }
  }
}

void attention_row_dot(TensorView delta, TensorView dout, TensorView out, int n_head) {
  for (const TensorView* t : {&delta, &dout, &out}) expect_cpu(*t, "tensor");
  const int64_t B = dout.shape[0], T = dout.shape[1];
  const int hs = static_cast<int>(dout.shape[2] / n_head);
  auto value = [](const TensorView& t, int64_t b, int64_t i, int64_t c) {
    const int64_t at = b * t.strides[0] + i * t.strides[1] + c;
    return t.dtype == DType::f32 ? t.f32()[at]
                                 : bf16_to_float(static_cast<const uint16_t*>(t.data)[at]);
  };
  float* D = delta.f32();
#pragma omp parallel for collapse(2) if (B * T * dout.shape[2] >= kParallelMin)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int h = 0; h < n_head; ++h) {
        float s = 0.f;
        for (int c = 0; c < hs; ++c) {
          const int64_t col = static_cast<int64_t>(h) * hs + c;
          s += value(dout, b, i, col) * value(out, b, i, col);
        }
        D[b * delta.strides[0] + h * delta.strides[1] + i] = s;
      }
}

}  // namespace gt::cpu
