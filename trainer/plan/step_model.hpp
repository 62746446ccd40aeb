// Step model: the work of one optimizer step for one rank of a layout, as
// counts (FLOPs, bytes on each mesh axis), before any hardware enters.
// Every model family has the same tensor-parallel block (block_matmuls(),
// model_flops.hpp): two column-parallel layers, "qkv" (GPT-2 c_attn, Llama
// q|k|v_proj) and "up" (c_fc, gate|up_proj), and two row-parallel ones,
// "out" (attn.c_proj, o_proj) and "down" (mlp.c_proj, down_proj), around
// attention; the families differ in those layers' widths and in which
// gradients are tp-partial.
//
// FLOPs count what the kernels compute: every matmul 2*M*N*K; causal
// attention only the key positions <= the query (the CPU kernel and flash
// kernels skip the masked half): QK^T and AV each 2*B*NH*hs*T(T+1)/2 over
// the NH query heads; backward twice the forward. Under context
// parallelism (cp > 1) a rank computes its T / cp rows of every matmul and
// the causal pairs of its own query chunks against every key before them
// (op_cost::causal_pairs over SequenceChunks): load-balanced, each rank's
// share is 1/cp of T(T+1)/2; without balancing rank cp - 1, holding the
// last chunk, attends to the most keys, and the step waits for it, so the
// figure is that slowest rank's. train.recompute adds the
// forward work it repeats in backward (recompute_flops): the up layer for
// mlp (c_fc; gate|up); qkv, attention, out and up for block. That is
// overhead: model_flops_per_step, the MFU numerator, leaves it out (PaLM's
// definition of MFU).
//
// Communication is the ring volume each rank sends per optimizer step, the
// figure metrics.jsonl logs as comm_bytes and tests/layouts/layout_matrix.py
// (expected_bytes, per family) checks against the trainer to 1%:
//   tp    per micro-batch (8L+4) all-gathers/reduce-scatters of (t-1)/t of the
//         (B*T, C) activations (per block forward: the two column-parallel
//         layers' all-gathers and the two row-parallel ones' reduce-scatters,
//         their duals in backward; the embedding's reduce-scatter and the LM
//         head's all-gather with their duals), those recomputation repeats
//         (L for mlp, the up layer's all-gather; 3L for block, the qkv and up
//         layers' all-gathers and the out layer's reduce-scatter), two small
//         all-reduces for the vocab-parallel cross-entropy, and all-reduces
//         of the tp-partial gradients once per step (every micro-batch under
//         ZeRO-2/3): what ParameterLayout marks tp_partial_grad, GPT-2's
//         LayerNorms, wpe and ln_f (4CL + PC + 2C), Llama's RMSNorm weights
//         (2CL + C);
//   fsdp  stage 1: reduce-scatter + all-gather of the unit storage once;
//         stage 2: reduce-scatter every micro-batch + one all-gather;
//         stage 3: reduce-scatter every micro-batch, all-gather every block
//         in forward and all but the last two again in backward; with fp8
//         all-gather (PlanLayout::gathers_fp8) a block as its codes and
//         fp32 side (fp8_gather_plan.hpp) after one all-reduce of the fp8
//         weights' amaxes a step, which tp reduces too;
//   dp    all-reduce of the gradients (of the fsdp shard under HSDP).
//   cp    the attention's keys and values (below, cp_bytes_per_step).
// With runtime.fp8, tp and cp also carry the layers' amax reductions
// (fp8_amax_floats).
// Under context parallelism the gradients' groups fold cp in
// (trainer/sharding/data_parallel_groups.hpp): fsdp above is the shard
// degree fsdp x cp (fsdp > 1; the units padded to it) and dp the replica
// degree (dp x cp at fsdp = 1), logged as fsdp_cp and dp_cp; and tp's
// (B*T, C) rows are a cp rank's B*T/cp.
// Parameters and gradients travel as fp32 on both backends; tp activations
// as 4-byte floats on cpu and bf16 on cuda.
#pragma once

#include <cstdint>

