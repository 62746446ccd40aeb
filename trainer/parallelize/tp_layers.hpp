// The tensor-parallel layers (Megatron-Core's ColumnParallelLinear,
// RowParallelLinear, VocabParallelEmbedding, vocab-parallel cross-entropy),
// written over the mappings of tp_mappings.hpp. A model calls
// `c_attn.forward(out, x, w, b)` and never sees a communicator; at tp = 1
// each layer is the plain op.
//
// Shapes, with R = B*T rows, p tp ranks, (R/p, .) a sequence shard and (R, .)
// the gathered rows:
//   ColumnParallelLinear  forward   x (R, K) own rows in place -> out (R, N/p)
//                         backward  dout (R, N/p) -> dx (R/p, K) fp32
//   RowParallelLinear     forward   x (R, K/p) -> out (R/p, N)
//                         backward  dout (R/p, N) fp32 -> dx (R, K/p)
//   VocabParallelEmbedding forward  tokens (B, T) -> (R/p, C)
//   VocabParallelCrossEntropy       logits (R, V/p) -> losses (R)
// The weights come in per call (the parameter store owns them and may gather
// them first); each layer reads this rank's shard as the placement table
// (placement.hpp) cut it.
//
// Weight and bias gradients ACCUMULATE (micro-batches add up); input
// gradients are assigned.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/parallelize/fp8_linear.hpp"
#include "trainer/parallelize/linear_precision.hpp"
#include "trainer/parallelize/tp_mappings.hpp"

namespace gt {

// What the tensor-parallel layers of one model replica share: the backend,
// the mappings of this rank's tp group, the GEMM operand precision and the
// scratch rows. The layers run one at a time, in program order on one
// stream, and nothing in the scratch outlives a layer call, so one scratch
// serves every layer (sized for the widest, (R, C) rows).
class TpLayerContext {
 public:
  // Floats of each scratch buffer.
  struct Scratch {
    int64_t sum_rows = 0;     // (R/p, C): a bf16 output's fp32 sum (bf16 storage)
    int64_t gather_rows = 0;  // (R, C): an fp32 tensor to all-gather (tp > 1)
    int64_t ring = 0;         // the reduce-scatter ring's workspace (tp > 1)
    int64_t stats = 0;        // (3, R): the vocab-parallel cross-entropy's (tp > 1)
    int64_t bytes() const {
      return (sum_rows + gather_rows + ring + stats) * static_cast<int64_t>(sizeof(float));
    }
  };
  // The scratch of p = tp ranks for at most `rows` rows R of a micro-batch of
  // model width `width` C (every linear layer's sequence-region side): what
  // the constructor allocates, and what the planner counts.
  static Scratch scratch(int tp, bool overlap, ComputeDType dtype, int64_t rows, int64_t width);

  // scratch: scratch(group.size(), group.overlap, dtype, R, C); precision:
  // the GEMMs' operand buffers (LinearPrecision).
  TpLayerContext(Ops& ops, TensorParallelGroup group, ComputeDType dtype, const Scratch& scratch,
                 const LinearPrecision::Sizes& precision);

