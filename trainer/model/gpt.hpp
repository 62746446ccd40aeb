// GPT: the GPT-2 forward and backward pass, written once against the
// backend-neutral Ops interface, for one tensor-parallel rank (tp = 1 is the
// plain model). Parameters come from a ParameterStore unit by unit; the model
// owns the activations of one micro-batch.
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
// Invariants:
//   * forward() with targets and grad_scale > 0 leaves d(loss)/d(logits)
//     (scaled by grad_scale) in place of the logits, ready for backward().
//   * backward() ACCUMULATES into the store's gradients, so micro-batches of
//     one optimizer step simply call forward/backward in turn.
//   * Activation buffers are sized for (max_rows, max_seq) at construction
//     and reused; smaller (B, T) views of them are contiguous too.
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
//     gathered rows.
//     dln, a LayerNorm's output gradient, is bf16 at tp = 1 (one GEMM writes
//     it whole) and fp32 under tp (the reduce-scatter's fp32 sum);
//   * fp32 staging rows for the sums across tp ranks (the vocab-parallel
//     embedding, the row-parallel reduce-scatter): partial sums are added in
//     fp32 and rounded to bf16 once.
// Tensor-parallel all-gathers of bf16 activations move bf16 (two to a word).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/activation_plan.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/parallelize/tp_layers.hpp"

