// CpuOps: the Ops implementation of the CPU backend. It owns nothing; every
// op forwards to a free function in cpu_kernels.hpp so each op family lives
// (and is tested) in its own file. Those functions check all of their
// arguments again (with the messages the CPU tests pin), because they must
// throw before entering an OpenMP region. Also home of the argument checks
// the families share and of the BLAS thread control.
#include "kernels/cpu/cpu_ops.hpp"

#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "kernels/core/attention_kernels.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/fp8_kernels.hpp"
#include "kernels/cpu/llama_kernels.hpp"
#include "kernels/cpu/moe_kernels.hpp"

#if TRAINER_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace gt {
namespace cpu {

namespace {
void expect_cpu(const TensorView& t, DType dtype, const char* what) {
  if (t.device != Device::cpu)
    fail("internal check: ", what, " must be on the cpu, got ", device_name(t.device));
  if (t.dtype != dtype)
    fail("internal check: ", what, " must be ", dtype_name(dtype), ", got ",
         dtype_name(t.dtype));
  if (t.data == nullptr && t.numel() > 0) fail("internal check: ", what, " has no data");
}
}  // namespace

void expect_f32(const TensorView& t, std::initializer_list<int64_t> shape, const char* what) {
  expect_cpu(t, DType::f32, what);
  expect_shape(t, shape, what);
}

void expect_f32_or_bf16(const TensorView& t, std::initializer_list<int64_t> shape,
                        const char* what) {
  expect_cpu(t, t.dtype == DType::bf16 ? DType::bf16 : DType::f32, what);
  expect_shape(t, shape, what);
}

void expect_i32(const TensorView& t, std::initializer_list<int64_t> shape, const char* what) {
  expect_cpu(t, DType::i32, what);
  expect_shape(t, shape, what);
}

void expect_f32_any(const TensorView& t, const char* what) {
  expect_cpu(t, DType::f32, what);
  if (!t.contiguous()) fail("internal check: ", what, " must be contiguous, got strided ",
                            t.shape_str());
}

void expect_storage_any(const TensorView& t, DType dtype, const char* what) {
  if (dtype != DType::f32 && dtype != DType::bf16)
    fail("internal check: ", what, " must be fp32 or bf16, got ", dtype_name(dtype));
  expect_cpu(t, dtype, what);
  if (!t.contiguous())
    fail("internal check: ", what, " must be contiguous, got strided ", t.shape_str());
}

void expect_same_shape(const TensorView& a, const TensorView& b, const char* what_a,
                       const char* what_b) {
  bool same = a.ndim == b.ndim;
  for (int i = 0; same && i < a.ndim; ++i) same = a.shape[i] == b.shape[i];
  if (!same)
    fail("internal shape check: ", what_a, " ", a.shape_str(), " and ", what_b, " ",
         b.shape_str(), " must have the same shape");
}

void set_blas_threads(int n) {
#if TRAINER_HAVE_OPENBLAS
  openblas_set_num_threads(n);
#else
  (void)n;
#endif
}

}  // namespace cpu

namespace {

// A flat attention buffer seen as the (B,NH,T,T) probabilities, after
// checking it holds exactly that many floats.
TensorView probabilities_view(TensorView flat, const TensorView& qkv, int n_head,
                              const char* what) {
  GT_CHECK(qkv.ndim == 3, what, ": qkv must be (B, T, 3C), got ", qkv.shape_str());
  const int64_t B = qkv.shape[0], T = qkv.shape[1];
  GT_CHECK(flat.contiguous() && flat.numel() == B * n_head * T * T, what, " holds ",
           flat.numel(), " floats, expected B*NH*T*T = ", B * n_head * T * T);
  TensorView v = make_view(flat.data, flat.dtype, flat.device, {B, n_head, T, T});
  return v;
}

void check_host_transfer(const TensorView& t, const char* what) {
  GT_CHECK(t.device == Device::cpu && t.contiguous(), what, ": expected a contiguous cpu tensor, got ",
           device_name(t.device), " ", t.shape_str());
}

}  // namespace

Buffer CpuOps::allocate(size_t bytes) {
  if (bytes == 0) return {};
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail("out of host memory allocating ", bytes, " bytes");
  std::memset(p, 0, rounded);
  return Buffer(p, bytes, Device::cpu, [](void* q) { std::free(q); });
}

void CpuOps::upload(TensorView dst, const void* host) {
  check_host_transfer(dst, "upload");
  std::memcpy(dst.data, host, static_cast<size_t>(dst.numel()) * dtype_size(dst.dtype));
}