  Ops& ops() { return ops_; }
  TpMappings& maps() { return maps_; }
  // Where the layers record every placement they check or give (null:
  // nowhere; not owned).
  void set_placement_log(PlacementLog* log) { maps_.set_placement_log(log); }
  PlacementLog* placement_log() const { return maps_.placement_log(); }
  LinearPrecision& precision() { return precision_; }
  // runtime.fp8: the blocks' linear layers run their GEMMs in fp8 from now
  // on (fp8_linear.hpp); `cp` is the context-parallel group whose ranks hold
  // the rest of each sequence (their amaxes are reduced over it); `weights`
  // (the parameter store), when given, may hold weights gathered as fp8
  // codes (Fp8Linear::gathered_weight).
  void enable_fp8(const Fp8Settings& settings, const ContextParallelGroup& cp,
                  Fp8WeightSource* weights = nullptr);
  // The fp8 GEMMs, or null when runtime.fp8 is off.
  Fp8Linear* fp8() { return fp8_.get(); }
  int size() const { return maps_.size(); }
  int rank() const { return maps_.rank(); }
  // (rows, cols) fp32 views of the scratch.
  TensorView sum_rows(int64_t rows, int64_t cols);     // (R/p, C): a bf16 output's fp32 sum
  TensorView gather_rows(int64_t rows, int64_t cols);  // (R, C): an fp32 tensor to all-gather
  float* ring_workspace() { return ring_.f32(); }
  float* stats(int64_t rows);  // (3, rows) fp32
  // The own chunk of gather_rows(R, cols) set to `local` (R/p, cols) fp32:
  // ready for gather_from_sequence, with local's placement.
  Activation stage_for_gather(const Activation& local);
  // Bytes of the scratch and the precision buffers, for the memory figures.
  int64_t bytes() const;

  // One GEMM in the layer precision; w is precision().weight(...) already.
  // With gelu_pre (not empty) the GELU is fused: forward writes the product
  // to gelu_pre and gelu of it to out; backward multiplies by gelu'(gelu_pre).
  void gemm_forward(TensorView out, TensorView x, TensorView w, TensorView b,
                    TensorView gelu_pre = {});
  void gemm_backward(TensorView dx, TensorView dw, TensorView db, TensorView dout, TensorView x,
                     TensorView w, TensorView gelu_pre = {});

 private:
  Ops& ops_;
  TpMappings maps_;
  LinearPrecision precision_;
  std::unique_ptr<Fp8Linear> fp8_;  // runtime.fp8 only
  Buffer sum_rows_;     // (R/p, C) fp32, bf16 storage only
  Buffer gather_rows_;  // (R, C) fp32, tp > 1
  Buffer ring_;         // the reduce-scatter ring's workspace, tp > 1
  Buffer stats_;        // (3, R) fp32, tp > 1
};

// Every layer checks the placements of the activations it reads at entry
// and returns what it writes with the placement it gives
// (activation_placement.hpp); the cp placement of a per-position layer's
// input passes through to its output. `name` (the layer's role, "c_attn")
// and the tensor's own name make the messages.

// Output features split: all-gather the input rows (gather_from_sequence),
// multiply by this rank's rows of W. Backward: reduce-scatter the input
// gradient (the dual).
class ColumnParallelLinear {
 public:
  // out_dim: what the output features are (heads: q|k|v; hidden: the MLP;
  // vocabulary: the LM head).
  ColumnParallelLinear(TpLayerContext& ctx, std::string name, ActDim out_dim)
      : ctx_(ctx), name_(std::move(name)), out_dim_(out_dim) {}
  // out (R, N/p) = x (R, K) @ w^T + b; x {tp: shard(sequence)} holds this
  // rank's R/p rows at its own chunk and is gathered in place (its
  // placement becomes tp replicated); returns out {tp: shard(out_dim)}.
  // gelu_pre (R, N/p) fuses a GELU (TpLayerContext::gemm_forward). b may be
  // empty (the tied LM head). x_row_amax: what input_row_amax() returned,
  // filled by x's producer. gelu_row_amax (R), with gelu_pre: ASSIGNED the
  // GELU output's row amaxes for the next layer's fp8 input (its
  // input_row_amax()), taken as the GELU writes them on the fp8 path.
  Activation forward(const Target& out, Activation& x, TensorView w, TensorView b,
                     TensorView gelu_pre = {}, TensorView x_row_amax = {},
                     TensorView gelu_row_amax = {});
  // The row amaxes of x (R/p, K), this rank's rows, that forward's fp8 GEMM
  // reads if x's producer takes them (Ops: "Row amaxes for an fp8 GEMM's
  // input"), for the producer to fill; empty when the layer takes none (no
  // fp8, or rowwise scales of rows that arrive from other tp ranks). w: the
  // weight, or any view of its shape (only its shape is read).
  TensorView input_row_amax(const TensorView& w, int64_t rows);
  // dx (R/p, K) = reduce-scatter of dout @ w; dw, db accumulate. dout
  // {tp: shard(out_dim)}, x the forward's gathered input {tp: replicated};
  // returns dx {tp: shard(sequence)}.
  // dout_row_amax: what output_grad_row_amax() returned, filled by dout's
  // producer.
  Activation backward(const Target& dx, TensorView dw, TensorView db, const Activation& dout,
                      const Activation& x, TensorView w, TensorView dout_row_amax = {});
  // The row amaxes of dout (R, N/p) that backward's fp8 GEMMs read if its
  // producer takes them, over this rank's features (reduced over tp with
  // the rest); empty when the layer takes none. w: the weight, or any view
  // of its shape (only its shape is read).
  TensorView output_grad_row_amax(const TensorView& w, int64_t rows);

