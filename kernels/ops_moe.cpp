// The Ops entry points of the mixture-of-experts ops (router, dispatch plan,
// permute, combine, grouped GEMM, load balance): name the tensors, check the
// backend-neutral contract of ops.hpp, run do_<op> in a Scope, as ops.cpp
// does for the others.
//
// Unlike most ops, these state their dtypes in the contract itself (the same
// on every backend): index tensors int32, router tensors fp32, row tensors
// fp32 or bf16. So the entries check them too, and a backend is handed only
// tensors it can take. What the entries cannot check is what lies in device
// memory (offsets, positions and expert ids): a CPU kernel checks those
// itself, a device kernel trusts its producer (moe_dispatch_plan).
#include <cstdint>
#include <limits>

#include "kernels/ops.hpp"
#include "kernels/ops_entry.hpp"

namespace gt {

namespace {

void dtype(const Contract& c, const TensorView& t, const char* what, DType want) {
  if (t.dtype != want) c.fail(what, " must be ", dtype_name(want), ", got ", dtype_name(t.dtype));
}
void index_dtype(const Contract& c, const TensorView& t, const char* what) {
  dtype(c, t, what, DType::i32);
}
void router_dtype(const Contract& c, const TensorView& t, const char* what) {
  dtype(c, t, what, DType::f32);
}
// A row tensor: fp32 or bf16 (bf16 storage).
void row_dtype(const Contract& c, const TensorView& t, const char* what) {
  if (t.dtype != DType::f32 && t.dtype != DType::bf16)
    c.fail(what, " must be fp32 or bf16, got ", dtype_name(t.dtype));
}
// A row tensor that must share `ref`'s dtype.
void row_dtype_like(const Contract& c, const TensorView& t, const char* what, const TensorView& ref,
               const char* ref_what) {
  row_dtype(c, t, what);
  if (t.dtype != ref.dtype)
    c.fail(what, " is ", dtype_name(t.dtype), " but ", ref_what, " is ", dtype_name(ref.dtype),
           "; they share one dtype");
}

// The routing of R rows to k of E experts: topk (R, k) int32 with 1 <= k <=
// E. Returns k.
int64_t topk_shape(const Contract& c, const TensorView& topk, const char* what, int64_t R,
                   int64_t E) {
  c.ndim(topk, what, 2, "(R, k)");
  const int64_t k = topk.shape[1];
  if (topk.shape[0] != R) c.fail(what, " must be (", R, ", k), got ", topk.shape_str());
  if (k < 1 || k > E) c.fail(what, " ", topk.shape_str(), ": k = ", k, " outside [1, E = ", E, "]");
  return k;
}

// The slots' positions (R, k) int32 into a dispatch buffer of N = R k rows;
// rows (R, C) and buf (N, C). Returns {R, k, C}.
struct RKC {
  int64_t R, k, C;
};
RKC slot_shapes(const Contract& c, const TensorView& positions, const TensorView& rows_t,
                const char* rows_what, const TensorView& buf, const char* buf_what) {
  c.ndim(positions, "positions", 2, "(R, k)");
  index_dtype(c, positions, "positions");
  const int64_t R = positions.shape[0], k = positions.shape[1];
  if (k < 1) c.fail("positions must be (R, k) with k >= 1, got ", positions.shape_str());
  c.ndim(rows_t, rows_what, 2, "(R, C)");
  const int64_t C = rows_t.shape[1];
  c.shape(rows_t, rows_what, {R, C});
  c.shape(buf, buf_what, {R * k, C});
  return {R, k, C};
}

// G groups over N rows: offsets (G+1) int32; inp (N, C), weight (G, OC, C).
struct GroupShape {
  int64_t N, C, G, OC;
};
GroupShape group_shapes(const Contract& c, const TensorView& inp, const char* inp_what,
                        const TensorView& weight, const char* weight_what,
                        const TensorView& offsets) {
  c.ndim(inp, inp_what, 2, "(N, C)");
  c.ndim(weight, weight_what, 3, "(G, OC, C)");
  const GroupShape s{inp.shape[0], inp.shape[1], weight.shape[0], weight.shape[1]};
  if (s.G < 1) c.fail(weight_what, " must have G >= 1 groups, got ", weight.shape_str());
  c.shape(weight, weight_what, {s.G, s.OC, s.C});
  c.shape(offsets, "offsets", {s.G + 1});
  index_dtype(c, offsets, "offsets");
  return s;
}

}  // namespace

// ---- router -------------------------------------------------------------------------

void Ops::moe_router_forward(TensorView probs, TensorView lse, TensorView topk_expert,
                             TensorView topk_weight, TensorView logits, TensorView bias) {
  OpCall call("moe_router_forward", OpClass::elementwise);
  call.write("probs", probs).write("lse", lse).write("topk_expert", topk_expert);
  call.write("topk_weight", topk_weight).read("logits", logits).read("bias", bias);
  const Contract c{*this, call.name()};
  c.ndim(logits, "logits", 2, "(R, E)");
  const int64_t R = logits.shape[0], E = logits.shape[1];
  const int64_t k = topk_shape(c, topk_expert, "topk_expert", R, E);
  c.shape(probs, "probs", {R, E});
  c.shape(lse, "lse", {R});
  c.shape(topk_weight, "topk_weight", {R, k});
  c.shape_if_given(bias, "bias", {E});
  router_dtype(c, logits, "logits");
  router_dtype(c, probs, "probs");
  router_dtype(c, lse, "lse");
  index_dtype(c, topk_expert, "topk_expert");
  router_dtype(c, topk_weight, "topk_weight");
  if (!bias.empty()) router_dtype(c, bias, "bias");
  Scope scope(*this, call);
  if (scope.run()) do_moe_router_forward(probs, lse, topk_expert, topk_weight, logits, bias);
}

void Ops::moe_router_backward(TensorView dlogits, TensorView dtopk_weight, TensorView probs,
                              TensorView lse, TensorView topk_expert, TensorView topk_weight,
                              TensorView dprob_shared, float z_grad) {
  OpCall call("moe_router_backward", OpClass::elementwise);
  call.write("dlogits", dlogits).read("dtopk_weight", dtopk_weight).read("probs", probs);
  call.read("lse", lse).read("topk_expert", topk_expert).read("topk_weight", topk_weight);
  call.read("dprob_shared", dprob_shared).scalar("z_grad", z_grad);
  const Contract c{*this, call.name()};
  c.ndim(probs, "probs", 2, "(R, E)");
  const int64_t R = probs.shape[0], E = probs.shape[1];
  const int64_t k = topk_shape(c, topk_expert, "topk_expert", R, E);
  c.shape(dlogits, "dlogits", {R, E});
  c.shape(lse, "lse", {R});
  c.shape(topk_weight, "topk_weight", {R, k});
  c.shape(dtopk_weight, "dtopk_weight", {R, k});
  c.shape_if_given(dprob_shared, "dprob_shared", {E});
  router_dtype(c, dlogits, "dlogits");
  router_dtype(c, dtopk_weight, "dtopk_weight");
  router_dtype(c, probs, "probs");
  router_dtype(c, lse, "lse");
  index_dtype(c, topk_expert, "topk_expert");
  router_dtype(c, topk_weight, "topk_weight");
  if (!dprob_shared.empty()) router_dtype(c, dprob_shared, "dprob_shared");
  Scope scope(*this, call);
  if (scope.run())
    do_moe_router_backward(dlogits, dtopk_weight, probs, lse, topk_expert, topk_weight,
                           dprob_shared, z_grad);
}

void Ops::moe_router_stats(TensorView counts, TensorView prob_sums, TensorView probs,
                           TensorView topk_expert) {
  OpCall call("moe_router_stats", OpClass::elementwise);
  call.accumulate("counts", counts).accumulate("prob_sums", prob_sums);
  call.read("probs", probs).read("topk_expert", topk_expert);
  const Contract c{*this, call.name()};
  c.ndim(probs, "probs", 2, "(R, E)");
  const int64_t R = probs.shape[0], E = probs.shape[1];
  topk_shape(c, topk_expert, "topk_expert", R, E);
  c.shape(counts, "counts", {E});
  c.shape(prob_sums, "prob_sums", {E});
  router_dtype(c, counts, "counts");
  router_dtype(c, prob_sums, "prob_sums");
  router_dtype(c, probs, "probs");
  index_dtype(c, topk_expert, "topk_expert");
  Scope scope(*this, call);
  if (scope.run()) do_moe_router_stats(counts, prob_sums, probs, topk_expert);
}

// ---- dispatch ------------------------------------------------------------------------

void Ops::moe_dispatch_plan(TensorView positions, TensorView offsets, TensorView topk_expert,
                            TensorView topk_weight, int64_t capacity) {
  OpCall call("moe_dispatch_plan", OpClass::elementwise);
  call.write("positions", positions).write("offsets", offsets);
  call.read("topk_expert", topk_expert).read("topk_weight", topk_weight);
  call.scalar("capacity", static_cast<double>(capacity));
  const Contract c{*this, call.name()};
  c.ndim(offsets, "offsets", 1, "(E + 1)");
  const int64_t E = offsets.shape[0] - 1;
  if (E < 1) c.fail("offsets must be (E + 1) with E >= 1, got ", offsets.shape_str());
  c.ndim(topk_expert, "topk_expert", 2, "(R, k)");
  const int64_t R = topk_expert.shape[0];
  const int64_t k = topk_shape(c, topk_expert, "topk_expert", R, E);
  c.shape(topk_weight, "topk_weight", {R, k});
  c.shape(positions, "positions", {R, k});
  index_dtype(c, positions, "positions");
  index_dtype(c, offsets, "offsets");
  index_dtype(c, topk_expert, "topk_expert");
  router_dtype(c, topk_weight, "topk_weight");
  if (capacity < 0) c.fail("capacity must be >= 0 (0: dropless), got ", capacity);
  // positions and offsets are int32: every slot's row must fit.
  if (R * k > std::numeric_limits<int32_t>::max())
    c.fail(R, " x ", k, " slots exceed the int32 positions");
  Scope scope(*this, call);
  if (scope.run()) do_moe_dispatch_plan(positions, offsets, topk_expert, topk_weight, capacity);
}

void Ops::moe_permute(TensorView out, TensorView inp, TensorView positions) {
  OpCall call("moe_permute", OpClass::elementwise);
  // out: written where a slot maps, the rest left (not read: a write).
  call.write("out", out).read("inp", inp).read("positions", positions);
  const Contract c{*this, call.name()};
  slot_shapes(c, positions, inp, "inp", out, "out");
  row_dtype(c, inp, "inp");
  row_dtype_like(c, out, "out", inp, "inp");
  Scope scope(*this, call);
  if (scope.run()) do_moe_permute(out, inp, positions);
}

void Ops::moe_permute_backward(TensorView dinp, TensorView dout, TensorView positions) {
  OpCall call("moe_permute_backward", OpClass::elementwise);
  call.write("dinp", dinp).read("dout", dout).read("positions", positions);
  const Contract c{*this, call.name()};
  slot_shapes(c, positions, dinp, "dinp", dout, "dout");
  row_dtype(c, dinp, "dinp");
  row_dtype(c, dout, "dout");
  Scope scope(*this, call);
  if (scope.run()) do_moe_permute_backward(dinp, dout, positions);
}

// ---- combine -------------------------------------------------------------------------

void Ops::moe_combine_forward(TensorView out, TensorView expert_out, TensorView positions,
                              TensorView topk_weight) {
  OpCall call("moe_combine_forward", OpClass::elementwise);
  call.write("out", out).read("expert_out", expert_out).read("positions", positions);
  call.read("topk_weight", topk_weight);
  const Contract c{*this, call.name()};
  const RKC s = slot_shapes(c, positions, out, "out", expert_out, "expert_out");
  c.shape(topk_weight, "topk_weight", {s.R, s.k});
  row_dtype(c, out, "out");
  row_dtype(c, expert_out, "expert_out");
  router_dtype(c, topk_weight, "topk_weight");
  Scope scope(*this, call);
  if (scope.run()) do_moe_combine_forward(out, expert_out, positions, topk_weight);
}

void Ops::moe_combine_backward(TensorView dexpert_out, TensorView dtopk_weight, TensorView dout,
                               TensorView expert_out, TensorView positions,
                               TensorView topk_weight) {
  OpCall call("moe_combine_backward", OpClass::elementwise);
  // dexpert_out: the kept rows assigned, the others left (not read: a write).
  call.write("dexpert_out", dexpert_out).write("dtopk_weight", dtopk_weight);
  call.read("dout", dout).read("expert_out", expert_out).read("positions", positions);
  call.read("topk_weight", topk_weight);
  const Contract c{*this, call.name()};
  const RKC s = slot_shapes(c, positions, dout, "dout", expert_out, "expert_out");
  c.shape(dexpert_out, "dexpert_out", {s.R * s.k, s.C});
  c.shape(dtopk_weight, "dtopk_weight", {s.R, s.k});
  c.shape(topk_weight, "topk_weight", {s.R, s.k});
  row_dtype(c, dexpert_out, "dexpert_out");
  row_dtype(c, dout, "dout");
  row_dtype(c, expert_out, "expert_out");
  router_dtype(c, dtopk_weight, "dtopk_weight");
  router_dtype(c, topk_weight, "topk_weight");
  Scope scope(*this, call);
  if (scope.run())
    do_moe_combine_backward(dexpert_out, dtopk_weight, dout, expert_out, positions, topk_weight);
}

// ---- grouped GEMM ----------------------------------------------------------------------

void Ops::grouped_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                                 TensorView offsets) {
  OpCall call("grouped_matmul_forward", OpClass::gemm);
  // out: rows past offsets[G] are left as they are (not read: a write).
  call.write("out", out).read("inp", inp).read("weight", weight).read("offsets", offsets);
  const Contract c{*this, call.name()};
  const GroupShape s = group_shapes(c, inp, "inp", weight, "weight", offsets);
  c.shape(out, "out", {s.N, s.OC});
  row_dtype(c, inp, "inp");
  row_dtype_like(c, weight, "weight", inp, "inp");
  row_dtype_like(c, out, "out", inp, "inp");
  Scope scope(*this, call);
  if (scope.run()) do_grouped_matmul_forward(out, inp, weight, offsets);
}

