// The Ops entry points of the embeddings, LayerNorm, the linear layers and
// attention (the element-wise, cross-entropy and optimizer ops are in
// ops_pointwise.cpp), and OpCall. Each entry names every tensor of the call
// for the observer, checks the shapes ops.hpp states, then runs the backend's
// do_<op> inside an Ops::Scope (ops_entry.hpp).
#include "kernels/ops.hpp"

#include <string_view>

#include "kernels/ops_entry.hpp"

namespace gt {

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::gemm:
      return "gemm";
    case OpClass::attention:
      return "attention";
    case OpClass::layernorm:
      return "layernorm";
    case OpClass::gelu:
      return "gelu";
    case OpClass::cross_entropy:
      return "cross_entropy";
    case OpClass::embedding:
      return "embedding";
    case OpClass::elementwise:
      return "elementwise";
    case OpClass::optimizer:
      return "optimizer";
  }
  return "?";
}

// ---- OpCall -----------------------------------------------------------------------

OpCall& OpCall::add(const char* name, Access access, TensorView& v) {
  GT_CHECK(num_tensors_ < kMaxTensors, "OpCall ", name_, ": more than kMaxTensors tensors");
  tensors_[static_cast<size_t>(num_tensors_++)] = {name, access, &v};
  return *this;
}

OpCall& OpCall::scalar(const char* name, double value) {
  GT_CHECK(num_scalars_ < kMaxScalars, "OpCall ", name_, ": more than kMaxScalars scalars");
  scalars_[static_cast<size_t>(num_scalars_++)] = {name, value};
  return *this;
}

const TensorView& OpCall::view(const char* name) const {
  for (int i = 0; i < num_tensors_; ++i)
    if (std::string_view(tensors_[static_cast<size_t>(i)].name) == name)
      return *tensors_[static_cast<size_t>(i)].view;
  fail("OpCall ", name_, " has no tensor named ", name);
}

double OpCall::scalar(const char* name) const {
  for (int i = 0; i < num_scalars_; ++i)
    if (std::string_view(scalars_[static_cast<size_t>(i)].name) == name)
      return scalars_[static_cast<size_t>(i)].value;
  fail("OpCall ", name_, " has no scalar named ", name);
}

double op_call_bytes(const OpCall& call) {
  double bytes = 0;
  for (int i = 0; i < call.num_tensors(); ++i) {
    const OpTensor& t = call.tensor(i);
    if (t.view->empty()) continue;
    const double b = static_cast<double>(t.view->numel()) * dtype_size(t.view->dtype);
    bytes += t.access == Access::accumulate ? 2 * b : b;
  }
  return bytes;
}

double op_call_written_elems(const OpCall& call) {
  double n = 0;
  for (int i = 0; i < call.num_tensors(); ++i) {
    const OpTensor& t = call.tensor(i);
    if (t.access != Access::read && !t.view->empty()) n += static_cast<double>(t.view->numel());
  }
  return n;
}

// ---- embeddings -----------------------------------------------------------------

namespace {

// tokens (B,T), table (V,C) and positions (maxT,C) with T <= maxT; returns {B, T, C}.
struct BTC {
  int64_t B, T, C;
};
BTC embedding_shapes(const Contract& c, const TensorView& tokens, const TensorView& table,
                     const TensorView& positions, const char* table_name, const char* pos_name) {
  c.ndim(tokens, "tokens", 2, "(B, T)");
  c.ndim(table, table_name, 2, "(V, C)");
  c.ndim(positions, pos_name, 2, "(maxT, C)");
  const BTC s{tokens.shape[0], tokens.shape[1], table.shape[1]};
  c.shape(positions, pos_name, {positions.shape[0], s.C});
  if (s.T > positions.shape[0])
    c.fail("sequence length ", s.T, " exceeds the ", positions.shape[0], " positions of ",
           pos_name);
  return s;
}

// rows (N,C) of a flattened batch against the position table (maxT,C).
void position_shapes(const Contract& c, const TensorView& rows, const TensorView& table,
                     const char* rows_name, const char* table_name, int64_t first_row, int T) {
  c.ndim(rows, rows_name, 2, "(N, C)");
  c.ndim(table, table_name, 2, "(maxT, C)");
  c.shape(table, table_name, {table.shape[0], rows.shape[1]});
  if (T < 1 || T > table.shape[0] || first_row < 0)
    c.fail("sequence length ", T, " must be in [1, ", table.shape[0], "] (the positions of ",
           table_name, ") and first_row = ", first_row, " >= 0");
}

}  // namespace

