// CausalLM: what every model family (GPT-2: gpt.hpp, Llama: llama.hpp)
// shares, and what the trainer, the sampler and the cost command see. A
// family writes its forward and backward against the backend-neutral Ops
// interface for one tensor-parallel rank (tp = 1 is the plain model), over
// the tensor-parallel layers (trainer/parallelize/tp_layers.hpp), which own
// the tp group: the model holds no communicator. Parameters come from a
// ParameterStore unit by unit; the model owns the activations of one
// micro-batch.
//
// This class owns what does not depend on the family: the parameters' views
// (through the store, or a LocalParameters of its own at one rank), the
// tokens, logits and losses of a micro-batch, the loss bookkeeping of
// forward / forward_train / take_loss, and the host copy of the logits.
//
// Invariants (every family):
//   * forward() with targets and grad_scale > 0 leaves d(loss)/d(logits)
//     (scaled by grad_scale) in place of the logits, ready for backward().
//   * backward() ACCUMULATES into the store's gradients, so micro-batches of
//     one optimizer step simply call forward/backward in turn.
//   * Activation buffers are sized for (max_rows, max_seq) at construction
//     and reused; smaller (B, T) views of them are contiguous too.
//   * Recomputation (train.recompute) reruns the forward's ops on the same
//     inputs, so losses, gradients and parameters are bit for bit those of
//     Recompute::none.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/activation_plan.hpp"
#include "trainer/parallelize/moe_step_stats.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/model/parameter_store.hpp"
#include "trainer/parallelize/context_parallel.hpp"
#include "trainer/parallelize/tp_layers.hpp"

