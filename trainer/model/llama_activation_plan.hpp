// LlamaActivationPlan: every activation and activation-gradient buffer one
// Llama rank allocates (trainer/model/llama.hpp), with its size, slots and
// dtype, in one table: Llama::allocate allocates exactly these, and the
// planner's memory model sums the same table (as ActivationPlan does for
// GPT-2, activation_plan.hpp, whose ActivationShape it takes).
//
// With R = B*T rows, p tp ranks, C channels, Q = n_head * hs query features,
// K = n_kv_head * hs key (and value) features, F the MLP width and V padded
// vocabulary rows; "act" is the activations' storage dtype.
#pragma once

#include <cstdint>

#include "trainer/config/config.hpp"
#include "trainer/model/activation_plan.hpp"

namespace gt {

struct LlamaActivationPlan {
  BufferSize tokens, targets;                // (R) int32
  BufferSize rope;                           // (max_seq, hs) fp32: [cos | sin] per local position
  BufferSize encoded;                        // (R/p, C) act
  BufferSize ln1, ln1_rstd;                  // (L, R, C) act gathered, (L, R/p) fp32
  BufferSize qkv;                            // (L, R, (Q + 2K)/p) act, q and k rotated
  BufferSize atty;                           // (L, R, Q/p) act
  BufferSize att;                            // (L, attention_saved_elems) fp32
  BufferSize res2;                           // (L, R/p, C) act
  BufferSize ln2, ln2_rstd;                  // as ln1
  BufferSize gu;                             // (L, R, 2F/p) act: gate | up
  BufferSize swiglu;                         // (L, R, F/p) act: silu(gate) * up
  BufferSize res3;                           // (L, R/p, C) act: always every block's
  BufferSize lnf, lnf_rstd;                  // (R, C) act, (R/p) fp32
  BufferSize logits;                         // (R, V/p) act
  BufferSize losses, loss_sum;               // (R) fp32
  BufferSize proj_tmp;                       // (R/p, C) act
  BufferSize dresidual;                      // (R/p, C) fp32: an accumulator
  BufferSize dln;                            // (R/p, C) fp32 at every tp
  BufferSize dresidual_bf16;                 // (R/p, C) bf16 copy (bf16, tp = 1)
  BufferSize datty, dswiglu, dgu, dqkv;      // (R, Q/p), (R, F/p), (R, 2F/p), (R, (Q+2K)/p) act
  BufferSize datt;                           // attention_scratch_elems fp32
  LinearPrecision::Sizes precision;          // the GEMMs' bf16 operand copies
  TpLayerContext::Scratch parallel_scratch;  // the tensor-parallel layers' scratch
  ContextParallelAttention::Scratch attention_cp;  // cp > 1: the attention layer's
  // model.arch=mixtral: the sparse MLPs' buffers (MixtureOfExperts::
  // planned_bytes, over this rank's R/p rows and the blocks); gu, swiglu,
  // dgu and dswiglu are then empty (the experts keep their own).
  int64_t moe_bytes = 0;

  // Everything above, in bytes: what Llama::activation_bytes() reports.
  int64_t bytes() const;
  // The parts a pipeline's first and last stages hold of them, per
  // micro-batch: the embedding's (tokens, its output) and the head's
  // (targets, final norm, logits, losses).
  int64_t embed_bytes() const;
  int64_t head_bytes() const;
};

LlamaActivationPlan plan_llama_activations(const ModelConfig& m, const ActivationShape& s);

}  // namespace gt
