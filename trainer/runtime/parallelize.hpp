// parallelize: the model on a device mesh, with every kind of parallelism
// applied in one fixed order, each step reading only what the steps before
// it built:
//
//   1. placement      ParameterLayout: the model's placement table
//                     (trainer/parallelize/, e.g. gpt2_placement.cpp) cut
//                     for this tp rank: which rows/columns of each parameter
//                     it holds, which gradients are tp-partial; units padded
//                     to a multiple of the shard degree for the sharding below.
//   2. data parallel  ShardedParameters over the data-parallel groups at the
//                     ZeRO stage (data_parallel_groups.hpp: dp x fsdp, with
//                     cp folded in, the parameters being replicated over
//                     cp): its strategies UnitParameters (whole, or stage
//                     3's per-unit gathers), GradientReducer (DDP buckets,
//                     ZeRO-1, ZeRO-2/3, with HSDP's dp all-reduce and the
//                     tp-partial sums) and ShardOptimizer.
//   3. the model      the family's CausalLM (GPT, Llama: make_model.hpp)
//                     over the tensor-parallel layers (the tp group and
//                     its collective-matmul switch, with sequence
//                     parallelism) and the context-parallel attention (the
//                     cp group, its mode and chunks: context_parallel.hpp;
//                     each rank's model holds seq_len / cp rows of each
//                     sequence), reading its parameters from (2). The
//                     model holds no communicator.
//                     With aux-loss-free balancing, every instance reads
//                     the RouterBias table of the rank's blocks.
//   4. the step       a StepRunner: gradient accumulation over the one
//                     model (pp = 1), or the PipelineExecutor over this
//                     pipeline stage's model instances and the pp axis.
//
// Pipeline parallelism (pp > 1) comes first of all, as 0: the stage split
// (pipeline_stages.hpp) gives this pp rank its blocks, and (1) lays out only
// that stage's units; (2) and (3) then apply within the stage, and (4) runs
// the schedule (pipeline_schedule.hpp) this rank's list of which names.
//
// The weights are not set here: the caller loads a checkpoint, HF weights or
// the seed's initial values into params.
#pragma once

#include <memory>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/collective_context.hpp"
#include "parallel/mesh.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/causal_lm.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/runtime/router_bias.hpp"
#include "trainer/runtime/step_runner.hpp"
#include "trainer/sharding/sharded_parameters.hpp"

namespace gt {

// How the layers are split and the state sharded, beyond the mesh's shape.
struct ParallelPlan {
  FsdpStage fsdp_stage = FsdpStage::parameters;
  double bucket_mb = 25.0;  // DDP's gradient buckets
  // parallel.reduce_dtype: gradient reductions over dp and fsdp in fp32 or bf16.
  ComputeDType reduce_dtype = ComputeDType::fp32;
  bool tp_overlap = true;   // collective matmuls (ring) or plain collectives
  // A bf16 run: the model stores bf16 activations, and the parameters keep
  // their bf16 copy where they are whole.
  ComputeDType dtype = ComputeDType::fp32;
  // runtime.fp8*: the blocks' linear layers in fp8 (off by default).
  Fp8Settings fp8;
  // parallel.fp8_allgather in effect (fp8_allgather_applies): ZeRO-3
  // gathers the blocks' fp8 weights as codes (fp8_gathered_weights.hpp).
  bool fp8_allgather = false;
  // Pipeline stages (parallel.pp_*): the schedule, chunks per rank and the
  // blocks per chunk (empty: the balanced split).
  PipeSchedule pp_schedule = PipeSchedule::one_f_one_b;
  int pp_virtual_stages = 1;
  std::vector<int> pp_layers;
  // Context parallelism (parallel.cp_*): how keys and values move, and the
  // load-balanced chunking.
  CpComm cp_comm = CpComm::allgather;
  bool cp_load_balance = true;
};
// The plan a validated config asks for.
ParallelPlan parallel_plan(const Config& cfg);

// What one micro-batch looks like to the model (its activation buffers).
struct ModelShape {
  int micro_batch = 1, seq_len = 1;  // seq_len: the whole sequence (each cp rank holds / cp)
  Recompute recompute = Recompute::none;
  int micro_batches = 1;  // per optimizer step on each data rank (the pipeline's m)
};

// Built in the order above; destroyed runner (with the model or the
// stage's model instances, of the family model.arch names) first, then the
// parameters, the layout (members in reverse).
struct ParallelModel {
  std::unique_ptr<ParameterLayout> layout;
  std::unique_ptr<ShardedParameters> params;
  // model.router_bias_update_rate > 0 only: the routers' selection biases,
  // read by every model instance (built before them, destroyed after).
  std::unique_ptr<RouterBias> router_bias;
  std::unique_ptr<StepRunner> runner;
};

// `mesh` and `ops` outlive the result; so does `context` (may be null), where
// a pipeline names the action in progress for collective-deadline messages.
ParallelModel parallelize(const ModelConfig& model, const ParallelPlan& plan,
                          const DeviceMesh& mesh, Ops& ops, const ModelShape& shape,
                          CollectiveContext* context = nullptr);

}  // namespace gt