void CpuOps::download(void* host, TensorView src) {
  check_host_transfer(src, "download");
  std::memcpy(host, src.data, static_cast<size_t>(src.numel()) * dtype_size(src.dtype));
}

int64_t CpuOps::attention_saved_elems(int B, int n_head, int T) const {
  return gt::attention_saved_elems(Device::cpu, B, n_head, T);
}
int64_t CpuOps::attention_scratch_elems(int B, int n_head, int T) const {
  return gt::attention_scratch_elems(Device::cpu, B, n_head, T);
}
int64_t CpuOps::attention_block_scratch_elems(int B, int n_head, int Tq, int Tk) const {
  return gt::attention_block_scratch_elems(Device::cpu, B, n_head, Tq, Tk);
}

// ---- ops: one kernel family each (cpu_kernels.hpp) ------------------------------

void CpuOps::do_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                  TensorView wpe) {
  cpu::embedding_forward(out, tokens, wte, wpe);
}
void CpuOps::do_embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout,
                                   TensorView tokens) {
  cpu::embedding_backward(dwte, dwpe, dout, tokens);
}
void CpuOps::do_token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                        int64_t vocab_start) {
  cpu::token_embedding_forward(out, tokens, wte, vocab_start);
}
void CpuOps::do_token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                                         int64_t vocab_start) {
  cpu::token_embedding_backward(dwte, dout, tokens, vocab_start);
}
void CpuOps::do_position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row,
                                           int T) {
  cpu::position_embedding_forward(out, wpe, first_row, T);
}
void CpuOps::do_position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row,
                                            int T) {
  cpu::position_embedding_backward(dwpe, dout, first_row, T);
}

void CpuOps::do_layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                                  TensorView weight, TensorView bias, TensorView row_amax) {
  cpu::layernorm_forward(out, mean, rstd, inp, weight, bias);
  cpu::output_row_amax(row_amax, out);
}
void CpuOps::do_add_layernorm_forward(TensorView res, TensorView out, TensorView mean,
                                      TensorView rstd, TensorView a, TensorView b,
                                      TensorView weight, TensorView bias, TensorView row_amax) {
  cpu::add(res, a, b);
  cpu::layernorm_forward(out, mean, rstd, res, weight, bias);
  cpu::output_row_amax(row_amax, out);
}
void CpuOps::do_layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias,
                                   TensorView dout, TensorView inp, TensorView weight,
                                   TensorView mean, TensorView rstd, TensorView dinp_bf16,
                                   TensorView row_amax) {
  cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, dinp_bf16);
  cpu::output_row_amax(row_amax, dinp_bf16.empty() ? dinp : dinp_bf16);
}

void CpuOps::do_matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  cpu::matmul_forward(out, inp, weight, bias);
}
void CpuOps::do_matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias,
                                TensorView dout, TensorView inp, TensorView weight) {
  cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight);
}
void CpuOps::do_matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp,
                                    TensorView weight, TensorView bias) {
  cpu::matmul_gelu_forward(out, pre, inp, weight, bias);
}
void CpuOps::do_matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias,
                                      TensorView dout, TensorView inp, TensorView weight,
                                      TensorView pre) {
  cpu::matmul_backward_dgelu(dinp, dweight, dbias, dout, inp, weight, pre);
}
void CpuOps::do_add_bias(TensorView out, TensorView bias) { cpu::add_bias(out, bias); }
void CpuOps::do_bias_backward(TensorView dbias, TensorView dout) {
  cpu::bias_backward(dbias, dout);
}
void CpuOps::do_fp8_amax(TensorView amax, TensorView x, Fp8Reduce over) {
  cpu::fp8_amax_op(amax, x, over);
}
void CpuOps::do_fp8_scale_from_amax(TensorView scale, TensorView amax, Fp8Format format,
                                    bool pow2) {
  cpu::fp8_scale_from_amax_op(scale, amax, format, pow2);
}
void CpuOps::do_fp8_matmul(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                           TensorView b_scale, TensorView bias, const Fp8MatmulSpec& spec) {
  cpu::fp8_matmul(out, a, a_scale, b, b_scale, bias, spec);
}

void CpuOps::do_fp8_quantize(TensorView q, TensorView x, TensorView scale, Fp8Format format) {
  cpu::fp8_quantize_op(q, x, scale, format);
}

void CpuOps::do_attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head,
                                  int n_kv_head) {
  cpu::attention_forward(out, probabilities_view(saved, qkv, n_head, "attention saved"), qkv,
                         n_head, n_kv_head);
}
void CpuOps::do_attention_backward(TensorView dqkv, TensorView scratch, TensorView dout,
                                   TensorView qkv, TensorView out, TensorView saved, int n_head,
                                   int n_kv_head) {
  cpu::attention_backward(dqkv, probabilities_view(scratch, qkv, n_head, "attention scratch"), dout,
                          qkv, out, probabilities_view(saved, qkv, n_head, "attention saved"),
                          n_head, n_kv_head);
}

