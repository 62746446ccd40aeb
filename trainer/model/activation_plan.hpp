// ActivationPlan: every activation and activation-gradient buffer one GPT
// rank allocates, with its size, slots and dtype, in one table. GPT::allocate
// allocates exactly these buffers; the planner's memory model
// (trainer/plan/memory_model.hpp) sums the same table for any layout, device
// and precision, so what it predicts is what the model allocates, on the CPU
// and on CUDA alike.
//
// With R = B*T rows of the largest micro-batch, p tp ranks, C channels and V
// padded vocabulary rows; "act" is the activations' storage dtype (bf16 under
// runtime.dtype=bf16, trainer/model/gpt.hpp "Precision").
#pragma once

#include <cstdint>

#include "kernels/core/tensor.hpp"
#include "trainer/config/config.hpp"
#include "trainer/parallelize/context_parallel.hpp"
#include "trainer/parallelize/linear_precision.hpp"
#include "trainer/parallelize/tp_layers.hpp"

namespace gt {

// One buffer: `slots` slices of `elems` elements (one per block, or one all
// blocks share when recomputation drops it).
struct BufferSize {
  int64_t elems = 0;
  int slots = 1;
  DType dtype = DType::f32;
  int64_t bytes() const { return elems * slots * static_cast<int64_t>(dtype_size(dtype)); }
};

// What the plan depends on besides the model.
struct ActivationShape {
  // The largest micro-batch (B) and sequence (T): under context parallelism
  // a rank's T / cp rows of each sequence.
  int max_rows = 1, max_seq = 1;
  int tp = 1;
  bool overlap = true;  // parallel.tp_overlap: the ring collective matmuls
  Recompute recompute = Recompute::none;
  ComputeDType dtype = ComputeDType::fp32;
  // Floats attention saves per block and uses as backward scratch, for
  // (max_rows, n_head/tp, max_seq): the backend's Ops::attention_saved_elems
  // and attention_scratch_elems (the rule of kernels/core/attention_kernels.hpp).
  int64_t attention_saved = 0, attention_scratch = 0;
  bool store_keeps_bf16_params = false;  // ParameterStore::keeps_bf16_params
  // A pipeline stage's model instance: the blocks it runs (its per-block
  // buffers hold that many slots; -1: model.n_layer) and whether it runs
  // the LM head (without it no final norm or logits buffers).
  int blocks = -1;
  bool head = true;
  // Context parallelism (trainer/parallelize/context_parallel.hpp): the
  // degree, how keys and values move, the chunking; cp_block_scratch is the
  // backend's attention_block_scratch_elems(max_rows, n_head/tp, chunk, chunk).
  int cp = 1;
  CpComm cp_mode = CpComm::allgather;  // parallel.cp_comm
  bool cp_load_balance = true;
  int64_t cp_block_scratch = 0;
  // Expert parallelism's group size (parallel.ep): a mixture's expert
  // buffers hold ep x the rows (mixture_of_experts.hpp).
  int ep = 1;
  // The sequence's chunks (cp = 1: one chunk, the whole sequence).
  SequenceChunks chunks() const { return SequenceChunks(max_seq * cp, cp, cp_load_balance); }
};

struct ActivationPlan {
  BufferSize tokens, targets;                // (R) int32
  BufferSize encoded;                        // (R/p, C) act
  BufferSize ln1, ln1_mean, ln1_rstd;        // (L, R, C) act gathered, (L, R/p) fp32 x2
  BufferSize qkv, atty;                      // (L, R, 3C/p), (L, R, C/p) act
  BufferSize att;                            // (L, attention_saved_elems) fp32
  BufferSize res2;                           // (L, R/p, C) act
  BufferSize ln2, ln2_mean, ln2_rstd;        // as ln1
  BufferSize fch, fch_gelu;                  // (L, R, 4C/p) act x2
  BufferSize res3;                           // (L, R/p, C) act: always every block's
  BufferSize lnf, lnf_mean, lnf_rstd;        // (R, C) act, (R/p) fp32 x2
  BufferSize logits;                         // (R, V/p), bf16 in the bf16 model
  BufferSize losses, loss_sum;               // (R) fp32
  BufferSize proj_tmp;                       // (R/p, C) act
  BufferSize dresidual;                      // (R/p, C) fp32: an accumulator
  BufferSize dresidual_bf16;                 // (R/p, C) bf16 copy (bf16, tp = 1)
  BufferSize dln;                            // (R/p, C): act at tp = 1, fp32 sum under tp
  BufferSize datty, dfch, dqkv;              // (R, C/p), (R, 4C/p), (R, 3C/p) act
  BufferSize datt;                           // attention_scratch_elems fp32
  BufferSize positions;                      // cp > 1: (R) int32, each row's position
  BufferSize position_rows;                  // cp > 1: (R/p, C) fp32, wpe of the own rows
  LinearPrecision::Sizes precision;          // the GEMMs' bf16 operand copies
  TpLayerContext::Scratch parallel_scratch;  // the tensor-parallel layers' scratch
  ContextParallelAttention::Scratch attention_cp;  // cp > 1: the attention layer's

  // Everything above, in bytes: what GPT::activation_bytes() reports.
  int64_t bytes() const;
  // The parts a pipeline's first and last stages hold of them, per
  // micro-batch: the embedding's (tokens, its output) and the head's
  // (targets, final norm, logits, losses).
  int64_t embed_bytes() const;
  int64_t head_bytes() const;
};

ActivationPlan plan_activations(const ModelConfig& m, const ActivationShape& s);

}  // namespace gt
