// Fp8Linear: the linear layers' GEMMs in fp8 (runtime.fp8), as torchao's
// float8 training recipes compute them, over the tensor-parallel layers'
// chunks. A layer asks applies() with its weight's whole shape, then
// prepare()s the scales of the operands each phase needs and calls gemm()
// per chunk of rows.
//
// Scaling (current amax, no history, so nothing enters a checkpoint):
//   tensorwise  one fp32 scale per tensor: format max / amax. Activations and
//               weights e4m3, output gradients e5m2.
//   rowwise     one scale per row of each GEMM operand along its
//               non-contracted dimension, rounded down to a power of two, e4m3
//               throughout: the forward scales x by row and W by output
//               feature; the input gradient dout by row and W by input
//               feature (W's columns); the weight gradient dout and x by
//               column (their rows as that GEMM reads them transposed).
// The three GEMMs of a layer with y = x W^T (x (R, K), W (N, K)):
//   forward  y  (R, N) = Q(x) Q(W)^T            fast accumulation allowed
//   dgrad    dx (R, K) = Q(dy) Q(W^T)^T
//   wgrad    dW (N, K) += Q(dy^T) Q(x^T)^T
// bias gradients come from dy in its own precision (bias_backward).
//
// One rank's amaxes are the whole tensor's: an amax is taken over the rows
// and columns one rank holds, then max-reduced over the ranks holding the
// rest of the slice it scales. Over tp where the slice is split by tensor
// parallelism (sequence-sharded rows, column/row-split weights), over cp
// where it spans the rows of a sequence (context parallelism holds a
// sequence's chunks on different ranks). So every layout computes one rank's
// scales of the same micro-batch, and a tp or cp run matches one rank up to
// fp32 summation order. Data-parallel ranks hold different micro-batches:
// each scales its own, as one rank scales each micro-batch it accumulates.
//
// The LM head, the embeddings, attention and the MoE router and experts
// stay in bf16 (the layers that call this class are the column- and
// row-parallel linears of the blocks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/parallelize/context_parallel.hpp"
#include "trainer/parallelize/fp8_weight_source.hpp"
#include "trainer/parallelize/tp_mappings.hpp"

namespace gt {

// runtime.fp8, runtime.fp8_fast_accum and runtime.fp8_min_dim.
struct Fp8Settings {
  Fp8Recipe recipe = Fp8Recipe::off;
  bool fast_accum = true;
  int64_t min_dim = 0;
  bool check_amax = false;  // runtime.fp8_check_amax
  bool on() const { return recipe != Fp8Recipe::off; }
};
Fp8Settings fp8_settings(const RuntimeConfig& r);

class Fp8Linear {
 public:
  // Which ranks hold the rest of the slice an amax scales.
  enum Span : unsigned { local = 0, over_tp = 1, over_cp = 2, over_tp_cp = 3 };
  // One operand's scales: amax of x over `over`, max-reduced over `span`.
  // row_amax, if given, holds x's row amaxes as x's producer took them
  // (Ops: "Row amaxes for an fp8 GEMM's input"): prepare() reads those R
  // floats instead of x (`over` rows or tensor, never cols).
  struct Request {
    TensorView x;
    Fp8Reduce over;
    Fp8Format format;
    unsigned span;
    TensorView row_amax = {};
  };

  // `maps` (the tp group), `cp` and `weights` outlive this. `weights` (may
  // be null: the parameter store) is asked for weights already in fp8
  // (gathered_weight).
  Fp8Linear(Ops& ops, TpMappings& maps, const Fp8Settings& settings,
            const ContextParallelGroup& cp, Fp8WeightSource* weights = nullptr);

  // A weight the store holds as fp8 codes (ZeRO-3's fp8 all-gather,
  // tensorwise): its codes in w32's shape and its scale (1), which the
  // layer uses instead of quantising w32 (whose fp32 values the store then
  // does not hold). Empty codes: quantise w32 as usual.
  struct Weight {
    TensorView codes, scale;
  };
  Weight gathered_weight(const TensorView& w32) const;

  const Fp8Settings& settings() const { return settings_; }
  bool rowwise() const { return settings_.recipe == Fp8Recipe::rowwise; }
  // Whether a linear layer whose whole weight is (out_features, in_features)
  // runs in fp8 (runtime.fp8_min_dim).
  bool applies(int64_t out_features, int64_t in_features) const;
  // The format of activations and weights / of output gradients.
  Fp8Format forward_format() const { return Fp8Format::e4m3; }
  Fp8Format grad_format() const { return rowwise() ? Fp8Format::e4m3 : Fp8Format::e5m2; }
  // The scale's reduction for an operand: the whole tensor (tensorwise) or
  // `rowwise_over`.
  Fp8Reduce reduce(Fp8Reduce rowwise_over) const {
    return rowwise() ? rowwise_over : Fp8Reduce::tensor;
  }

  // Where prepare() keeps its scales: one slot for what a layer call
  // prepares before its chunks, one for what each chunk prepares.
  enum Slot { layer_slot = 0, chunk_slot = 1 };

  // Where an operand's producer writes the row amaxes a layer then reads
  // (Request::row_amax), one buffer per consuming layer kind and operand:
  // the column-parallel layers' inputs come from the norms, the
  // row-parallel layers' from the activation functions, their output
  // gradients from the activations' and the norms' backward; one of each
  // can be pending at once (GPT-2's c_fc writes mlp_proj's GELU amaxes
  // while reading its own input's). A view of `rows` floats, valid until
  // the next call for the same consumer.
  enum Consumer { column_input = 0, row_input = 1, column_grad = 2, row_grad = 3 };
  TensorView producer_row_amax(Consumer consumer, int64_t rows);
  // The scales of each request, in order: amaxes first, then the tp and the
  // cp max-reductions (one collective each for all requests that need it),
  // then the scales. Valid until the next prepare() of the same slot.
  // `layer` names the caller in the runtime.fp8_check_amax error.
  std::vector<TensorView> prepare(const std::vector<Request>& requests, Slot slot = layer_slot,
                                  const std::string& layer = "");

  // out = / += the fp8 GEMM (Ops::fp8_matmul). A forward GEMM takes
  // runtime.fp8_fast_accum; the backward ones accumulate in fp32.
  void gemm(TensorView out, TensorView a, TensorView a_scale, TensorView b, TensorView b_scale,
            TensorView bias, Fp8MatmulSpec spec, bool forward);

  // Bytes of the scale buffers (each grown to the widest prepare() of its
  // slot: a few floats per row and feature of the widest layer).
  int64_t bytes() const {
    size_t n = slots_[0].bytes() + slots_[1].bytes();
    for (const Buffer& b : produced_) n += b.bytes();
    return static_cast<int64_t>(n);
  }

 private:
  Ops& ops_;
  TpMappings& maps_;
  Fp8Settings settings_;
  ContextParallelGroup cp_;
  Fp8WeightSource* weights_;
  Buffer slots_[2];  // fp32: the amaxes, then (in place) the scales, of one prepare()
  Buffer produced_[4];  // fp32: row amaxes from producers, per Consumer
  Buffer check_;        // fp32: runtime.fp8_check_amax's own pass
};

}  // namespace gt