namespace gt {

class CausalLM {
 public:
  virtual ~CausalLM();
  CausalLM(const CausalLM&) = delete;
  CausalLM& operator=(const CausalLM&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ParameterLayout& layout() const { return layout_; }
  int64_t num_parameters() const { return layout_.global_numel(); }
  Recompute recompute() const { return recompute_; }

  // Only for a model that owns its parameters (built without a store). The
  // raw pointers are host memory only on a host backend (they throw
  // otherwise); the views are the backend's memory.
  float* params();
  float* grads();
  TensorView flat_params();
  TensorView flat_grads();
  TensorView param(const std::string& name);  // view of one parameter (owned store)
  void zero_grads();                          // owned store only

  // tokens, targets: (B, T) int32 HOST arrays (uploaded to the backend), the
  // same on every tp rank; targets may be null (then no loss is computed and
  // logits() holds the logits). Returns the mean loss over the B*T positions
  // (0 without targets), equal on every tp rank. grad_scale > 0 prepares
  // backward(): dlogits = (softmax - onehot) * grad_scale.
  // Waits for the step so far: the losses are read back.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale);
  // forward() in two halves, for a caller that must settle something before
  // the host reads (the trainer drains the mesh's device-waited collectives,
  // Communicator::drain): queue the forward, then read its mean loss.
  // forward() is exactly these two calls.
  bool queue_forward(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale);
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
  // Gradients of the last forward() with targets and grad_scale > 0.
  void backward();

  // Records every placement the model's layers check or give from now on
  // (null: nothing; not owned): the placement table of docs/ARCHITECTURE.md.
  void set_placement_log(PlacementLog* log);
  // runtime.fp8: the blocks' linear layers run fp8 GEMMs from now on
  // (trainer/parallelize/fp8_linear.hpp), their amaxes reduced over this
  // instance's tp and cp groups. Off: bf16 GEMMs (the default).
  void set_fp8(const Fp8Settings& settings);

  // (B, T, vocab_size) logits of the last forward() without a backward
  // pending (tp = 1), copied to the host without the padding columns.
  const float* logits();
  // Per-position losses (B*T) of the last forward() with targets, on the host
  // (forward_train() does not read them back).
  const float* losses() const { return host_losses_.data(); }
  // Bytes of every activation and activation-gradient buffer this rank
  // allocated, with the bf16 GEMM operand copies (what the planner's memory
  // model predicts, trainer/plan/).
  virtual int64_t activation_bytes() const = 0;
  // What the mixture's routers did since the last call (which it forgets);
  // empty for a dense model.
  virtual MoeStepStats take_moe_stats() { return {}; }
  // A mixture's per-expert selection biases (n_layer, E) fp32 on the
  // backend, block l's in row l (aux-loss-free balancing; the table
  // outlives the model). A dense model has no routers to bias.
  virtual void set_router_bias(TensorView table);

  // ---- Pipeline stages (parallel.pp; the executor is issue 15's next step) ----
  // A stage runs blocks [first_layer, end_layer) of the model; the first
  // stage (first_layer 0) also embeds the tokens, the last (end_layer
  // n_layer) also runs the final norm, the LM head and the loss. Between
  // stages travels the residual stream, (R/p, C) per tp rank, and its
  // gradient. A model is the whole model (one stage) until told otherwise,
  // or the stage of its parameter layout (ParameterLayout's StageSpan). On a
  // layout of several chunks (one pipeline rank's, interleaved_1f1b) there
  // is one model per chunk over the one store, each told its chunk with
  // set_pipeline_stage before its first forward (which refuses until then).
  struct PipelineStage {
    int first_layer = 0;
    int end_layer = -1;  // -1: n_layer
  };
  // Before the first forward; throws naming the numbers on an empty or
  // out-of-range span, or one that is not one of a stage layout's chunks.
  void set_pipeline_stage(const PipelineStage& stage);
  // Whether the model knows its blocks: always, but on a layout of several
  // chunks before set_pipeline_stage.
  bool stage_set() const { return first_layer_ >= 0; }
  bool embeds() const { return first_layer_ == 0; }
  bool heads() const { return end_layer_ == cfg_.n_layer; }
  int first_layer() const { return first_layer_; }
  int end_layer() const { return end_layer_; }
  // The boundary tensors of a (B, T) micro-batch, (R/p, C) each:
  //   input        (not the first stage) the previous stage's output: write
  //                it here before forward; the activations' dtype;
  //   output       (not the last stage) after forward, what to send on; the
  //                activations' dtype;
  //   output_grad  (not the last stage) d(loss)/d(output): write it here
  //                before backward; fp32;
  //   input_grad   (not the first stage) after backward, d(loss)/d(input)
  //                to send back; fp32.
  // A mixture of experts' router statistics travel with them in training
  // (MixtureOfExperts: fp32 (2, E) each; empty for a dense model):
  //   router_in     with input: the earlier stages' sums of the micro-batch;
  //   router_out    with output: the sums through this stage;
  //   router_totals with output_grad (received) and input_grad (sent):
  //                 every layer's sums, formed on the last stage.
  // On a stage without that boundary the view is empty. Forward on a stage
  // that is not the last computes no loss (forward_train records none);
  // grad_scale > 0 still prepares backward.
  struct StageBoundary {
    TensorView input, output, output_grad, input_grad;
    TensorView router_in, router_out, router_totals;
  };
  StageBoundary stage_boundary(int B, int T);

 protected:
  // A per-layer activation: `slots` slices of the (max_rows, max_seq) size,
  // one per block (n_layer) or one all blocks share (1, dropped by recompute).
  struct LayerBuffer {
    Buffer buf;
    int slots = 0;
    DType dtype = DType::f32;
  };
  // What every family's forward reads and writes at its ends.
  struct Ends {
    Buffer tokens, targets;  // (R) int32
    Buffer logits;           // (R, V/p), bf16 in the bf16 model
    Buffer losses;           // (R)
    Buffer loss_sum;         // (R) forward_train's running sum
  };

  // `family` names the model in messages ("GPT", "Llama"). One rank: the
  // model owns its parameters (LocalParameters over the tp = 1 layout).
  CausalLM(const char* family, const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
           Recompute recompute, ComputeDType dtype);
  // A tensor-parallel rank whose parameters (laid out by `layout`, built for
  // group.rank() of group.size()) live in `store`.
  // `chunk` (one of the layout's chunks): the stage this instance runs,
  // set now so that its activations are sized for that chunk's blocks and
  // head; without it a layout of one chunk sizes for that chunk and one of
  // several for its longest chunk and its head (any chunk may be set later).
  // `cp`: the context-parallel group; max_seq is then this rank's T / cp
  // rows of each sequence (context_parallel.hpp: which positions they are).
  CausalLM(const char* family, const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
           const ParameterLayout& layout, ParameterStore& store, const TensorParallelGroup& group,
           Recompute recompute, ComputeDType dtype, std::optional<StageSpan> chunk = std::nullopt,
           const ContextParallelGroup& cp = {});

  // The family's forward up to the losses (and dlogits with grad_scale > 0),
  // without reading them back; false when there were no targets. It must set
  // B_, T_ and backward_ready_.
  virtual bool run_forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                           float grad_scale) = 0;
  virtual void run_backward() = 0;
  // The family's buffers behind stage_boundary (the base empties those a
  // stage does not have).
  virtual StageBoundary boundary_views(int B, int T) = 0;
  // The boundaries as every family keeps them: the input in `encoded` (where
  // the first stage embeds), the output in `res3`'s slot of the stage's last
  // block, both gradients in the residual stream's fp32 gradient.
  StageBoundary residual_boundary(const Buffer& encoded, const LayerBuffer& res3,
                                  const Buffer& dresidual, int B, int T);
  // Whether a forward prepares backward: grad_scale > 0 with targets, or on
  // a stage before the last (whose gradient comes from the next stage).
  bool wants_backward(const int32_t* targets, float grad_scale) const {
    return grad_scale > 0.f && (targets != nullptr || !heads());
  }