 private:
  // Whether this layer's GEMMs run in fp8 (runtime.fp8 on, not the LM head,
  // the whole weight past runtime.fp8_min_dim); the _fp8 paths are
  // forward's and backward's with fp8 GEMMs (tp_layers_fp8.cpp), entered
  // after the placement checks.
  bool uses_fp8(const TensorView& w) const;
  void forward_fp8(TensorView out, Activation& x, TensorView w, TensorView b,
                   TensorView gelu_pre, TensorView x_row_amax, TensorView gelu_row_amax,
                   const std::string& layer);
  Activation backward_fp8(TensorView dx, TensorView dw, TensorView db, const Activation& dout,
                          const Activation& x, TensorView w, TensorView dout_row_amax,
                          const std::string& name, const std::string& layer);
  TpLayerContext& ctx_;
  std::string name_;
  ActDim out_dim_;
};

// Input features split: multiply this rank's columns of W, reduce-scatter
// the partial sums to the sequence shard, add the (replicated) bias once
// (an empty b and db: no bias, Llama's o_proj and down_proj).
// Backward: all-gather the output gradient (the dual).
class RowParallelLinear {
 public:
  // in_dim: what the input features are (heads: attention's output;
  // hidden: the MLP's).
  RowParallelLinear(TpLayerContext& ctx, std::string name, ActDim in_dim)
      : ctx_(ctx), name_(std::move(name)), in_dim_(in_dim) {}
  // out (R/p, N) = RS(x (R, K/p) @ w^T) + b (b may be empty: no bias); the
  // partial sums add in fp32 and a bf16 out is rounded once. x {tp:
  // shard(in_dim)}; returns out {tp: shard(sequence)}.
  // x_row_amax: what input_row_amax() returned, filled by x's producer.
  Activation forward(const Target& out, const Activation& x, TensorView w, TensorView b,
                     TensorView x_row_amax = {});
  // As ColumnParallelLinear's: x (R, K/p), its rows' amaxes over this
  // rank's features (reduced over tp with the rest of the scales).
  TensorView input_row_amax(const TensorView& w, int64_t rows);
  // dout (R/p, N) {tp: shard(sequence)} is gathered; dx (R, K/p) assigned;
  // dw, db accumulate (db from all rows: complete on every rank); gelu_pre
  // (R, K/p) {tp: shard(in_dim)} multiplies dx by gelu'(gelu_pre) (the MLP's
  // c_proj, whose input was gelu of it); returns dx {tp: shard(in_dim)}.
  // dx_row_amax (R), with gelu_pre: ASSIGNED dx's row amaxes for the layer
  // before's fp8 backward (its output_grad_row_amax()), taken as the GELU
  // backward writes dx on the fp8 path.
  Activation backward(const Target& dx, TensorView dw, TensorView db, const Activation& dout,
                      const Activation& x, TensorView w, const Activation& gelu_pre = {},
                      TensorView dout_row_amax = {}, TensorView dx_row_amax = {});
  // As ColumnParallelLinear's: dout (R/p, N), this rank's rows; empty also
  // when rowwise scales rows gathered from other tp ranks.
  TensorView output_grad_row_amax(const TensorView& w, int64_t rows);
  // As ColumnParallelLinear's (every row-parallel layer is a block's).
  // Public: dout's producer writes a bf16 copy of dout only for a bf16 GEMM
  // (an fp8 one quantizes the fp32 gradient itself, as under tp).
  bool uses_fp8(const TensorView& w) const;

