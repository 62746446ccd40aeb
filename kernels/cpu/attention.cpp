// Causal multi-head self-attention, forward and backward, as sgemm on strided
// views of the packed qkv (B,T,3C) (leading dimension 3C) so Q, K, V are never
// copied out. Grouped-query attention (Llama) is the same with n_kv_head <
// n_head key/value heads: qkv (B,T,(NH + 2 KV) hs) packs q | k | v, and q
// head h reads kv head h / (NH / KV); backward then sums the dK and dV of a
// kv head over its group's q heads, in head order (n_kv_head = n_head is
// plain multi-head attention, computed exactly as before). Causality is exploited by row blocks:
// rows [i0,i1) only need keys [0,i1), which roughly halves the flops for long sequences.
// Invariants: att holds softmax probabilities with exact zeros above the
// diagonal; dqkv is assigned (every element written); scratch is clobbered.
// With enough (batch, head) pairs to go round, they run in parallel, one per
// thread, each product single-threaded (the OpenMP build of OpenBLAS we link
// runs sequentially inside a parallel region); with few, BLAS threads each
// product. Each pair writes only its own outputs and reductions run in a
// fixed order, so results are bitwise deterministic run to run.
//
// dtypes, as CudaOps: qkv, out (and in backward dout, dqkv) are all fp32 or
// all bf16; att (the saved probabilities) and scratch are always fp32. bf16
// inputs are widened (exactly) into per-call fp32 buffers, the fp32 algorithm
// runs unchanged on them, and the bf16 outputs are its fp32 results rounded
// to nearest even: a bf16 call is bit for bit the fp32 call on the bf16
// values, then rounded. fp32 calls work in place with no extra copy. bf16
// exists here to make the mixed-precision model testable, not fast.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include <omp.h>

#include "kernels/core/bf16.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fast_math.hpp"

