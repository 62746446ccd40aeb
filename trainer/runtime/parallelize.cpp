#include "trainer/runtime/parallelize.hpp"

#include "trainer/model/make_model.hpp"

namespace gt {

ParallelPlan parallel_plan(const Config& cfg) {
  ParallelPlan p;
  p.fsdp_stage = cfg.parallel.fsdp_stage;
  p.bucket_mb = cfg.parallel.bucket_mb;
  p.reduce_dtype = cfg.parallel.reduce_dtype;
  p.tp_overlap = cfg.parallel.tp_overlap;
  p.dtype = cfg.runtime.dtype;
  return p;
}

ParallelModel parallelize(const ModelConfig& model, const ParallelPlan& plan,
                          const DeviceMesh& mesh, Ops& ops, const ModelShape& shape) {
  const ParallelDims& d = mesh.dims();
  ParallelModel out;
  // 1. placement: this tp rank's shards, units padded to fsdp.
  out.layout = std::make_unique<ParameterLayout>(model, d.tp, mesh.coord().tp, d.fsdp);
  // 2. data parallel: the state over dp x fsdp and its strategies.
  out.params =
      std::make_unique<ShardedParameters>(*out.layout, mesh, plan.fsdp_stage, plan.bucket_mb, ops,
                                          plan.dtype == ComputeDType::bf16, plan.reduce_dtype);
  // 3. the model over the tensor-parallel layers.
  out.model =
      make_model(model, ops, shape.micro_batch, shape.seq_len, *out.layout, *out.params,
                 TensorParallelGroup{&mesh.tp(), plan.tp_overlap}, shape.recompute, plan.dtype);
  return out;
}

}  // namespace gt
