// CudaOps (see cuda_ops.hpp): the linear layers on cuBLASLt (GemmContext),
// with their fused epilogues: bias, GELU (forward), dGELU (backward) and the
// bias gradient. Host code only.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/cuda_ops_check.hpp"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/nvtx.hpp"

namespace gt {

using namespace cuda_ops_detail;

void CudaOps::do_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                                TensorView bias) {
  cuda::NvtxRange range("matmul_forward");
  linear_forward(Check{"matmul_forward"}, out, TensorView{}, inp, weight, bias);
}

void CudaOps::do_matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp,
                                     TensorView weight, TensorView bias) {
  cuda::NvtxRange range("matmul_gelu_forward");
  const Check c{"matmul_gelu_forward"};
  c.tensor(pre, "pre", {out.dtype});
  linear_forward(c, out, pre, inp, weight, bias);
}

// out = inp @ weight^T [+ bias], or with `pre` (not empty): pre = that,
// out = gelu(pre), by the GELU_AUX(_BIAS) epilogue (pre is its aux). The
// shapes were checked by the Ops entry point.
void CudaOps::linear_forward(const Check& c, TensorView out, TensorView pre, TensorView inp,
                             TensorView weight, TensorView bias) {
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(weight, "weight", {inp.dtype});
  // bf16 products may be written in fp32; fp32 ones stay fp32.
  c.tensor(out, "out", inp.dtype == DType::bf16 ? kF32Bf16 : kF32);
  // The bias has out's dtype, or is fp32 (bf16 storage: the model's fp32 bias).
  if (!bias.empty()) c.tensor(bias, "bias", out.dtype == DType::f32 ? kF32 : kF32Bf16);

  // out (R,OC) = inp (R,C) @ weight (OC,C)^T [+ bias]
  cuda::GemmArgs g;
  g.M = R;
  g.N = OC;
  g.K = C;
  g.A = inp.data;
  g.B = weight.data;
  g.trans_b = true;
  g.D = out.data;
  g.ab_type = inp.dtype;
  g.d_type = out.dtype;
  if (!pre.empty()) {
    g.epilogue = bias.empty() ? cuda::GemmEpilogue::gelu : cuda::GemmEpilogue::gelu_bias;
    g.aux = pre.data;
    g.bias = bias.empty() ? nullptr : bias.data;
    g.fp32_bias = !bias.empty() && bias.dtype == DType::f32;
    // cuBLASLt takes an aux row stride that is a multiple of 8 only.
    if (OC % 8 == 0 && gemm_.supported(g)) {
      gemm_.run(g, stream());
      return;
    }
    // No fused kernel (or an aux stride cuBLASLt refuses): the product into
    // pre, then GELU of it (of the rounded pre, in bf16).
    linear_forward(c, pre, TensorView{}, inp, weight, bias);
    do_gelu_forward(out, pre, TensorView{});
    return;
  }
  if (!bias.empty()) {
    g.epilogue = cuda::GemmEpilogue::bias;
    g.bias = bias.data;
    g.fp32_bias = bias.dtype == DType::f32;
    if (gemm_.supported(g)) {
      gemm_.run(g, stream());
      return;
    }
    // No fused kernel for this shape: add it after (a bf16 out is then
    // rounded twice, after the product and after the bias).
    g.epilogue = cuda::GemmEpilogue::none;
    g.bias = nullptr;
    g.fp32_bias = false;
  }
  gemm_.run(g, stream());
  if (bias.empty()) return;
  if (out.dtype == DType::f32)
    cuda::add_bias(out.f32(), bias.f32(), R, OC, stream());
  else if (bias.dtype == DType::f32)
    cuda::add_bias(ptr<bf16>(out), bias.f32(), R, OC, stream());
  else
    cuda::add_bias(ptr<bf16>(out), ptr<bf16>(bias), R, OC, stream());
}

void CudaOps::do_matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias,
                                 TensorView dout, TensorView inp, TensorView weight) {
  cuda::NvtxRange range("matmul_backward");
  linear_backward(Check{"matmul_backward"}, dinp, dweight, dbias, dout, inp, weight, TensorView{});
}

void CudaOps::do_matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias,
                                       TensorView dout, TensorView inp, TensorView weight,
                                       TensorView pre) {
  cuda::NvtxRange range("matmul_backward_dgelu");
  const Check c{"matmul_backward_dgelu"};  // dinp given: checked by the entry point
  c.tensor(pre, "pre", {dinp.dtype});
  linear_backward(c, dinp, dweight, dbias, dout, inp, weight, pre);
}