#include "trainer/config/config.hpp"
#include "trainer/plan/hardware.hpp"
#include "trainer/plan/memory_model.hpp"

namespace gt {

// The part of the model one rank holds: all of it without a pipeline, one
// pipeline rank's chunks with one (trainer/plan/pipeline_model.hpp). Every
// count below is of the share's units and blocks.
struct ModelShare {
  int blocks = 0;
  bool embed = true, head = true;
  // The last stage's copy of a tied embedding (GPT-2 under pp > 1: the LM
  // head multiplies by wte, which the first stage owns; Megatron keeps a
  // copy on the last stage and all-reduces its gradient with the first).
  bool tied_copy = false;
};
ModelShare whole_model(const ModelConfig& m);

struct MicroBatchFlops {  // one rank, one micro-batch, forward only
  double linear = 0;      // qkv, out, up and down of every block
  double attention = 0;   // QK^T and AV
  double lm_head = 0;     // the (vocab-parallel) LM head, tied or not
  double total() const { return linear + attention + lm_head; }
};
// seq_len: the whole sequence; cp: the slowest cp rank's share of it.
MicroBatchFlops micro_batch_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                  const PlanCp& cp = {});
// Of a share: its blocks' part of linear and attention, the head if it holds it.
MicroBatchFlops micro_batch_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                  const ModelShare& share, const PlanCp& cp = {});

// The causal (query, key) pairs of one sequence that the slowest cp rank
// attends to: T(T+1)/2 at cp = 1, its chunks' pairs beyond.
double cp_rank_attention_pairs(int seq_len, const PlanCp& cp);

// The forward FLOPs train.recompute runs again in backward, one rank, one
// micro-batch (lm_head 0), as each family's backward reruns them (gpt.hpp,
// llama.hpp): mlp the up layer (GPT-2 c_fc, 4C² of 12C² per block; Llama
// gate|up, 2CF); block the qkv, out and up layers (everything but the down
// projection) and all of attention.
MicroBatchFlops recompute_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                Recompute recompute, const PlanCp& cp = {});
MicroBatchFlops recompute_flops(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                Recompute recompute, const ModelShare& share,
                                const PlanCp& cp = {});

// runtime.fp8 in the step model: which of the blocks' linear FLOPs run on
// fp8 tensor cores and what the quantisation adds in memory traffic, one
// rank, one micro-batch. The fp8 layers are the blocks' qkv, out, up and
// down (a mixture's experts and router stay bf16) whose whole weight has no
// dimension under runtime.fp8_min_dim, as Fp8Linear::applies decides.
// Each fp8 GEMM quantises its two operands: the forward x and W, the input
// gradient dy and W, the weight gradient dy and x again (rowwise requantises
// them along the other dimension; tensorwise is counted the same). Each
// operand costs an amax pass (2 bytes read per bf16 element), a cast (2 read,
// 1 written) and the GEMM's 1-byte read where bf16 read 2: 4 bytes per
// element beyond the bf16 GEMM, less the 2 of the amax pass where the
// operand's producer takes it in its own pass (the forward inputs of all
// but the attention output projection, the output gradients of all but
// q|k|v: Ops' "Row amaxes for an fp8 GEMM's input"), except, rowwise at
// tp > 1, the column-parallel inputs and the row-parallel output gradients,
// whose rows arrive by gather and are scaled in a pass each. A pipeline
// stage's first backward block, whose gradient arrives from the next
// stage, is credited all the same (an estimate). The casts are not fused
// yet.
struct Fp8Work {
  double linear_share = 0;  // of MicroBatchFlops::linear (and recompute's) on fp8
  double cast_bytes = 0;    // one micro-batch's extra traffic, forward and backward
};
Fp8Work fp8_work(const ModelConfig& m, int micro_batch, int seq_len, int tp, int64_t min_dim,
                 const PlanCp& cp = {}, bool rowwise = false);

