// GPT: the GPT-2 forward and backward pass, a CausalLM (causal_lm.hpp: the
// interface, the parameter views, the loss bookkeeping and the invariants
// every family keeps), written once against the backend-neutral Ops
// interface for one tensor-parallel rank (tp = 1 is the plain model).
//
// Tensor parallelism (Megatron-LM with sequence parallelism) lives in the
// layers this model calls (trainer/parallelize/tp_layers.hpp), which own the
// tp group; the model only says which layer each matrix is. With R = B*T
// rows of a micro-batch and p tp ranks:
//   * Between blocks (residual stream, LayerNorms) each rank holds R/p rows
//     (its sequence shard).
//   * c_attn and mlp.c_fc are ColumnParallelLinear, attn.c_proj and
//     mlp.c_proj RowParallelLinear; attention runs on this rank's n_head/p
//     heads over all R rows.
//   * The vocabulary is padded (ModelConfig::padded_vocab_size, V below): wte
//     and the logits have V rows/columns, the padding masked in the loss.
//   * The embedding is a VocabParallelEmbedding; the tied LM head is a
//     ColumnParallelLinear over the vocabulary followed by a
//     VocabParallelCrossEntropy, so no rank ever holds the full (R, V) logits.
// How each parameter is split is the placement table's
// (trainer/parallelize/gpt2_placement.cpp).
//
// Activation recomputation (train.recompute) trades compute for memory. A
// per-layer activation has one slot per block, or a single slot all blocks
// share when recomputation drops it:
//   none   every block's activations are kept for backward;
//   mlp    ln_2's output and statistics, c_fc's output and its GELU share one
//          slot; backward recomputes ln_2, c_fc (its all-gather again under
//          tp) and GELU from the kept res2 first;
//   block  only each block's input (encoded, res3 of the block before) is
//          kept; backward recomputes the whole block up to the GELU first.
// Recomputation runs the forward's ops on the same inputs, so the losses,
// gradients and parameters are bit for bit those of none. It runs inside the
// block's backward, between before_backward(l) (which makes its parameters
// valid) and the gradients; it calls no store hook of its own.
//
// Precision (runtime.dtype, the `dtype` argument). fp32: everything fp32.
// bf16 (bf16 storage, kernels/ops.hpp): every activation the model keeps or
// passes between ops is bf16 (the embedding's output, the residual stream
// res2/res3, LayerNorm outputs, qkv, attention's output, fch and its GELU,
// the logits), and so are the activation gradients that feed a GEMM or
// attention (datty, dfch, dqkv, dlogits). Math stays fp32 in every op; each
// bf16 output is the fp32 result rounded once. What stays fp32, and why:
//   * master weights, their gradients, AdamW state: updates far smaller than
//     a bf16 step of the weight must not vanish; the GEMMs read bf16 copies
//     of the weights and biases (LinearPrecision: a bias is added in fp32 as
//     its bf16 value, like torch.autocast's linear);
//   * LayerNorm mean/rstd, attention's saved row statistics, the losses;
//   * dresidual, the residual stream's gradient: every block ADDS its two
//     branch gradients into it (LayerNorm backward accumulates), and a bf16
//     accumulator would drop the small terms; being (R/p, C) it is a
//     twentieth of the activations, so it costs little to keep. The GEMMs
//     that read it (the row-parallel layers' backward) get a bf16 copy: at
//     tp = 1 the LayerNorm backward that last updated it writes that copy in
//     the same pass (dresidual_bf16); under tp, LinearPrecision rounds the
//     gathered rows. An fp8 layer reads the fp32 gradient (it quantizes it
//     itself, as under tp).
//     dln, a LayerNorm's output gradient, is bf16 at tp = 1 (one GEMM writes
//     it whole) and fp32 under tp (the reduce-scatter's fp32 sum);
//   * fp32 staging rows for the sums across tp ranks (the vocab-parallel
//     embedding, the row-parallel reduce-scatter): partial sums are added in
//     fp32 and rounded to bf16 once.
// Tensor-parallel all-gathers of bf16 activations move bf16 (two to a word).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/causal_lm.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/parallelize/tp_layers.hpp"

