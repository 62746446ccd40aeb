// Linear layer out = inp @ weight^T + bias with weight (OC, C) as in
// torch.nn.Linear. Every product is one cblas_sgemm on row-major data.
// Invariants: dinp is assigned; dweight and dbias accumulate (beta = 1 for
// dweight, += for dbias). dbias's column sums run per column block in row
// order, so they are bitwise deterministic for any thread count.
//
// dtypes: inp, weight (and dout) are all fp32 or all bf16; dweight and dbias
// are fp32; bias is fp32, or bf16 with a bf16 out (widened exactly, like
// the operands); out and dinp are fp32, or bf16 when the inputs are (the
// bf16 model's activations and activation gradients): the fp32 result
// rounded to nearest even, as cuBLASLt writes a bf16 D. bf16 operands are widened (exactly) to fp32
// in per-call scratch and go through the same sgemm, so a bf16 matmul is the fp32 matmul of the
// bf16 values, accumulated in fp32 like the CUDA backend's. bf16 exists on the CPU to make the
// mixed-precision model testable, not fast: the widening costs a pass and a copy of every operand.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"

namespace gt::cpu {

namespace {
constexpr int64_t kColumnBlock = 64;

// Throws naming op and tensor unless `t` (a GEMM operand) is fp32 or bf16 and,
// when `like` is given, has its dtype; the shape is checked by the caller.
void expect_operand_dtype(const TensorView& t, const char* op, const char* what,
                          const TensorView* like = nullptr) {
  GT_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16, op, ": ", what,
           " must be fp32 or bf16, got ", dtype_name(t.dtype));
  if (like)
    GT_CHECK(t.dtype == like->dtype, op, ": ", what, " is ", dtype_name(t.dtype),
             " but inp is ", dtype_name(like->dtype), "; inp, weight and dout share one dtype");
}

// Throws naming op and tensor unless `t` (a result) is fp32.
void expect_result_dtype(const TensorView& t, const char* op, const char* what) {
  GT_CHECK(t.dtype == DType::f32, op, ": ", what, " must be fp32 on the CPU backend, got ",
           dtype_name(t.dtype), " (bf16 results need bf16 inputs)");
}

// Throws unless `t` is a contiguous CPU tensor of exactly `shape` with data.
void expect_cpu_shape(const TensorView& t, std::initializer_list<int64_t> shape,
                      const char* what) {
  GT_CHECK(t.device == Device::cpu, what, " must be on the cpu, got ", device_name(t.device));
  expect_shape(t, shape, what);
  GT_CHECK(t.data != nullptr || t.numel() == 0, what, " has no data");
}

// A GEMM operand as fp32: its own data when fp32, else its bf16 values
// widened into `scratch`.
const float* as_f32(const TensorView& t, std::vector<float>& scratch) {
  if (t.dtype == DType::f32) return t.f32();
  scratch.resize(static_cast<size_t>(t.numel()));
  widen_bf16(scratch.data(), static_cast<const uint16_t*>(t.data), t.numel());
  return scratch.data();
}

}  // namespace

void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  GT_CHECK(inp.ndim == 2 && weight.ndim == 2, "matmul inp ", inp.shape_str(), " weight ",
           weight.shape_str());
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  const char* op = "matmul_forward";
  expect_operand_dtype(inp, op, "inp");
  expect_operand_dtype(weight, op, "weight", &inp);
  const bool bf16_out = out.dtype == DType::bf16 && inp.dtype == DType::bf16;
  if (!bf16_out) expect_result_dtype(out, op, "out");
  expect_cpu_shape(inp, {R, C}, "matmul inp");
  expect_cpu_shape(weight, {OC, C}, "matmul weight");
  expect_cpu_shape(out, {R, OC}, "matmul out");
  if (!bias.empty()) {
    // A bf16 out may come with a bf16 bias (bf16 storage's rounded bias).
    if (!bf16_out || bias.dtype != DType::bf16) expect_result_dtype(bias, op, "bias");
    expect_cpu_shape(bias, {OC}, "matmul bias");
  }
  std::vector<float> inp_scratch, weight_scratch, bias_scratch;
  const float* x = as_f32(inp, inp_scratch);      // (R, C)
  const float* w = as_f32(weight, weight_scratch);  // (OC, C)

  std::vector<float> out_scratch(bf16_out ? static_cast<size_t>(R * OC) : 0);
  float* o = bf16_out ? out_scratch.data() : out.f32();
  float beta = 0.f;
  if (!bias.empty()) {
    // Pre-filling with the bias and letting sgemm add (beta = 1) saves a
    // second pass over out.
    const float* bi = as_f32(bias, bias_scratch);
#pragma omp parallel for if (R * OC >= kParallelMin)
    for (int64_t r = 0; r < R; ++r) std::copy(bi, bi + OC, o + r * OC);
    beta = 1.f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(R),
              static_cast<int>(OC), static_cast<int>(C), 1.f, x, static_cast<int>(C), w,
              static_cast<int>(C), beta, o, static_cast<int>(OC));
  if (bf16_out) narrow_to_bf16(static_cast<uint16_t*>(out.data), o, R * OC);
}

void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                     TensorView inp, TensorView weight) {
  GT_CHECK(inp.ndim == 2 && weight.ndim == 2, "matmul inp ", inp.shape_str(), " weight ",
           weight.shape_str());
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  const char* op = "matmul_backward";
  expect_operand_dtype(inp, op, "inp");
  expect_operand_dtype(weight, op, "weight", &inp);
  expect_operand_dtype(dout, op, "dout", &inp);
  expect_result_dtype(dweight, op, "dweight");
  const bool bf16_dinp = !dinp.empty() && dinp.dtype == DType::bf16 && inp.dtype == DType::bf16;
  if (!dinp.empty() && !bf16_dinp) expect_result_dtype(dinp, op, "dinp");
  if (!dbias.empty()) expect_result_dtype(dbias, op, "dbias");
  expect_cpu_shape(inp, {R, C}, "matmul inp");
  expect_cpu_shape(weight, {OC, C}, "matmul weight");
  expect_cpu_shape(dout, {R, OC}, "matmul dout");
  expect_f32(dweight, {OC, C}, "matmul dweight");
  if (!dinp.empty()) expect_cpu_shape(dinp, {R, C}, "matmul dinp");
  if (!dbias.empty()) expect_f32(dbias, {OC}, "matmul dbias");

  const int r = static_cast<int>(R), c = static_cast<int>(C), oc = static_cast<int>(OC);
  std::vector<float> dout_scratch, inp_scratch, weight_scratch;
  const float* dy = as_f32(dout, dout_scratch);  // (R, OC)
  if (!dinp.empty()) {
    // dinp (R,C) = dout (R,OC) @ weight (OC,C)
    const float* w = as_f32(weight, weight_scratch);
    std::vector<float> dinp_scratch(bf16_dinp ? static_cast<size_t>(R * C) : 0);
    float* dx = bf16_dinp ? dinp_scratch.data() : dinp.f32();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, c, oc, 1.f, dy, oc, w, c, 0.f, dx, c);
    if (bf16_dinp) narrow_to_bf16(static_cast<uint16_t*>(dinp.data), dx, R * C);
  }
  // dweight (OC,C) += dout^T (OC,R) @ inp (R,C)
  const float* x = as_f32(inp, inp_scratch);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, r, 1.f, dy, oc, x, c, 1.f,
              dweight.f32(), c);

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
