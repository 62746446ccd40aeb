// The CPU backend: fp32, BLAS sgemm for every matmul (attention included),
// OpenMP for the elementwise and row-wise loops. It defines what "correct"
// means for every other backend.
//
// CpuOps is a class (not only the factory) so that test and planning
// backends can stand in for a device with the CPU's op implementations:
// OffHostOps (tests/offhost_ops.hpp) and DryRunOps (trainer/plan). They
// replace the memory, the device and the hooks around every op
// (Ops::begin_op/end_op), never an op: the do_ methods are final.
#pragma once

#include <memory>

#include "kernels/ops.hpp"

namespace gt {

// Sets the BLAS and OpenMP thread counts (process-wide); threads <= 0 means
// all cores.
void set_cpu_threads(int threads);

class CpuOps : public Ops {
 public:
  Device device() const override { return Device::cpu; }
  const char* backend_name() const override { return "CpuOps"; }

  // 64-byte aligned host memory, zero-filled.
  Buffer allocate(size_t bytes) override;
  void upload(TensorView dst, const void* host) override;
  void download(void* host, TensorView src) override;

  // The (B,NH,T,T) probabilities: recomputing them in backward would cost
  // another Q K^T product per head.
  int64_t attention_saved_elems(int B, int n_head, int T) const override;
  int64_t attention_scratch_elems(int B, int n_head, int T) const override;
  int64_t attention_block_scratch_elems(int B, int n_head, int Tq, int Tk) const override;

