// The Ops entry points of attention over blocks (context parallelism,
// kernels/ops.hpp): attention_block_forward / _backward and
// attention_row_dot. Each names its tensors for the observer and checks the
// backend-neutral contract: ranks, extents, the heads dividing the widths,
// innermost dimensions contiguous, dtypes shared where ops.hpp says so. The
// backends check only their own limits (head sizes of their kernels).
#include <cmath>

#include "kernels/ops.hpp"
#include "kernels/ops_entry.hpp"

namespace gt {

namespace {

// A 3-D view whose last dimension is contiguous (the first two may be strided).
void rows_view(const Contract& c, const TensorView& t, const char* what, const char* layout) {
  c.ndim(t, what, 3, layout);
  if (t.shape[2] > 1 && t.strides[2] != 1)
    c.fail(what, " ", t.shape_str(), " must have its last dimension contiguous, got stride ",
           t.strides[2]);
}

void io_dtype(const Contract& c, const TensorView& t, const char* what, const TensorView& q) {
  if (t.dtype != DType::f32 && t.dtype != DType::bf16)
    c.fail(what, " must be fp32 or bf16, got ", dtype_name(t.dtype));
  if (t.dtype != q.dtype)
    c.fail(what, " is ", dtype_name(t.dtype), " but q is ", dtype_name(q.dtype),
           "; q, k, v and dout share one dtype");
}

void fp32(const Contract& c, const TensorView& t, const char* what) {
  if (t.dtype != DType::f32) c.fail(what, " must be fp32, got ", dtype_name(t.dtype));
}

// The block's extents, from q (B, Tq, NH hs) and k (B, Tk, KV hs).
struct BlockShape {
  int64_t B, Tq, Tk, C, Ckv;  // C = NH hs, Ckv = KV hs
};

BlockShape block_shape(const Contract& c, const TensorView& q, const TensorView& k,
                       const TensorView& v, int n_head, int n_kv_head) {
  rows_view(c, q, "q", "(B, Tq, n_head * hs)");
  rows_view(c, k, "k", "(B, Tk, n_kv_head * hs)");
  rows_view(c, v, "v", "(B, Tk, n_kv_head * hs)");
  if (n_head < 1 || n_kv_head < 1 || n_head % n_kv_head != 0)
    c.fail("n_kv_head ", n_kv_head, " must divide n_head ", n_head,
           " (grouped-query attention: each key/value head serves n_head / n_kv_head queries)");
  const BlockShape s{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2]};
  if (s.C % n_head != 0)
    c.fail("q ", q.shape_str(), " is not (B, Tq, n_head * hs) with n_head ", n_head);
  if (s.Ckv != s.C / n_head * n_kv_head)
    c.fail("k ", k.shape_str(), " must be (", s.B, ", Tk, ", s.C / n_head * n_kv_head,
           "): n_kv_head ", n_kv_head, " heads of q's head size ", s.C / n_head);
  c.shape(v, "v", {s.B, s.Tk, s.Ckv});
  if (k.shape[0] != s.B) c.fail("k ", k.shape_str(), " and q ", q.shape_str(), " differ in B");
  io_dtype(c, k, "k", q);
  io_dtype(c, v, "v", q);
  return s;
}

void positions(const Contract& c, int64_t q_pos, int64_t k_pos) {
  if (q_pos < 0 || k_pos < 0)
    c.fail("positions must be >= 0, got q_pos ", q_pos, " and k_pos ", k_pos);
}

// lse or delta (B, NH, Tq) fp32, last dimension contiguous.
void row_stats(const Contract& c, const TensorView& t, const char* what, int64_t B, int n_head,
               int64_t Tq) {
  rows_view(c, t, what, "(B, n_head, Tq)");
  c.shape(t, what, {B, n_head, Tq});
  fp32(c, t, what);
}

// The backend's workspace for the block: at least `need` fp32 floats.
void block_scratch(const Contract& c, const TensorView& scratch, int64_t need) {
  if (scratch.numel() < need || (need > 0 && scratch.dtype != DType::f32))
    c.fail("scratch must hold ", need, " fp32 floats (attention_block_scratch_elems), got ",
           scratch.numel(), " ", dtype_name(scratch.dtype));
}

}  // namespace

