// CudaOps (see cuda_ops.hpp): the Llama family's ops (RMSNorm, rotary
// embedding, SwiGLU) on kernels/cuda/llama.cu. Host code only. Shapes were
// checked by the entry points (kernels/ops_llama.cpp); here: device, dtypes,
// contiguity and the kernels' int limits.
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/cuda_ops_check.hpp"
#include "kernels/cuda/llama.cuh"
#include "kernels/cuda/nvtx.hpp"

namespace gt {

using namespace cuda_ops_detail;

void CudaOps::do_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight,
                                 float eps, TensorView row_amax) {
  cuda::NvtxRange range("rmsnorm_forward");
  const Check c{"rmsnorm_forward"};
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(out, "out", {inp.dtype});
  c.tensor(rstd, "rstd", kF32);
  c.tensor(weight, "weight", kF32);
  const int64_t R = inp.shape[0];
  const int C = c.to_int(inp.shape[1], "C");
  float* amax = optional_row_amax(c, row_amax);
  if (inp.dtype == DType::f32)
    cuda::rmsnorm_forward(out.f32(), rstd.f32(), inp.f32(), weight.f32(), R, C, eps, stream(),
                          amax);
  else
    cuda::rmsnorm_forward(ptr<bf16>(out), rstd.f32(), ptr<const bf16>(inp), weight.f32(), R, C, eps,
                          stream(), amax);
}

void CudaOps::do_add_rmsnorm_forward(TensorView res, TensorView out, TensorView rstd,
                                     TensorView a, TensorView b, TensorView weight, float eps,
                                     TensorView row_amax) {
  cuda::NvtxRange range("add_rmsnorm_forward");
  const Check c{"add_rmsnorm_forward"};
  c.tensor(a, "a", kF32Bf16);
  c.tensor(b, "b", {a.dtype});
  c.tensor(res, "res", {a.dtype});
  c.tensor(out, "out", {a.dtype});
  c.tensor(rstd, "rstd", kF32);
  c.tensor(weight, "weight", kF32);
  const int64_t R = a.shape[0];
  const int C = c.to_int(a.shape[1], "C");
  float* amax = optional_row_amax(c, row_amax);
  if (a.dtype == DType::f32)
    cuda::add_rmsnorm_forward(res.f32(), out.f32(), rstd.f32(), static_cast<const float*>(a.f32()),
                              static_cast<const float*>(b.f32()), weight.f32(), R, C, eps,
                              stream(), amax);
  else
    cuda::add_rmsnorm_forward(ptr<bf16>(res), ptr<bf16>(out), rstd.f32(), ptr<const bf16>(a),
                              ptr<const bf16>(b), weight.f32(), R, C, eps, stream(), amax);
}

void CudaOps::do_rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout,
                                  TensorView inp, TensorView weight, TensorView rstd,
                                  TensorView dinp_bf16, TensorView row_amax) {
  cuda::NvtxRange range("rmsnorm_backward");
  const Check c{"rmsnorm_backward"};
  c.tensor(inp, "inp", kF32Bf16);
  c.tensor(dout, "dout", kF32Bf16);
  c.tensor(dinp, "dinp", kF32);
  c.tensor(dweight, "dweight", kF32);
  c.tensor(weight, "weight", kF32);
  c.tensor(rstd, "rstd", kF32);
  const int64_t R = inp.shape[0];
  const int C = c.to_int(inp.shape[1], "C");
  if (!dinp_bf16.empty()) c.tensor(dinp_bf16, "dinp_bf16", {DType::bf16});
  bf16* d16 = dinp_bf16.empty() ? nullptr : ptr<bf16>(dinp_bf16);
  float* amax = optional_row_amax(c, row_amax);
  float* tmp = static_cast<float*>(
      scratch(sizeof(float) * static_cast<size_t>(cuda::rmsnorm_backward_scratch_floats(R, C))));
  auto run = [&](const auto* g, const auto* x) {
    cuda::rmsnorm_backward(dinp.f32(), dweight.f32(), g, x, weight.f32(), rstd.f32(), R, C, tmp,
                           stream(), amax, d16);
  };
  const bool g16 = dout.dtype == DType::bf16, x16 = inp.dtype == DType::bf16;
  if (g16 && x16)
    run(ptr<const bf16>(dout), ptr<const bf16>(inp));
  else if (g16)
    run(ptr<const bf16>(dout), static_cast<const float*>(inp.f32()));
  else if (x16)
    run(static_cast<const float*>(dout.f32()), ptr<const bf16>(inp));
  else
    run(static_cast<const float*>(dout.f32()), static_cast<const float*>(inp.f32()));
}

namespace {
void rope_on(const Check& c, TensorView x, const char* what, TensorView cos_sin, int rot_heads,
             int64_t first_row, int T, float direction, cudaStream_t stream) {
  c.tensor(x, what, kF32Bf16);
  c.tensor(cos_sin, "cos_sin", kF32);
  const int H = c.to_int(x.shape[1], "heads"), D = c.to_int(x.shape[2], "head size");
  if (x.dtype == DType::f32)
    cuda::rope(x.f32(), cos_sin.f32(), x.shape[0], H, D, rot_heads, first_row, T, direction,
               stream);
  else
    cuda::rope(ptr<bf16>(x), cos_sin.f32(), x.shape[0], H, D, rot_heads, first_row, T, direction,
               stream);
}
}  // namespace

void CudaOps::do_rope_forward(TensorView qk, TensorView cos_sin, int rot_heads, int64_t first_row,
                              int T) {
  cuda::NvtxRange range("rope_forward");
  rope_on(Check{"rope_forward"}, qk, "qk", cos_sin, rot_heads, first_row, T, 1.f, stream());
}

void CudaOps::do_rope_backward(TensorView dqk, TensorView cos_sin, int rot_heads, int64_t first_row,
                               int T) {
  cuda::NvtxRange range("rope_backward");
  rope_on(Check{"rope_backward"}, dqk, "dqk", cos_sin, rot_heads, first_row, T, -1.f, stream());
}

void CudaOps::do_swiglu_forward(TensorView out, TensorView gu, TensorView row_amax) {
  cuda::NvtxRange range("swiglu_forward");
  const Check c{"swiglu_forward"};
  c.tensor(gu, "gu", kF32Bf16);
  c.tensor(out, "out", {gu.dtype});
  const int64_t R = gu.shape[0], F = gu.shape[1] / 2;
  float* amax = optional_row_amax(c, row_amax);
  if (gu.dtype == DType::f32)
    cuda::swiglu_forward(out.f32(), gu.f32(), R, F, stream(), amax);
  else
    cuda::swiglu_forward(ptr<bf16>(out), ptr<const bf16>(gu), R, F, stream(), amax);
}

void CudaOps::do_swiglu_backward(TensorView dgu, TensorView dout, TensorView gu,
                                 TensorView row_amax) {
  cuda::NvtxRange range("swiglu_backward");
  const Check c{"swiglu_backward"};
  c.tensor(gu, "gu", kF32Bf16);
  c.tensor(dout, "dout", {gu.dtype});
  c.tensor(dgu, "dgu", {gu.dtype});
  const int64_t R = gu.shape[0], F = gu.shape[1] / 2;
  float* amax = optional_row_amax(c, row_amax);
  if (gu.dtype == DType::f32)
    cuda::swiglu_backward(dgu.f32(), dout.f32(), gu.f32(), R, F, stream(), amax);
  else
    cuda::swiglu_backward(ptr<bf16>(dgu), ptr<const bf16>(dout), ptr<const bf16>(gu), R, F,
                          stream(), amax);
}

}  // namespace gt