 private:
  // The partial sums (or, at tp = 1, out with the bias) of the forward.
  Activation forward_fp8(TensorView sum, const Activation& x, TensorView w, TensorView b,
                         TensorView x_row_amax, const std::string& name,
                         const std::string& layer);
  void backward_fp8(TensorView dx, TensorView dw, TensorView db, const Activation& dout,
                    const Activation& x, TensorView w, TensorView gelu_pre,
                    TensorView dout_row_amax, TensorView dx_row_amax, const std::string& layer);
  TpLayerContext& ctx_;
  std::string name_;
  ActDim in_dim_;
};

// The token embedding with the vocabulary split (plus GPT-2's learned
// positions, replicated; an empty wpe means none, as in Llama): each rank
// looks up the tokens of its vocabulary rows for all R rows (zeros for the
// others); the sum over ranks, reduce-scattered by rows, is the embedding of
// this rank's rows.
class VocabParallelEmbedding {
 public:
  explicit VocabParallelEmbedding(TpLayerContext& ctx) : ctx_(ctx) {}
  // out (R/p, C) = wte[tokens] + wpe[positions] of this rank's rows;
  // tokens (B, T) int32 {tp: replicated} (all rows, the same on every tp
  // rank); wte (V/p, C) this rank's vocabulary rows; wpe (block_size, C).
  // Summed in fp32, a bf16 out rounded once. A row's position is its index
  // in its sequence, or, given `positions` (R/p) int32 (context
  // parallelism: a rank holds chunks of each sequence), positions[i] for own
  // row i; wpe's rows are then looked up into `position_rows` (R/p, C) fp32
  // scratch and added. Returns out {tp: shard(sequence), cp: tokens' cp}.
  Activation forward(const Target& out, const Activation& tokens, TensorView wte, TensorView wpe,
                     TensorView positions = {}, TensorView position_rows = {});
  // dout (R/p, C) fp32 {tp: shard(sequence)}; dwte, dwpe accumulate (dwpe:
  // this rank's rows only, a partial sum over tp, and over cp with
  // `positions`).
  void backward(TensorView dwte, TensorView dwpe, const Activation& dout, const Activation& tokens,
                TensorView positions = {});

 private:
  TpLayerContext& ctx_;
};

// Softmax cross-entropy over logits whose vocabulary columns are split: the
// row max and the sums of exponentials and target logits are reduced over
// the tp ranks, so no rank holds the full (R, V) logits.
class VocabParallelCrossEntropy {
 public:
  explicit VocabParallelCrossEntropy(TpLayerContext& ctx) : ctx_(ctx) {}
  // losses (R) fp32; logits (R, V/p) {tp: shard(vocabulary)}, this rank's
  // columns [rank*V/p, ...), columns >= vocab padding (masked); targets (R)
  // int32 {tp: replicated}, with the logits' cp placement. With dlogits (the
  // logits themselves, in place) it writes (softmax - onehot) * grad_scale.
  // Returns the losses {tp: replicated}.
  Activation forward(const Target& losses, TensorView dlogits, const Activation& logits,
                     const Activation& targets, int64_t vocab, float grad_scale);

 private:
  TpLayerContext& ctx_;
};

}  // namespace gt