  // Sizes the activation shape's common fields for this rank (tp, overlap,
  // recompute, dtype, attention sizes for n_head / tp query heads, the
  // store's bf16 copy, the cp group's chunks) and checks the sequence
  // against the block size.
  ActivationShape activation_shape(const TensorParallelGroup& group) const;
  // Allocates the ends and the tensor-parallel layers' context from a
  // family's activation plan (ActivationPlan, LlamaActivationPlan).
  template <class Plan>
  void allocate_shared(const Plan& plan, const TensorParallelGroup& group) {
    allocate_ends({plan.tokens, plan.targets, plan.logits, plan.losses, plan.loss_sum},
                  plan.parallel_scratch, plan.precision, group);
  }
  Buffer allocate(const BufferSize& b);
  LayerBuffer allocate_layer(const BufferSize& b);
  // Bytes of the ends and the tensor-parallel context (activation_bytes()'s common part).
  int64_t shared_bytes() const;

  TensorView p(const std::string& name);  // parameter through the store
  // A linear layer's weight or bias as its GEMMs take it: the store's bf16
  // copy in a bf16 run where the store keeps one, else p(name) (which
  // LinearPrecision rounds per call).
  TensorView gemm_param(const std::string& name);
  TensorView g(const std::string& name);  // its gradient
  // A view of `name`'s local shape with no data, for questions about its
  // shape alone (does a layer run in fp8?) asked before its unit is gathered.
  TensorView param_shape(const std::string& name) const;
  // Parameters [first .. last] (adjacent in the layout, same column count)
  // as one matrix: the fused GEMMs' weights (q|k|v, gate|up). Throws unless
  // they are adjacent in storage.
  TensorView p_rows(const std::string& first, const std::string& last);
  TensorView gemm_rows(const std::string& first, const std::string& last);
  TensorView g_rows(const std::string& first, const std::string& last);
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

