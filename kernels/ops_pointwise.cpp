// The Ops entry points of the element-wise ops, the casts, cross-entropy and
// the optimizer's reductions and update (the rest are in ops.cpp). Same
// pattern: name the tensors, check the shapes, run do_<op> in a Scope.
#include "kernels/ops.hpp"
#include "kernels/ops_entry.hpp"

namespace gt {

// ---- element-wise -------------------------------------------------------------------

void Ops::gelu_forward(TensorView out, TensorView inp, TensorView row_amax) {
  OpCall call("gelu_forward", OpClass::gelu);
  call.write("out", out).write("row_amax", row_amax).read("inp", inp);
  const Contract c{*this, call.name()};
  c.same_shape(out, inp, "out", "inp");
  if (!row_amax.empty()) {
    c.ndim(out, "out (with row_amax)", 2, "(R, C)");
    c.row_amax(row_amax, out.shape[0]);
  }
  Scope scope(*this, call);
  if (scope.run()) do_gelu_forward(out, inp, row_amax);
}

void Ops::gelu_backward(TensorView dinp, TensorView inp, TensorView dout, TensorView row_amax) {
  OpCall call("gelu_backward", OpClass::gelu);
  call.write("dinp", dinp).write("row_amax", row_amax).read("inp", inp).read("dout", dout);
  const Contract c{*this, call.name()};
  c.same_shape(dinp, inp, "dinp", "inp");
  c.same_shape(dout, inp, "dout", "inp");
  if (!row_amax.empty()) {
    c.ndim(dinp, "dinp (with row_amax)", 2, "(R, C)");
    c.row_amax(row_amax, dinp.shape[0]);
  }
  Scope scope(*this, call);
  if (scope.run()) do_gelu_backward(dinp, inp, dout, row_amax);
}

void Ops::add(TensorView out, TensorView a, TensorView b) {
  OpCall call("add", OpClass::elementwise);
  call.write("out", out).read("a", a).read("b", b);
  const Contract c{*this, call.name()};
  c.same_shape(out, a, "out", "a");
  c.same_shape(out, b, "out", "b");
  Scope scope(*this, call);
  if (scope.run()) do_add(out, a, b);
}

void Ops::accumulate(TensorView acc, TensorView x) {
  OpCall call("accumulate", OpClass::elementwise);
  call.accumulate("acc", acc).read("x", x);
  Contract{*this, call.name()}.same_shape(acc, x, "acc", "x");
  Scope scope(*this, call);
  if (scope.run()) do_accumulate(acc, x);
}

void Ops::zero(TensorView t) {
  OpCall call("zero", OpClass::elementwise);
  call.write("t", t);
  Scope scope(*this, call);
  if (scope.run()) do_zero(t);
}

void Ops::copy(TensorView dst, TensorView src) {
  OpCall call("copy", OpClass::elementwise);
  call.write("dst", dst).read("src", src);
  Contract{*this, call.name()}.same_shape(dst, src, "dst", "src");
  Scope scope(*this, call);
  if (scope.run()) do_copy(dst, src);
}

void Ops::cast(TensorView dst, TensorView src) {
  OpCall call("cast", OpClass::elementwise);
  call.write("dst", dst).read("src", src);
  const Contract c{*this, call.name()};
  if (!Contract::same_shapes(dst, src))
    c.fail("cannot cast dst ", dst.shape_str(), " from src ", src.shape_str(),
           ": they must have the same shape");
  Scope scope(*this, call);
  if (scope.run()) do_cast(dst, src);
}

void Ops::cast_rows(TensorView dst, TensorView src) {
  OpCall call("cast_rows", OpClass::elementwise);
  call.write("dst", dst).read("src", src);
  const Contract c{*this, call.name()};
  c.ndim(dst, "dst", 2, "(rows, cols)");
  c.ndim(src, "src", 2, "(rows, cols)");
  if (!Contract::same_shapes(dst, src))
    c.fail("cannot cast dst ", dst.shape_str(), " from src ", src.shape_str(),
           ": they must have the same shape");
  for (const TensorView* t : {&dst, &src}) {
    const char* what = t == &dst ? "dst" : "src";
    if (t->shape[1] > 1 && t->strides[1] != 1)
      c.fail(what, " ", t->shape_str(), " must have contiguous rows, got column stride ",
             t->strides[1]);
    if (t->shape[0] > 1 && t->strides[0] < t->shape[1])
      c.fail(what, " ", t->shape_str(), " has row stride ", t->strides[0],
             " < its ", t->shape[1], " columns (rows would overlap)");
  }
  Scope scope(*this, call);
  if (scope.run()) do_cast_rows(dst, src);
}

// ---- cross-entropy --------------------------------------------------------------

namespace {

// logits (R,V) with V >= 1 columns; returns {R, V}.
struct RV {
  int64_t R, V;
};
RV logits_shape(const Contract& c, const TensorView& logits, const char* layout) {
  c.ndim(logits, "logits", 2, layout);
  const RV s{logits.shape[0], logits.shape[1]};
  if (s.V < 1) c.fail("logits ", logits.shape_str(), " have no vocabulary column");
  return s;
}

// A shard's place in the vocabulary: [vocab_start, vocab_start + V_shard) of vocab_size rows.
void check_shard(const Contract& c, int64_t vocab_start, int64_t vocab_size) {
  if (vocab_start < 0 || vocab_size < 1)
    c.fail("vocab_start ", vocab_start, " must be >= 0 and vocab_size ", vocab_size, " >= 1");
}

}  // namespace

void Ops::softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                                TensorView targets, int64_t vocab_size, float grad_scale) {
  OpCall call("softmax_cross_entropy", OpClass::cross_entropy);
  call.write("losses", losses).write("dlogits", dlogits);
  call.read("logits", logits).read("targets", targets);
  call.scalar("vocab_size", static_cast<double>(vocab_size)).scalar("grad_scale", grad_scale);
  const Contract c{*this, call.name()};
  const RV s = logits_shape(c, logits, "(R, V)");
  if (vocab_size < 1 || vocab_size > s.V)
    c.fail("vocab_size ", vocab_size, " must be in [1, ", s.V, "] (the logits' columns)");
  c.shape(losses, "losses", {s.R});
  c.shape(targets, "targets", {s.R});
  c.shape_if_given(dlogits, "dlogits", {s.R, s.V});
  Scope scope(*this, call);
  if (scope.run())
    do_softmax_cross_entropy(losses, dlogits, logits, targets, vocab_size, grad_scale);
}

