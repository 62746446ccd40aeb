// Linear layer out = inp @ weight^T + bias with weight (OC, C) as in
// torch.nn.Linear. Every product is one cblas_sgemm on row-major data.
// Invariants: dinp is assigned; dweight and dbias accumulate (beta = 1 for
// dweight, += for dbias). dbias's column sums run per column block in row
// order, so they are bitwise deterministic for any thread count.
#include <cblas.h>

#include <algorithm>

#include "kernels/cpu/cpu_kernels.hpp"

namespace gt::cpu {

namespace {
constexpr int64_t kColumnBlock = 64;
}  // namespace

void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  GT_CHECK(inp.ndim == 2 && weight.ndim == 2, "matmul inp ", inp.shape_str(), " weight ",
           weight.shape_str());
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  expect_f32(inp, {R, C}, "matmul inp");
  expect_f32(weight, {OC, C}, "matmul weight");
  expect_f32(out, {R, OC}, "matmul out");
  if (!bias.empty()) expect_f32(bias, {OC}, "matmul bias");

  float* o = out.f32();
  float beta = 0.f;
  if (!bias.empty()) {
    // Pre-filling with the bias and letting sgemm add (beta = 1) saves a
    // second pass over out.
    const float* bi = bias.f32();
#pragma omp parallel for if (R * OC >= kParallelMin)
    for (int64_t r = 0; r < R; ++r) std::copy(bi, bi + OC, o + r * OC);
    beta = 1.f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(R),
              static_cast<int>(OC), static_cast<int>(C), 1.f, inp.f32(), static_cast<int>(C),
              weight.f32(), static_cast<int>(C), beta, o, static_cast<int>(OC));
}

void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                     TensorView inp, TensorView weight) {
  GT_CHECK(inp.ndim == 2 && weight.ndim == 2, "matmul inp ", inp.shape_str(), " weight ",
           weight.shape_str());
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  expect_f32(inp, {R, C}, "matmul inp");
  expect_f32(weight, {OC, C}, "matmul weight");
  expect_f32(dout, {R, OC}, "matmul dout");
  expect_f32(dweight, {OC, C}, "matmul dweight");
  if (!dinp.empty()) expect_f32(dinp, {R, C}, "matmul dinp");
  if (!dbias.empty()) expect_f32(dbias, {OC}, "matmul dbias");

  const int r = static_cast<int>(R), c = static_cast<int>(C), oc = static_cast<int>(OC);
  const float* dy = dout.f32();
  if (!dinp.empty()) {
    // dinp (R,C) = dout (R,OC) @ weight (OC,C)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, oc, 1.f, dy, oc,
                weight.f32(), c, 0.f, dinp.f32(), c);
  }
  // dweight (OC,C) += dout^T (OC,R) @ inp (R,C)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, r, 1.f, dy, oc, inp.f32(), c,
              1.f, dweight.f32(), c);

  if (!dbias.empty()) {
    float* db = dbias.f32();
    const int64_t nblocks = (OC + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (R * OC >= kParallelMin)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t j0 = blk * kColumnBlock, j1 = std::min(OC, j0 + kColumnBlock);
      float acc[kColumnBlock] = {};
      for (int64_t i = 0; i < R; ++i) {
        const float* row = dy + i * OC;
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += row[j];
      }
      for (int64_t j = j0; j < j1; ++j) db[j] += acc[j - j0];
    }
  }
}

}  // namespace gt::cpu