// matmul_backward; with `pre` (not empty) dinp is multiplied by gelu'(pre)
// by the DGELU epilogue (pre is its aux). Shapes: checked by the entry point.
void CudaOps::linear_backward(const Check& c, TensorView dinp, TensorView dweight, TensorView dbias,
                              TensorView dout, TensorView inp, TensorView weight, TensorView pre) {
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  c.tensor(inp, "inp", kF32Bf16);
  const std::initializer_list<DType> acc_types = inp.dtype == DType::bf16 ? kF32Bf16 : kF32;
  c.tensor(weight, "weight", {inp.dtype});
  c.tensor(dout, "dout", {inp.dtype});
  c.tensor(dweight, "dweight", acc_types);
  if (!dinp.empty()) c.tensor(dinp, "dinp", acc_types);
  if (!dbias.empty()) c.tensor(dbias, "dbias", kF32);

  if (!dinp.empty()) {
    // dinp (R,C) = dout (R,OC) @ weight (OC,C), assigned
    cuda::GemmArgs g;
    g.M = R;
    g.N = C;
    g.K = OC;
    g.A = dout.data;
    g.B = weight.data;
    g.D = dinp.data;
    g.ab_type = inp.dtype;
    g.d_type = dinp.dtype;
    if (!pre.empty()) {
      g.epilogue = cuda::GemmEpilogue::dgelu;
      g.aux = pre.data;
    }
    if (pre.empty() || (C % 8 == 0 && gemm_.supported(g))) {
      gemm_.run(g, stream());
    } else {
      // No fused kernel: the product, then GELU's backward in place (the
      // product rounded first, in bf16).
      g.epilogue = cuda::GemmEpilogue::none;
      g.aux = nullptr;
      gemm_.run(g, stream());
      do_gelu_backward(dinp, pre, dinp, TensorView{});
    }
  }

  // dweight (OC,C) += dout^T (OC,R) @ inp (R,C); dbias (OC) += column sums of dout
  cuda::GemmArgs g;
  g.M = OC;
  g.N = C;
  g.K = R;
  g.A = dout.data;
  g.trans_a = true;
  g.B = inp.data;
  g.D = dweight.data;
  g.ab_type = inp.dtype;
  g.d_type = dweight.dtype;
  g.beta = 1.f;
  if (dbias.empty()) {
    gemm_.run(g, stream());
    return;
  }
  // One scratch request for both paths, so the pointer stays valid.
  const int64_t fused_floats = OC;
  const int64_t sum_floats = cuda::column_sum_scratch_floats(R, OC);
  float* tmp = static_cast<float*>(
      scratch(sizeof(float) * static_cast<size_t>(std::max(fused_floats, sum_floats))));
  // The BGRADB epilogue writes the bias gradient in D's dtype and assigns it:
  // usable for an fp32 dweight, added to dbias afterwards.
  if (options_.fuse_bias_grad && dweight.dtype == DType::f32) {
    g.epilogue = cuda::GemmEpilogue::bgrad_a;
    g.bias = tmp;
    if (gemm_.supported(g)) {
      gemm_.run(g, stream());
      cuda::accumulate(dbias.f32(), tmp, OC, stream());
      return;
    }
    g.epilogue = cuda::GemmEpilogue::none;
    g.bias = nullptr;
  }
  gemm_.run(g, stream());
  if (dout.dtype == DType::f32)
    cuda::column_sum_accumulate(dbias.f32(), dout.f32(), R, OC, tmp, stream());
  else
    cuda::column_sum_accumulate(dbias.f32(), ptr<bf16>(dout), R, OC, tmp, stream());
}

void CudaOps::do_add_bias(TensorView out, TensorView bias) {
  cuda::NvtxRange range("add_bias");
  const Check c{"add_bias"};
  const int64_t R = out.shape[0], C = out.shape[1];
  c.tensor(out, "out", kF32Bf16);
  c.tensor(bias, "bias", {out.dtype});
  if (out.dtype == DType::f32)
    cuda::add_bias(out.f32(), bias.f32(), R, C, stream());
  else
    cuda::add_bias(ptr<bf16>(out), ptr<bf16>(bias), R, C, stream());
}

}  // namespace gt