void Ops::grouped_matmul_backward(TensorView dinp, TensorView dweight, TensorView dout,
                                  TensorView inp, TensorView weight, TensorView offsets) {
  OpCall call("grouped_matmul_backward", OpClass::gemm);
  call.write("dinp", dinp).accumulate("dweight", dweight).read("dout", dout);
  call.read("inp", inp).read("weight", weight).read("offsets", offsets);
  const Contract c{*this, call.name()};
  const GroupShape s = group_shapes(c, inp, "inp", weight, "weight", offsets);
  c.shape(dout, "dout", {s.N, s.OC});
  c.shape(dweight, "dweight", {s.G, s.OC, s.C});
  c.shape_if_given(dinp, "dinp", {s.N, s.C});
  row_dtype(c, inp, "inp");
  row_dtype_like(c, weight, "weight", inp, "inp");
  row_dtype_like(c, dout, "dout", inp, "inp");
  if (!dinp.empty()) row_dtype_like(c, dinp, "dinp", inp, "inp");
  dtype(c, dweight, "dweight", DType::f32);
  Scope scope(*this, call);
  if (scope.run()) do_grouped_matmul_backward(dinp, dweight, dout, inp, weight, offsets);
}

// ---- load balance ----------------------------------------------------------------------

void Ops::moe_load_balance(TensorView aux, TensorView dprob, TensorView counts,
                           TensorView prob_sums, double rows, float grad_coef) {
  OpCall call("moe_load_balance", OpClass::elementwise);
  call.write("aux", aux).write("dprob", dprob).read("counts", counts);
  call.read("prob_sums", prob_sums).scalar("rows", rows).scalar("grad_coef", grad_coef);
  const Contract c{*this, call.name()};
  c.ndim(counts, "counts", 1, "(E)");
  const int64_t E = counts.shape[0];
  if (E < 1) c.fail("counts must be (E) with E >= 1, got ", counts.shape_str());
  c.shape(prob_sums, "prob_sums", {E});
  c.shape(dprob, "dprob", {E});
  c.shape(aux, "aux", {1});
  router_dtype(c, aux, "aux");
  router_dtype(c, dprob, "dprob");
  router_dtype(c, counts, "counts");
  router_dtype(c, prob_sums, "prob_sums");
  // A pooled row count below one row is a caller's bug (and 0 divides by zero).
  if (!(rows >= 1)) c.fail("rows must be >= 1, got ", rows);
  Scope scope(*this, call);
  if (scope.run()) do_moe_load_balance(aux, dprob, counts, prob_sums, rows, grad_coef);
}

}  // namespace gt
