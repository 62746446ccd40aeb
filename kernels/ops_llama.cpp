// The Ops entry points of the Llama family's ops (RMSNorm, rotary
// embedding, SwiGLU): name the tensors, check the shapes, run do_<op> in a
// Scope, as ops.cpp does for the others.
#include "kernels/ops.hpp"
#include "kernels/ops_entry.hpp"

#include <utility>

namespace gt {

void Ops::rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight,
                          float eps, TensorView row_amax) {
  OpCall call("rmsnorm_forward", OpClass::layernorm);
  call.write("out", out).write("rstd", rstd).write("row_amax", row_amax);
  call.read("inp", inp).read("weight", weight);
  call.scalar("eps", eps);
  const Contract c{*this, call.name()};
  c.ndim(inp, "inp", 2, "(R, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.shape(out, "out", {R, C});
  c.shape(rstd, "rstd", {R});
  c.shape(weight, "weight", {C});
  if (!(eps > 0)) c.fail("eps must be > 0, got ", eps);
  c.row_amax(row_amax, R);
  Scope scope(*this, call);
  if (scope.run()) do_rmsnorm_forward(out, rstd, inp, weight, eps, row_amax);
}

void Ops::add_rmsnorm_forward(TensorView res, TensorView out, TensorView rstd, TensorView a,
                              TensorView b, TensorView weight, float eps, TensorView row_amax) {
  OpCall call("add_rmsnorm_forward", OpClass::layernorm);
  call.write("res", res).write("out", out).write("rstd", rstd).write("row_amax", row_amax);
  call.read("a", a).read("b", b).read("weight", weight);
  call.scalar("eps", eps);
  const Contract c{*this, call.name()};
  c.ndim(a, "a", 2, "(R, C)");
  const int64_t R = a.shape[0], C = a.shape[1];
  c.shape(b, "b", {R, C});
  c.shape(res, "res", {R, C});
  c.shape(out, "out", {R, C});
  c.shape(rstd, "rstd", {R});
  c.shape(weight, "weight", {C});
  for (const auto& [t, what] : {std::pair{&b, "b"}, {&res, "res"}, {&out, "out"}})
    if (t->dtype != a.dtype)
      c.fail(what, " must be ", dtype_name(a.dtype), " (a's dtype), got ", dtype_name(t->dtype));
  if (!(eps > 0)) c.fail("eps must be > 0, got ", eps);
  c.row_amax(row_amax, R);
  Scope scope(*this, call);
  if (scope.run()) do_add_rmsnorm_forward(res, out, rstd, a, b, weight, eps, row_amax);
}

void Ops::rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                           TensorView weight, TensorView rstd, TensorView dinp_bf16,
                           TensorView row_amax) {
  OpCall call("rmsnorm_backward", OpClass::layernorm);
  call.accumulate("dinp", dinp).accumulate("dweight", dweight).write("row_amax", row_amax);
  call.read("dout", dout).read("inp", inp).read("weight", weight).read("rstd", rstd);
  call.write("dinp_bf16", dinp_bf16);
  const Contract c{*this, call.name()};
  c.ndim(inp, "inp", 2, "(R, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.shape(dinp, "dinp", {R, C});
  c.shape(dout, "dout", {R, C});
  c.shape(dweight, "dweight", {C});
  c.shape(weight, "weight", {C});
  c.shape(rstd, "rstd", {R});
  c.shape_if_given(dinp_bf16, "dinp_bf16", {R, C});
  c.row_amax(row_amax, R);
  Scope scope(*this, call);
  if (scope.run()) do_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, dinp_bf16, row_amax);
}

namespace {
// The rotary embedding's contract, shared by forward and backward.
void check_rope(const Contract& c, const TensorView& x, const char* what, const TensorView& cos_sin,
                int rot_heads, int64_t first_row, int T) {
  c.ndim(x, what, 3, "(N, heads, head size)");
  const int64_t H = x.shape[1], D = x.shape[2];
  if (D % 2 != 0) c.fail("the head size ", D, " must be even (pairs of channels turn)");
  if (rot_heads < 0 || rot_heads > H) c.fail("rot_heads ", rot_heads, " outside [0, ", H, "]");
  c.ndim(cos_sin, "cos_sin", 2, "(max_T, head size)");
  if (cos_sin.shape[1] != D) c.fail("cos_sin must be (max_T, ", D, "), got ", cos_sin.shape_str());
  if (T < 1 || T > cos_sin.shape[0])
    c.fail("T ", T, " outside the table's ", cos_sin.shape[0], " positions");
  if (first_row < 0) c.fail("first_row ", first_row, " must be >= 0");
}
}  // namespace

void Ops::rope_forward(TensorView qk, TensorView cos_sin, int rot_heads, int64_t first_row, int T) {
  OpCall call("rope_forward", OpClass::elementwise);
  call.accumulate("qk", qk).read("cos_sin", cos_sin);
  call.scalar("rot_heads", rot_heads).scalar("first_row", static_cast<double>(first_row));
  call.scalar("T", T);
  check_rope(Contract{*this, call.name()}, qk, "qk", cos_sin, rot_heads, first_row, T);
  Scope scope(*this, call);
  if (scope.run()) do_rope_forward(qk, cos_sin, rot_heads, first_row, T);
}

void Ops::rope_backward(TensorView dqk, TensorView cos_sin, int rot_heads, int64_t first_row,
                        int T) {
  OpCall call("rope_backward", OpClass::elementwise);
  call.accumulate("dqk", dqk).read("cos_sin", cos_sin);
  call.scalar("rot_heads", rot_heads).scalar("first_row", static_cast<double>(first_row));
  call.scalar("T", T);
  check_rope(Contract{*this, call.name()}, dqk, "dqk", cos_sin, rot_heads, first_row, T);
  Scope scope(*this, call);
  if (scope.run()) do_rope_backward(dqk, cos_sin, rot_heads, first_row, T);
}

void Ops::swiglu_forward(TensorView out, TensorView gu, TensorView row_amax) {
  OpCall call("swiglu_forward", OpClass::elementwise);
  call.write("out", out).write("row_amax", row_amax).read("gu", gu);
  const Contract c{*this, call.name()};
  c.ndim(gu, "gu", 2, "(R, 2F)");
  if (gu.shape[1] % 2 != 0) c.fail("gu must be (R, 2F), got ", gu.shape_str());
  c.shape(out, "out", {gu.shape[0], gu.shape[1] / 2});
  c.row_amax(row_amax, gu.shape[0]);
  Scope scope(*this, call);
  if (scope.run()) do_swiglu_forward(out, gu, row_amax);
}

void Ops::swiglu_backward(TensorView dgu, TensorView dout, TensorView gu, TensorView row_amax) {
  OpCall call("swiglu_backward", OpClass::elementwise);
  call.write("dgu", dgu).write("row_amax", row_amax).read("dout", dout).read("gu", gu);
  const Contract c{*this, call.name()};
  c.ndim(gu, "gu", 2, "(R, 2F)");
  if (gu.shape[1] % 2 != 0) c.fail("gu must be (R, 2F), got ", gu.shape_str());
  c.shape(dout, "dout", {gu.shape[0], gu.shape[1] / 2});
  c.same_shape(dgu, gu, "dgu", "gu");
  c.row_amax(row_amax, gu.shape[0]);
  Scope scope(*this, call);
  if (scope.run()) do_swiglu_backward(dgu, dout, gu, row_amax);
}

}  // namespace gt