// runtime.fp8's amax max-reductions (Fp8Linear::prepare; each layer's
// requests in tp_layers_fp8.cpp), floats one rank all-reduces per block and
// micro-batch over tp and over cp. R = micro_batch seq_len / cp rows, p =
// tp; a column-parallel layer's x (R, in) and dy (R, out/p), a row-parallel
// one's x (R, in/p) and dy (R/p, out). Tensorwise: one float per tensor
// split over the group (over tp: x and dy, and W unless gathered in fp8;
// over cp: x and dy, the row-parallel dy and x over both). Rowwise: the
// column layer's backward over tp dy's R rows and W's `in` columns, over
// cp dy's out/p and x's `in` columns; the row layer's forward over tp x's R
// rows and W's `out` rows, its backward over tp dy's `out` columns, over cp
// those and x's in/p columns. A recomputed forward (train.recompute: the up
// layer, or qkv, out and up) reduces again.
struct Fp8AmaxFloats {
  double tp = 0, cp = 0;
};
Fp8AmaxFloats fp8_amax_floats(const ModelConfig& m, const PlanLayout& l, int seq_len,
                              Recompute recompute);

// Forward + backward model FLOPs of one optimizer step over the whole job
// (global_batch rows): MFU's numerator, model_flops() x tokens, the same
// count the trainer's "mfu" metric uses (attention over the full T x T; the
// compute-time model above charges the causal half a kernel actually does).
double model_flops_per_step(const ModelConfig& m, const TrainConfig& t);

struct CommBytes {          // bytes one rank sends per optimizer step
  // dp: the gradients' replica reduction, fsdp: the shard group's gathers
  // and reductions (logged as dp_cp and fsdp_cp when cp folds into them:
  // replica_key, shard_key).
  double dp = 0, fsdp = 0, tp = 0;
  double cp = 0;  // the attention's keys and values (cp_bytes_per_step)
  double ep = 0;  // the mixtures' tokens all-to-all (ep_bytes_per_step), an estimate
  // edp: the experts' gradient reduction and (fsdp > 1) their shards'
  // gathers over the expert-data-parallel group (ep > 1), and the part of it
  // that runs under backward/forward compute (as fsdp_overlapped).
  double edp = 0, edp_overlapped = 0;
  double fsdp_overlapped = 0;  // the part that runs under backward/forward compute
  // pp: the busiest pipeline rank's point-to-point sends (pipeline_model.hpp:
  // activations forward, their gradients back, and the tied embedding's
  // gradient all-reduce between the first and the last stage).
  double pp = 0;
};
CommBytes comm_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                              PlanBackend backend);
// Of one pipeline rank's share (its units and blocks; a stage reduces only
// its own parameters over dp and fsdp). Under pp > 1 ZeRO-3 gathers every
// block again for backward (1F1B interleaves other micro-batches' forwards
// between a block's forward and its backward, so none stays gathered); the
// embedding and the head keep their own slots. pp is not set here.
CommBytes comm_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                              PlanBackend backend, const ModelShare& share);

// The names metrics.jsonl's comm_bytes gives CommBytes::dp and ::fsdp for
// a layout: the communicators the reductions run on ("dp_cp" / "fsdp_cp"
// where cp folds into them, else "dp" / "fsdp").
const char* replica_key(const PlanLayout& l);
const char* shard_key(const PlanLayout& l);

