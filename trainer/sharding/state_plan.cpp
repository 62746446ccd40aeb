#include "trainer/sharding/state_plan.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

UnitSizes unit_sizes(const ParameterLayout& layout, int fsdp) {
  GT_CHECK(fsdp >= 1, "fsdp ", fsdp);
  const auto& units = layout.units();
  UnitSizes z;
  z.total = layout.total();
  // A pipeline stage may hold no embedding or head (size 0: an empty slot).
  const int embed = layout.embed_unit(), head = layout.head_unit();
  if (embed >= 0) z.embed = units[static_cast<size_t>(embed)].size();
  if (head >= 0) z.head = units[static_cast<size_t>(head)].size();
  for (size_t u = 0; u < units.size(); ++u) {
    GT_CHECK(units[u].size() % fsdp == 0, "unit ", units[u].name, " of ", units[u].size(),
             " floats does not split into fsdp=", fsdp, " shards");
    z.shard_total += units[u].size() / fsdp;
    const int unit = static_cast<int>(u);
    if (unit != embed && unit != head) z.block = std::max(z.block, units[u].size());
  }
  return z;
}

ShardedStatePlan plan_sharded_state(const ParameterLayout& layout, int fsdp, FsdpStage stage,
                                    bool bf16_params, int dp, ComputeDType reduce_dtype) {
  return plan_sharded_state(unit_sizes(layout, fsdp), fsdp, stage, bf16_params, dp, reduce_dtype);
}

ShardedStatePlan plan_sharded_state(const UnitSizes& z, int fsdp, FsdpStage stage, bool bf16_params,
                                    int dp, ComputeDType reduce_dtype) {
  GT_CHECK(dp >= 1 && fsdp >= 1, "dp ", dp, " fsdp ", fsdp);
  const int64_t T = z.total, S = z.shard_total;
  ShardedStatePlan p;
  p.fsdp = fsdp;
  p.full_params = fsdp == 1 || stage != FsdpStage::parameters;
  p.full_grads = fsdp == 1 || stage == FsdpStage::optimizer;
  p.params = p.full_params ? T : S;
  p.params_bf16 = keeps_bf16_params(fsdp, stage, bf16_params) ? T : 0;
  p.grads = p.full_grads ? T : 0;
  p.shard_grads = fsdp > 1 ? S : 0;
  p.moments = fsdp > 1 ? S : T;
  p.param_slots = !p.full_params;
  p.grad_slots = !p.full_grads;
  if (p.param_slots || p.grad_slots) {
    p.slot_size[kEmbedSlot] = z.embed;
    p.slot_size[kHeadSlot] = z.head;
    p.slot_size[kBlockSlot] = p.slot_size[kBlockSlot + 1] = z.block;
  }
  if (reduce_dtype == ComputeDType::bf16) {
    if (fsdp == 1) {
      p.wire_bf16 = dp > 1 ? T : 0;
    } else {
      if (p.grad_slots) {
        for (int64_t size : p.slot_size) p.wire_bf16 += size + size / fsdp;
      } else {
        p.wire_bf16 = T + S;
      }
      if (dp > 1) p.wire_bf16 += S;
    }
  }
  return p;
}

StateBytes ShardedStatePlan::bytes() const {
  const int64_t f = sizeof(float), h = 2;  // fp32, bf16
  StateBytes b;
  b.params = params * f + params_bf16 * h;
  b.grads = (grads + shard_grads) * f;
  for (int64_t size : slot_size) {
    if (param_slots) b.params += size * f;
    if (grad_slots) b.grads += (size + size / fsdp) * f;
  }
  b.grads += wire_bf16 * h;
  b.optimizer = 2 * moments * f;
  return b;
}

}  // namespace gt
