// Token + position embedding, forward and backward, fused (one rank) and
// split into its token and position halves (vocab-parallel tensor parallelism).
// Invariants: dwte/dwpe accumulate (+=). The backward is a scatter-add, so to
// stay bitwise deterministic without atomics it is parallelised over channel
// blocks: every element of dwte/dwpe is owned by one thread and receives its
// contributions in (b, t) order, whatever the thread count.
#include <algorithm>

#include "kernels/cpu/cpu_kernels.hpp"

namespace gt::cpu {

namespace {

constexpr int64_t kChannelBlock = 64;

// Token ids come from data files, so a bad one is a user-facing error that
// names the value, checked before any thread starts.
void check_tokens(const int32_t* tok, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    if (tok[i] < 0 || tok[i] >= V)
      fail("token id ", tok[i], " at position ", i, " is out of range [0, ", V, ")");
}

}  // namespace

void embedding_forward(TensorView out, TensorView tokens, TensorView wte, TensorView wpe) {
  GT_CHECK(tokens.ndim == 2 && wte.ndim == 2 && wpe.ndim == 2, "tokens ", tokens.shape_str(),
           " wte ", wte.shape_str(), " wpe ", wpe.shape_str());
  const int64_t B = tokens.shape[0], T = tokens.shape[1];
  const int64_t V = wte.shape[0], C = wte.shape[1], maxT = wpe.shape[0];
  GT_CHECK(T <= maxT, "sequence length ", T, " exceeds the ", maxT, " positions of wpe");
  expect_i32(tokens, {B, T}, "embedding tokens");
  expect_f32(wte, {V, C}, "embedding wte");
  expect_f32(wpe, {maxT, C}, "embedding wpe");
  expect_f32(out, {B, T, C}, "embedding out");
  const int32_t* tok = tokens.i32();
  check_tokens(tok, B * T, V);

  float* o = out.f32();
  const float* e = wte.f32();
  const float* p = wpe.f32();
#pragma omp parallel for if (B * T * C >= kParallelMin)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const float* er = e + tok[bt] * C;
    const float* pr = p + (bt % T) * C;
    float* orow = o + bt * C;
    for (int64_t c = 0; c < C; ++c) orow[c] = er[c] + pr[c];
  }
}

void embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout, TensorView tokens) {
  GT_CHECK(tokens.ndim == 2 && dwte.ndim == 2 && dwpe.ndim == 2, "tokens ",
           tokens.shape_str(), " dwte ", dwte.shape_str(), " dwpe ", dwpe.shape_str());
  const int64_t B = tokens.shape[0], T = tokens.shape[1];
  const int64_t V = dwte.shape[0], C = dwte.shape[1], maxT = dwpe.shape[0];
  GT_CHECK(T <= maxT, "sequence length ", T, " exceeds the ", maxT, " positions of dwpe");
  expect_i32(tokens, {B, T}, "embedding tokens");
  expect_f32(dwte, {V, C}, "embedding dwte");
  expect_f32(dwpe, {maxT, C}, "embedding dwpe");
  expect_f32(dout, {B, T, C}, "embedding dout");
  const int32_t* tok = tokens.i32();
  check_tokens(tok, B * T, V);

  float* dw = dwte.f32();
  float* dp = dwpe.f32();
  const float* d = dout.f32();
  const int64_t nblocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (B * T * C >= kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const float* drow = d + (b * T + t) * C;
        float* wrow = dw + tok[b * T + t] * C;
        float* prow = dp + t * C;
        for (int64_t c = c0; c < c1; ++c) {
          wrow[c] += drow[c];
          prow[c] += drow[c];
        }
      }
    }
  }
}

}  // namespace gt::cpu

namespace gt::cpu {

// The split embedding of tensor parallelism. Same determinism scheme as the
// fused backward: channel blocks own their columns, rows added in order.

void token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                             int64_t vocab_start) {
  GT_CHECK(tokens.ndim == 1 && wte.ndim == 2, "tokens ", tokens.shape_str(), " wte ",
           wte.shape_str());
  const int64_t N = tokens.shape[0], Vs = wte.shape[0], C = wte.shape[1];
  expect_i32(tokens, {N}, "token embedding tokens");
  expect_f32(wte, {Vs, C}, "token embedding wte");
  expect_f32(out, {N, C}, "token embedding out");
  const int32_t* tok = tokens.i32();
  const float* e = wte.f32();
  float* o = out.f32();
#pragma omp parallel for if (N * C >= kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t row = tok[i] - vocab_start;
    float* orow = o + i * C;
    if (row >= 0 && row < Vs)
      std::copy(e + row * C, e + (row + 1) * C, orow);
    else
      std::fill(orow, orow + C, 0.f);
  }
}

void token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                              int64_t vocab_start) {
  GT_CHECK(tokens.ndim == 1 && dwte.ndim == 2, "tokens ", tokens.shape_str(), " dwte ",
           dwte.shape_str());
  const int64_t N = tokens.shape[0], Vs = dwte.shape[0], C = dwte.shape[1];
  expect_i32(tokens, {N}, "token embedding tokens");
  expect_f32(dwte, {Vs, C}, "token embedding dwte");
  expect_f32(dout, {N, C}, "token embedding dout");
  const int32_t* tok = tokens.i32();
  const float* d = dout.f32();
  float* dw = dwte.f32();
  const int64_t nblocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t row = tok[i] - vocab_start;
      if (row < 0 || row >= Vs) continue;
      const float* drow = d + i * C;
      float* wrow = dw + row * C;
      for (int64_t c = c0; c < c1; ++c) wrow[c] += drow[c];
    }
  }
}

namespace {
void check_positions(const TensorView& rows, const TensorView& table, int64_t first_row, int T,
                     const char* what) {
  GT_CHECK(rows.ndim == 2 && table.ndim == 2, what, ": rows ", rows.shape_str(), " table ",
           table.shape_str());
  GT_CHECK(T >= 1 && T <= table.shape[0], what, ": sequence length ", T, " outside [1, ",
           table.shape[0], "]");
  GT_CHECK(first_row >= 0, what, ": first_row ", first_row);
  GT_CHECK(rows.shape[1] == table.shape[1], what, ": rows ", rows.shape_str(), " vs table ",
           table.shape_str());
}
}  // namespace

void position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row, int T) {
  check_positions(out, wpe, first_row, T, "position embedding");
  const int64_t N = out.shape[0], C = out.shape[1];
  expect_f32(out, {N, C}, "position embedding out");
  expect_f32(wpe, {wpe.shape[0], C}, "position embedding wpe");
  const float* p = wpe.f32();
  float* o = out.f32();
#pragma omp parallel for if (N * C >= kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const float* prow = p + ((first_row + i) % T) * C;
    float* orow = o + i * C;
    for (int64_t c = 0; c < C; ++c) orow[c] += prow[c];
  }
}

void position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row, int T) {
  check_positions(dout, dwpe, first_row, T, "position embedding backward");
  const int64_t N = dout.shape[0], C = dout.shape[1];
  expect_f32(dout, {N, C}, "position embedding dout");
  expect_f32(dwpe, {dwpe.shape[0], C}, "position embedding dwpe");
  const float* d = dout.f32();
  float* dp = dwpe.f32();
  const int64_t nblocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
    for (int64_t i = 0; i < N; ++i) {
      const float* drow = d + i * C;
      float* prow = dp + ((first_row + i) % T) * C;
      for (int64_t c = c0; c < c1; ++c) prow[c] += drow[c];
    }
  }
}

}  // namespace gt::cpu
