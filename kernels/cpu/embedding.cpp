// Token + position embedding, forward and backward.
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