void Ops::embedding_forward(TensorView out, TensorView tokens, TensorView wte, TensorView wpe) {
  OpCall call("embedding_forward", OpClass::embedding);
  call.write("out", out).read("tokens", tokens).read("wte", wte).read("wpe", wpe);
  const Contract c{*this, call.name()};
  const BTC s = embedding_shapes(c, tokens, wte, wpe, "wte", "wpe");
  c.shape(out, "out", {s.B, s.T, s.C});
  Scope scope(*this, call);
  if (scope.run()) do_embedding_forward(out, tokens, wte, wpe);
}

void Ops::embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout, TensorView tokens) {
  OpCall call("embedding_backward", OpClass::embedding);
  call.accumulate("dwte", dwte).accumulate("dwpe", dwpe).read("dout", dout).read("tokens", tokens);
  const Contract c{*this, call.name()};
  const BTC s = embedding_shapes(c, tokens, dwte, dwpe, "dwte", "dwpe");
  c.shape(dout, "dout", {s.B, s.T, s.C});
  Scope scope(*this, call);
  if (scope.run()) do_embedding_backward(dwte, dwpe, dout, tokens);
}

void Ops::token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                  int64_t vocab_start) {
  OpCall call("token_embedding_forward", OpClass::embedding);
  call.write("out", out).read("tokens", tokens).read("wte", wte);
  call.scalar("vocab_start", static_cast<double>(vocab_start));
  const Contract c{*this, call.name()};
  c.ndim(tokens, "tokens", 1, "(N)");
  c.ndim(wte, "wte", 2, "(V_shard, C)");
  c.shape(out, "out", {tokens.shape[0], wte.shape[1]});
  Scope scope(*this, call);
  if (scope.run()) do_token_embedding_forward(out, tokens, wte, vocab_start);
}

void Ops::token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                                   int64_t vocab_start) {
  OpCall call("token_embedding_backward", OpClass::embedding);
  call.accumulate("dwte", dwte).read("dout", dout).read("tokens", tokens);
  call.scalar("vocab_start", static_cast<double>(vocab_start));
  const Contract c{*this, call.name()};
  c.ndim(tokens, "tokens", 1, "(N)");
  c.ndim(dwte, "dwte", 2, "(V_shard, C)");
  c.shape(dout, "dout", {tokens.shape[0], dwte.shape[1]});
  Scope scope(*this, call);
  if (scope.run()) do_token_embedding_backward(dwte, dout, tokens, vocab_start);
}

void Ops::position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row, int T) {
  OpCall call("position_embedding_forward", OpClass::embedding);
  call.accumulate("out", out).read("wpe", wpe);
  call.scalar("first_row", static_cast<double>(first_row)).scalar("T", T);
  position_shapes(Contract{*this, call.name()}, out, wpe, "out", "wpe", first_row, T);
  Scope scope(*this, call);
  if (scope.run()) do_position_embedding_forward(out, wpe, first_row, T);
}

void Ops::position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row, int T) {
  OpCall call("position_embedding_backward", OpClass::embedding);
  call.accumulate("dwpe", dwpe).read("dout", dout);
  call.scalar("first_row", static_cast<double>(first_row)).scalar("T", T);
  position_shapes(Contract{*this, call.name()}, dout, dwpe, "dout", "dwpe", first_row, T);
  Scope scope(*this, call);
  if (scope.run()) do_position_embedding_backward(dwpe, dout, first_row, T);
}

// ---- layernorm ------------------------------------------------------------------

