// Memory model of one rank: what ShardedParameters and the model
// (GPT::allocate, Llama::allocate) hold for a layout, computed without
// allocating anything, so the planner can size GPT-2 1.5B or Llama 3 70B on
// 512 devices from a laptop.
//
// Parameters, gradients and AdamW state follow ShardedParameters exactly (the
// same ParameterLayout: tensors padded to 16 floats, units to a multiple of
// fsdp; stage 1/2/3 storage with the four unit buffers of stages 2/3); a test
// compares them byte for byte with ShardedParameters::memory() on every
// layout of 1, 2 and 4 ranks (tests/mpi/test_plan_memory_mpi.cpp). They are
// fp32 on both backends: the CUDA path keeps fp32 master weights, gradients
// and moments (16 bytes per parameter, before sharding).
//
// Activations follow the family's activation plan (GPT::allocate,
// Llama::allocate) for one micro-batch (B = train.micro_batch rows of T =
// train.seq_len, of which a context-parallel rank holds T / cp: every
// per-row buffer divided by cp, plus the cp attention's scratch,
// ContextParallelAttention::scratch) and train.recompute: what recomputation drops (mlp: the
// second norm's output and statistics and the MLP's hidden activations;
// block: everything of a block but res3) is one layer's slot instead of L:
//   cpu   every buffer fp32 (4 bytes), attention keeps its B*NH/tp*T^2
//         probabilities per layer plus a scratch of the same size.
//   cuda  activation buffers bf16 (2 bytes); a flash-style attention keeps
//         B*NH/tp*T fp32 row statistics per layer instead of T^2
//         probabilities; token ids, norm statistics, losses and the
//         cross-entropy statistics stay 4 bytes. This is the planner's
//         assumption about the CUDA training path, which is not written yet.
// Collective workspace (cpu only): Open MPI's non-blocking collectives
// (coll/libnbc) allocate temporaries while they run; what rank 0 holds at
// its peak was measured on this machine's Open MPI 4.1 (scripts/sweep.py, 2
// and 4 ranks) and is modelled in predict_comm_workspace_bytes. On cuda,
// NCCL's buffers are part of the baseline.
// Not included: the process baseline (binary, MPI, BLAS, CUDA context),
// which the hardware file states as baseline_mib.
#pragma once

#include <cstdint>
#include <string>

#include "parallel/parallel_dims.hpp"
#include "trainer/config/config.hpp"
#include "trainer/plan/hardware.hpp"
#include "trainer/sharding/state_plan.hpp"

