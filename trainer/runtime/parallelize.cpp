#include "trainer/runtime/parallelize.hpp"

#include <numeric>

#include "kernels/core/error.hpp"
#include "trainer/model/make_model.hpp"
#include "trainer/parallelize/pipeline_stages.hpp"
#include "trainer/runtime/accumulation_runner.hpp"
#include "trainer/runtime/pipeline_executor.hpp"

namespace gt {

ParallelPlan parallel_plan(const Config& cfg) {
  ParallelPlan p;
  p.fsdp_stage = cfg.parallel.fsdp_stage;
  p.bucket_mb = cfg.parallel.bucket_mb;
  p.reduce_dtype = cfg.parallel.reduce_dtype;
  p.tp_overlap = cfg.parallel.tp_overlap;
  p.dtype = cfg.runtime.dtype;
  p.fp8 = fp8_settings(cfg.runtime);
  p.fp8_allgather = fp8_allgather_applies(cfg);
  p.pp_schedule = cfg.parallel.pp_schedule;
  p.pp_virtual_stages = cfg.parallel.pp_virtual_stages;
  p.pp_layers = cfg.parallel.pp_layers;
  p.cp_comm = cfg.parallel.cp_comm;
  p.cp_load_balance = cfg.parallel.cp_load_balance;
  return p;
}

namespace {

// The blocks of each of pipeline rank `rank`'s chunks (chunk c is global
// stage c * pp + rank), in chunk order.
std::vector<StageSpan> rank_chunks(const std::vector<int>& split, int pp, int rank) {
  std::vector<StageSpan> out;
  for (size_t s = static_cast<size_t>(rank); s < split.size(); s += static_cast<size_t>(pp)) {
    const int first = std::accumulate(split.begin(), split.begin() + static_cast<long>(s), 0);
    out.push_back({first, first + split[s]});
  }
  return out;
}

}  // namespace

ParallelModel parallelize(const ModelConfig& model, const ParallelPlan& plan,
                          const DeviceMesh& mesh, Ops& ops, const ModelShape& shape,
                          CollectiveContext* context) {
  const ParallelDims& d = mesh.dims();
  const TensorParallelGroup tp_group{&mesh.tp(), plan.tp_overlap};
  const ContextParallelGroup cp_group{&mesh.cp(), plan.cp_comm, plan.cp_load_balance};
  // Expert parallelism: the mixtures' token exchange over the ep group.
  const ExpertParallelGroup ep_group{d.ep > 1 ? &mesh.ep() : nullptr};
  // Each cp rank's model holds its chunks of every sequence: seq_len / cp rows.
  const int B = shape.micro_batch, T = shape.seq_len / d.cp;
  GT_CHECK(T * d.cp == shape.seq_len, "seq_len ", shape.seq_len, " over parallel.cp=", d.cp);
  ParallelModel out;
  // 0. pipeline stage: this pp rank's blocks.
  const int v = plan.pp_virtual_stages;
  const std::vector<StageSpan> chunks =
      d.pp > 1
          ? rank_chunks(pipeline_layer_split(model, d.pp, v, plan.pp_layers), d.pp, mesh.coord().pp)
          : std::vector<StageSpan>{StageSpan{}};
  // 1. placement: this tp rank's shards of the stage's units (every chunk's
  // of an interleaved rank), padded to fsdp (to 4 x fsdp with fp8
  // all-gather, whose codes travel as floats).
  // At ep > 1 only this ep rank's experts, in expert units of their own.
  const bool fp8_gather = plan.fp8_allgather && shard_degree(d) > 1;
  const int unit_multiple = shard_degree(d) * (fp8_gather ? 4 : 1);
  const ExpertShard experts{d.ep, d.ep > 1 ? mesh.ep().rank() : 0};
  out.layout = std::make_unique<ParameterLayout>(model, chunks, d.tp, mesh.coord().tp,
                                                 unit_multiple, experts);
  // 2. data parallel: the state over dp x fsdp and its strategies (the
  // experts' over the expert-data-parallel group, a part of its own).
  std::vector<std::unique_ptr<ParameterLayout>> parts;
  if (d.ep > 1) {
    parts.push_back(std::make_unique<ParameterLayout>(model, chunks, d.tp, mesh.coord().tp,
                                                      unit_multiple, experts, LayoutPart::dense));
    parts.push_back(std::make_unique<ParameterLayout>(model, chunks, d.tp, mesh.coord().tp,
                                                      expert_shard_degree(d), experts,
                                                      LayoutPart::experts));
  }
  out.params = std::make_unique<ShardedParameters>(
      *out.layout, mesh, plan.fsdp_stage, plan.bucket_mb, ops, plan.dtype == ComputeDType::bf16,
      plan.reduce_dtype, Fp8GatherOptions{fp8_gather, plan.fp8.min_dim}, std::move(parts));
  if (model.moe() && model.router_bias_update_rate > 0) {
    std::vector<int> layers;
    for (const StageSpan& c : chunks)
      for (int l = c.first_layer; l < (c.end_layer < 0 ? model.n_layer : c.end_layer); ++l)
        layers.push_back(l);
    out.router_bias = std::make_unique<RouterBias>(ops, model, std::move(layers));
  }
  auto build_model = [&](std::optional<StageSpan> chunk) {
    auto m = make_model(model, ops, B, T, *out.layout, *out.params, tp_group, shape.recompute,
                        plan.dtype, chunk, cp_group, ep_group);
    if (out.router_bias) m->set_router_bias(out.router_bias->table());
    m->set_fp8(plan.fp8);
    return m;
  };
  if (d.pp == 1) {
    // 3. the model over the tensor-parallel layers; 4. gradient accumulation.
    out.runner =
        std::make_unique<AccumulationRunner>(build_model(std::nullopt), *out.params, mesh, B, T);
    return out;
  }
  // 3. one model instance per micro-batch the stage holds at once; 4. the schedule.
  const PipeScheduleSpec spec{plan.pp_schedule, d.pp, shape.micro_batches, v};
  std::vector<PipeAction> actions =
      build_pipeline_schedule(spec)[static_cast<size_t>(mesh.coord().pp)];
  const std::vector<int> counts = instances_per_chunk(actions, d.pp, v);
  std::vector<PipelineExecutor::Chunk> stage_chunks;
  for (size_t c = 0; c < chunks.size(); ++c) {
    PipelineExecutor::Chunk chunk;
    chunk.stage = static_cast<int>(c) * d.pp + mesh.coord().pp;
    // Each instance sized for its own chunk's blocks (and head, on the last).
    for (int i = 0; i < std::max(1, counts[c]); ++i)
      chunk.instances.push_back(build_model(chunks[c]));
    stage_chunks.push_back(std::move(chunk));
  }
  out.runner = std::make_unique<PipelineExecutor>(spec, std::move(actions), std::move(stage_chunks),
                                                  *out.params, mesh, ops, B, T, context);
  return out;
}

}  // namespace gt
