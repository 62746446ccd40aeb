// describe_op: one line per op that op_costs.hpp has a formula for, reading
// the shapes the formula needs from the call's views by their Ops names; the
// generic description for any other op. The views were checked by the Ops
// entry point before the observer sees them.
#include "trainer/profile/op_descriptions.hpp"

#include <cstdio>
#include <cstring>

namespace gt {

namespace {

std::string fmt(const char* format, long long a, long long b = 0, long long c = 0,
                long long d = 0) {
  char buf[96];
  std::snprintf(buf, sizeof buf, format, a, b, c, d);
  return buf;
}

// A tensor's element size, for the byte formulas (bf16 activations are 2).
int64_t bytes_of(const TensorView& t) { return static_cast<int64_t>(dtype_size(t.dtype)); }

// GEMM shape as M x N x K of out (M,N) = inp (M,K) @ weight (N,K)^T.
std::string gemm_shape(int64_t R, int64_t C, int64_t OC) {
  return fmt("M=%lld N=%lld K=%lld", R, OC, C);
}

// Whether the call's tensor `name` is accumulated into (+=), not assigned.
bool accumulates(const OpCall& c, const char* name) {
  for (int i = 0; i < c.num_tensors(); ++i)
    if (std::strcmp(c.tensor(i).name, name) == 0) return c.tensor(i).access == Access::accumulate;
  return false;
}

int64_t scalar_i(const OpCall& c, const char* name) { return static_cast<int64_t>(c.scalar(name)); }

using Describe = OpDescription (*)(const OpCall&);
struct Formula {
  const char* op;
  Describe describe;
};

// Shapes read exactly as each op's former forwarding decorator read them, so
// the cost table is unchanged.
const Formula kFormulas[] = {
    {"embedding_forward",
     [](const OpCall& c) {
       const TensorView& out = c.view("out");
       const int64_t B = out.shape[0], T = out.shape[1], C = out.shape[2];
       return OpDescription{fmt("B=%lld T=%lld C=%lld", B, T, C),
                            op_cost::embedding_forward(B, T, C, c.view("wte").shape[0])};
     }},
    {"embedding_backward",
     [](const OpCall& c) {
       const TensorView& dout = c.view("dout");
       const int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2];
       return OpDescription{fmt("B=%lld T=%lld C=%lld", B, T, C),
                            op_cost::embedding_backward(B, T, C, c.view("dwte").shape[0])};
     }},
    {"token_embedding_forward",
     [](const OpCall& c) {
       const TensorView& out = c.view("out");
       const int64_t N = out.shape[0], C = out.shape[1];
       return OpDescription{fmt("N=%lld C=%lld", N, C),
                            op_cost::token_embedding_forward(N, C, c.view("wte").shape[0])};
     }},
    {"token_embedding_backward",
     [](const OpCall& c) {
       const TensorView& dout = c.view("dout");
       const int64_t N = dout.shape[0], C = dout.shape[1];
       return OpDescription{fmt("N=%lld C=%lld", N, C),
                            op_cost::token_embedding_backward(N, C, c.view("dwte").shape[0])};
     }},
    {"position_embedding_forward",
     [](const OpCall& c) {
       const TensorView& out = c.view("out");
       const int64_t N = out.shape[0], C = out.shape[1];
       return OpDescription{fmt("N=%lld C=%lld", N, C),
                            op_cost::position_embedding_forward(N, C, scalar_i(c, "T"))};
     }},
    {"position_embedding_backward",
     [](const OpCall& c) {
       const TensorView& dout = c.view("dout");
       const int64_t N = dout.shape[0], C = dout.shape[1];
       return OpDescription{fmt("N=%lld C=%lld", N, C),
                            op_cost::position_embedding_backward(N, C, scalar_i(c, "T"))};
     }},
    {"layernorm_forward",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       const int64_t R = inp.shape[0], C = inp.shape[1];
       return OpDescription{
           fmt("R=%lld C=%lld", R, C),
           op_cost::layernorm_forward(R, C, bytes_of(inp), bytes_of(c.view("weight")))};
     }},
    {"add_layernorm_forward",
     [](const OpCall& c) {
       const TensorView& a = c.view("a");
       const int64_t R = a.shape[0], C = a.shape[1];
       return OpDescription{
           fmt("R=%lld C=%lld", R, C),
           op_cost::add_layernorm_forward(R, C, bytes_of(a), bytes_of(c.view("weight")))};
     }},
    {"layernorm_backward",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       const TensorView& copy = c.view("dinp_bf16");
       const int64_t R = inp.shape[0], C = inp.shape[1];
       return OpDescription{
           fmt("R=%lld C=%lld", R, C),
           op_cost::layernorm_backward(R, C, bytes_of(inp), bytes_of(c.view("dout")),
                                       copy.empty() ? 0 : bytes_of(copy))};
     }},
    {"matmul_forward",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       const int64_t R = inp.shape[0], C = inp.shape[1], OC = c.view("weight").shape[0];
       return OpDescription{gemm_shape(R, C, OC),
                            op_cost::matmul_forward(R, C, OC, !c.view("bias").empty(),
                                                    bytes_of(inp), bytes_of(c.view("out")))};
     }},
    {"matmul_backward",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       const TensorView& dinp = c.view("dinp");
       const int64_t R = inp.shape[0], C = inp.shape[1], OC = c.view("weight").shape[0];
       return OpDescription{
           gemm_shape(R, C, OC) + (dinp.empty() ? " (dW only)" : ""),
           op_cost::matmul_backward(R, C, OC, !dinp.empty(), !c.view("dbias").empty(),
                                    bytes_of(inp), dinp.empty() ? 4 : bytes_of(dinp))};
     }},
    {"fp8_matmul",
     [](const OpCall& c) {
       const TensorView& a = c.view("a");
       const TensorView& b = c.view("b");
       const TensorView& out = c.view("out");
       const TensorView& bias = c.view("bias");
       const bool at = c.scalar("a_transposed") != 0, bt = c.scalar("b_transposed") != 0;
       const int64_t M = out.shape[0], N = out.shape[1], K = a.shape[at ? 0 : 1];
       const bool accumulate = accumulates(c, "out");
       const int64_t scales = c.view("a_scale").numel() + c.view("b_scale").numel();
       return OpDescription{
           fmt("M=%lld N=%lld K=%lld", M, N, K) + (at ? " aT" : "") + (bt ? " bT" : "") +
               (scales > 2 ? " rowwise" : ""),
           op_cost::fp8_matmul(M, N, K, bytes_of(a), bytes_of(b), bytes_of(out), accumulate,
                               bias.empty() ? 0 : bytes_of(bias), scales)};
     }},
    {"fp8_quantize",
     [](const OpCall& c) {
       const TensorView& x = c.view("x");
       return OpDescription{fmt("n=%lld", x.numel()), op_cost::fp8_quantize(x.numel(), bytes_of(x))};
     }},
    {"fp8_amax",
     [](const OpCall& c) {
       const TensorView& x = c.view("x");
       const int64_t R = x.shape[0], C = x.shape[1];
       return OpDescription{fmt("R=%lld C=%lld", R, C),
                            op_cost::fp8_amax(R, C, bytes_of(x), c.view("amax").numel())};
     }},
    {"fp8_scale_from_amax",
     [](const OpCall& c) {
       const int64_t n = c.view("scale").numel();
       return OpDescription{fmt("n=%lld", n), op_cost::fp8_scale_from_amax(n)};
     }},
    {"bias_backward",
     [](const OpCall& c) {
       const TensorView& dout = c.view("dout");
       const int64_t R = dout.shape[0], OC = dout.shape[1];
       return OpDescription{fmt("R=%lld OC=%lld", R, OC),
                            op_cost::bias_backward(R, OC, bytes_of(dout))};
     }},
    {"grouped_matmul_forward",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       const TensorView& w = c.view("weight");
       const int64_t N = inp.shape[0], C = inp.shape[1], G = w.shape[0], OC = w.shape[1];
       return OpDescription{fmt("G=%lld ", G) + gemm_shape(N, C, OC),
                            op_cost::grouped_matmul_forward(N, C, OC, G, bytes_of(inp))};
     }},
    {"grouped_matmul_backward",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       const TensorView& w = c.view("weight");
       const bool dinp = !c.view("dinp").empty();
       const int64_t N = inp.shape[0], C = inp.shape[1], G = w.shape[0], OC = w.shape[1];
       return OpDescription{fmt("G=%lld ", G) + gemm_shape(N, C, OC) + (dinp ? "" : " (dW only)"),
                            op_cost::grouped_matmul_backward(N, C, OC, G, dinp, bytes_of(inp))};
     }},
    {"matmul_gelu_forward",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       const int64_t R = inp.shape[0], C = inp.shape[1], OC = c.view("weight").shape[0];
       return OpDescription{gemm_shape(R, C, OC),
                            op_cost::matmul_gelu_forward(R, C, OC, !c.view("bias").empty(),
                                                         bytes_of(inp), bytes_of(c.view("out")))};
     }},
    {"matmul_backward_dgelu",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       const int64_t R = inp.shape[0], C = inp.shape[1], OC = c.view("weight").shape[0];
       return OpDescription{gemm_shape(R, C, OC), op_cost::matmul_backward_dgelu(
                                                      R, C, OC, !c.view("dbias").empty(),
                                                      bytes_of(inp), bytes_of(c.view("dinp")))};
     }},
    {"add_bias",
     [](const OpCall& c) {
       const int64_t C = c.view("bias").numel(), R = C > 0 ? c.view("out").numel() / C : 0;
       return OpDescription{fmt("R=%lld C=%lld", R, C), op_cost::add_bias(R, C)};
     }},
    {"attention_forward",
     [](const OpCall& c) {
       const TensorView& qkv = c.view("qkv");
       const int64_t B = qkv.shape[0], T = qkv.shape[1];
       const int64_t NH = scalar_i(c, "n_head"), KV = scalar_i(c, "n_kv_head");
       const int64_t hs = NH + 2 * KV > 0 ? qkv.shape[2] / (NH + 2 * KV) : 0;
       return OpDescription{
           fmt("B=%lld NH=%lld T=%lld hs=%lld", B, NH, T, hs),
           op_cost::attention_forward(B, NH, T, hs, c.view("saved").numel(), bytes_of(qkv), KV)};
     }},
    {"attention_backward",
     [](const OpCall& c) {
       const TensorView& qkv = c.view("qkv");
       const int64_t B = qkv.shape[0], T = qkv.shape[1];
       const int64_t NH = scalar_i(c, "n_head"), KV = scalar_i(c, "n_kv_head");
       const int64_t hs = NH + 2 * KV > 0 ? qkv.shape[2] / (NH + 2 * KV) : 0;
       return OpDescription{
           fmt("B=%lld NH=%lld T=%lld hs=%lld", B, NH, T, hs),
           op_cost::attention_backward(B, NH, T, hs, c.view("saved").numel(), bytes_of(qkv), KV)};
     }},
    // Attention over blocks: a row per block shape (the positions vary
    // from call to call; each call's FLOPs count its own visible pairs).
    {"attention_block_forward",
     [](const OpCall& c) {
       const TensorView &q = c.view("q"), &k = c.view("k");
       const int64_t NH = scalar_i(c, "n_head"), KV = scalar_i(c, "n_kv_head");
       const int64_t B = q.shape[0], Tq = q.shape[1], Tk = k.shape[1], hs = q.shape[2] / NH;
       return OpDescription{
           fmt("B=%lld NH=%lld KV=%lld hs=%lld", B, NH, KV, hs) + fmt(" Tq=%lld Tk=%lld", Tq, Tk),
           op_cost::attention_block_forward(B, NH, KV, hs, Tq, Tk, scalar_i(c, "q_pos"),
                                            scalar_i(c, "k_pos"), c.scalar("accumulate") != 0,
                                            bytes_of(q))};
     }},
    {"attention_block_backward",
     [](const OpCall& c) {
       const TensorView &q = c.view("q"), &k = c.view("k");
       const int64_t NH = scalar_i(c, "n_head"), KV = scalar_i(c, "n_kv_head");
       const int64_t B = q.shape[0], Tq = q.shape[1], Tk = k.shape[1], hs = q.shape[2] / NH;
       return OpDescription{
           fmt("B=%lld NH=%lld KV=%lld hs=%lld", B, NH, KV, hs) + fmt(" Tq=%lld Tk=%lld", Tq, Tk),
           op_cost::attention_block_backward(B, NH, KV, hs, Tq, Tk, scalar_i(c, "q_pos"),
                                             scalar_i(c, "k_pos"), bytes_of(q))};
     }},
    {"attention_row_dot",
     [](const OpCall& c) {
       const TensorView &dout = c.view("dout"), &out = c.view("out");
       const int64_t NH = scalar_i(c, "n_head");
       const int64_t B = dout.shape[0], T = dout.shape[1], hs = dout.shape[2] / NH;
       return OpDescription{
           fmt("B=%lld NH=%lld T=%lld hs=%lld", B, NH, T, hs),
           op_cost::attention_row_dot(B, T, NH, hs, bytes_of(dout), bytes_of(out))};
     }},
    {"cast_rows",
     [](const OpCall& c) {
       const TensorView& dst = c.view("dst");
       const int64_t rows = dst.shape[0], cols = dst.shape[1];
       return OpDescription{fmt("rows=%lld cols=%lld", rows, cols),
                            op_cost::cast_rows(rows, cols, bytes_of(c.view("src")), bytes_of(dst))};
     }},
    {"gelu_forward",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       return OpDescription{fmt("n=%lld", inp.numel()),
                            op_cost::gelu_forward(inp.numel(), bytes_of(inp))};
     }},
    {"gelu_backward",
     [](const OpCall& c) {
       const TensorView& inp = c.view("inp");
       return OpDescription{fmt("n=%lld", inp.numel()),
                            op_cost::gelu_backward(inp.numel(), bytes_of(inp))};
     }},
    {"add",
     [](const OpCall& c) {
       const TensorView& out = c.view("out");
       return OpDescription{fmt("n=%lld", out.numel()), op_cost::add(out.numel(), bytes_of(out))};
     }},
    {"accumulate",
     [](const OpCall& c) {
       const int64_t n = c.view("acc").numel();
       return OpDescription{fmt("n=%lld", n), op_cost::accumulate(n)};
     }},
    {"zero",
     [](const OpCall& c) {
       const TensorView& t = c.view("t");
       return OpDescription{fmt("n=%lld", t.numel()), op_cost::zero(t.numel(), bytes_of(t))};
     }},
    {"copy",
     [](const OpCall& c) {
       const TensorView& dst = c.view("dst");
       return OpDescription{fmt("n=%lld", dst.numel()), op_cost::copy(dst.numel(), bytes_of(dst))};
     }},
    {"cast",
     [](const OpCall& c) {
       const TensorView& dst = c.view("dst");
       return OpDescription{fmt("n=%lld", dst.numel()),
                            op_cost::cast(dst.numel(), bytes_of(c.view("src")), bytes_of(dst))};
     }},
    {"softmax_cross_entropy",
     [](const OpCall& c) {
       const TensorView& logits = c.view("logits");
       const int64_t R = logits.shape[0], V = logits.shape[1];
       return OpDescription{
           fmt("R=%lld V=%lld", R, V),
           op_cost::softmax_cross_entropy(R, V, !c.view("dlogits").empty(), bytes_of(logits))};
     }},
    {"cross_entropy_shard_max",
     [](const OpCall& c) {
       const TensorView& logits = c.view("logits");
       const int64_t R = logits.shape[0], V = logits.shape[1];
       return OpDescription{fmt("R=%lld V=%lld", R, V),
                            op_cost::cross_entropy_shard_max(R, V, bytes_of(logits))};
     }},
    {"cross_entropy_shard_sums",
     [](const OpCall& c) {
       const TensorView& logits = c.view("logits");
       const int64_t R = logits.shape[0], V = logits.shape[1];
       return OpDescription{fmt("R=%lld V=%lld", R, V),
                            op_cost::cross_entropy_shard_sums(R, V, bytes_of(logits))};
     }},
    {"cross_entropy_shard_finish",
     [](const OpCall& c) {
       const TensorView& logits = c.view("logits");
       const int64_t R = logits.shape[0], V = logits.shape[1];
       return OpDescription{
           fmt("R=%lld V=%lld", R, V),
           op_cost::cross_entropy_shard_finish(R, V, !c.view("dlogits").empty(), bytes_of(logits))};
     }},
    {"sum_squares",
     [](const OpCall& c) {
       const int64_t n = c.view("t").numel();
       return OpDescription{fmt("n=%lld", n), op_cost::sum_squares(n)};
     }},
    {"sum_squares_runs",
     [](const OpCall& c) {
       const int64_t n = scalar_i(c, "elems");
       return OpDescription{fmt("n=%lld runs=%lld", n, scalar_i(c, "runs")),
                            op_cost::sum_squares(n)};
     }},
    {"clip_scale",
     [](const OpCall&) {
       return OpDescription{"", op_cost::clip_scale()};
     }},
    {"adamw_update",
     [](const OpCall& c) {
       const int64_t n = scalar_i(c, "elems");
       const bool bf16 = !c.view("param_bf16").empty();
       return OpDescription{
           fmt("n=%lld runs=%lld", n, scalar_i(c, "runs")) + (bf16 ? " +bf16" : ""),
           op_cost::adamw(n, bf16)};
     }},
};

const Formula* find_formula(const char* op) {
  for (const Formula& f : kFormulas)
    if (std::strcmp(f.op, op) == 0) return &f;
  return nullptr;
}

// An op without a formula: what its views move, one FLOP per element written.
OpDescription generic(const OpCall& call) {
  OpDescription d;
  d.cost = {op_call_written_elems(call), op_call_bytes(call)};
  for (int i = 0; i < call.num_tensors(); ++i) {
    const OpTensor& t = call.tensor(i);
    if (t.access != Access::read && !t.view->empty()) {
      d.shape = std::string(t.name) + " " + t.view->shape_str();
      break;
    }
  }
  return d;
}

}  // namespace

OpDescription describe_op(const OpCall& call) {
  const Formula* f = find_formula(call.name());
  return f ? f->describe(call) : generic(call);
}

bool has_op_formula(const char* op) { return find_formula(op) != nullptr; }

}  // namespace gt