void CpuOps::do_attention_block_forward(TensorView out, TensorView lse, TensorView scratch,
                                        TensorView q, TensorView k, TensorView v, int64_t q_pos,
                                        int64_t k_pos, int n_head, int n_kv_head,
                                        bool accumulate) {
  cpu::attention_block_forward(out, lse, scratch, q, k, v, q_pos, k_pos, n_head, n_kv_head,
                               accumulate);
}
void CpuOps::do_attention_block_backward(TensorView dq, TensorView dk, TensorView dv,
                                         TensorView scratch, TensorView dout, TensorView q,
                                         TensorView k, TensorView v, TensorView lse,
                                         TensorView delta, int64_t q_pos, int64_t k_pos,
                                         int n_head, int n_kv_head) {
  cpu::attention_block_backward(dq, dk, dv, scratch, dout, q, k, v, lse, delta, q_pos, k_pos,
                                n_head, n_kv_head);
}
void CpuOps::do_attention_row_dot(TensorView delta, TensorView dout, TensorView out, int n_head) {
  cpu::attention_row_dot(delta, dout, out, n_head);
}

void CpuOps::do_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight,
                                float eps, TensorView row_amax) {
  cpu::rmsnorm_forward(out, rstd, inp, weight, eps);
  cpu::output_row_amax(row_amax, out);
}
void CpuOps::do_add_rmsnorm_forward(TensorView res, TensorView out, TensorView rstd, TensorView a,
                                    TensorView b, TensorView weight, float eps,
                                    TensorView row_amax) {
  cpu::add(res, a, b);
  cpu::rmsnorm_forward(out, rstd, res, weight, eps);
  cpu::output_row_amax(row_amax, out);
}
void CpuOps::do_rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout,
                                 TensorView inp, TensorView weight, TensorView rstd,
                                 TensorView dinp_bf16, TensorView row_amax) {
  cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, dinp_bf16);
  cpu::output_row_amax(row_amax, dinp_bf16.empty() ? dinp : dinp_bf16);
}
void CpuOps::do_rope_forward(TensorView qk, TensorView cos_sin, int rot_heads, int64_t first_row,
                             int T) {
  cpu::rope_forward(qk, cos_sin, rot_heads, first_row, T);
}
void CpuOps::do_rope_backward(TensorView dqk, TensorView cos_sin, int rot_heads, int64_t first_row,
                              int T) {
  cpu::rope_backward(dqk, cos_sin, rot_heads, first_row, T);
}
void CpuOps::do_swiglu_forward(TensorView out, TensorView gu, TensorView row_amax) {
  cpu::swiglu_forward(out, gu);
  cpu::output_row_amax(row_amax, out);
}
void CpuOps::do_swiglu_backward(TensorView dgu, TensorView dout, TensorView gu,
                                TensorView row_amax) {
  cpu::swiglu_backward(dgu, dout, gu);
  cpu::output_row_amax(row_amax, dgu);
}
void CpuOps::do_moe_router_forward(TensorView probs, TensorView lse, TensorView topk_expert,
                                   TensorView topk_weight, TensorView logits, TensorView bias) {
  cpu::moe_router_forward(probs, lse, topk_expert, topk_weight, logits, bias);
}
void CpuOps::do_moe_router_backward(TensorView dlogits, TensorView dtopk_weight, TensorView probs,
                                    TensorView lse, TensorView topk_expert,
                                    TensorView topk_weight, TensorView dprob_shared,
                                    float z_grad) {
  cpu::moe_router_backward(dlogits, dtopk_weight, probs, lse, topk_expert, topk_weight,
                           dprob_shared, z_grad);
}
void CpuOps::do_moe_router_stats(TensorView counts, TensorView prob_sums, TensorView probs,
                                 TensorView topk_expert) {
  cpu::moe_router_stats(counts, prob_sums, probs, topk_expert);
}
void CpuOps::do_moe_dispatch_plan(TensorView positions, TensorView offsets,
                                  TensorView topk_expert, TensorView topk_weight,
                                  int64_t capacity) {
  cpu::moe_dispatch_plan(positions, offsets, topk_expert, topk_weight, capacity);
}
void CpuOps::do_moe_permute(TensorView out, TensorView inp, TensorView positions) {
  cpu::moe_permute(out, inp, positions);
}
void CpuOps::do_moe_permute_backward(TensorView dinp, TensorView dout, TensorView positions) {
  cpu::moe_permute_backward(dinp, dout, positions);
}
void CpuOps::do_moe_combine_forward(TensorView out, TensorView expert_out, TensorView positions,
                                    TensorView topk_weight) {
  cpu::moe_combine_forward(out, expert_out, positions, topk_weight);
}
void CpuOps::do_moe_combine_backward(TensorView dexpert_out, TensorView dtopk_weight,
                                     TensorView dout, TensorView expert_out,
                                     TensorView positions, TensorView topk_weight) {
  cpu::moe_combine_backward(dexpert_out, dtopk_weight, dout, expert_out, positions, topk_weight);
}
void CpuOps::do_grouped_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                                       TensorView offsets) {
  cpu::grouped_matmul_forward(out, inp, weight, offsets);
}
void CpuOps::do_grouped_matmul_backward(TensorView dinp, TensorView dweight, TensorView dout,
                                        TensorView inp, TensorView weight, TensorView offsets) {
  cpu::grouped_matmul_backward(dinp, dweight, dout, inp, weight, offsets);
}
void CpuOps::do_moe_load_balance(TensorView aux, TensorView dprob, TensorView counts,
                                 TensorView prob_sums, double rows, float grad_coef) {
  cpu::moe_load_balance(aux, dprob, counts, prob_sums, rows, grad_coef);
}