namespace gt::cpu {

namespace {

// Query rows handled per sgemm. Smaller wastes fewer flops above the
// diagonal, larger gives BLAS bigger products to thread.
constexpr int kRowBlock = 128;

struct Dims {
  int B, T, C, NH, hs;
  int KV = 0;     // key/value heads (NH for multi-head attention)
  int ld = 0;     // qkv's row length: (NH + 2 KV) hs
  int group = 1;  // q heads per kv head
  float scale;
  // Offsets of q head h, and of kv head g's k and v, within a qkv row.
  int64_t q_at(int h) const { return static_cast<int64_t>(h) * hs; }
  int64_t k_at(int g) const { return static_cast<int64_t>(NH + g) * hs; }
  int64_t v_at(int g) const { return static_cast<int64_t>(NH + KV + g) * hs; }
};

// Throws naming op and tensor unless `t` is fp32 or bf16 and, when `like`
// (qkv) is given, has its dtype.
void expect_io_dtype(const TensorView& t, const char* op, const char* what, const char* shared,
                     const TensorView* like = nullptr) {
  GT_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16, op, ": ", what,
           " must be fp32 or bf16, got ", dtype_name(t.dtype));
  if (like)
    GT_CHECK(t.dtype == like->dtype, op, ": ", what, " is ", dtype_name(t.dtype), " but qkv is ",
             dtype_name(like->dtype), "; ", shared, " share one dtype");
}

// Throws naming op and tensor unless `t` (saved probabilities or scratch) is fp32.
void expect_fp32_buffer(const TensorView& t, const char* op, const char* what) {
  GT_CHECK(t.dtype == DType::f32, op, ": ", what, " must be fp32 (also for bf16 qkv), got ",
           dtype_name(t.dtype));
}

// Throws unless `t` is a contiguous CPU tensor of exactly `shape` with data
// (its dtype is checked by the caller).
void expect_cpu_shape(const TensorView& t, std::initializer_list<int64_t> shape,
                      const char* what) {
  GT_CHECK(t.device == Device::cpu, what, " must be on the cpu, got ", device_name(t.device));
  expect_shape(t, shape, what);
  GT_CHECK(t.data != nullptr || t.numel() == 0, what, " has no data");
}

Dims attention_dims(const TensorView& qkv, int n_head, int n_kv_head) {
  GT_CHECK(qkv.ndim == 3, "attention qkv must be (B, T, 3C), got ", qkv.shape_str());
  GT_CHECK(n_head > 0, "n_head ", n_head);
  GT_CHECK(n_kv_head > 0 && n_head % n_kv_head == 0, "n_kv_head ", n_kv_head,
           " must divide n_head ", n_head);
  Dims d;
  d.B = static_cast<int>(qkv.shape[0]);
  d.T = static_cast<int>(qkv.shape[1]);
  d.NH = n_head;
  d.KV = n_kv_head;
  d.group = n_head / n_kv_head;
  const int heads = n_head + 2 * n_kv_head;  // q, k and v heads in a row
  GT_CHECK(
      qkv.shape[2] % heads == 0, "attention qkv last dim ", qkv.shape[2],
      n_kv_head == n_head
          ? std::string(" is not 3C")
          : detail::concat(" is not (n_head + 2 n_kv_head) * head size = ", heads, " * head size"));
  d.hs = static_cast<int>(qkv.shape[2] / heads);
  d.C = d.NH * d.hs;
  d.ld = heads * d.hs;
  d.scale = 1.f / std::sqrt(static_cast<float>(d.hs));
  expect_cpu_shape(qkv, {d.B, d.T, d.ld}, "attention qkv");
  return d;
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
          const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Rows [i0,i1) of S (already scaled) become causal softmax probabilities;
// columns (i, T) are zeroed.
void softmax_rows(float* a, int T, int i0, int i1) {
#pragma omp parallel for if ((i1 - i0) * T >= kParallelMin)
  for (int i = i0; i < i1; ++i) {
    float* row = a + static_cast<int64_t>(i) * T;
    float mx = row[0];
    for (int j = 1; j <= i; ++j) mx = std::max(mx, row[j]);
#pragma omp simd
    for (int j = 0; j <= i; ++j) row[j] = fast_exp(row[j] - mx);
    float sum = 0.f;
    for (int j = 0; j <= i; ++j) sum += row[j];
    const float inv = 1.f / sum;
    for (int j = 0; j <= i; ++j) row[j] *= inv;
    for (int j = i + 1; j < T; ++j) row[j] = 0.f;
  }
}

// One (batch, head) per thread with single-threaded sgemm inside (the OpenMP
// OpenBLAS runs sequentially within a parallel region) once there are enough
// heads to go round: the per-head products are small, and threading each of
// them cost more in fork/join than it gained.
bool heads_in_parallel(const Dims& d) { return d.B * d.NH >= 2 * omp_get_max_threads(); }

// A bf16 tensor's values widened into `buf` (resized to fit).
const float* widened(const TensorView& t, std::vector<float>& buf) {
  buf.resize(static_cast<size_t>(t.numel()));
  widen_bf16(buf.data(), static_cast<const uint16_t*>(t.data), t.numel());
  return buf.data();
}

// The bf16 tensor `t` = `src` rounded to nearest even, elementwise.
void store_rounded(TensorView t, const std::vector<float>& src) {
  uint16_t* dst = static_cast<uint16_t*>(t.data);
  const int64_t n = t.numel();
#pragma omp parallel for simd if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_from_float(src[static_cast<size_t>(i)]);
}

// out (B,T,C), att (B,NH,T,T) <- qkv (B,T,3C), all fp32.
void forward_f32(const Dims& d, float* out_p, float* att_p, const float* qkv_p) {
  const int T = d.T, C = d.C, C3 = d.ld, hs = d.hs;

#pragma omp parallel for schedule(dynamic) if (heads_in_parallel(d))
  for (int bh = 0; bh < d.B * d.NH; ++bh) {
    const int b = bh / d.NH, h = bh % d.NH;
    const float* row = qkv_p + static_cast<int64_t>(b) * T * C3;  // ld C3 = (NH + 2 KV) hs
    const float* q = row + d.q_at(h);                             // (T, hs)
    const float* k = row + d.k_at(h / d.group);
    const float* v = row + d.v_at(h / d.group);
    float* a = att_p + static_cast<int64_t>(bh) * T * T;               // (T, T)
    float* y = out_p + static_cast<int64_t>(b) * T * C + h * hs;        // (T, hs), ld C
    for (int i0 = 0; i0 < T; i0 += kRowBlock) {
      const int i1 = std::min(T, i0 + kRowBlock), m = i1 - i0;
      // S[i0:i1, 0:i1] = scale * Q[i0:i1] K[0:i1]^T
      gemm(CblasNoTrans, CblasTrans, m, i1, hs, d.scale, q + i0 * C3, C3, k, C3, 0.f,
           a + static_cast<int64_t>(i0) * T, T);
      softmax_rows(a, T, i0, i1);
      // Y[i0:i1] = P[i0:i1, 0:i1] V[0:i1]
      gemm(CblasNoTrans, CblasNoTrans, m, hs, i1, 1.f, a + static_cast<int64_t>(i0) * T, T,
           v, C3, 0.f, y + static_cast<int64_t>(i0) * C, C);
    }
  }
}

// dqkv (B,T,3C) <- dout (B,T,C), qkv, att (B,NH,T,T); scratch (B,NH,T,T)
// clobbered; all fp32.
void backward_f32(const Dims& d, float* dqkv_p, float* scr_p, const float* dout_p,
                  const float* qkv_p, const float* att_p) {
  const int T = d.T, C = d.C, C3 = d.ld, hs = d.hs;
  const float scale = d.scale;

  // One (batch, kv head) per iteration: its group's q heads, in order, are
  // the only writers of its dK and dV.
#pragma omp parallel for schedule(dynamic) if (heads_in_parallel(d))
  for (int bg = 0; bg < d.B * d.KV; ++bg)
    for (int gi = 0; gi < d.group; ++gi) {
      const int b = bg / d.KV, g = bg % d.KV, h = g * d.group + gi;
      const int bh = b * d.NH + h;
      const int64_t row = static_cast<int64_t>(b) * T * C3;  // ld C3 = (NH + 2 KV) hs
      const float* q = qkv_p + row + d.q_at(h);              // (T, hs)
      const float* k = qkv_p + row + d.k_at(g);
      const float* v = qkv_p + row + d.v_at(g);
      float* dq = dqkv_p + row + d.q_at(h);
      float* dk = dqkv_p + row + d.k_at(g);
      float* dv = dqkv_p + row + d.v_at(g);
      const float* dy = dout_p + static_cast<int64_t>(b) * T * C + h * hs;  // (T, hs), ld C
      const float* p = att_p + static_cast<int64_t>(bh) * T * T;            // (T, T)
      float* ds = scr_p + static_cast<int64_t>(bh) * T * T;                 // (T, T)

      // Blocks run last to first: the last block touches every key row, so
      // the group's first q head assigns all of dK and dV there (beta = 0) and
      // everything after adds to them.
      const int nblk = (T + kRowBlock - 1) / kRowBlock;
      for (int blk = nblk - 1; blk >= 0; --blk) {
        const int i0 = blk * kRowBlock, i1 = std::min(T, i0 + kRowBlock), m = i1 - i0;
        const float beta = blk == nblk - 1 && gi == 0 ? 0.f : 1.f;
        float* dsb = ds + static_cast<int64_t>(i0) * T;
        const float* pb = p + static_cast<int64_t>(i0) * T;
        // dP[i0:i1, 0:i1] = dY[i0:i1] V[0:i1]^T
        gemm(CblasNoTrans, CblasTrans, m, i1, hs, 1.f, dy + static_cast<int64_t>(i0) * C, C, v, C3,
             0.f, dsb, T);
        // dS = P o (dP - rowsum(dP o P)) * scale; zero above the diagonal, so
        // the products below can use the whole [0, i1) block.
#pragma omp parallel for if (m * T >= kParallelMin)
      for (int i = i0; i < i1; ++i) {
        float* dsr = ds + static_cast<int64_t>(i) * T;
        const float* pr = p + static_cast<int64_t>(i) * T;
        float dot = 0.f;
        for (int j = 0; j <= i; ++j) dot += dsr[j] * pr[j];
        for (int j = 0; j <= i; ++j) dsr[j] = pr[j] * (dsr[j] - dot) * scale;
        for (int j = i + 1; j < i1; ++j) dsr[j] = 0.f;
      }
      // dQ[i0:i1] = dS[i0:i1, 0:i1] K[0:i1]
      gemm(CblasNoTrans, CblasNoTrans, m, hs, i1, 1.f, dsb, T, k, C3, 0.f,
           dq + static_cast<int64_t>(i0) * C3, C3);
      // dK[0:i1] (+)= dS[i0:i1, 0:i1]^T Q[i0:i1]
      gemm(CblasTrans, CblasNoTrans, i1, hs, m, 1.f, dsb, T, q + static_cast<int64_t>(i0) * C3,
           C3, beta, dk, C3);
      // dV[0:i1] (+)= P[i0:i1, 0:i1]^T dY[i0:i1]
      gemm(CblasTrans, CblasNoTrans, i1, hs, m, 1.f, pb, T, dy + static_cast<int64_t>(i0) * C,
           C, beta, dv, C3);
    }
    }
}

}  // namespace

void attention_forward(TensorView out, TensorView att, TensorView qkv, int n_head, int n_kv_head) {
  const char* op = "attention_forward";
  const char* shared = "qkv and out";
  expect_io_dtype(qkv, op, "qkv", shared);
  expect_io_dtype(out, op, "out", shared, &qkv);
  expect_fp32_buffer(att, op, "saved");
  const Dims d = attention_dims(qkv, n_head, n_kv_head > 0 ? n_kv_head : n_head);
  expect_cpu_shape(out, {d.B, d.T, d.C}, "attention out");
  expect_f32(att, {d.B, d.NH, d.T, d.T}, "attention att");
  if (qkv.dtype == DType::f32) {
    forward_f32(d, out.f32(), att.f32(), qkv.f32());
    return;
  }
  std::vector<float> qkv32, out32(static_cast<size_t>(out.numel()));
  forward_f32(d, out32.data(), att.f32(), widened(qkv, qkv32));
  store_rounded(out, out32);
}

void attention_backward(TensorView dqkv, TensorView scratch, TensorView dout, TensorView qkv,
                        TensorView out, TensorView att, int n_head, int n_kv_head) {
  const char* op = "attention_backward";
  const char* shared = "dqkv, dout, qkv and out";
  expect_io_dtype(qkv, op, "qkv", shared);
  expect_io_dtype(dqkv, op, "dqkv", shared, &qkv);
  expect_io_dtype(dout, op, "dout", shared, &qkv);
  expect_io_dtype(out, op, "out", shared, &qkv);
  expect_fp32_buffer(scratch, op, "scratch");
  expect_fp32_buffer(att, op, "saved");
  const Dims d = attention_dims(qkv, n_head, n_kv_head > 0 ? n_kv_head : n_head);
  expect_cpu_shape(dqkv, {d.B, d.T, d.ld}, "attention dqkv");
  expect_cpu_shape(dout, {d.B, d.T, d.C}, "attention dout");
  expect_cpu_shape(out, {d.B, d.T, d.C}, "attention out");
  expect_f32(scratch, {d.B, d.NH, d.T, d.T}, "attention scratch");
  expect_f32(att, {d.B, d.NH, d.T, d.T}, "attention att");
  if (qkv.dtype == DType::f32) {
    backward_f32(d, dqkv.f32(), scratch.f32(), dout.f32(), qkv.f32(), att.f32());
    return;
  }
  // out is not read: the saved probabilities already give rowsum(dP o P).
  std::vector<float> qkv32, dout32, dqkv32(static_cast<size_t>(dqkv.numel()));
  backward_f32(d, dqkv32.data(), scratch.f32(), widened(dout, dout32), widened(qkv, qkv32),
               att.f32());
  store_rounded(dqkv, dqkv32);
}

}  // namespace gt::cpu
