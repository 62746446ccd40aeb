// The grouped GEMM of the MoE experts on the CPU (moe_kernels.hpp): group g's
// rows [offsets[g], offsets[g+1]) of inp (N, C) times weight[g] (OC, C)^T,
// one cblas_sgemm per non-empty group (an empty one calls nothing). Each
// group's call is exactly the one matmul_forward/backward (matmul.cpp) makes
// for that group's rows alone, so a grouped GEMM is bit for bit the per-group
// linear layers; bf16 operands are widened exactly first and bf16 results
// rounded once, as there. Rows from offsets[G] on are neither read nor
// written (only rows [0, offsets[G]) are widened or rounded).
#include <cblas.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/moe_kernels.hpp"

namespace gt::cpu {

namespace {

struct Groups {
  int64_t N, C, G, OC;
  const int32_t* off;  // (G + 1): checked non-decreasing from 0, off[G] <= N
};

// Checks the shapes, the dtypes (inp fp32 or bf16, weight inp's) and the
// offsets' values.
Groups check_groups(const TensorView& inp, const TensorView& weight, const TensorView& offsets,
                    const char* op) {
  GT_CHECK(inp.ndim == 2 && weight.ndim == 3, op, ": inp ", inp.shape_str(), " weight ",
           weight.shape_str());
  const Groups g{inp.shape[0], inp.shape[1], weight.shape[0], weight.shape[1], nullptr};
  GT_CHECK(g.C >= 1 && g.OC >= 1, op, ": C = ", g.C, " and OC = ", g.OC, " must be >= 1");
  expect_storage_any(inp, inp.dtype, "grouped matmul inp");
  expect_shape(inp, {g.N, g.C}, "grouped matmul inp");
  expect_storage_any(weight, inp.dtype, "grouped matmul weight (inp's dtype)");
  expect_shape(weight, {g.G, g.OC, g.C}, "grouped matmul weight");
  expect_i32(offsets, {g.G + 1}, "grouped matmul offsets");
  const int32_t* off = offsets.i32();
  GT_CHECK(off[0] == 0, op, ": offsets[0] = ", off[0], ", must be 0");
  for (int64_t i = 0; i < g.G; ++i)
    GT_CHECK(off[i + 1] >= off[i], op, ": offsets must not decrease, offsets[", i, "] = ", off[i],
             " > offsets[", i + 1, "] = ", off[i + 1]);
  GT_CHECK(off[g.G] <= g.N, op, ": offsets[G] = ", off[g.G], " exceeds the ", g.N, " rows");
  Groups r = g;
  r.off = off;
  return r;
}

// The first `n` elements of t as fp32: its own data when fp32, else widened
// into `scratch`.
const float* as_f32(const TensorView& t, int64_t n, std::vector<float>& scratch) {
  if (t.dtype == DType::f32) return t.f32();
  scratch.resize(static_cast<size_t>(n));
  widen_bf16(scratch.data(), static_cast<const uint16_t*>(t.data), n);
  return scratch.data();
}

}  // namespace

void grouped_matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView offsets) {
  const Groups g = check_groups(inp, weight, offsets, "grouped_matmul_forward");
  expect_storage_any(out, inp.dtype, "grouped matmul out (inp's dtype)");
  expect_shape(out, {g.N, g.OC}, "grouped matmul out");
  const int64_t M = g.off[g.G];  // the rows the groups cover
  if (M == 0) return;
  std::vector<float> x_scratch, w_scratch, y_scratch;
  const float* x = as_f32(inp, M * g.C, x_scratch);
  const float* w = as_f32(weight, g.G * g.OC * g.C, w_scratch);
  const bool bf16 = out.dtype == DType::bf16;
  if (bf16) y_scratch.resize(static_cast<size_t>(M * g.OC));
  float* y = bf16 ? y_scratch.data() : out.f32();
  const int c = static_cast<int>(g.C), oc = static_cast<int>(g.OC);
  for (int64_t e = 0; e < g.G; ++e) {
    const int64_t r0 = g.off[e], n = g.off[e + 1] - r0;
    if (n == 0) continue;
    // y_e (n, OC) = x_e (n, C) @ w_e (OC, C)^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), oc, c, 1.f,
                x + r0 * g.C, c, w + e * g.OC * g.C, c, 0.f, y + r0 * g.OC, oc);
  }
  if (bf16) narrow_to_bf16(static_cast<uint16_t*>(out.data), y, M * g.OC);
}

void grouped_matmul_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                             TensorView weight, TensorView offsets) {
  const Groups g = check_groups(inp, weight, offsets, "grouped_matmul_backward");
  expect_storage_any(dout, inp.dtype, "grouped matmul dout (inp's dtype)");
  expect_shape(dout, {g.N, g.OC}, "grouped matmul dout");
  expect_f32(dweight, {g.G, g.OC, g.C}, "grouped matmul dweight");
  if (!dinp.empty()) {
    expect_storage_any(dinp, inp.dtype, "grouped matmul dinp (inp's dtype)");
    expect_shape(dinp, {g.N, g.C}, "grouped matmul dinp");
  }
  const int64_t M = g.off[g.G];
  if (M == 0) return;
  std::vector<float> dy_scratch, x_scratch, w_scratch, dx_scratch;
  const float* dy = as_f32(dout, M * g.OC, dy_scratch);
  const int c = static_cast<int>(g.C), oc = static_cast<int>(g.OC);
  if (!dinp.empty()) {
    const float* w = as_f32(weight, g.G * g.OC * g.C, w_scratch);
    const bool bf16 = dinp.dtype == DType::bf16;
    if (bf16) dx_scratch.resize(static_cast<size_t>(M * g.C));
    float* dx = bf16 ? dx_scratch.data() : dinp.f32();
    for (int64_t e = 0; e < g.G; ++e) {
      const int64_t r0 = g.off[e], n = g.off[e + 1] - r0;
      if (n == 0) continue;
      // dx_e (n, C) = dy_e (n, OC) @ w_e (OC, C)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), c, oc, 1.f,
                  dy + r0 * g.OC, oc, w + e * g.OC * g.C, c, 0.f, dx + r0 * g.C, c);
    }
    if (bf16) narrow_to_bf16(static_cast<uint16_t*>(dinp.data), dx, M * g.C);
  }
  const float* x = as_f32(inp, M * g.C, x_scratch);
  float* dw = dweight.f32();
  for (int64_t e = 0; e < g.G; ++e) {
    const int64_t r0 = g.off[e], n = g.off[e + 1] - r0;
    if (n == 0) continue;  // dweight[e] += 0
    // dw_e (OC, C) += dy_e^T (OC, n) @ x_e (n, C)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, static_cast<int>(n), 1.f,
                dy + r0 * g.OC, oc, x + r0 * g.C, c, 1.f, dw + e * g.OC * g.C, c);
  }
}

}  // namespace gt::cpu
