// ProfilingOps: one forwarding method per Ops method. Each reads the shapes
// it needs from the views, names the op with its Ops method (the name the
// trace, the table and a GPU timer's NVTX range share) and its costs.
#include "trainer/profile/profiling_ops.hpp"

#include <cstdio>
#include <string>

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

// Times the op's forwarding call between construction and destruction.
class Record {
 public:
  Record(Profiler& p, OpClass cls, const char* op, std::string shape, const OpCost& cost)
      : p_(p), cls_(cls), op_(op), shape_(std::move(shape)), cost_(cost),
        index_(p.op_begin(op)) {}
  ~Record() { p_.op_end(index_, cls_, op_, std::move(shape_), cost_); }
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;

 private:
  Profiler& p_;
  OpClass cls_;
  const char* op_;
  std::string shape_;
  OpCost cost_;
  size_t index_;
};

class ProfilingOps final : public Ops {
 public:
  // Owning or not: the trainer keeps the backend itself (its CUDA stream must
  // outlive the communicators, which outlive the profiler).
  ProfilingOps(std::unique_ptr<Ops> owned, Ops& inner, Profiler& profiler)
      : owned_(std::move(owned)), inner_(&inner), p_(profiler) {}

  Device device() const override { return inner_->device(); }

  // Memory and transfers are not ops of the step: forwarded untimed.
  Buffer allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void upload(TensorView dst, const void* host) override { inner_->upload(dst, host); }
  void download(void* host, TensorView src) override { inner_->download(host, src); }
  void synchronize() override { inner_->synchronize(); }
  int64_t device_bytes_in_use() const override { return inner_->device_bytes_in_use(); }
  int64_t device_bytes_peak() const override { return inner_->device_bytes_peak(); }