void CpuOps::do_gelu_forward(TensorView out, TensorView inp, TensorView row_amax) {
  cpu::gelu_forward(out, inp);
  cpu::output_row_amax(row_amax, out);
}
void CpuOps::do_gelu_backward(TensorView dinp, TensorView inp, TensorView dout,
                              TensorView row_amax) {
  cpu::gelu_backward(dinp, inp, dout);
  cpu::output_row_amax(row_amax, dinp);
}

void CpuOps::do_add(TensorView out, TensorView a, TensorView b) { cpu::add(out, a, b); }
void CpuOps::do_accumulate(TensorView acc, TensorView x) { cpu::accumulate(acc, x); }
void CpuOps::do_zero(TensorView t) { cpu::zero(t); }
void CpuOps::do_copy(TensorView dst, TensorView src) { cpu::copy(dst, src); }
void CpuOps::do_cast(TensorView dst, TensorView src) { cpu::cast(dst, src); }
void CpuOps::do_cast_rows(TensorView dst, TensorView src) { cpu::cast_rows(dst, src); }

void CpuOps::do_softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                                      TensorView targets, int64_t vocab_size, float grad_scale) {
  cpu::softmax_cross_entropy(losses, dlogits, logits, targets, vocab_size, grad_scale);
}
void CpuOps::do_cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                                        int64_t vocab_size) {
  cpu::cross_entropy_shard_max(row_max, logits, vocab_start, vocab_size);
}
void CpuOps::do_cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit,
                                         TensorView logits, TensorView targets, TensorView row_max,
                                         int64_t vocab_start, int64_t vocab_size) {
  cpu::cross_entropy_shard_sums(sumexp, target_logit, logits, targets, row_max, vocab_start,
                                vocab_size);
}
void CpuOps::do_cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                           TensorView targets, TensorView row_max,
                                           TensorView sumexp, TensorView target_logit,
                                           int64_t vocab_start, int64_t vocab_size,
                                           float grad_scale) {
  cpu::cross_entropy_shard_finish(losses, dlogits, logits, targets, row_max, sumexp, target_logit,
                                  vocab_start, vocab_size, grad_scale);
}

double CpuOps::do_sum_squares(TensorView t) { return cpu::sum_squares(t); }
void CpuOps::do_sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs) {
  cpu::sum_squares_runs(out, x, runs);
}
void CpuOps::do_clip_scale(TensorView scale, TensorView stats, float max_norm) {
  cpu::clip_scale(scale, stats, max_norm);
}
void CpuOps::do_adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                                  TensorView param_bf16, TensorView scale,
                                  const std::vector<AdamWRun>& runs, const AdamWParams& p) {
  cpu::adamw_update_runs(param, grad, m, v, param_bf16, scale, runs, p);
}

void set_cpu_threads(int threads) {
  if (threads <= 0) threads = omp_get_num_procs();
  // Both pools are process-wide; setting them together keeps OpenMP loops
  // and sgemm from oversubscribing the cores between them.
  omp_set_num_threads(threads);
  cpu::set_blas_threads(threads);
}

std::unique_ptr<Ops> make_cpu_ops(int threads) {
  set_cpu_threads(threads);
  return std::make_unique<CpuOps>();
}

}  // namespace gt