void Ops::cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                                  int64_t vocab_size) {
  OpCall call("cross_entropy_shard_max", OpClass::cross_entropy);
  call.write("row_max", row_max).read("logits", logits);
  call.scalar("vocab_start", static_cast<double>(vocab_start));
  call.scalar("vocab_size", static_cast<double>(vocab_size));
  const Contract c{*this, call.name()};
  const RV s = logits_shape(c, logits, "(R, V_shard)");
  check_shard(c, vocab_start, vocab_size);
  c.shape(row_max, "row_max", {s.R});
  Scope scope(*this, call);
  if (scope.run()) do_cross_entropy_shard_max(row_max, logits, vocab_start, vocab_size);
}

void Ops::cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit, TensorView logits,
                                   TensorView targets, TensorView row_max, int64_t vocab_start,
                                   int64_t vocab_size) {
  OpCall call("cross_entropy_shard_sums", OpClass::cross_entropy);
  call.write("sumexp", sumexp).write("target_logit", target_logit);
  call.read("logits", logits).read("targets", targets).read("row_max", row_max);
  call.scalar("vocab_start", static_cast<double>(vocab_start));
  call.scalar("vocab_size", static_cast<double>(vocab_size));
  const Contract c{*this, call.name()};
  const RV s = logits_shape(c, logits, "(R, V_shard)");
  check_shard(c, vocab_start, vocab_size);
  c.shape(sumexp, "sumexp", {s.R});
  c.shape(target_logit, "target_logit", {s.R});
  c.shape(targets, "targets", {s.R});
  c.shape(row_max, "row_max", {s.R});
  Scope scope(*this, call);
  if (scope.run())
    do_cross_entropy_shard_sums(sumexp, target_logit, logits, targets, row_max, vocab_start,
                                vocab_size);
}

