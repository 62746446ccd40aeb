#include "trainer/plan/pipeline_model.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"
#include "trainer/parallelize/pipeline_stages.hpp"
#include "trainer/sharding/data_parallel_groups.hpp"

namespace gt {

PipeScheduleSpec pipeline_spec(const PlanLayout& l, int micro_batches) {
  PipeScheduleSpec spec;
  spec.kind = l.schedule;
  spec.stages = l.pp;
  spec.micro_batches = micro_batches;
  spec.virtual_stages = l.virtual_stages;
  return spec;
}

PipelineShape pipeline_shape(const ModelConfig& m, const PlanLayout& l,
                             const std::vector<int>& pp_layers, int config_pp, int config_v) {
  const bool own = l.pp == config_pp && l.virtual_stages == config_v;
  PipelineShape shape;
  shape.split =
      pipeline_layer_split(m, l.pp, l.virtual_stages, own ? pp_layers : std::vector<int>{});
  const std::vector<int> blocks = pipeline_rank_blocks(shape.split, l.pp);
  for (int r = 0; r < l.pp; ++r) {
    ModelShare s;
    s.blocks = blocks[static_cast<size_t>(r)];
    s.embed = r == 0;
    s.head = r == l.pp - 1;
    s.tied_copy = s.head && l.pp > 1 && m.tied_embeddings();
    shape.ranks.push_back(s);
  }
  return shape;
}

int64_t stage_activation_bytes(const PipelineShape& shape, int stage, const ActivationParts& parts,
                               int64_t boundary) {
  const int S = static_cast<int>(shape.split.size());
  int64_t bytes = shape.split[static_cast<size_t>(stage)] * parts.per_block;
  bytes += stage == 0 ? parts.embed : boundary;
  if (stage == S - 1) bytes += parts.head;
  return bytes;
}

std::vector<int64_t> pipeline_activation_peaks(const PipelineShape& shape, const PlanLayout& l,
                                               int micro_batches, const ActivationParts& parts,
                                               int64_t boundary) {
  const auto lists = build_pipeline_schedule(pipeline_spec(l, micro_batches));
  std::vector<int64_t> peaks;
  for (const auto& list : lists) {
    int64_t held = 0, peak = 0;
    for (const PipeAction& a : list) {
      if (a.op == PipeOp::forward) {
        held += stage_activation_bytes(shape, a.stage, parts, boundary);
        peak = std::max(peak, held);
      } else if (a.op == PipeOp::backward) {
        held -= stage_activation_bytes(shape, a.stage, parts, boundary);
      }
    }
    GT_CHECK(held == 0, "pipeline schedule left ", held, " activation bytes held");
    peaks.push_back(peak + parts.shared);
  }
  return peaks;
}

BoundaryBytes boundary_bytes(const ModelConfig& m, int micro_batch, int seq_len, int tp,
                             int act_bytes) {
  // Sequence parallelism leaves each tp rank R/tp rows of the residual
  // stream between blocks: that is what crosses to the same tp rank of the
  // next stage.
  const double rows = static_cast<double>(static_cast<int64_t>(micro_batch) * seq_len / tp);
  return {rows * m.n_embd * act_bytes, rows * m.n_embd * 4.0};
}

double pipeline_p2p_bytes(const ModelConfig& m, const PlanLayout& l, int micro_batches,
                          const BoundaryBytes& b, double embed_unit_floats) {
  const int p = l.pp, v = l.virtual_stages, S = p * v;
  if (p == 1) return 0;
  const double grad_bytes = l.reduce_dtype == ComputeDType::bf16 ? 2.0 : 4.0;
  // Two ranks all-reduce the tied embedding's gradient: a ring of 2 sends
  // 2 (2 - 1) / 2 = 1 copy of it (of the fsdp shard when sharded).
  const double tied =
      m.tied_embeddings() ? embed_unit_floats / shard_degree(l.dims()) * grad_bytes : 0.0;
  double busiest = 0;
  for (int r = 0; r < p; ++r) {
    int forward = 0, backward = 0;
    for (int s = r; s < S; s += p) {
      forward += s < S - 1 ? 1 : 0;
      backward += s > 0 ? 1 : 0;
    }
    double sends = micro_batches * (forward * b.forward + backward * b.backward);
    if (r == 0 || r == p - 1) sends += tied;
    busiest = std::max(busiest, sends);
  }
  return busiest;
}

}  // namespace gt
