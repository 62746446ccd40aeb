// Which ranks a parameter's gradient is summed over, and which of them shard
// its state: the data-parallel groups of a layout. Every data rank (dp x
// fsdp) holds different rows of the batch; every context-parallel rank
// (cp) different positions of the same rows. The parameters are replicated
// over both, so their gradients are summed over both:
//   fsdp = 1   no sharding; one all-reduce over dp x cp (the mesh's dp_cp,
//              which is dp itself at cp = 1);
//   fsdp > 1   ZeRO shards over fsdp x cp (fsdp_cp, torchtitan's
//              dp_shard_cp: without it, runs with cp diverged and ran out of
//              memory), HSDP's replicas over dp.
// Expert parallelism (ep > 1): a rank stores only its experts, and their
// gradients are summed over the expert-data-parallel group (the mesh's edp:
// the dp x fsdp / ep data ranks holding the same experts, times cp):
//   fsdp = 1   one all-reduce over edp, no sharding;
//   fsdp > 1   ZeRO shards over all of edp, no replicas.
// The bytes of those reductions count under the communicator's name in
// metrics.jsonl's comm_bytes: dp_cp or fsdp_cp at cp > 1, dp or fsdp at cp =
// 1, the experts' under edp; the planner (trainer/plan) uses these degrees
// too.
#pragma once

#include "parallel/mesh.hpp"
#include "parallel/parallel_dims.hpp"

namespace gt {

// The shard group's size: what FSDP shards over (1: no sharding).
inline int shard_degree(const ParallelDims& d) { return d.fsdp > 1 ? d.fsdp * d.cp : 1; }
// The replica group's size: the ranks holding the same shard.
inline int replica_degree(const ParallelDims& d) { return d.fsdp > 1 ? d.dp : d.dp * d.cp; }
inline MeshAxis shard_axis(const ParallelDims& d) {
  return d.fsdp > 1 ? MeshAxis::fsdp_cp : MeshAxis::fsdp;
}
inline MeshAxis replica_axis(const ParallelDims& d) {
  return d.fsdp > 1 ? MeshAxis::dp : MeshAxis::dp_cp;
}

// The expert-data-parallel group's size, and how it shards and replicates
// the experts' state (ep > 1).
inline int expert_data_degree(const ParallelDims& d) { return d.dp * d.fsdp / d.ep * d.cp; }
inline int expert_shard_degree(const ParallelDims& d) {
  return d.fsdp > 1 ? expert_data_degree(d) : 1;
}
inline int expert_replica_degree(const ParallelDims& d) {
  return d.fsdp > 1 ? 1 : expert_data_degree(d);
}

}  // namespace gt