void Ops::cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                     TensorView targets, TensorView row_max, TensorView sumexp,
                                     TensorView target_logit, int64_t vocab_start,
                                     int64_t vocab_size, float grad_scale) {
  OpCall call("cross_entropy_shard_finish", OpClass::cross_entropy);
  call.write("losses", losses).write("dlogits", dlogits).read("logits", logits);
  call.read("targets", targets).read("row_max", row_max).read("sumexp", sumexp);
  call.read("target_logit", target_logit);
  call.scalar("vocab_start", static_cast<double>(vocab_start));
  call.scalar("vocab_size", static_cast<double>(vocab_size)).scalar("grad_scale", grad_scale);
  const Contract c{*this, call.name()};
  const RV s = logits_shape(c, logits, "(R, V_shard)");
  check_shard(c, vocab_start, vocab_size);
  c.shape(losses, "losses", {s.R});
  c.shape(targets, "targets", {s.R});
  c.shape(row_max, "row_max", {s.R});
  c.shape(sumexp, "sumexp", {s.R});
  c.shape(target_logit, "target_logit", {s.R});
  c.shape_if_given(dlogits, "dlogits", {s.R, s.V});
  Scope scope(*this, call);
  if (scope.run())
    do_cross_entropy_shard_finish(losses, dlogits, logits, targets, row_max, sumexp, target_logit,
                                  vocab_start, vocab_size, grad_scale);
}

// ---- optimizer ------------------------------------------------------------------

double Ops::sum_squares(TensorView t) {
  OpCall call("sum_squares", OpClass::optimizer);
  call.read("t", t);
  double result = 0.0;  // what a skipped op (a dry run) returns
  Scope scope(*this, call);
  if (scope.run()) result = do_sum_squares(t);
  return result;
}

void Ops::sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs) {
  OpCall call("sum_squares_runs", OpClass::optimizer);
  call.write("out", out).read("x", x);
  call.scalar("elems", static_cast<double>(adamw_runs_elems(runs)));
  call.scalar("runs", static_cast<double>(runs.size()));
  const Contract c{*this, call.name()};
  c.shape(out, "out", {1});
  c.ndim(x, "x", 1, "1-D");
  check_state_runs((std::string(backend_name()) + "::sum_squares_runs").c_str(), runs, x.shape[0]);
  Scope scope(*this, call);
  if (scope.run()) do_sum_squares_runs(out, x, runs);
}

void Ops::clip_scale(TensorView scale, TensorView stats, float max_norm) {
  OpCall call("clip_scale", OpClass::optimizer);
  call.write("scale", scale).read("stats", stats).scalar("max_norm", max_norm);
  const Contract c{*this, call.name()};
  c.shape(scale, "scale", {1});
  c.shape(stats, "stats", {2});
  Scope scope(*this, call);
  if (scope.run()) do_clip_scale(scale, stats, max_norm);
}

void Ops::adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                            TensorView param_bf16, TensorView scale,
                            const std::vector<AdamWRun>& runs, const AdamWParams& p) {
  // Named "adamw_update" in the trace, the cost table and the NVTX range, as it always was.
  OpCall call("adamw_update", OpClass::optimizer);
  call.accumulate("param", param).read("grad", grad).accumulate("m", m).accumulate("v", v);
  call.write("param_bf16", param_bf16).read("scale", scale);
  call.scalar("elems", static_cast<double>(adamw_runs_elems(runs)));
  call.scalar("runs", static_cast<double>(runs.size()));
  call.scalar("lr", p.lr).scalar("t", static_cast<double>(p.t));
  const Contract c{*this, "adamw_update_runs"};
  c.ndim(param, "param", 1, "1-D");
  c.ndim(grad, "grad", 1, "1-D");
  const int64_t n = param.shape[0], n_state = grad.shape[0];
  c.shape(m, "m", {n_state});
  c.shape(v, "v", {n_state});
  c.shape_if_given(param_bf16, "param_bf16", {n});
  c.shape_if_given(scale, "scale", {1});
  if (p.t < 1) c.fail("step t counts from 1, got ", p.t);
  check_adamw_runs((std::string(backend_name()) + "::adamw_update_runs").c_str(), runs, n, n_state);
  Scope scope(*this, call);
  if (scope.run()) do_adamw_update_runs(param, grad, m, v, param_bf16, scale, runs, p);
}

}  // namespace gt
