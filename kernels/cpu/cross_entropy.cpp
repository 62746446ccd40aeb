// Fused softmax + cross-entropy over rows of logits (R,Vp), the first V
// columns the vocabulary and the rest padding (ops.hpp).
// Invariants: losses[r] = logsumexp(logits[r,:V]) - logits[r][target[r]], with
// the row max subtracted first; when dlogits is given it is assigned
// (softmax - onehot) * grad_scale on the first V columns and 0 on the padding,
// and may alias logits, so every read of a row's logits happens before that
// row is overwritten. Targets are validated up front: a target outside
// [0, V) is a data error, reported with its value.
// Logits and dlogits are both fp32 or both bf16 (the bf16 LM head's output):
// a bf16 row is widened exactly, the math is the fp32 path's, and the
// gradient is rounded to nearest even, as CUDA's kernels do.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fast_math.hpp"

namespace gt::cpu {

namespace {
// Rows of a (R, cols) fp32 or bf16 logits/dlogits view, read and written as
// fp32. A thread keeps its own LogitRows (the bf16 rows go through its
// buffers).
class LogitRows {
 public:
  LogitRows(const TensorView& t, int64_t cols) : t_(t), cols_(cols) {
    if (!t.empty() && t.dtype == DType::bf16) buf_.resize(static_cast<size_t>(cols));
  }
  // Row r as fp32: the row itself, or its bf16 values widened into a buffer.
  const float* read(int64_t r) {
    if (t_.dtype == DType::f32) return t_.f32() + r * cols_;
    widen_bf16(buf_.data(), static_cast<const uint16_t*>(t_.data) + r * cols_, cols_);
    return buf_.data();
  }
  // Where row r's fp32 values are written before commit(r): the row itself
  // (fp32; it may alias the logits' row) or a buffer rounded into the row.
  float* write(int64_t r) { return t_.dtype == DType::f32 ? t_.f32() + r * cols_ : buf_.data(); }
  void commit(int64_t r) {
    if (t_.dtype == DType::f32) return;
    narrow_to_bf16(static_cast<uint16_t*>(t_.data) + r * cols_, buf_.data(), cols_);
  }

 private:
  const TensorView& t_;
  int64_t cols_;
  std::vector<float> buf_;
};

void expect_logits(const TensorView& logits, const TensorView& dlogits, int64_t R, int64_t cols,
                   const char* what) {
  expect_f32_or_bf16(logits, {R, cols}, what);
  if (dlogits.empty()) return;
  expect_f32_or_bf16(dlogits, {R, cols}, "cross-entropy dlogits");
  GT_CHECK(dlogits.dtype == logits.dtype, "cross-entropy dlogits must have the logits' dtype ",
           dtype_name(logits.dtype), ", got ", dtype_name(dlogits.dtype));
}
}  // namespace

void softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                           TensorView targets, int64_t vocab_size, float grad_scale) {
  GT_CHECK(logits.ndim == 2, "cross-entropy logits must be (R, V), got ", logits.shape_str());
  const int64_t R = logits.shape[0], cols = logits.shape[1], V = vocab_size;
  GT_CHECK(V > 0 && V <= cols, "cross-entropy vocab_size ", V, " must be in [1, ", cols,
           "] (the logits' columns)");
  expect_logits(logits, dlogits, R, cols, "cross-entropy logits");
  expect_f32(losses, {R}, "cross-entropy losses");
  expect_i32(targets, {R}, "cross-entropy targets");
  const bool want_grad = !dlogits.empty();

  const int32_t* tgt = targets.i32();
  for (int64_t r = 0; r < R; ++r)
    if (tgt[r] < 0 || tgt[r] >= V)
      fail("cross-entropy target ", tgt[r], " at row ", r, " is out of range [0, ", V, ")");

  float* loss = losses.f32();
#pragma omp parallel if (R * cols >= kParallelMin)
  {
    LogitRows in(logits, cols), out(dlogits, cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const float* xr = in.read(r);
      const int64_t t = tgt[r];
      const float x_t = xr[t];
      float mx = xr[0];
      for (int64_t j = 1; j < V; ++j) mx = std::max(mx, xr[j]);
      // The sum runs in double: V is ~50k and the loss is logged and compared.
      double sum = 0.0;
      if (want_grad) {
        float* dr = out.write(r);
        // The exponentials are parked in dlogits (possibly logits itself); the
        // row's logits are not needed again after this loop.
#pragma omp simd
        for (int64_t j = 0; j < V; ++j) dr[j] = fast_exp(xr[j] - mx);
        for (int64_t j = 0; j < V; ++j) sum += dr[j];
        const float k = static_cast<float>(static_cast<double>(grad_scale) / sum);
        for (int64_t j = 0; j < V; ++j) dr[j] *= k;
        dr[t] -= grad_scale;
        std::fill(dr + V, dr + cols, 0.f);  // padding: no gradient
        out.commit(r);
      } else {
        for (int64_t j = 0; j < V; ++j) sum += fast_exp(xr[j] - mx);
      }
      loss[r] = static_cast<float>(std::log(sum) + static_cast<double>(mx) - x_t);
    }
  }
}

}  // namespace gt::cpu