namespace gt {

class GPT final : public CausalLM {
 public:
  // One rank, no parallelism: the model owns its parameters (LocalParameters).
  // recompute: train.recompute; dtype: the linear layers' precision
  // (linear_precision.hpp).
  GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
      Recompute recompute = Recompute::none, ComputeDType dtype = ComputeDType::fp32);
  // One tensor-parallel rank whose parameters (laid out by `layout`, built
  // for group.rank() of group.size()) live in `store`; the group goes to the
  // tensor-parallel layers.
  // `chunk`: the pipeline chunk of the layout this instance runs, its
  // activations sized for it (CausalLM::set_pipeline_stage).
  // `cp`: the context-parallel group (CausalLM's constructor).
  GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq, const ParameterLayout& layout,
      ParameterStore& store, const TensorParallelGroup& group,
      Recompute recompute = Recompute::none, ComputeDType dtype = ComputeDType::fp32,
      std::optional<StageSpan> chunk = std::nullopt, const ContextParallelGroup& cp = {});
  ~GPT() override;

  int64_t activation_bytes() const override;

 private:
  struct Activations {
    Buffer encoded;                         // (R/p, C)
    LayerBuffer ln1, ln1_mean, ln1_rstd;    // (L, R, C) gathered, (L, R/p) x2
    LayerBuffer qkv;                        // (L, R, 3C/p)
    LayerBuffer atty;                       // (L, R, C/p)
    LayerBuffer att;                        // (L, attention_saved_elems)
    LayerBuffer res2;                       // (L, R/p, C)
    LayerBuffer ln2, ln2_mean, ln2_rstd;    // (L, R, C) gathered, (L, R/p) x2
    LayerBuffer fch, fch_gelu;              // (L, R, 4C/p) x2
    LayerBuffer res3;                       // (L, R/p, C): always every block's
    Buffer lnf, lnf_mean, lnf_rstd;         // (R, C) gathered, (R/p) x2
    Buffer proj_tmp;                        // (R/p, C) row-parallel output before the residual add
    Buffer positions;                       // cp > 1: (R) int32, each row's position
    Buffer position_rows;                   // cp > 1: (R/p, C) fp32, wpe of the own rows
  };
  struct Gradients {  // activation gradients, reused across layers
    Buffer dresidual, dln;                  // (R/p, C) x2 (dln bf16 at tp = 1 in bf16)
    Buffer dresidual_bf16;                  // (R, C) bf16 copy of dresidual (bf16, tp = 1)
    Buffer datty, dfch, dqkv;               // (R, C/p), (R, 4C/p), (R, 3C/p)
    Buffer datt;                            // attention_scratch_elems
  };
  // The layers that carry tensor parallelism, one per role (the weights come
  // per call, so one object serves every block).
  // (attention: CausalLM::attention(), n_head/p heads, over the cp ranks.)
  struct Layers {
    explicit Layers(TpLayerContext& ctx)
        : c_attn(ctx, "c_attn", ActDim::heads),
          attn_proj(ctx, "attn.c_proj", ActDim::heads),
          c_fc(ctx, "c_fc", ActDim::hidden),
          mlp_proj(ctx, "mlp.c_proj", ActDim::hidden),
          lm_head(ctx, "lm_head", ActDim::vocabulary),
          embedding(ctx),
          cross_entropy(ctx) {}
    ColumnParallelLinear c_attn;
    RowParallelLinear attn_proj;
    ColumnParallelLinear c_fc;
    RowParallelLinear mlp_proj;
    ColumnParallelLinear lm_head;  // tied: reads wte
    VocabParallelEmbedding embedding;
    VocabParallelCrossEntropy cross_entropy;
  };

  void allocate(const TensorParallelGroup& group);
  // The positions (R/p) int32 of this tp rank's own rows of a (B, T)
  // micro-batch under context parallelism; empty without.
  TensorView own_positions(int B, int T);
  bool run_forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                   float grad_scale) override;
  void run_backward() override;
  StageBoundary boundary_views(int B, int T) override;

  // Block l's activations as the layers returned them (each view with its
  // placement): what its backward reads. Recomputation refills them.
  struct BlockActivations {
    Activation input, ln1, qkv, atty, res2, ln2, fch, fch_gelu, res3;
    // c_fc's and mlp.c_proj's fp8 input row amaxes, taken by ln_2's and the
    // GELU's passes (empty: none asked). Views of Fp8Linear's buffers: read
    // by the same forward only.
    TensorView ln2_amax, gelu_amax;
  };

  // Block l's forward in three parts, run by forward() in turn and again by
  // backward() for what recomputation dropped. x: (R/p, C) the block's input.
  // ln_1, c_attn, attention, attn.c_proj, and the residual add into res2
  // fused with ln_2 (mlp recomputation reruns ln_2 alone from the kept res2
  // in block_mlp_up_forward). With `prev_res2` (forward() for l > 0) the
  // block before left its residual add pending: x is where its sum goes
  // (res3 of l-1), computed as prev_res2 + proj_tmp by ln_1's pass, fused
  // the same way; recomputation reads the kept res3 instead.
  void block_attention_forward(int l, const Activation& x, TensorView prev_res2 = {});
  // ln_2 (unless ln2_done), c_fc and GELU: the MLP's activations up to
  // mlp.c_proj's input.
  void block_mlp_up_forward(int l, bool ln2_done);
  // mlp.c_proj into proj_tmp; the residual add res3 = res2 + proj_tmp is
  // left to the next block's ln_1 or to ln_f, which do it in their pass
  // (its placements are checked and res3's recorded here).
  void block_mlp_down_forward(int l);
  // Where the LayerNorm backward that writes block l's d(res3) puts its row
  // amaxes for block l's fp8 mlp.c_proj (empty when it runs in bf16:
  // Fp8Linear::producer_row_amax).
  TensorView mlp_proj_grad_amax(int l);

  Activations acts_;
  Gradients dacts_;
  std::unique_ptr<Layers> layers_;
  std::vector<BlockActivations> blocks_;  // (n_layer), this stage's filled
  Activation lnf_, logits_;               // the head's: ln_f's gathered output, the logits
};

}  // namespace gt