// Bytes one rank sends on the cp axis per optimizer step
// (trainer/parallelize/context_parallel.hpp; the formula
// tests/layouts/cp_layouts.py cp_bytes holds the trainer's logged bytes
// to), over `blocks` blocks and `micro_batches` micro-batches of R =
// micro_batch x seq_len / cp rows per rank. n = R x 2 KV hs / tp: a rank's
// packed keys and values (its tp rank's KV / tp heads), in the activations'
// dtype (2 bytes on cuda, the bf16 plan; 4 on cpu); their gradients fp32.
//   allgather  per micro-batch, per block: all-gather (cp - 1) n forward
//              and again in backward, except where the gather the forward
//              just made is still held: the last block of each chunk a
//              rank runs (chunks: v under pp, else 1), or every block under
//              recompute=block (rerun just before); and one fp32
//              reduce-scatter of dK|dV, (cp - 1) n.
//   ring       per block: (cp - 1) hops of n forward (again in a
//              recomputed forward); in backward (cp - 1) hops of n beside
//              cp fp32 hops of the dK|dV partial sums (the last bringing
//              each rank its own).
// Plus once per step the loss averaged over the sequence: an 8-byte
// all-reduce over cp.
// Expert parallelism's all-to-all, bytes one rank sends per step: per block
// and micro-batch the counts ((ep - 1) E/ep int32) and four exchanges of its
// R k sorted rows of C elements (x out, y back; dy out, dx back), of which
// the share routed to the other ep ranks leaves: (ep - 1)/ep under a
// balanced router (an estimate: the real share follows the routing; a
// rank routing everything to its own experts sends none). R = micro_batch
// seq_len / (cp tp), the rank's rows. Recomputation does not run the experts
// again (the mixture keeps its state): no more exchanges. 0 at ep = 1.
double ep_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                         PlanBackend backend, int blocks, int micro_batches);

double cp_bytes_per_step(const ModelConfig& m, const TrainConfig& t, const PlanLayout& l,
                         PlanBackend backend, int blocks, int micro_batches);

// Unit sizes (floats) of one tp rank, padded as ParameterLayout pads them
// (the sharded state's own: trainer/sharding/state_plan.hpp).
UnitSizes unit_sizes(const ModelConfig& m, int tp, int fsdp);
// Of a share: its units only (a zero embed or head: it holds none; the tied
// copy counts as an embedding unit).
UnitSizes unit_sizes(const ModelConfig& m, int tp, int fsdp, const ModelShare& share);
// The same from the whole model's (no ParameterLayout built: the planner
// asks it for every pipeline rank of every layout).
UnitSizes share_unit_sizes(const UnitSizes& whole, int fsdp, const ModelShare& share);

// The units of the sharded state's parts, as ShardedParameters keeps them
// (trainer/sharding/sharded_parameters.hpp): at ep > 1 the dense part (the
// model without experts, cut over the data axes) and this rank's experts
// (E / ep of every block, cut over the expert-data-parallel group:
// data_parallel_groups.hpp); at ep = 1 the whole model and no experts.
// With fp8 all-gather (PlanLayout::gathers_fp8) the dense part's units are
// padded to 4 x its shard degree and `fp8` sums its plan
// (trainer/sharding/fp8_gather_plan.hpp): every block unit is cut alike.
struct Fp8GatherSizes {
  bool on = false;
  int64_t weights = 0;     // the share's fp8 weights (amaxes and scales)
  int64_t block_side = 0;  // a block unit's fp32 side floats per shard
  int64_t widest = 0;      // the widest part of one weight in one shard
  int block_slots = 0;     // block unit slots in use: min(the share's blocks, 2)
};
struct StateUnits {
  UnitSizes dense, experts;
  int expert_fsdp = 1, expert_dp = 1;  // the experts' shard and replica degrees
  Fp8GatherSizes fp8;
};
StateUnits state_units(const ModelConfig& m, const PlanLayout& l, const ModelShare& share);
// The sharded state's bytes for those parts (bf16_params: a bf16 run, whose
// copy both parts keep where the dense part's parameters are whole), with
// fp8 all-gather's buffers among the parameters' (fp8_gather_bytes).
StateBytes predict_state_bytes(const StateUnits& units, const PlanLayout& l, bool bf16_params);
// What fp8 all-gather adds to a rank's parameter bytes, as
// Fp8GatheredWeights and the block slots allocate it: the codes of its shard
// storage (a byte per float of the dense part's shards), a float per weight
// (its amax, then its scale; at least one), the bf16 rounding of the widest
// weight part (at least one element), and in each block slot in use (two,
// or one for a single block) the block's codes (a byte per float), the side
// floats it sends and the shard degree's sides it gathers. 0 unless
// units.fp8.on.
int64_t fp8_gather_bytes(const StateUnits& units, int shard_degree);

}  // namespace gt
