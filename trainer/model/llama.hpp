// Llama: the Llama 2/3 forward and backward pass (HF LlamaForCausalLM), a
// CausalLM (causal_lm.hpp: the interface, parameter views, loss bookkeeping
// and the invariants every family keeps), for one tensor-parallel rank.
//
//   x = embed_tokens[tokens]                                  (no positions)
//   per block:  h = x + o_proj(attn(rope(q|k|v_proj(rmsnorm_1(x)))))
//               x = h + down_proj(silu(gate_proj(n)) * up_proj(n)), n = rmsnorm_2(h)
//   logits = lm_head(norm(x))         (embed_tokens when tie_embeddings)
//
// The math is HF's: RMSNorm with weight and no bias (model.norm_eps), rotary
// embeddings on q and k in the rotate_half convention (positions 0..T-1 of
// each sequence, the table of trainer/model/rope_table.hpp, Llama 3.1
// scaling included), grouped-query causal attention (n_kv_head key/value
// heads, each shared by n_head / n_kv_head query heads), SwiGLU, no biases
// anywhere, and an untied LM head unless model.tie_embeddings.
//
// Fused GEMMs: q_proj, k_proj and v_proj are separate tensors (HF's names,
// each split by heads under tp) but adjacent in the layout, so one GEMM
// reads them as one ((NH + 2 KV) hs / p, C) matrix and writes qkv (R,
// (NH + 2 KV) hs / p) = [q heads | k heads | v heads] of this rank, the
// layout the attention op takes; gate_proj and up_proj likewise give gu (R,
// 2F/p) = [gate | up], the layout the SwiGLU op takes.
//
// Tensor parallelism (Megatron-LM with sequence parallelism, as GPT): the
// residual stream and the norms hold R/p rows; q|k|v and gate|up are
// column-parallel (each rank NH/p query heads, KV/p key/value heads, F/p of
// the MLP), o_proj and down_proj row-parallel; the embedding and the LM head
// split the vocabulary; the norms' weights are replicated and their
// gradients tp-partial (summed by the store's reducer).
//
// Recomputation (train.recompute), as GPT:
//   none   every block's activations are kept;
//   mlp    post_attention_layernorm's output and rstd, gate|up and the SwiGLU
//          share one slot; backward recomputes them from the kept res2;
//   block  only each block's input is kept; backward reruns the block up to
//          the SwiGLU first.
//
// Precision (runtime.dtype=bf16), as GPT's: activations and the activation
// gradients a GEMM or attention reads are bf16; master weights, their
// gradients, the norms' rstd, attention's statistics, the losses and the
// residual stream's gradient dresidual (an accumulator) stay fp32, the
// latter rounded to bf16 where a row-parallel layer's backward reads it (at
// tp = 1 by the norms' backward in their pass, as GPT's). The residual adds
// run inside the norm that reads their sum next (add_rmsnorm_forward). A
// norm's output gradient dln is fp32 at every tp (GPT's is bf16 at tp = 1):
// the layouts then differ only in summation order, not in a rounding.
//
// Mixtral (model.arch=mixtral, HF MixtralForCausalLM) is this class with
// each block's MLP a sparse mixture of experts (MixtureOfExperts,
// trainer/parallelize/mixture_of_experts.hpp): post_attention_layernorm's
// output, this rank's R/p rows (never gathered: every tp rank holds every
// expert whole and routes its own rows), goes through
// block_sparse_moe in place of gate|up, SwiGLU and down_proj. The router
// statistics of the micro-batch are pooled after the last block
// (MixtureOfExperts::finish_micro_batch) and before any backward, which the
// load-balancing loss's gradient needs. Recomputation refills
// post_attention_layernorm's output; the mixture keeps its own state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/causal_lm.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/parallelize/mixture_of_experts.hpp"
#include "trainer/parallelize/tp_layers.hpp"

namespace gt {

class Llama final : public CausalLM {
 public:
  // One rank owning its parameters (LocalParameters).
  Llama(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
        Recompute recompute = Recompute::none, ComputeDType dtype = ComputeDType::fp32);
  // One tensor-parallel rank over `store` (see GPT's constructor).
  Llama(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq, const ParameterLayout& layout,
        ParameterStore& store, const TensorParallelGroup& group,
        Recompute recompute = Recompute::none, ComputeDType dtype = ComputeDType::fp32,
        std::optional<StageSpan> chunk = std::nullopt, const ContextParallelGroup& cp = {},
        const ExpertParallelGroup& ep = {});
  ~Llama() override;

  int64_t activation_bytes() const override;
  MoeStepStats take_moe_stats() override;
  void set_router_bias(TensorView table) override;