  void embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                         TensorView wpe) override {
    if (!p_.recording()) return inner_->embedding_forward(out, tokens, wte, wpe);
    const int64_t B = out.shape[0], T = out.shape[1], C = out.shape[2], V = wte.shape[0];
    Record r(p_, OpClass::embedding, "embedding_forward", fmt("B=%lld T=%lld C=%lld", B, T, C),
             op_cost::embedding_forward(B, T, C, V));
    inner_->embedding_forward(out, tokens, wte, wpe);
  }
  void embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout,
                          TensorView tokens) override {
    if (!p_.recording()) return inner_->embedding_backward(dwte, dwpe, dout, tokens);
    const int64_t B = dout.shape[0], T = dout.shape[1], C = dout.shape[2], V = dwte.shape[0];
    Record r(p_, OpClass::embedding, "embedding_backward", fmt("B=%lld T=%lld C=%lld", B, T, C),
             op_cost::embedding_backward(B, T, C, V));
    inner_->embedding_backward(dwte, dwpe, dout, tokens);
  }
  void token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                               int64_t vocab_start) override {
    if (!p_.recording()) return inner_->token_embedding_forward(out, tokens, wte, vocab_start);
    const int64_t N = out.shape[0], C = out.shape[1], V = wte.shape[0];
    Record r(p_, OpClass::embedding, "token_embedding_forward", fmt("N=%lld C=%lld", N, C),
             op_cost::token_embedding_forward(N, C, V));
    inner_->token_embedding_forward(out, tokens, wte, vocab_start);
  }
  void token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                                int64_t vocab_start) override {
    if (!p_.recording())
      return inner_->token_embedding_backward(dwte, dout, tokens, vocab_start);
    const int64_t N = dout.shape[0], C = dout.shape[1], V = dwte.shape[0];
    Record r(p_, OpClass::embedding, "token_embedding_backward", fmt("N=%lld C=%lld", N, C),
             op_cost::token_embedding_backward(N, C, V));
    inner_->token_embedding_backward(dwte, dout, tokens, vocab_start);
  }
  void position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row,
                                  int T) override {
    if (!p_.recording()) return inner_->position_embedding_forward(out, wpe, first_row, T);
    const int64_t N = out.shape[0], C = out.shape[1];
    Record r(p_, OpClass::embedding, "position_embedding_forward", fmt("N=%lld C=%lld", N, C),
             op_cost::position_embedding_forward(N, C, T));
    inner_->position_embedding_forward(out, wpe, first_row, T);
  }
  void position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row,
                                   int T) override {
    if (!p_.recording()) return inner_->position_embedding_backward(dwpe, dout, first_row, T);
    const int64_t N = dout.shape[0], C = dout.shape[1];
    Record r(p_, OpClass::embedding, "position_embedding_backward", fmt("N=%lld C=%lld", N, C),
             op_cost::position_embedding_backward(N, C, T));
    inner_->position_embedding_backward(dwpe, dout, first_row, T);
  }

  void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                         TensorView weight, TensorView bias) override {
    if (!p_.recording()) return inner_->layernorm_forward(out, mean, rstd, inp, weight, bias);
    const int64_t R = inp.shape[0], C = inp.shape[1];
    Record r(p_, OpClass::layernorm, "layernorm_forward", fmt("R=%lld C=%lld", R, C),
             op_cost::layernorm_forward(R, C, bytes_of(inp), bytes_of(weight)));
    inner_->layernorm_forward(out, mean, rstd, inp, weight, bias);
  }
  void add_layernorm_forward(TensorView res, TensorView out, TensorView mean, TensorView rstd,
                             TensorView a, TensorView b, TensorView weight,
                             TensorView bias) override {
    if (!p_.recording())
      return inner_->add_layernorm_forward(res, out, mean, rstd, a, b, weight, bias);
    const int64_t R = a.shape[0], C = a.shape[1];
    Record r(p_, OpClass::layernorm, "add_layernorm_forward", fmt("R=%lld C=%lld", R, C),
             op_cost::add_layernorm_forward(R, C, bytes_of(a), bytes_of(weight)));
    inner_->add_layernorm_forward(res, out, mean, rstd, a, b, weight, bias);
  }
  void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                          TensorView inp, TensorView weight, TensorView mean, TensorView rstd,
                          TensorView dinp_bf16) override {
    if (!p_.recording())
      return inner_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                        dinp_bf16);
    const int64_t R = inp.shape[0], C = inp.shape[1];
    Record r(p_, OpClass::layernorm, "layernorm_backward", fmt("R=%lld C=%lld", R, C),
             op_cost::layernorm_backward(R, C, bytes_of(inp), bytes_of(dout),
                                         dinp_bf16.empty() ? 0 : bytes_of(dinp_bf16)));
    inner_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, dinp_bf16);
  }

  void matmul_forward(TensorView out, TensorView inp, TensorView weight,
                      TensorView bias) override {
    if (!p_.recording()) return inner_->matmul_forward(out, inp, weight, bias);
    const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
    Record r(p_, OpClass::gemm, "matmul_forward", gemm_shape(R, C, OC),
             op_cost::matmul_forward(R, C, OC, !bias.empty(), bytes_of(inp), bytes_of(out)));
    inner_->matmul_forward(out, inp, weight, bias);
  }
  void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                       TensorView inp, TensorView weight) override {
    if (!p_.recording()) return inner_->matmul_backward(dinp, dweight, dbias, dout, inp, weight);
    const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
    Record r(p_, OpClass::gemm, "matmul_backward",
             gemm_shape(R, C, OC) + (dinp.empty() ? " (dW only)" : ""),
             op_cost::matmul_backward(R, C, OC, !dinp.empty(), !dbias.empty(), bytes_of(inp),
                                      dinp.empty() ? 4 : bytes_of(dinp)));
    inner_->matmul_backward(dinp, dweight, dbias, dout, inp, weight);
  }

  void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                           TensorView bias) override {
    if (!p_.recording()) return inner_->matmul_gelu_forward(out, pre, inp, weight, bias);
    const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
    Record r(p_, OpClass::gemm, "matmul_gelu_forward", gemm_shape(R, C, OC),
             op_cost::matmul_gelu_forward(R, C, OC, !bias.empty(), bytes_of(inp), bytes_of(out)));
    inner_->matmul_gelu_forward(out, pre, inp, weight, bias);
  }
  void matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                             TensorView inp, TensorView weight, TensorView pre) override {
    if (!p_.recording())
      return inner_->matmul_backward_dgelu(dinp, dweight, dbias, dout, inp, weight, pre);
    const int64_t R = inp.shape[0], C = inp.shape[1], OC = weight.shape[0];
    Record r(
        p_, OpClass::gemm, "matmul_backward_dgelu", gemm_shape(R, C, OC),
        op_cost::matmul_backward_dgelu(R, C, OC, !dbias.empty(), bytes_of(inp), bytes_of(dinp)));
    inner_->matmul_backward_dgelu(dinp, dweight, dbias, dout, inp, weight, pre);
  }

  void add_bias(TensorView out, TensorView bias) override {
    if (!p_.recording()) return inner_->add_bias(out, bias);
    const int64_t C = bias.numel(), R = C > 0 ? out.numel() / C : 0;
    Record r(p_, OpClass::elementwise, "add_bias", fmt("R=%lld C=%lld", R, C),
             op_cost::add_bias(R, C));
    inner_->add_bias(out, bias);
  }

  int64_t attention_saved_elems(int B, int n_head, int T) const override {
    return inner_->attention_saved_elems(B, n_head, T);
  }
  int64_t attention_scratch_elems(int B, int n_head, int T) const override {
    return inner_->attention_scratch_elems(B, n_head, T);
  }
  void attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head) override {
    if (!p_.recording()) return inner_->attention_forward(out, saved, qkv, n_head);
    const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
    const int64_t hs = n_head > 0 ? C / n_head : 0;
    Record r(p_, OpClass::attention, "attention_forward",
             fmt("B=%lld NH=%lld T=%lld hs=%lld", B, n_head, T, hs),
             op_cost::attention_forward(B, n_head, T, hs, saved.numel(), bytes_of(qkv)));
    inner_->attention_forward(out, saved, qkv, n_head);
  }
  void attention_backward(TensorView dqkv, TensorView scratch, TensorView dout, TensorView qkv,
                          TensorView out, TensorView saved, int n_head) override {
    if (!p_.recording())
      return inner_->attention_backward(dqkv, scratch, dout, qkv, out, saved, n_head);
    const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
    const int64_t hs = n_head > 0 ? C / n_head : 0;
    Record r(p_, OpClass::attention, "attention_backward",
             fmt("B=%lld NH=%lld T=%lld hs=%lld", B, n_head, T, hs),
             op_cost::attention_backward(B, n_head, T, hs, saved.numel(), bytes_of(qkv)));
    inner_->attention_backward(dqkv, scratch, dout, qkv, out, saved, n_head);
  }

  void gelu_forward(TensorView out, TensorView inp) override {
    if (!p_.recording()) return inner_->gelu_forward(out, inp);
    const int64_t n = inp.numel();
    Record r(p_, OpClass::gelu, "gelu_forward", fmt("n=%lld", n),
             op_cost::gelu_forward(n, bytes_of(inp)));
    inner_->gelu_forward(out, inp);
  }
  void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) override {
    if (!p_.recording()) return inner_->gelu_backward(dinp, inp, dout);
    const int64_t n = inp.numel();
    Record r(p_, OpClass::gelu, "gelu_backward", fmt("n=%lld", n),
             op_cost::gelu_backward(n, bytes_of(inp)));
    inner_->gelu_backward(dinp, inp, dout);
  }

  void add(TensorView out, TensorView a, TensorView b) override {
    if (!p_.recording()) return inner_->add(out, a, b);
    const int64_t n = out.numel();
    Record r(p_, OpClass::elementwise, "add", fmt("n=%lld", n), op_cost::add(n, bytes_of(out)));
    inner_->add(out, a, b);
  }
  void accumulate(TensorView acc, TensorView x) override {
    if (!p_.recording()) return inner_->accumulate(acc, x);
    const int64_t n = acc.numel();
    Record r(p_, OpClass::elementwise, "accumulate", fmt("n=%lld", n), op_cost::accumulate(n));
    inner_->accumulate(acc, x);
  }
  void zero(TensorView t) override {
    if (!p_.recording()) return inner_->zero(t);
    const int64_t n = t.numel();
    Record r(p_, OpClass::elementwise, "zero", fmt("n=%lld", n),
             op_cost::zero(n, static_cast<int64_t>(dtype_size(t.dtype))));
    inner_->zero(t);
  }
  void copy(TensorView dst, TensorView src) override {
    if (!p_.recording()) return inner_->copy(dst, src);
    const int64_t n = dst.numel();
    Record r(p_, OpClass::elementwise, "copy", fmt("n=%lld", n),
             op_cost::copy(n, static_cast<int64_t>(dtype_size(dst.dtype))));
    inner_->copy(dst, src);
  }
  void cast(TensorView dst, TensorView src) override {
    if (!p_.recording()) return inner_->cast(dst, src);
    const int64_t n = dst.numel();
    Record r(p_, OpClass::elementwise, "cast", fmt("n=%lld", n),
             op_cost::cast(n, static_cast<int64_t>(dtype_size(src.dtype)),
                           static_cast<int64_t>(dtype_size(dst.dtype))));
    inner_->cast(dst, src);
  }

  void softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                             TensorView targets, int64_t vocab_size, float grad_scale) override {
    if (!p_.recording())
      return inner_->softmax_cross_entropy(losses, dlogits, logits, targets, vocab_size,
                                           grad_scale);
    const int64_t R = logits.shape[0], V = logits.shape[1];
    Record r(
        p_, OpClass::cross_entropy, "softmax_cross_entropy", fmt("R=%lld V=%lld", R, V),
        op_cost::softmax_cross_entropy(R, V, !dlogits.empty(), int64_t(dtype_size(logits.dtype))));
    inner_->softmax_cross_entropy(losses, dlogits, logits, targets, vocab_size, grad_scale);
  }
  void cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                               int64_t vocab_size) override {
    if (!p_.recording())
      return inner_->cross_entropy_shard_max(row_max, logits, vocab_start, vocab_size);
    const int64_t R = logits.shape[0], V = logits.shape[1];
    Record r(p_, OpClass::cross_entropy, "cross_entropy_shard_max", fmt("R=%lld V=%lld", R, V),
             op_cost::cross_entropy_shard_max(R, V, int64_t(dtype_size(logits.dtype))));
    inner_->cross_entropy_shard_max(row_max, logits, vocab_start, vocab_size);
  }
  void cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit, TensorView logits,
                                TensorView targets, TensorView row_max, int64_t vocab_start,
                                int64_t vocab_size) override {
    if (!p_.recording())
      return inner_->cross_entropy_shard_sums(sumexp, target_logit, logits, targets, row_max,
                                              vocab_start, vocab_size);
    const int64_t R = logits.shape[0], V = logits.shape[1];
    Record r(p_, OpClass::cross_entropy, "cross_entropy_shard_sums", fmt("R=%lld V=%lld", R, V),
             op_cost::cross_entropy_shard_sums(R, V, int64_t(dtype_size(logits.dtype))));
    inner_->cross_entropy_shard_sums(sumexp, target_logit, logits, targets, row_max, vocab_start,
                                     vocab_size);
  }
  void cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                  TensorView targets, TensorView row_max, TensorView sumexp,
                                  TensorView target_logit, int64_t vocab_start, int64_t vocab_size,
                                  float grad_scale) override {
    if (!p_.recording())
      return inner_->cross_entropy_shard_finish(losses, dlogits, logits, targets, row_max, sumexp,
                                                target_logit, vocab_start, vocab_size, grad_scale);
    const int64_t R = logits.shape[0], V = logits.shape[1];
    Record r(p_, OpClass::cross_entropy, "cross_entropy_shard_finish", fmt("R=%lld V=%lld", R, V),
             op_cost::cross_entropy_shard_finish(R, V, !dlogits.empty(),
                                                 int64_t(dtype_size(logits.dtype))));
    inner_->cross_entropy_shard_finish(losses, dlogits, logits, targets, row_max, sumexp,
                                       target_logit, vocab_start, vocab_size, grad_scale);
  }

  double sum_squares(TensorView t) override {
    if (!p_.recording()) return inner_->sum_squares(t);
    const int64_t n = t.numel();
    Record r(p_, OpClass::optimizer, "sum_squares", fmt("n=%lld", n), op_cost::sum_squares(n));
    return inner_->sum_squares(t);
  }

  void sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs) override {
    if (!p_.recording()) return inner_->sum_squares_runs(out, x, runs);
    const int64_t n = adamw_runs_elems(runs);
    Record r(p_, OpClass::optimizer, "sum_squares_runs",
             fmt("n=%lld runs=%lld", n, static_cast<long long>(runs.size())),
             op_cost::sum_squares(n));
    inner_->sum_squares_runs(out, x, runs);
  }

  void clip_scale(TensorView scale, TensorView stats, float max_norm) override {
    if (!p_.recording()) return inner_->clip_scale(scale, stats, max_norm);
    Record r(p_, OpClass::optimizer, "clip_scale", "", op_cost::clip_scale());
    inner_->clip_scale(scale, stats, max_norm);
  }

  void adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                         TensorView param_bf16, TensorView scale, const std::vector<AdamWRun>& runs,
                         const AdamWParams& ap) override {
    if (!p_.recording())
      return inner_->adamw_update_runs(param, grad, m, v, param_bf16, scale, runs, ap);
    const int64_t n = adamw_runs_elems(runs);
    const bool bf16 = !param_bf16.empty();
    Record r(
        p_, OpClass::optimizer, "adamw_update",
        fmt("n=%lld runs=%lld", n, static_cast<long long>(runs.size())) + (bf16 ? " +bf16" : ""),
        op_cost::adamw(n, bf16));
    inner_->adamw_update_runs(param, grad, m, v, param_bf16, scale, runs, ap);
  }

 private:
  std::unique_ptr<Ops> owned_;  // null when the caller owns the backend
  Ops* inner_;
  Profiler& p_;
};

}  // namespace

std::unique_ptr<Ops> make_profiling_ops(std::unique_ptr<Ops> inner, Profiler& profiler) {
  Ops& ref = *inner;
  return std::make_unique<ProfilingOps>(std::move(inner), ref, profiler);
}

std::unique_ptr<Ops> make_profiling_ops(Ops& inner, Profiler& profiler) {
  return std::make_unique<ProfilingOps>(nullptr, inner, profiler);
}

}  // namespace gt