void Ops::layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                            TensorView weight, TensorView bias, TensorView row_amax) {
  OpCall call("layernorm_forward", OpClass::layernorm);
  call.write("out", out).write("mean", mean).write("rstd", rstd).write("row_amax", row_amax);
  call.read("inp", inp).read("weight", weight).read("bias", bias);
  const Contract c{*this, call.name()};
  c.ndim(inp, "inp", 2, "(R, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.shape(out, "out", {R, C});
  c.shape(weight, "weight", {C});
  c.shape(bias, "bias", {C});
  // Saved for backward, or (inference) not at all.
  if (mean.empty() != rstd.empty()) c.fail("mean and rstd are saved together (both or neither)");
  c.shape_if_given(mean, "mean", {R});
  c.shape_if_given(rstd, "rstd", {R});
  c.row_amax(row_amax, R);
  Scope scope(*this, call);
  if (scope.run()) do_layernorm_forward(out, mean, rstd, inp, weight, bias, row_amax);
}

void Ops::add_layernorm_forward(TensorView res, TensorView out, TensorView mean, TensorView rstd,
                                TensorView a, TensorView b, TensorView weight, TensorView bias,
                                TensorView row_amax) {
  OpCall call("add_layernorm_forward", OpClass::layernorm);
  call.write("res", res).write("out", out).write("mean", mean).write("rstd", rstd);
  call.write("row_amax", row_amax);
  call.read("a", a).read("b", b).read("weight", weight).read("bias", bias);
  const Contract c{*this, call.name()};
  c.ndim(a, "a", 2, "(R, C)");
  const int64_t R = a.shape[0], C = a.shape[1];
  c.shape(b, "b", {R, C});
  c.shape(res, "res", {R, C});
  c.shape(out, "out", {R, C});
  c.shape(weight, "weight", {C});
  c.shape(bias, "bias", {C});
  c.shape(mean, "mean", {R});
  c.shape(rstd, "rstd", {R});
  c.row_amax(row_amax, R);
  Scope scope(*this, call);
  if (scope.run()) do_add_layernorm_forward(res, out, mean, rstd, a, b, weight, bias, row_amax);
}

void Ops::layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                             TensorView inp, TensorView weight, TensorView mean, TensorView rstd,
                             TensorView dinp_bf16, TensorView row_amax) {
  OpCall call("layernorm_backward", OpClass::layernorm);
  call.write("row_amax", row_amax);
  call.accumulate("dinp", dinp).accumulate("dweight", dweight).accumulate("dbias", dbias);
  call.read("dout", dout).read("inp", inp).read("weight", weight);
  call.read("mean", mean).read("rstd", rstd).write("dinp_bf16", dinp_bf16);
  const Contract c{*this, call.name()};
  c.ndim(inp, "inp", 2, "(R, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1];
  c.shape(dinp, "dinp", {R, C});
  c.shape(dout, "dout", {R, C});
  c.shape(dweight, "dweight", {C});
  c.shape(dbias, "dbias", {C});
  c.shape(weight, "weight", {C});
  c.shape(mean, "mean", {R});
  c.shape(rstd, "rstd", {R});
  c.shape_if_given(dinp_bf16, "dinp_bf16", {R, C});
  c.row_amax(row_amax, R);
  Scope scope(*this, call);
  if (scope.run())
    do_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, dinp_bf16,
                          row_amax);
}

// ---- linear layers --------------------------------------------------------------

namespace {

// out (R,OC) = inp (R,C) @ weight (OC,C)^T + bias (OC, optional).
void linear_forward_shapes(const Contract& c, const TensorView& out, const TensorView& inp,
                           const TensorView& weight, const TensorView& bias) {
  c.ndim(inp, "inp", 2, "(R, C)");
  c.ndim(weight, "weight", 2, "(OC, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  c.shape(weight, "weight", {OC, C});
  c.shape(out, "out", {R, OC});
  c.shape_if_given(bias, "bias", {OC});
}

// dinp (R,C, optional), dweight (OC,C), dbias (OC, optional) from dout (R,OC).
void linear_backward_shapes(const Contract& c, const TensorView& dinp, const TensorView& dweight,
                            const TensorView& dbias, const TensorView& dout, const TensorView& inp,
                            const TensorView& weight) {
  c.ndim(inp, "inp", 2, "(R, C)");
  c.ndim(weight, "weight", 2, "(OC, C)");
  const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
  c.shape(weight, "weight", {OC, C});
  c.shape(dout, "dout", {R, OC});
  c.shape(dweight, "dweight", {OC, C});
  c.shape_if_given(dinp, "dinp", {R, C});
  c.shape_if_given(dbias, "dbias", {OC});
}

}  // namespace

void Ops::matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  OpCall call("matmul_forward", OpClass::gemm);
  call.write("out", out).read("inp", inp).read("weight", weight).read("bias", bias);
  linear_forward_shapes(Contract{*this, call.name()}, out, inp, weight, bias);
  Scope scope(*this, call);
  if (scope.run()) do_matmul_forward(out, inp, weight, bias);
}

void Ops::matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                          TensorView inp, TensorView weight) {
  OpCall call("matmul_backward", OpClass::gemm);
  call.write("dinp", dinp).accumulate("dweight", dweight).accumulate("dbias", dbias);
  call.read("dout", dout).read("inp", inp).read("weight", weight);
  linear_backward_shapes(Contract{*this, call.name()}, dinp, dweight, dbias, dout, inp, weight);
  Scope scope(*this, call);
  if (scope.run()) do_matmul_backward(dinp, dweight, dbias, dout, inp, weight);
}

void Ops::matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                              TensorView bias) {
  OpCall call("matmul_gelu_forward", OpClass::gemm);
  call.write("out", out).write("pre", pre);
  call.read("inp", inp).read("weight", weight).read("bias", bias);
  const Contract c{*this, call.name()};
  linear_forward_shapes(c, out, inp, weight, bias);
  c.same_shape(pre, out, "pre", "out");
  Scope scope(*this, call);
  if (scope.run()) do_matmul_gelu_forward(out, pre, inp, weight, bias);
}

