// CudaOps: the Ops implementation of the CUDA backend. Every Ops method runs
// on device TensorViews (Device::cuda), enqueued on the context's own stream,
// inside an NVTX range named like the method. The semantics (assigned vs
// accumulated, layouts) are kernels/ops.hpp's; what differs is stated here.
//
// It owns (RAII, declared in teardown order): the stream, the GemmContext
// (cuBLASLt handle, workspace, per-shape plan cache), a device scratch arena
// and a pinned host word for sum_squares. Nothing global: two CudaOps are
// independent. Not thread-safe; one host thread drives one CudaOps.
//
// Memory rules:
//   * No op allocates memory, with one documented exception: the scratch
//     arena (layernorm_backward's and dbias's partial sums, sum_squares'
//     partials) GROWS in the context when a shape needs more than it holds.
//     Growing synchronises the stream and happens once per new largest
//     shape; reserve_scratch() or CudaContextOptions::scratch_bytes allocate
//     it up front so a training step never allocates.
//   * attention's saved/scratch buffers are the caller's, sized by
//     attention_saved_elems / attention_scratch_elems (B*NH*T floats each: the
//     log-sum-exp and D = rowsum(dout*out)); the T x T matrix never exists.
//     Attention over blocks needs no scratch at all
//     (attention_block_scratch_elems is 0): its tiles stay on chip.
//   * The cuBLASLt workspace is fixed at construction (options.workspace_bytes).
//
// dtypes: fp32 everywhere; bf16 views are accepted by matmul_forward/backward
// (bf16 inp/weight/dout/dinp; out bf16 or fp32; dweight bf16 or fp32; dbias
// fp32), attention_forward/backward, gelu_*, layernorm_forward (weight and
// bias bf16, or fp32 for bf16 storage), layernorm_backward's inp and dout, add,
// accumulate, add_bias, zero, copy, cast, cast_rows, the MoE row tensors
// (permute, combine, grouped GEMM; dweight fp32), as the logits/dlogits of
// the cross-entropy ops, and as q, k, v, dout of attention over blocks (whose
// out, lse, delta, dq, dk, dv are fp32) and either input of
// attention_row_dot; the others throw gt::Error naming the op.
//
// Synchronisation: ops are asynchronous on stream(); sum_squares returns a
// host double and therefore waits for the stream. Differences from CpuOps
// that come from not synchronising: token ids and cross-entropy targets are
// not range-checked on the device (the data loader validates them; an
// out-of-range token gives a NaN row, an out-of-range target a NaN loss).
//
// Host-only header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

#include "kernels/cuda/cuda_resources.hpp"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/matmul_fp8.cuh"
#include "kernels/cuda/upload_staging.hpp"
#include "kernels/ops.hpp"

namespace gt {

namespace cuda_ops_detail {
struct Check;  // cuda_ops_check.hpp: the argument checks of one op
}

struct CudaContextOptions {
  int device = 0;                              // CUDA device index
  size_t workspace_bytes = size_t{32} << 20;   // cuBLASLt workspace
  bool allow_tf32 = false;                     // fp32 GEMMs on TF32 tensor cores (~1e-3 rel.)
  size_t scratch_bytes = 0;                    // scratch arena allocated up front
  bool fuse_bias_grad = true;                  // dbias by cuBLASLt's BGRADB epilogue when it can
  // bf16 attention with hs % 16 == 0 on the tensor-core (FlashAttention-2
  // style) kernels (attention_tc.cu) instead of the fp32-math SIMT ones. The
  // trainer sets it from runtime.attention (on by default in bf16).
  bool attention_tensor_cores = false;
  // bf16 attention forward with hs 64 or 128 on the sm_90 kernels
  // (attention_sm90.cu: TMA and wgmma), the backward on the tensor-core
  // ones; runtime.attention: wgmma. CudaOps refuses it on a device that is
  // not sm_90.
  bool attention_wgmma = false;
};

class CudaOps final : public Ops {
 public:
  // Throws gt::Error when no CUDA device is visible or `device` is out of range.
  explicit CudaOps(const CudaContextOptions& options = {});
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  Device device() const override { return Device::cuda; }
  const char* backend_name() const override { return "CudaOps"; }

  // cudaMalloc + cudaMemsetAsync (synchronised), counted in device_bytes_*.
  Buffer allocate(size_t bytes) override;
  // Synchronous copies on stream(): upload returns once `host` may be reused,
  // download once the data has landed (after everything queued before).
  void upload(TensorView dst, const void* host) override;
  void download(void* host, TensorView src) override;
  void synchronize() override { stream_.synchronize(); }
  // Buffers from allocate() + the scratch arena + the cuBLASLt workspace.
  int64_t device_bytes_in_use() const override;
  int64_t device_bytes_peak() const override { return peak_bytes_; }
  // CUDA events on stream() (kernels/cuda/cuda_op_timer.hpp).
  std::unique_ptr<OpTimer> make_op_timer() const override;