void Ops::attention_block_forward(TensorView out, TensorView lse, TensorView scratch, TensorView q,
                                  TensorView k, TensorView v, int64_t q_pos, int64_t k_pos,
                                  int n_head, int n_kv_head, bool accumulate) {
  if (n_kv_head == 0) n_kv_head = n_head;
  OpCall call("attention_block_forward", OpClass::attention);
  if (accumulate)
    call.accumulate("out", out).accumulate("lse", lse);
  else
    call.write("out", out).write("lse", lse);
  call.write("scratch", scratch).read("q", q).read("k", k).read("v", v);
  call.scalar("n_head", n_head).scalar("n_kv_head", n_kv_head);
  call.scalar("q_pos", static_cast<double>(q_pos)).scalar("k_pos", static_cast<double>(k_pos));
  call.scalar("accumulate", accumulate ? 1.0 : 0.0);
  const Contract c{*this, call.name()};
  const BlockShape s = block_shape(c, q, k, v, n_head, n_kv_head);
  positions(c, q_pos, k_pos);
  rows_view(c, out, "out", "(B, Tq, n_head * hs)");
  c.shape(out, "out", {s.B, s.Tq, s.C});
  fp32(c, out, "out");
  row_stats(c, lse, "lse", s.B, n_head, s.Tq);
  block_scratch(c, scratch, attention_block_scratch_elems(static_cast<int>(s.B), n_head,
                                                          static_cast<int>(s.Tq),
                                                          static_cast<int>(s.Tk)));
  Scope scope(*this, call);
  if (scope.run())
    do_attention_block_forward(out, lse, scratch, q, k, v, q_pos, k_pos, n_head, n_kv_head,
                               accumulate);
}

void Ops::attention_block_backward(TensorView dq, TensorView dk, TensorView dv,
                                   TensorView scratch, TensorView dout, TensorView q, TensorView k,
                                   TensorView v, TensorView lse, TensorView delta, int64_t q_pos,
                                   int64_t k_pos, int n_head, int n_kv_head) {
  if (n_kv_head == 0) n_kv_head = n_head;
  OpCall call("attention_block_backward", OpClass::attention);
  call.accumulate("dq", dq).accumulate("dk", dk).accumulate("dv", dv).write("scratch", scratch);
  call.read("dout", dout).read("q", q).read("k", k).read("v", v);
  call.read("lse", lse).read("delta", delta);
  call.scalar("n_head", n_head).scalar("n_kv_head", n_kv_head);
  call.scalar("q_pos", static_cast<double>(q_pos)).scalar("k_pos", static_cast<double>(k_pos));
  const Contract c{*this, call.name()};
  const BlockShape s = block_shape(c, q, k, v, n_head, n_kv_head);
  positions(c, q_pos, k_pos);
  rows_view(c, dout, "dout", "(B, Tq, n_head * hs)");
  c.shape(dout, "dout", {s.B, s.Tq, s.C});
  io_dtype(c, dout, "dout", q);
  rows_view(c, dq, "dq", "(B, Tq, n_head * hs)");
  c.shape(dq, "dq", {s.B, s.Tq, s.C});
  rows_view(c, dk, "dk", "(B, Tk, n_kv_head * hs)");
  c.shape(dk, "dk", {s.B, s.Tk, s.Ckv});
  rows_view(c, dv, "dv", "(B, Tk, n_kv_head * hs)");
  c.shape(dv, "dv", {s.B, s.Tk, s.Ckv});
  fp32(c, dq, "dq");
  fp32(c, dk, "dk");
  fp32(c, dv, "dv");
  row_stats(c, lse, "lse", s.B, n_head, s.Tq);
  row_stats(c, delta, "delta", s.B, n_head, s.Tq);
  block_scratch(c, scratch, attention_block_scratch_elems(static_cast<int>(s.B), n_head,
                                                          static_cast<int>(s.Tq),
                                                          static_cast<int>(s.Tk)));
  Scope scope(*this, call);
  if (scope.run())
    do_attention_block_backward(dq, dk, dv, scratch, dout, q, k, v, lse, delta, q_pos, k_pos,
                                n_head, n_kv_head);
}

void Ops::attention_row_dot(TensorView delta, TensorView dout, TensorView out, int n_head) {
  OpCall call("attention_row_dot", OpClass::attention);
  call.write("delta", delta).read("dout", dout).read("out", out).scalar("n_head", n_head);
  const Contract c{*this, call.name()};
  rows_view(c, dout, "dout", "(B, T, n_head * hs)");
  rows_view(c, out, "out", "(B, T, n_head * hs)");
  if (n_head < 1 || dout.shape[2] % n_head != 0)
    c.fail("dout ", dout.shape_str(), " is not (B, T, n_head * hs) with n_head ", n_head);
  c.shape(out, "out", {dout.shape[0], dout.shape[1], dout.shape[2]});
  for (const TensorView* t : {&dout, &out})
    if (t->dtype != DType::f32 && t->dtype != DType::bf16)
      c.fail(t == &dout ? "dout" : "out", " must be fp32 or bf16, got ", dtype_name(t->dtype));
  row_stats(c, delta, "delta", dout.shape[0], n_head, dout.shape[1]);
  Scope scope(*this, call);
  if (scope.run()) do_attention_row_dot(delta, dout, out, n_head);
}

}  // namespace gt