void Ops::matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias,
                                TensorView dout, TensorView inp, TensorView weight,
                                TensorView pre) {
  OpCall call("matmul_backward_dgelu", OpClass::gemm);
  call.write("dinp", dinp).accumulate("dweight", dweight).accumulate("dbias", dbias);
  call.read("dout", dout).read("inp", inp).read("weight", weight).read("pre", pre);
  const Contract c{*this, call.name()};
  if (dinp.empty()) c.fail("dinp is required (it is what GELU's backward folds into)");
  linear_backward_shapes(c, dinp, dweight, dbias, dout, inp, weight);
  c.same_shape(pre, dinp, "pre", "dinp");
  Scope scope(*this, call);
  if (scope.run()) do_matmul_backward_dgelu(dinp, dweight, dbias, dout, inp, weight, pre);
}

void Ops::add_bias(TensorView out, TensorView bias) {
  OpCall call("add_bias", OpClass::elementwise);
  call.accumulate("out", out).read("bias", bias);
  const Contract c{*this, call.name()};
  c.ndim(out, "out", 2, "(R, C)");
  c.shape(bias, "bias", {out.shape[1]});
  Scope scope(*this, call);
  if (scope.run()) do_add_bias(out, bias);
}

// ---- attention --------------------------------------------------------------------

namespace {

// qkv (B,T,(NH + 2 KV) hs): the query heads, then the key and the value
// heads (KV = n_kv_head; multi-head attention is KV = NH, qkv (B,T,3C)).
// Returns {B, T, C} with C = NH hs, out's width. The sizes of `saved` and
// `scratch` are the backend's (attention_saved_elems): checked there.
BTC attention_shapes(const Contract& c, const TensorView& qkv, int n_head, int n_kv_head) {
  c.ndim(qkv, "qkv", 3, "(B, T, 3C)");
  const int64_t width = qkv.shape[2];
  if (n_kv_head == n_head) {
    if (n_head < 1 || width % 3 != 0 || (width / 3) % n_head != 0)
      c.fail("qkv ", qkv.shape_str(), " is not (B, T, 3C) with C divisible by n_head ", n_head);
    return {qkv.shape[0], qkv.shape[1], width / 3};
  }
  if (n_head < 1 || n_kv_head < 1 || n_head % n_kv_head != 0)
    c.fail("n_kv_head ", n_kv_head, " must divide n_head ", n_head,
           " (grouped-query attention: each key/value head serves n_head / n_kv_head queries)");
  const int64_t heads = int64_t(n_head) + 2 * int64_t(n_kv_head);
  if (width % heads != 0)
    c.fail("qkv ", qkv.shape_str(), " is not (B, T, (n_head + 2 n_kv_head) hs) with n_head ",
           n_head, " and n_kv_head ", n_kv_head);
  return {qkv.shape[0], qkv.shape[1], width / heads * n_head};
}

}  // namespace

void Ops::attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head,
                            int n_kv_head) {
  if (n_kv_head == 0) n_kv_head = n_head;
  OpCall call("attention_forward", OpClass::attention);
  call.write("out", out).write("saved", saved).read("qkv", qkv).scalar("n_head", n_head);
  call.scalar("n_kv_head", n_kv_head);
  const Contract c{*this, call.name()};
  const BTC s = attention_shapes(c, qkv, n_head, n_kv_head);
  c.shape(out, "out", {s.B, s.T, s.C});
  Scope scope(*this, call);
  if (scope.run()) do_attention_forward(out, saved, qkv, n_head, n_kv_head);
}

void Ops::attention_backward(TensorView dqkv, TensorView scratch, TensorView dout, TensorView qkv,
                             TensorView out, TensorView saved, int n_head, int n_kv_head) {
  if (n_kv_head == 0) n_kv_head = n_head;
  OpCall call("attention_backward", OpClass::attention);
  call.write("dqkv", dqkv).write("scratch", scratch);
  call.read("dout", dout).read("qkv", qkv).read("out", out).read("saved", saved);
  call.scalar("n_head", n_head).scalar("n_kv_head", n_kv_head);
  const Contract c{*this, call.name()};
  const BTC s = attention_shapes(c, qkv, n_head, n_kv_head);
  c.shape(dqkv, "dqkv", {s.B, s.T, qkv.shape[2]});
  c.shape(dout, "dout", {s.B, s.T, s.C});
  c.shape(out, "out", {s.B, s.T, s.C});
  Scope scope(*this, call);
  if (scope.run()) do_attention_backward(dqkv, scratch, dout, qkv, out, saved, n_head, n_kv_head);
}

}  // namespace gt
