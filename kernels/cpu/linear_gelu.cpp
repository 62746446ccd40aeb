// The linear layer fused with GELU (Ops::matmul_gelu_forward,
// Ops::matmul_backward_dgelu): the CPU twin of cuBLASLt's GELU_AUX(_BIAS) and
// DGELU epilogues. Both are the unfused ops run on an fp32 product: in fp32
// they are bit for bit matmul then gelu (forward) and matmul then
// gelu_backward (backward); in bf16 the product is not rounded before GELU
// touches it, and each output is rounded once, as the epilogue does.
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fp32_access.hpp"

namespace gt::cpu {

namespace {
// Throws unless `t` is a 2-D CPU tensor shaped like `like` with `like`'s dtype.
void expect_like(const TensorView& t, const TensorView& like, const char* what,
                 const char* like_what) {
  expect_storage_any(t, like.dtype, what);
  expect_same_shape(t, like, what, like_what);
}
}  // namespace

void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                         TensorView bias) {
  GT_CHECK(out.ndim == 2, "matmul_gelu_forward: out must be (R, OC), got ", out.shape_str());
  expect_storage_any(out, out.dtype, "matmul_gelu_forward out");
  expect_like(pre, out, "matmul_gelu_forward pre (out's dtype)", "out");
  if (out.dtype == DType::f32) {
    matmul_forward(pre, inp, weight, bias);
    gelu_forward(out, pre);
    return;
  }
  // bf16: the fp32 product, then both outputs rounded once.
  const int64_t R = out.shape[0], OC = out.shape[1];
  std::vector<float> pre32(static_cast<size_t>(R * OC)), out32(pre32.size());
  // The product is fp32 here, so a bf16 bias is widened for it.
  const Fp32In bias32(bias);
  const TensorView b = bias.empty() ? bias : cpu_f32(const_cast<float*>(bias32.get()), {OC});
  matmul_forward(cpu_f32(pre32.data(), {R, OC}), inp, weight, b);
  gelu_forward(cpu_f32(out32.data(), {R, OC}), cpu_f32(pre32.data(), {R, OC}));
  narrow_to_bf16(static_cast<uint16_t*>(pre.data), pre32.data(), R * OC);
  narrow_to_bf16(static_cast<uint16_t*>(out.data), out32.data(), R * OC);
}

void matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                           TensorView inp, TensorView weight, TensorView pre) {
  GT_CHECK(!dinp.empty(),
           "matmul_backward_dgelu: dinp is required (it is what GELU's "
           "backward folds into)");
  GT_CHECK(dinp.ndim == 2, "matmul_backward_dgelu: dinp must be (R, C), got ", dinp.shape_str());
  expect_storage_any(dinp, dinp.dtype, "matmul_backward_dgelu dinp");
  expect_like(pre, dinp, "matmul_backward_dgelu pre (dinp's dtype)", "dinp");
  const int64_t R = dinp.shape[0], C = dinp.shape[1];
  // dout @ weight in fp32 (and dweight, dbias), then GELU's derivative.
  std::vector<float> g32(static_cast<size_t>(R * C));
  const TensorView g = cpu_f32(g32.data(), {R, C});
  matmul_backward(g, dweight, dbias, dout, inp, weight);
  const Fp32In pre32(pre);
  Fp32Out dx(dinp);
  gelu_backward(cpu_f32(dx.get(), {R, C}), cpu_f32(const_cast<float*>(pre32.get()), {R, C}), g);
  dx.store();
}

}  // namespace gt::cpu
