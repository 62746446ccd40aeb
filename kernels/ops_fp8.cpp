// The Ops entry points of the fp8 GEMM path (runtime.fp8) and of
// bias_backward, which the fp8 linear layers need beside it: name the
// tensors, check the backend-neutral contract of ops.hpp, run do_<op> in a
// Scope, as ops.cpp does for the others. Like the MoE ops, these state their
// dtypes in the contract (the same on every backend), so the entries check
// them too.
#include <cstdint>

#include "kernels/ops.hpp"
#include "kernels/ops_entry.hpp"

namespace gt {

const char* fp8_reduce_name(Fp8Reduce r) {
  switch (r) {
    case Fp8Reduce::tensor: return "tensor";
    case Fp8Reduce::rows: return "rows";
    case Fp8Reduce::cols: return "cols";
  }
  return "?";
}

namespace {

void f32(const Contract& c, const TensorView& t, const char* what) {
  if (t.dtype != DType::f32) c.fail(what, " must be fp32, got ", dtype_name(t.dtype));
}
void f32_or_bf16(const Contract& c, const TensorView& t, const char* what) {
  if (t.dtype != DType::f32 && t.dtype != DType::bf16)
    c.fail(what, " must be fp32 or bf16, got ", dtype_name(t.dtype));
}
// A scale vector of an operand with `rows` rows: (1) or (rows).
void scale_shape(const Contract& c, const TensorView& s, const char* what, int64_t rows) {
  c.ndim(s, what, 1, "(1) or (rows)");
  if (s.shape[0] != 1 && s.shape[0] != rows)
    c.fail(what, " must be (1) (tensorwise) or (", rows, ") (one per row), got ", s.shape_str());
  f32(c, s, what);
}

}  // namespace

void Ops::bias_backward(TensorView dbias, TensorView dout) {
  OpCall call("bias_backward", OpClass::elementwise);
  call.accumulate("dbias", dbias).read("dout", dout);
  const Contract c{*this, call.name()};
  c.ndim(dout, "dout", 2, "(R, OC)");
  c.shape(dbias, "dbias", {dout.shape[1]});
  f32(c, dbias, "dbias");
  f32_or_bf16(c, dout, "dout");
  Scope scope(*this, call);
  if (scope.run()) do_bias_backward(dbias, dout);
}

void Ops::fp8_amax(TensorView amax, TensorView x, Fp8Reduce over) {
  OpCall call("fp8_amax", OpClass::elementwise);
  call.write("amax", amax).read("x", x).scalar("over", static_cast<double>(over));
  const Contract c{*this, call.name()};
  c.ndim(x, "x", 2, "(R, C)");
  const int64_t n = over == Fp8Reduce::tensor ? 1 : over == Fp8Reduce::rows ? x.shape[0]
                                                                            : x.shape[1];
  c.shape(amax, "amax", {n});
  f32(c, amax, "amax");
  f32_or_bf16(c, x, "x");
  Scope scope(*this, call);
  if (scope.run()) do_fp8_amax(amax, x, over);
}

void Ops::fp8_scale_from_amax(TensorView scale, TensorView amax, Fp8Format format, bool pow2) {
  OpCall call("fp8_scale_from_amax", OpClass::elementwise);
  call.write("scale", scale).read("amax", amax);
  call.scalar("format", static_cast<double>(format)).scalar("pow2", pow2 ? 1 : 0);
  const Contract c{*this, call.name()};
  c.ndim(amax, "amax", 1, "(n)");
  c.same_shape(scale, amax, "scale", "amax");
  f32(c, scale, "scale");
  f32(c, amax, "amax");
  Scope scope(*this, call);
  if (scope.run()) do_fp8_scale_from_amax(scale, amax, format, pow2);
}

void Ops::fp8_matmul(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                     TensorView b_scale, TensorView bias, const Fp8MatmulSpec& spec) {
  OpCall call("fp8_matmul", OpClass::gemm);
  if (spec.accumulate)
    call.accumulate("out", out);
  else
    call.write("out", out);
  call.read("a", a).read("a_scale", a_scale).read("b", b).read("b_scale", b_scale);
  call.read("bias", bias);
  call.scalar("a_transposed", spec.a_transposed).scalar("b_transposed", spec.b_transposed);
  call.scalar("a_format", static_cast<double>(spec.a_format));
  call.scalar("b_format", static_cast<double>(spec.b_format));
  const Contract c{*this, call.name()};
  c.ndim(a, "a", 2, spec.a_transposed ? "(K, M)" : "(M, K)");
  c.ndim(b, "b", 2, spec.b_transposed ? "(K, N)" : "(N, K)");
  const int64_t M = a.shape[spec.a_transposed ? 1 : 0], K = a.shape[spec.a_transposed ? 0 : 1];
  const int64_t N = b.shape[spec.b_transposed ? 1 : 0], Kb = b.shape[spec.b_transposed ? 0 : 1];
  if (K != Kb)
    c.fail("a ", a.shape_str(), spec.a_transposed ? " (read transposed)" : "", " and b ",
           b.shape_str(), spec.b_transposed ? " (read transposed)" : "",
           " contract over different lengths ", K, " and ", Kb);
  c.shape(out, "out", {M, N});
  c.shape_if_given(bias, "bias", {N});
  scale_shape(c, a_scale, "a_scale", M);
  scale_shape(c, b_scale, "b_scale", N);
  f32_or_bf16(c, a, "a");
  if (b.dtype != DType::u8) f32_or_bf16(c, b, "b");
  f32_or_bf16(c, out, "out");
  if (!bias.empty()) f32_or_bf16(c, bias, "bias");
  if (spec.accumulate) {
    f32(c, out, "out (accumulated)");
    if (!bias.empty()) c.fail("an accumulated out takes no bias");
  }
  Scope scope(*this, call);
  if (scope.run()) do_fp8_matmul(out, a, a_scale, b, b_scale, bias, spec);
}

void Ops::fp8_quantize(TensorView q, TensorView x, TensorView scale, Fp8Format format) {
  OpCall call("fp8_quantize", OpClass::elementwise);
  call.write("q", q).read("x", x).read("scale", scale);
  call.scalar("format", static_cast<double>(format));
  const Contract c{*this, call.name()};
  if (q.dtype != DType::u8) c.fail("q must be fp8 codes (u8), got ", dtype_name(q.dtype));
  f32_or_bf16(c, x, "x");
  if (q.numel() != x.numel())
    c.fail("q ", q.shape_str(), " and x ", x.shape_str(), " differ in size");
  c.ndim(scale, "scale", 1, "(1)");
  if (scale.shape[0] != 1) c.fail("scale must be (1), got ", scale.shape_str());
  f32(c, scale, "scale");
  Scope scope(*this, call);
  if (scope.run()) do_fp8_quantize(q, x, scale, format);
}

// ---- defaults: a backend without these ops -------------------------------------

void Ops::do_bias_backward(TensorView, TensorView) {
  fail(backend_name(), "::bias_backward is not implemented on this backend");
}
void Ops::do_fp8_amax(TensorView, TensorView, Fp8Reduce) {
  fail(backend_name(), "::fp8_amax is not implemented on this backend (runtime.fp8)");
}
void Ops::do_fp8_scale_from_amax(TensorView, TensorView, Fp8Format, bool) {
  fail(backend_name(), "::fp8_scale_from_amax is not implemented on this backend (runtime.fp8)");
}
void Ops::do_fp8_matmul(TensorView, TensorView, TensorView, TensorView, TensorView, TensorView,
                        const Fp8MatmulSpec&) {
  fail(backend_name(), "::fp8_matmul is not implemented on this backend (runtime.fp8)");
}
void Ops::do_fp8_quantize(TensorView, TensorView, TensorView, Fp8Format) {
  fail(backend_name(), "::fp8_quantize is not implemented on this backend (runtime.fp8)");
}

}  // namespace gt