// Vocab-parallel cross-entropy: the three per-shard passes of Ops (stats,
// sums, finish). Sums run in double like the fused op; every row is owned by
// one thread, so results do not depend on the thread count. Columns whose
// vocabulary row vocab_start + j is at or past vocab_size are padding: left
// out of the max and the sum, and given a zero gradient.
namespace gt::cpu {

namespace {
struct ShardRows {
  int64_t R, Vs;
  int64_t valid;  // columns [0, valid) are vocabulary, [valid, Vs) padding
};
ShardRows shard_rows(const TensorView& logits, const TensorView& dlogits, int64_t vocab_start,
                     int64_t vocab_size, const char* what) {
  GT_CHECK(logits.ndim == 2, what, ": logits must be (R, V_shard), got ", logits.shape_str());
  GT_CHECK(vocab_start >= 0 && vocab_size > 0, what, ": vocab_start ", vocab_start, ", vocab_size ",
           vocab_size);
  const int64_t Vs = logits.shape[1];
  ShardRows s{logits.shape[0], Vs, std::clamp<int64_t>(vocab_size - vocab_start, 0, Vs)};
  expect_logits(logits, dlogits, s.R, s.Vs, what);
  return s;
}
}  // namespace

void cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                             int64_t vocab_size) {
  const ShardRows s =
      shard_rows(logits, TensorView{}, vocab_start, vocab_size, "cross-entropy shard logits");
  expect_f32(row_max, {s.R}, "cross-entropy shard row_max");
  float* mx = row_max.f32();
#pragma omp parallel if (s.R * s.Vs >= kParallelMin)
  {
    LogitRows in(logits, s.Vs);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < s.R; ++r) {
      const float* xr = in.read(r);
      float m = -INFINITY;  // a shard of padding only: exp(-inf - max) adds 0 later
      for (int64_t j = 0; j < s.valid; ++j) m = std::max(m, xr[j]);
      mx[r] = m;
    }
  }
}

void cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit, TensorView logits,
                              TensorView targets, TensorView row_max, int64_t vocab_start,
                              int64_t vocab_size) {
  const ShardRows s =
      shard_rows(logits, TensorView{}, vocab_start, vocab_size, "cross-entropy shard logits");
  expect_f32(sumexp, {s.R}, "cross-entropy shard sumexp");
  expect_f32(target_logit, {s.R}, "cross-entropy shard target_logit");
  expect_i32(targets, {s.R}, "cross-entropy shard targets");
  expect_f32(row_max, {s.R}, "cross-entropy shard row_max");
  const int32_t* tgt = targets.i32();
  const float* mx = row_max.f32();
  float* se = sumexp.f32();
  float* tl = target_logit.f32();
#pragma omp parallel if (s.R * s.Vs >= kParallelMin)
  {
    LogitRows in(logits, s.Vs);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < s.R; ++r) {
      const float* xr = in.read(r);
      double sum = 0.0;
      for (int64_t j = 0; j < s.valid; ++j) sum += fast_exp(xr[j] - mx[r]);
      se[r] = static_cast<float>(sum);
      const int64_t t = tgt[r] - vocab_start;
      tl[r] = (t >= 0 && t < s.valid) ? xr[t] : 0.f;
    }
  }
}

void cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                TensorView targets, TensorView row_max, TensorView sumexp,
                                TensorView target_logit, int64_t vocab_start, int64_t vocab_size,
                                float grad_scale) {
  const ShardRows s =
      shard_rows(logits, dlogits, vocab_start, vocab_size, "cross-entropy shard logits");
  expect_f32(losses, {s.R}, "cross-entropy shard losses");
  expect_i32(targets, {s.R}, "cross-entropy shard targets");
  expect_f32(row_max, {s.R}, "cross-entropy shard row_max");
  expect_f32(sumexp, {s.R}, "cross-entropy shard sumexp");
  expect_f32(target_logit, {s.R}, "cross-entropy shard target_logit");
  const bool want_grad = !dlogits.empty();
  const int32_t* tgt = targets.i32();
  const float* mx = row_max.f32();
  const float* se = sumexp.f32();
  const float* tl = target_logit.f32();
  float* loss = losses.f32();
#pragma omp parallel if (s.R * s.Vs >= kParallelMin)
  {
    LogitRows in(logits, s.Vs), out(dlogits, s.Vs);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < s.R; ++r) {
      loss[r] = static_cast<float>(std::log(static_cast<double>(se[r])) +
                                   static_cast<double>(mx[r]) - tl[r]);
      if (!want_grad) continue;
      const float* xr = in.read(r);
      float* dr = out.write(r);  // may be xr itself (fp32 in place): read before written
      const float k = static_cast<float>(static_cast<double>(grad_scale) / se[r]);
#pragma omp simd
      for (int64_t j = 0; j < s.valid; ++j) dr[j] = fast_exp(xr[j] - mx[r]) * k;
      std::fill(dr + s.valid, dr + s.Vs, 0.f);  // padding: no gradient
      const int64_t t = tgt[r] - vocab_start;
      if (t >= 0 && t < s.valid) dr[t] -= grad_scale;
      out.commit(r);
    }
  }
}

}  // namespace gt::cpu
