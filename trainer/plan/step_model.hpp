// Step model: the work of one optimizer step for one rank of a layout, as
// counts (FLOPs, bytes on each mesh axis), before any hardware enters.
//
// FLOPs count what the kernels compute: every matmul 2*M*N*K; causal
// attention only the key positions <= the query (the CPU kernel and flash
// kernels skip the masked half): QK^T and AV each 2*B*NH*hs*T(T+1)/2;
// backward twice the forward. train.recompute adds the forward work it
// repeats in backward (recompute_flops): c_fc for mlp; c_attn, attention,
// attn.c_proj and c_fc for block. That is overhead: model_flops_per_step, the
// MFU numerator, leaves it out (PaLM's definition of MFU).
//
// Communication is the ring volume each rank sends per optimizer step, the
// figure metrics.jsonl logs as comm_bytes and tests/layouts/layout_matrix.py
// (expected_bytes) checks against the trainer to 1%:
//   tp    per micro-batch (8L+4) all-gathers/reduce-scatters of (t-1)/t of the
//         (B*T, C) activations (and those recomputation repeats: L for mlp,
//         c_fc's all-gather; 3L for block, c_attn's and c_fc's all-gathers and
//         attn.c_proj's reduce-scatter), two small all-reduces for the vocab-parallel
//         cross-entropy, and all-reduces of the tp-partial gradients
//         (LayerNorms, wpe) once per step (every micro-batch under ZeRO-2/3);
//   fsdp  stage 1: reduce-scatter + all-gather of the unit storage once;
//         stage 2: reduce-scatter every micro-batch + one all-gather;
//         stage 3: reduce-scatter every micro-batch, all-gather every block
//         in forward and all but the last two again in backward;
//   dp    all-reduce of the gradients (of the fsdp shard under HSDP).
// Parameters and gradients travel as fp32 on both backends; tp activations
// as 4-byte floats on cpu and bf16 on cuda.
#pragma once

#include <cstdint>

#include "trainer/config/config.hpp"
#include "trainer/plan/hardware.hpp"
#include "trainer/plan/memory_model.hpp"

namespace gt {

struct MicroBatchFlops {  // one rank, one micro-batch, forward only
  double linear = 0;      // c_attn, attn.c_proj, c_fc, mlp.c_proj of every block
  double attention = 0;   // QK^T and AV
  double lm_head = 0;     // the tied (vocab-parallel) LM head
  double total() const { return linear + attention + lm_head; }
};
MicroBatchFlops micro_batch_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp);

// The forward FLOPs train.recompute runs again in backward, one rank, one
// micro-batch (lm_head 0): mlp c_fc (4C of the 12C output columns); block
// c_attn, attn.c_proj and c_fc (8C of 12C) and all of attention.
MicroBatchFlops recompute_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                Recompute recompute);

// Forward + backward model FLOPs of one optimizer step over the whole job
// (global_batch rows): MFU's numerator, model_flops() x tokens, the same
// count the trainer's "mfu" metric uses (attention over the full T x T; the
// compute-time model above charges the causal half a kernel actually does).
double model_flops_per_step(const ModelConfig& m, const TrainConfig& t);

struct CommBytes {          // bytes one rank sends per optimizer step
  double dp = 0, fsdp = 0, tp = 0;
  double fsdp_overlapped = 0;  // the part that runs under backward/forward compute
};
CommBytes comm_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                              PlanBackend backend);

// Unit sizes (floats) of one tp rank, padded as ParameterLayout pads them
// (the sharded state's own: trainer/sharding/state_plan.hpp).
UnitSizes unit_sizes(const ModelConfig& m, int tp, int fsdp);

}  // namespace gt