namespace gt {

class GPT {
 public:
  // One rank, no parallelism: the model owns its parameters (LocalParameters).
  // recompute: train.recompute; dtype: the linear layers' precision
  // (linear_precision.hpp).
  GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
      Recompute recompute = Recompute::none, ComputeDType dtype = ComputeDType::fp32);
  // One tensor-parallel rank whose parameters (laid out by `layout`, built
  // for group.rank() of group.size()) live in `store`; the group goes to the
  // tensor-parallel layers.
  GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq, const ParameterLayout& layout,
      ParameterStore& store, const TensorParallelGroup& group,
      Recompute recompute = Recompute::none, ComputeDType dtype = ComputeDType::fp32);
  ~GPT();

  const ModelConfig& config() const { return cfg_; }
  const ParameterLayout& layout() const { return layout_; }
  int64_t num_parameters() const { return layout_.global_numel(); }
  Recompute recompute() const { return recompute_; }

  // Only for a model that owns its parameters (the first constructor). The
  // raw pointers are host memory only on a host backend (they throw
  // otherwise); the views are the backend's memory.
  float* params();
  float* grads();
  TensorView flat_params();
  TensorView flat_grads();
  TensorView param(const std::string& name);  // view of one parameter (owned store)

  // tokens, targets: (B, T) int32 HOST arrays (uploaded to the backend), the same on every tp rank;
  // targets may be null (then no loss is computed and logits() holds the
  // logits). Returns the mean loss over the B*T positions (0 without
  // targets), equal on every tp rank. grad_scale > 0 prepares backward():
  // dlogits = (softmax - onehot) * grad_scale.
  // Waits for the step so far: the losses are read back.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale);
  // forward() in two halves, for a caller that must settle something before
  // the host reads (the trainer drains the mesh's device-waited collectives,
  // Communicator::drain): queue the forward, then read its mean loss.
  // forward() is exactly these two calls.
  bool queue_forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                     float grad_scale) {
    return run_forward(tokens, targets, B, T, grad_scale);
  }
  float read_forward_loss(int B, int T);
  // Training's forward: the same, except that the per-position losses are
  // added up on the device and not read back, so a micro-batch costs no wait
  // on the host; take_loss() reads them once per optimizer step. Every
  // micro-batch between two take_loss() calls has the same B*T rows.
  void forward_train(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale);
  // The mean loss over every position of the forward_train() calls since the
  // last take_loss() (NaN when there were none), which it forgets.
  double take_loss();
  // The per-position loss sums take_loss() will read (R), on the backend:
  // for a check on the device (the optimizer's finiteness test) before it.
  TensorView pending_loss_sums();
  void backward();
  void zero_grads();  // owned store only

  // (B, T, vocab_size) logits of the last forward() without a backward
  // pending (tp = 1), copied to the host without the padding columns.
  const float* logits();
  // Per-position losses (B*T) of the last forward() with targets, on the host
  // (forward_train() does not read them back).
  const float* losses() const { return host_losses_.data(); }
  // Bytes of every activation and activation-gradient buffer this rank
  // allocated, with the bf16 GEMM operand copies (what the planner's memory
  // model predicts, trainer/plan/).
  int64_t activation_bytes() const;

 private:
  // A per-layer activation: `slots` slices of the (max_rows, max_seq) size,
  // one per block (n_layer) or one all blocks share (1, dropped by recompute).
  struct LayerBuffer {
    Buffer buf;
    int slots = 0;
    DType dtype = DType::f32;
  };
  struct Activations {
    Buffer tokens, targets;                 // (R) int32
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
    Buffer logits;                          // (R, V/p), bf16 in the bf16 model
    Buffer losses;                          // (R)
    Buffer loss_sum;                        // (R) forward_train's running sum
    Buffer proj_tmp;                        // (R/p, C) row-parallel output before the residual add
  };
  struct Gradients {  // activation gradients, reused across layers
    Buffer dresidual, dln;                  // (R/p, C) x2 (dln bf16 at tp = 1 in bf16)
    Buffer dresidual_bf16;                  // (R, C) bf16 copy of dresidual (bf16, tp = 1)
    Buffer datty, dfch, dqkv;               // (R, C/p), (R, 4C/p), (R, 3C/p)
    Buffer datt;                            // attention_scratch_elems
  };
  // The layers that carry tensor parallelism, one per role (the weights come
  // per call, so one object serves every block).
  struct Layers {
    explicit Layers(TpLayerContext& ctx)
        : c_attn(ctx),
          attn_proj(ctx),
          c_fc(ctx),
          mlp_proj(ctx),
          lm_head(ctx),
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

  void allocate(int max_rows, int max_seq, const TensorParallelGroup& group);
  // forward() without reading the losses back; false when there were no
  // targets (no loss computed).
  bool run_forward(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale);
  TensorView p(const std::string& name);  // parameter through the store
  // A linear layer's weight or bias as its GEMMs take it: the store's bf16
  // copy in a bf16 run where the store keeps one, else p(name) (which
  // LinearPrecision rounds per call).
  TensorView gemm_param(const std::string& name);
  TensorView g(const std::string& name);  // its gradient
  TensorView layer_act(const LayerBuffer& buf, int layer, std::initializer_list<int64_t> shape);
  // The logits' storage (bf16 in the bf16 model) and a (rows, cols) view of them.
  DType logits_dtype() const;
  TensorView logits_view(int64_t rows, int64_t cols) const;
  // Views of the backend's memory (device views on CUDA).
  TensorView view(float* p, std::initializer_list<int64_t> shape) const;
  // An activation view in the activations' dtype (act_dtype_).
  TensorView aview(const Buffer& b, std::initializer_list<int64_t> shape) const;
  TensorView iview(int32_t* p, std::initializer_list<int64_t> shape) const;
  // This rank's rows (its sequence shard) of a gathered (R, cols) view.
  TensorView own_rows(TensorView full) const;

  // Block l's forward in three parts, run by forward() in turn and again by
  // backward() for what recomputation dropped. x: (R/p, C) the block's input.
  // ln_1, c_attn, attention, attn.c_proj and the residual add into res2;
  // with_ln2: ln_2 too, fused with the add (forward() does; recomputation,
  // which reruns the parts separately, does not). With `prev_res2` (forward()
  // for l > 0) the block before left its residual add pending: x is where
  // its sum goes (res3 of l-1), computed as prev_res2 + proj_tmp by ln_1's
  // pass, fused the same way; recomputation reads the kept res3 instead.
  void block_attention_forward(int l, TensorView x, bool with_ln2, TensorView prev_res2 = {});
  // ln_2 (unless ln2_done), c_fc and GELU: the MLP's activations up to
  // mlp.c_proj's input.
  void block_mlp_up_forward(int l, bool ln2_done);
  // mlp.c_proj into proj_tmp; the residual add res3 = res2 + proj_tmp is
  // left to the next block's ln_1 or to ln_f, which do it in their pass.
  void block_mlp_down_forward(int l);

  ModelConfig cfg_;
  Ops& ops_;
  ParameterLayout layout_;
  std::unique_ptr<LocalParameters> owned_;
  ParameterStore* store_;
  int shards_ = 1;  // tensor-parallel ranks: the model's width is split this many ways
  Recompute recompute_ = Recompute::none;
  int max_rows_, max_seq_;
  ComputeDType dtype_;
  DType act_dtype_;  // the activations' storage: bf16 under runtime.dtype=bf16
  Activations acts_;
  Gradients dacts_;
  std::unique_ptr<TpLayerContext> parallel_;  // the layers' tp group, precision and scratch
  std::unique_ptr<Layers> layers_;
  std::vector<float> host_losses_;  // (R) losses downloaded for the mean
  std::vector<float> host_logits_;  // logits() copy
  int B_ = 0, T_ = 0;
  int64_t pending_rows_ = 0;  // rows of each forward_train() since take_loss()
  int pending_losses_ = 0;    // how many
  bool backward_ready_ = false;
};

}  // namespace gt