 private:
  struct Activations {
    Buffer rope;                // (max_seq, hs) fp32 [cos | sin] at each local row's position
    Buffer encoded;             // (R/p, C)
    LayerBuffer ln1, ln1_rstd;  // (L, R, C) gathered, (L, R/p)
    LayerBuffer qkv;            // (L, R, (NH + 2 KV) hs / p), q and k rotated
    LayerBuffer atty;           // (L, R, NH hs / p)
    LayerBuffer att;            // (L, attention_saved_elems)
    LayerBuffer res2;           // (L, R/p, C)
    LayerBuffer ln2, ln2_rstd;  // (L, R, C) gathered, (L, R/p)
    LayerBuffer gu, swiglu;     // (L, R, 2F/p), (L, R, F/p)
    LayerBuffer res3;           // (L, R/p, C): every block's output
    Buffer lnf, lnf_rstd;       // (R, C) gathered, (R/p)
    Buffer proj_tmp;            // (R/p, C) a row-parallel output before its residual add
  };
  struct Gradients {                   // reused across blocks
    Buffer dresidual, dln;             // (R/p, C) fp32 x2
    Buffer dresidual_bf16;             // (R/p, C) bf16 copy of dresidual (bf16, tp = 1)
    Buffer datty, dswiglu, dgu, dqkv;  // (R, NH hs/p), (R, F/p), (R, 2F/p), (R, (NH+2KV) hs/p)
    Buffer datt;                       // attention_scratch_elems
  };
  // (attention: CausalLM::attention(), over the cp ranks.)
  struct Layers {
    explicit Layers(TpLayerContext& ctx)
        : qkv(ctx, "qkv_proj", ActDim::heads),
          o_proj(ctx, "o_proj", ActDim::heads),
          gate_up(ctx, "gate_up_proj", ActDim::hidden),
          down(ctx, "down_proj", ActDim::hidden),
          lm_head(ctx, "lm_head", ActDim::vocabulary),
          embedding(ctx),
          cross_entropy(ctx) {}
    ColumnParallelLinear qkv;  // q_proj | k_proj | v_proj
    RowParallelLinear o_proj;
    ColumnParallelLinear gate_up;  // gate_proj | up_proj
    RowParallelLinear down;
    ColumnParallelLinear lm_head;  // lm_head.weight, or embed_tokens when tied
    VocabParallelEmbedding embedding;
    VocabParallelCrossEntropy cross_entropy;
  };

  void allocate(const TensorParallelGroup& group);
  bool run_forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                   float grad_scale) override;
  void run_backward() override;
  StageBoundary boundary_views(int B, int T) override;

  // Block l's activations as the layers returned them (each view with its
  // placement): what its backward reads. Recomputation refills them.
  struct BlockActivations {
    Activation input, ln1, qkv, atty, res2, ln2, gu, swiglu, res3;
    // gate|up's and down_proj's fp8 input row amaxes, taken by
    // post_attention_layernorm's and SwiGLU's passes (empty: none asked).
    // Views of Fp8Linear's buffers: read by this forward only.
    TensorView ln2_amax, swiglu_amax;
  };

  // Block l's forward in two parts, run by forward() and again by backward()
  // for what recomputation dropped. x (R/p, C): the block's input.
  // input_layernorm, q|k|v, RoPE, attention, o_proj, and the residual add
  // into res2 fused with post_attention_layernorm. prev_res2 (R/p, C),
  // unless empty: the block before's res2, whose residual add (x =
  // prev_res2 + proj_tmp) input_layernorm does in its pass, writing x
  // (forward() for a stage's blocks after its first; recomputation reads
  // the kept x instead).
  void block_attention_forward(int l, const Activation& x, TensorView prev_res2 = {});
  // post_attention_layernorm into ln2 (this rank's rows) and its fp8 amaxes:
  // of the kept res2, or, with proj (R/p, C), fused with res2 = input + proj.
  void post_attention_norm(int l, TensorView proj);
  // post_attention_layernorm (unless ln2_done), gate|up and SwiGLU:
  // down_proj's input.
  void block_mlp_up_forward(int l, bool ln2_done);
  // Block l's MLP backward (dense or the mixture): dres = d(res3) (R/p, C),
  // dln (R/p, C) fp32 assigned d(post_attention_layernorm's output).
  // dres_amax: d(res3)'s row amaxes for an fp8 down_proj, taken by the
  // norm backward that wrote dres (empty: none).
  Activation block_mlp_backward(int l, const Activation& dres, TensorView dln,
                                TensorView dres_amax);
  // Where the norm backward that writes block l's d(res3) puts its row
  // amaxes for block l's fp8 down_proj (empty when it runs in bf16 or
  // takes none: Fp8Linear::producer_row_amax).
  TensorView down_grad_amax(int l);
  // The bf16 copy of d(res3) for block l's down_proj (residual_grad_copy;
  // empty for a mixture, which reads the fp32 gradient).
  TensorView down_grad_copy(int l) const;
  // Mixtral: block l's router and experts, as the mixture reads them
  // (grads false) and accumulates into them (grads true).
  MixtureOfExperts::Weights moe_views(int l, bool grads);

  // Per-rank widths: query heads, key/value heads, q|k|v features, MLP width.
  int NHl_ = 0, KVl_ = 0;
  int64_t qkv_width_ = 0, ffn_ = 0;
  std::string head_weight_;  // lm_head.weight, or embed_tokens.weight when tied
  Activations acts_;
  Gradients dacts_;
  std::unique_ptr<Layers> layers_;
  std::unique_ptr<MixtureOfExperts> moe_;  // model.arch=mixtral only
  ExpertParallelGroup ep_;                 // the mixtures' ep group (size 1: none)
  TensorView router_bias_;                 // (n_layer, E) selection biases; empty: none
  std::vector<BlockActivations> blocks_;  // (n_layer), this stage's filled
  Activation lnf_, logits_;               // the head's: the final norm's gathered output, logits
};

}  // namespace gt