  int64_t attention_saved_elems(int B, int n_head, int T) const override;
  int64_t attention_scratch_elems(int B, int n_head, int T) const override;
  int64_t attention_block_scratch_elems(int B, int n_head, int Tq, int Tk) const override;

  // ---- CUDA-only extras ----------------------------------------------------

  cudaStream_t stream() const { return stream_.get(); }
  cuda::GemmContext& gemm() { return gemm_; }
  // Grows the scratch arena to at least `bytes` (synchronising the stream).
  void reserve_scratch(size_t bytes);
  size_t scratch_bytes() const { return scratch_.bytes(); }
  const CudaContextOptions& options() const { return options_; }

 protected:
  // The ops (kernels/ops.hpp's entry points call them once the shapes are
  // checked); each checks what only this backend decides: the views' device,
  // dtypes and contiguity, and its kernels' limits.
  void do_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                            TensorView wpe) override;
  void do_embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout,
                             TensorView tokens) override;
  void do_token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                  int64_t vocab_start) override;
  void do_token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                                   int64_t vocab_start) override;
  void do_position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row,
                                     int T) override;
  void do_position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row,
                                      int T) override;

  void do_layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                            TensorView weight, TensorView bias, TensorView row_amax) override;
  void do_add_layernorm_forward(TensorView res, TensorView out, TensorView mean, TensorView rstd,
                                TensorView a, TensorView b, TensorView weight, TensorView bias,
                                TensorView row_amax) override;
  void do_layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                             TensorView inp, TensorView weight, TensorView mean, TensorView rstd,
                             TensorView dinp_bf16,
                             TensorView row_amax) override;

  void do_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                         TensorView bias) override;
  void do_matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                          TensorView inp, TensorView weight) override;
  // The GELU_AUX(_BIAS) / DGELU epilogues; when cuBLASLt has no kernel for a
  // shape, the GEMM then gelu_forward / gelu_backward (a bf16 product is then
  // rounded before GELU: the CPU twin rounds once).
  void do_matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                              TensorView bias) override;
  void do_matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias,
                                TensorView dout, TensorView inp, TensorView weight,
                                TensorView pre) override;
  void do_add_bias(TensorView out, TensorView bias) override;
  // The fp8 path (cuda_ops_fp8.cpp): the quantising casts into scratch and
  // cuBLASLt's fp8 matmul on its own context, created by the first
  // fp8_matmul (its workspace counted in device_bytes_in_use from then on).
  void do_bias_backward(TensorView dbias, TensorView dout) override;
  void do_fp8_amax(TensorView amax, TensorView x, Fp8Reduce over) override;
  void do_fp8_scale_from_amax(TensorView scale, TensorView amax, Fp8Format format,
                              bool pow2) override;
  void do_fp8_matmul(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                     TensorView b_scale, TensorView bias, const Fp8MatmulSpec& spec) override;
  void do_fp8_quantize(TensorView q, TensorView x, TensorView scale, Fp8Format format) override;

  void do_attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head,
                            int n_kv_head) override;
  void do_attention_backward(TensorView dqkv, TensorView scratch, TensorView dout, TensorView qkv,
                             TensorView out, TensorView saved, int n_head, int n_kv_head) override;
  void do_attention_block_forward(TensorView out, TensorView lse, TensorView scratch, TensorView q,
                                  TensorView k, TensorView v, int64_t q_pos, int64_t k_pos,
                                  int n_head, int n_kv_head, bool accumulate) override;
  void do_attention_block_backward(TensorView dq, TensorView dk, TensorView dv, TensorView scratch,
                                   TensorView dout, TensorView q, TensorView k, TensorView v,
                                   TensorView lse, TensorView delta, int64_t q_pos, int64_t k_pos,
                                   int n_head, int n_kv_head) override;
  void do_attention_row_dot(TensorView delta, TensorView dout, TensorView out,
                            int n_head) override;

  void do_gelu_forward(TensorView out, TensorView inp, TensorView row_amax) override;
  void do_gelu_backward(TensorView dinp, TensorView inp, TensorView dout,
                        TensorView row_amax) override;

  void do_add(TensorView out, TensorView a, TensorView b) override;
  void do_accumulate(TensorView acc, TensorView x) override;
  void do_zero(TensorView t) override;
  void do_copy(TensorView dst, TensorView src) override;
  // fp32 <-> bf16 by kernels/cuda/cast.cu; same dtype: copy().
  void do_cast(TensorView dst, TensorView src) override;
  void do_cast_rows(TensorView dst, TensorView src) override;

  void do_softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                                TensorView targets, int64_t vocab_size, float grad_scale) override;
  void do_cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                                  int64_t vocab_size) override;
  void do_cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit, TensorView logits,
                                   TensorView targets, TensorView row_max, int64_t vocab_start,
                                   int64_t vocab_size) override;
  void do_cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                     TensorView targets, TensorView row_max, TensorView sumexp,
                                     TensorView target_logit, int64_t vocab_start,
                                     int64_t vocab_size, float grad_scale) override;

  void do_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight,
                          float eps, TensorView row_amax) override;
  void do_add_rmsnorm_forward(TensorView res, TensorView out, TensorView rstd, TensorView a,
                              TensorView b, TensorView weight, float eps,
                              TensorView row_amax) override;
  void do_rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                           TensorView weight, TensorView rstd, TensorView dinp_bf16,
                           TensorView row_amax) override;
  void do_rope_forward(TensorView qk, TensorView cos_sin, int rot_heads, int64_t first_row,
                       int T) override;
  void do_rope_backward(TensorView dqk, TensorView cos_sin, int rot_heads, int64_t first_row,
                        int T) override;
  void do_swiglu_forward(TensorView out, TensorView gu, TensorView row_amax) override;
  void do_swiglu_backward(TensorView dgu, TensorView dout, TensorView gu,
                          TensorView row_amax) override;
  // Mixture of experts (cuda_ops_moe.cpp, kernels/cuda/moe.cu): no op reads
  // device memory back or waits for the stream. moe_router_stats and
  // moe_dispatch_plan take their scratch from the arena. The dispatch plan
  // takes at most cuda::kMoeMaxExperts experts; an expert index outside
  // [0, E) is not diagnosed (that would need the host): its slot is dropped.
  void do_moe_router_forward(TensorView probs, TensorView lse, TensorView topk_expert,
                             TensorView topk_weight, TensorView logits, TensorView bias) override;
  void do_moe_router_backward(TensorView dlogits, TensorView dtopk_weight, TensorView probs,
                              TensorView lse, TensorView topk_expert, TensorView topk_weight,
                              TensorView dprob_shared, float z_grad) override;
  void do_moe_router_stats(TensorView counts, TensorView prob_sums, TensorView probs,
                           TensorView topk_expert) override;
  void do_moe_dispatch_plan(TensorView positions, TensorView offsets, TensorView topk_expert,
                            TensorView topk_weight, int64_t capacity) override;
  void do_moe_permute(TensorView out, TensorView inp, TensorView positions) override;
  void do_moe_permute_backward(TensorView dinp, TensorView dout, TensorView positions) override;
  void do_moe_combine_forward(TensorView out, TensorView expert_out, TensorView positions,
                              TensorView topk_weight) override;
  void do_moe_combine_backward(TensorView dexpert_out, TensorView dtopk_weight, TensorView dout,
                               TensorView expert_out, TensorView positions,
                               TensorView topk_weight) override;
  void do_grouped_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                                 TensorView offsets) override;
  void do_grouped_matmul_backward(TensorView dinp, TensorView dweight, TensorView dout,
                                  TensorView inp, TensorView weight, TensorView offsets) override;
  void do_moe_load_balance(TensorView aux, TensorView dprob, TensorView counts,
                           TensorView prob_sums, double rows, float grad_coef) override;
  double do_sum_squares(TensorView t) override;
  void do_sum_squares_runs(TensorView out, TensorView x,
                           const std::vector<AdamWRun>& runs) override;
  void do_clip_scale(TensorView scale, TensorView stats, float max_norm) override;
  void do_adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                            TensorView param_bf16, TensorView scale,
                            const std::vector<AdamWRun>& runs, const AdamWParams& p) override;

 private:
  // Scratch for one op: `bytes` from the arena, grown first when needed.
  void* scratch(size_t bytes);
  // Adds `delta` bytes to the Buffers counted in use, updating the peak.
  void count_buffer_bytes(int64_t delta);
  // The linear layers (cuda_ops_linear.cpp): matmul_forward / matmul_backward
  // and, with `pre`, their GELU-fused forms; `c` names the public op.
  void linear_forward(const cuda_ops_detail::Check& c, TensorView out, TensorView pre,
                      TensorView inp, TensorView weight, TensorView bias);
  void linear_backward(const cuda_ops_detail::Check& c, TensorView dinp, TensorView dweight,
                       TensorView dbias, TensorView dout, TensorView inp, TensorView weight,
                       TensorView pre);

  // Declaration order is teardown order reversed: the stream outlives the
  // GEMM context and the buffers used on it.
  CudaContextOptions options_;
  cuda::CudaStream stream_;
  cuda::GemmContext gemm_;
  std::unique_ptr<cuda::Fp8GemmContext> fp8_gemm_;  // the first fp8_matmul creates it
  cuda::DeviceBuffer scratch_;
  cuda::PinnedBuffer host_result_;  // one double for sum_squares
  cuda::UploadStaging uploads_;     // pinned staging: upload() never waits for the GPU
  int64_t buffer_bytes_ = 0;        // live Buffers from allocate()
  int64_t peak_bytes_ = 0;          // of device_bytes_in_use()
};

// The backend factory: a CudaOps behind the Ops interface. Throws gt::Error
// with a clear message when no CUDA device is visible.
std::unique_ptr<Ops> make_cuda_ops(const CudaContextOptions& options = {});

}  // namespace gt