namespace gt {

// Context parallelism of a layout (trainer/parallelize/context_parallel.hpp):
// the degree, parallel.cp_comm and parallel.cp_load_balance. cp = 1: none.
struct PlanCp {
  int cp = 1;
  CpComm comm = CpComm::allgather;
  bool load_balance = true;
};

// One candidate layout of the planner.
struct PlanLayout {
  int pp = 1, dp = 1, fsdp = 1, tp = 1;
  // Context parallelism: each sequence cut over cp ranks (next to tp in the
  // mesh), keys and values shared by cp_comm, chunks balanced or not.
  int cp = 1;
  CpComm cp_comm = CpComm::allgather;
  bool cp_load_balance = true;
  // Expert parallelism (model.arch=mixtral): groups of ep consecutive data
  // ranks split the experts; folded out of dp x fsdp, not in world().
  int ep = 1;
  int stage = 3;         // FSDP stage; only meaningful when fsdp > 1
  int micro_batch = 1;
  bool tp_overlap = true;
  // parallel.reduce_dtype: the gradient reductions' wire copies (state) and
  // bytes (bf16 halves the data axes' gradient traffic).
  ComputeDType reduce_dtype = ComputeDType::fp32;
  // runtime.fp8 and runtime.fp8_min_dim: the blocks' linear layers in fp8,
  // whose amaxes are max-reduced over tp and cp (fp8_amax_floats); with
  // parallel.fp8_allgather not off, their fp8 weights gathered as codes
  // where a tensorwise layout runs ZeRO-3 (gathers_fp8, as config.hpp's
  // fp8_allgather_applies decides for a config's own layout).
  Fp8Recipe fp8 = Fp8Recipe::off;
  int64_t fp8_min_dim = 0;
  bool fp8_allgather = true;
  bool gathers_fp8() const {
    return fp8 == Fp8Recipe::tensorwise && fp8_allgather && fsdp > 1 && stage == 3;
  }
  // The pipeline's schedule and chunks per rank; only meaningful when pp > 1.
  PipeSchedule schedule = PipeSchedule::one_f_one_b;
  int virtual_stages = 1;
  int world() const { return pp * dp * fsdp * cp * tp; }
  PlanCp context() const { return {cp, cp_comm, cp_load_balance}; }
  // The mesh's degrees, for the trainer's own rules about them
  // (data_parallel_groups.hpp: shard_degree, replica_degree).
  ParallelDims dims() const { return ParallelDims{dp, fsdp, tp, pp, cp, ep}; }
  // "dp=2 fsdp=2 tp=1 stage=3 mb=4", led by "pp=4 1f1b " (or "pp=4
  // interleaved_1f1b v=2 ") for a pipeline, with " cp=2 ring" (or
  // " cp=2 allgather", "+unbalanced") before tp under context parallelism,
  // " ep=2" after tp under expert parallelism.
  std::string str() const;
};

// Bytes one rank holds for parameters, gradients and AdamW moments: the sum
// of the plan ShardedParameters allocates from (trainer/sharding/state_plan.hpp). Throws
// gt::Error when tp does not divide the heads, channels or vocabulary.
// bf16_params: ShardedParameters was asked for the parameters' bf16 copy (a
// bf16 run); it keeps one where the parameters are whole (fsdp = 1, stage < 3).
// dp, reduce_dtype: bf16 gradient reductions keep wire copies (state_plan.hpp).
StateBytes predict_state_bytes(const ModelConfig& m, int fsdp, int tp, int stage,
                               bool bf16_params = false, int dp = 1,
                               ComputeDType reduce_dtype = ComputeDType::fp32);

// Bytes of the model's activation and activation-gradient buffers for one
// rank (the same on every tp rank): the sum of the table its family
// allocates from (m.arch: trainer/model/activation_plan.hpp for gpt2,
// llama_activation_plan.hpp for llama), with the backend's attention sizes
// (kernels/core/attention_kernels.hpp).
// dtype: runtime.dtype (bf16 stores the activations in bf16).
// store_keeps_bf16_params: keeps_bf16_params() (state_plan.hpp): no weight copy buffer.
// cp: context parallelism; seq_len is the whole sequence, of which each cp
// rank holds seq_len / cp rows (as CausalLM::activation_shape sizes them).
// The same buffers as one pipeline stage holds them: per_block is what one
// block keeps for backward per micro-batch (the buffers with a slot per
// layer), embed and head what the embedding and the head keep per
// micro-batch (ActivationPlan::embed_bytes, head_bytes), shared the rest,
// allocated once whatever the blocks and micro-batches (backward scratch,
// what recomputation drops, the GEMMs' bf16 copies, the tp layers'
// scratch). Invariant: n_layer * per_block + embed + head + shared is
// predict_activation_bytes() with the same arguments.
struct ActivationParts {
  int64_t per_block = 0, embed = 0, head = 0, shared = 0;
};
ActivationParts predict_activation_parts(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                         bool tp_overlap, PlanBackend backend,
                                         Recompute recompute = Recompute::none,
                                         ComputeDType dtype = ComputeDType::fp32,
                                         bool store_keeps_bf16_params = false,
                                         const PlanCp& cp = {}, int ep = 1);

int64_t predict_activation_bytes(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                                 bool tp_overlap, PlanBackend backend,
                                 Recompute recompute = Recompute::none,
                                 ComputeDType dtype = ComputeDType::fp32,
                                 bool store_keeps_bf16_params = false, const PlanCp& cp = {},
                                 int ep = 1);

// Bytes of collective temporaries live at rank 0's peak (0 on cuda); dp
// and fsdp here are the replica and shard degrees of the gradients
// (trainer/sharding/data_parallel_groups.hpp: cp folded into them):
//   dp, fsdp = 1   one copy of every gradient bucket: all of them are in
//                  flight from the backward that fills them to the optimizer: T
//   HSDP           likewise one copy of every shard's dp all-reduce: S
//   fsdp > 2       reduce-scatters hold two copies of their unit's input;
//                  stage 2/3: the four unit slots (the embedding, the head, two
//                  blocks) bound how many are in flight: 2(embed + head + 2 block);
//                  stage 1 starts every unit's on the last micro-batch and waits
//                  for none until the optimizer, but the progress calls between
//                  ops complete them as backward goes on: 2.5 to 3 blocks were
//                  measured in flight at fsdp = 4, so 2(embed + head + 3 block),
//                  at most 2T; under context parallelism each block's backward
//                  also waits on its cp collectives, inside which MPI moves
//                  the reduce-scatters on: 1.5 to 2 blocks in flight (fsdp 2
//                  x cp 2: 374-399 MiB peaks against 410 predicted with 3),
//                  so 2 block as at stages 2/3.
//   fsdp = 2       none measurable: a two-rank reduce-scatter left no
//                  temporaries at rank 0's peak in any stage
//   tp without tp_overlap: a plain reduce-scatter of (B*T, C): 2 B*T*C
// (T, S: this rank's flat and shard parameter counts; 4-byte floats.) The tp
// rings (point-to-point) need none; about 6 MiB at tp = 4 is not modelled.
int64_t predict_comm_workspace_bytes(const ModelConfig& m, const PlanLayout& l, int seq_len,
                                     PlanBackend backend);
// The same for the units one pipeline stage holds (unit_sizes of its share).
int64_t predict_comm_workspace_bytes(const ModelConfig& m, const UnitSizes& units,
                                     const PlanLayout& l, int seq_len, PlanBackend backend);
// Expert parallelism (ep > 1): the experts' own gradient reductions over the
// expert-data-parallel group, by the same rules (`experts`: the expert
// units, sharded over expert_fsdp and replicated over expert_dp ranks).
// Not measured apart from the dense part's: an estimate by those rules.
int64_t predict_expert_workspace_bytes(const UnitSizes& experts, int expert_fsdp, int expert_dp,
                                       const PlanLayout& l, PlanBackend backend);

}  // namespace gt