  // The position of each of this rank's rows of a sequence (max_seq; 0..T-1
  // without context parallelism).
  std::vector<int32_t> local_positions() const { return seq_.positions(cp_.rank()); }
  // Floats attention keeps per block for backward, and the backward scratch
  // the model passes it, for B sequences of T rows and n_head heads here:
  // the backend's without context parallelism, the cp layer's with it.
  int64_t attention_saved(int B, int n_head, int T) const {
    return ContextParallelAttention::saved_elems(ops_, cp_.size(), B, n_head, T);
  }
  int64_t attention_scratch(int B, int n_head, int T) const {
    return ContextParallelAttention::scratch_elems(ops_, cp_.size(), B, n_head, T);
  }
  // The attention layer of this rank's heads (context-parallel at cp > 1),
  // built by the family's allocate (make_attention) and owned here.
  void make_attention(int n_head, int n_kv_head);
  ContextParallelAttention& attention() { return *attention_; }
  int64_t attention_bytes() const { return attention_ ? attention_->bytes() : 0; }
  // The chain of placements starts at the tokens: every tp rank holds all
  // rows of the micro-batch, every cp rank its chunks of each sequence (as
  // the loader gave them). Targets likewise.
  Activation token_rows(const TensorView& tokens, const char* name) const {
    return {tokens, {AxisPlacement::replicated(), AxisPlacement::shard(ActDim::sequence)}, name};
  }
  // The input of a pipeline stage after the first (the residual stream the
  // previous stage sent: its rows' placement).
  static Activation stage_input(const TensorView& v) { return {v, sequence_shard(), "stage input"}; }
  // The residual gradient's bf16 copy (R/p, C) in `copy` for a row-parallel
  // layer's backward (w: its weight, or any view of its shape), which the
  // norm backward before it writes in its pass; empty when none is written:
  // `copy` unallocated (fp32 runs; tp > 1, where the layer casts the rows it
  // gathers) or an fp8 layer, which quantizes the fp32 gradient itself as
  // under tp, so that the layouts' scales agree.
  TensorView residual_grad_copy(const Buffer& copy, const RowParallelLinear& layer,
                                const TensorView& w) const;
  // dres as a row-parallel backward reads it: its copy when one was written.
  static Activation read_as(const Activation& dres, const TensorView& copy) {
    return copy.empty() ? dres : dres.as(copy);
  }

  const char* family_;
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
  Ends ends_;
  std::unique_ptr<TpLayerContext> parallel_;  // the layers' tp group, precision and scratch
  int B_ = 0, T_ = 0;
  bool backward_ready_ = false;
  std::unique_ptr<ContextParallelAttention> attention_;
  PlacementLog* placement_log_ = nullptr;
  ContextParallelGroup cp_;  // this rank's cp group (size 1: none)
  SequenceChunks seq_;       // the sequence of max_seq * cp tokens over the cp ranks
  // This stage's blocks (the whole model by default); -1 until
  // set_pipeline_stage on a layout of several chunks.
  int first_layer_ = 0, end_layer_ = 0;
  // What the activations were sized for: blocks per buffer (-1: every
  // block, a model owning its parameters) and whether the head's buffers
  // exist (set_pipeline_stage keeps within them).
  int sized_blocks_ = -1;
  bool sized_head_ = true;

 private:
  struct EndSizes {
    BufferSize tokens, targets, logits, losses, loss_sum;
  };
  bool is_layout_chunk(int first_layer, int end_layer) const;
  std::string describe_chunks() const;  // "[0, 1) [2, 3)"
  // Throws, naming `what`, on a model of several chunks before set_pipeline_stage.
  void check_stage_set(const char* what) const;
  void allocate_ends(const EndSizes& ends, const TpLayerContext::Scratch& scratch,
                     const LinearPrecision::Sizes& precision, const TensorParallelGroup& group);
  // `one`(first) widened to the rows of every parameter through `last`.
  TensorView fused(const std::string& first, const std::string& last,
                   TensorView (CausalLM::*one)(const std::string&));

  std::vector<float> host_losses_;  // (R) losses downloaded for the mean
  std::vector<float> host_logits_;  // logits() copy
  int64_t pending_rows_ = 0;        // rows of each forward_train() since take_loss()
  int pending_losses_ = 0;          // how many
};

}  // namespace gt