 protected:
  void do_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                            TensorView wpe) final;
  void do_embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout,
                             TensorView tokens) final;
  void do_token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                  int64_t vocab_start) final;
  void do_token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                                   int64_t vocab_start) final;
  void do_position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row,
                                     int T) final;
  void do_position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row,
                                      int T) final;
  void do_layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                            TensorView weight, TensorView bias, TensorView row_amax) final;
  void do_add_layernorm_forward(TensorView res, TensorView out, TensorView mean, TensorView rstd,
                                TensorView a, TensorView b, TensorView weight, TensorView bias,
                                TensorView row_amax) final;
  void do_layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                             TensorView inp, TensorView weight, TensorView mean, TensorView rstd,
                             TensorView dinp_bf16, TensorView row_amax) final;
  void do_matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) final;
  void do_matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                          TensorView inp, TensorView weight) final;
  void do_matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                              TensorView bias) final;
  void do_matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias,
                                TensorView dout, TensorView inp, TensorView weight,
                                TensorView pre) final;
  void do_add_bias(TensorView out, TensorView bias) final;
  void do_bias_backward(TensorView dbias, TensorView dout) final;
  void do_fp8_amax(TensorView amax, TensorView x, Fp8Reduce over) final;
  void do_fp8_scale_from_amax(TensorView scale, TensorView amax, Fp8Format format,
                              bool pow2) final;
  void do_fp8_matmul(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                     TensorView b_scale, TensorView bias, const Fp8MatmulSpec& spec) final;
  void do_fp8_quantize(TensorView q, TensorView x, TensorView scale, Fp8Format format) final;
  void do_attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head,
                            int n_kv_head) final;
  void do_attention_backward(TensorView dqkv, TensorView scratch, TensorView dout, TensorView qkv,
                             TensorView out, TensorView saved, int n_head, int n_kv_head) final;
  void do_attention_block_forward(TensorView out, TensorView lse, TensorView scratch, TensorView q,
                                  TensorView k, TensorView v, int64_t q_pos, int64_t k_pos,
                                  int n_head, int n_kv_head, bool accumulate) final;
  void do_attention_block_backward(TensorView dq, TensorView dk, TensorView dv, TensorView scratch,
                                   TensorView dout, TensorView q, TensorView k, TensorView v,
                                   TensorView lse, TensorView delta, int64_t q_pos, int64_t k_pos,
                                   int n_head, int n_kv_head) final;
  void do_attention_row_dot(TensorView delta, TensorView dout, TensorView out, int n_head) final;
  void do_gelu_forward(TensorView out, TensorView inp, TensorView row_amax) final;
  void do_gelu_backward(TensorView dinp, TensorView inp, TensorView dout,
                        TensorView row_amax) final;
  void do_add(TensorView out, TensorView a, TensorView b) final;
  void do_accumulate(TensorView acc, TensorView x) final;
  void do_zero(TensorView t) final;
  void do_copy(TensorView dst, TensorView src) final;
  void do_cast(TensorView dst, TensorView src) final;
  void do_cast_rows(TensorView dst, TensorView src) final;
  void do_softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                                TensorView targets, int64_t vocab_size, float grad_scale) final;
  void do_cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                                  int64_t vocab_size) final;
  void do_cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit, TensorView logits,
                                   TensorView targets, TensorView row_max, int64_t vocab_start,
                                   int64_t vocab_size) final;
  void do_cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                     TensorView targets, TensorView row_max, TensorView sumexp,
                                     TensorView target_logit, int64_t vocab_start,
                                     int64_t vocab_size, float grad_scale) final;
  void do_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight,
                          float eps, TensorView row_amax) final;
  void do_add_rmsnorm_forward(TensorView res, TensorView out, TensorView rstd, TensorView a,
                              TensorView b, TensorView weight, float eps,
                              TensorView row_amax) final;
  void do_rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                           TensorView weight, TensorView rstd, TensorView dinp_bf16,
                           TensorView row_amax) final;
  void do_rope_forward(TensorView qk, TensorView cos_sin, int rot_heads, int64_t first_row,
                       int T) final;
  void do_rope_backward(TensorView dqk, TensorView cos_sin, int rot_heads, int64_t first_row,
                        int T) final;
  void do_swiglu_forward(TensorView out, TensorView gu, TensorView row_amax) final;
  void do_swiglu_backward(TensorView dgu, TensorView dout, TensorView gu,
                          TensorView row_amax) final;
  void do_moe_router_forward(TensorView probs, TensorView lse, TensorView topk_expert,
                             TensorView topk_weight, TensorView logits, TensorView bias) final;
  void do_moe_router_backward(TensorView dlogits, TensorView dtopk_weight, TensorView probs,
                              TensorView lse, TensorView topk_expert, TensorView topk_weight,
                              TensorView dprob_shared, float z_grad) final;
  void do_moe_router_stats(TensorView counts, TensorView prob_sums, TensorView probs,
                           TensorView topk_expert) final;
  void do_moe_dispatch_plan(TensorView positions, TensorView offsets, TensorView topk_expert,
                            TensorView topk_weight, int64_t capacity) final;
  void do_moe_permute(TensorView out, TensorView inp, TensorView positions) final;
  void do_moe_permute_backward(TensorView dinp, TensorView dout, TensorView positions) final;
  void do_moe_combine_forward(TensorView out, TensorView expert_out, TensorView positions,
                              TensorView topk_weight) final;
  void do_moe_combine_backward(TensorView dexpert_out, TensorView dtopk_weight, TensorView dout,
                               TensorView expert_out, TensorView positions,
                               TensorView topk_weight) final;
  void do_grouped_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                                 TensorView offsets) final;
  void do_grouped_matmul_backward(TensorView dinp, TensorView dweight, TensorView dout,
                                  TensorView inp, TensorView weight, TensorView offsets) final;
  void do_moe_load_balance(TensorView aux, TensorView dprob, TensorView counts,
                           TensorView prob_sums, double rows, float grad_coef) final;
  double do_sum_squares(TensorView t) final;
  void do_sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs) final;
  void do_clip_scale(TensorView scale, TensorView stats, float max_norm) final;
  void do_adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                            TensorView param_bf16, TensorView scale,
                            const std::vector<AdamWRun>& runs, const AdamWParams& p) final;
};

// set_cpu_threads(threads), then a CpuOps.
std::unique_ptr<Ops> make_cpu_ops(int threads);

}  // namespace gt
