// ShardedStatePlan: the buffers ShardedParameters stores for a layout, fsdp
// degree and ZeRO stage, with their sizes, in one place. ShardedParameters
// allocates exactly these; the planner's memory model
// (trainer/plan/memory_model.hpp) sums the same plan, so its state bytes are
// what the class holds for every layout.
//
// With T the flat layout's floats (this tp rank's shards, units padded to
// fsdp) and S = T / fsdp this rank's shard of every unit:
//   stage 1   params T, grads T + the reduced shard S, m + v 2S
//   stage 2   params T, grads S + four unit slots (and their one-shard
//             outputs), m + v 2S
//   stage 3   params S + four unit slots, grads as stage 2, m + v 2S
//   fsdp = 1  params T, grads T, m + v 2T
// plus, in a bf16 run where the parameters are whole, their bf16 copy (T),
// and with parallel.reduce_dtype=bf16 the bf16 wire copies the gradient
// reductions run on (counted with the gradients; see wire_bf16 below).
#pragma once

#include <cstdint>

#include "trainer/model/parameter_layout.hpp"

namespace gt {

// Bytes by kind, as ShardedParameters::memory() reports them.
struct StateBytes {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// The sizes (floats) of a layout's units that the sharded state is cut
// from: T, S = sum over units of unit / fsdp, the embedding, the head and
// the largest block.
struct UnitSizes {
  int64_t total = 0, shard_total = 0, embed = 0, head = 0, block = 0;
};
UnitSizes unit_sizes(const ParameterLayout& layout, int fsdp);

// The four unit-sized slots of stages 2/3: the embedding, the head and two
// blocks (one in use, one being gathered or reduced).
enum UnitSlot { kEmbedSlot = 0, kHeadSlot = 1, kBlockSlot = 2, kUnitSlots = 4 };
// The slot unit `unit` uses: its own for the embedding and the head,
// alternating block slots for the blocks (the one in use, the next). On a
// pipeline stage the embedding's slot holds its unit or its mirror.
inline int unit_slot(const ParameterLayout& layout, int unit) {
  if (unit == layout.embed_unit()) return kEmbedSlot;
  if (unit == layout.head_unit()) return kHeadSlot;
  return kBlockSlot + (unit - layout.first_block_unit()) % 2;
}

struct ShardedStatePlan {
  int fsdp = 1;
  bool full_params = true;  // the whole flat parameters (fsdp = 1 or stage < 3)
  bool full_grads = true;   // the whole flat gradients (fsdp = 1 or stage 1)
  int64_t params = 0;       // floats: T, or S at stage 3
  int64_t params_bf16 = 0;  // bf16 elements of the weights' copy: T or 0
  int64_t grads = 0;        // floats: T when full_grads, else 0
  int64_t shard_grads = 0;  // floats: S when fsdp > 1 (the reduced shard)
  int64_t moments = 0;      // floats of m, and of v: S when fsdp > 1, else T
  // Floats of each unit slot (0: no slots). Parameter slots exist at stage 3,
  // gradient slots (each with a slot_size / fsdp output) at stages 2 and 3.
  int64_t slot_size[kUnitSlots] = {};
  bool param_slots = false, grad_slots = false;
  // bf16 elements of the gradient reductions' wire copies
  // (GradientReducer, parallel.reduce_dtype=bf16), one per reduction that
  // can be in flight at once, each its input and then its output:
  //   fsdp = 1, dp > 1   T (the DDP buckets, all-reduced in place)
  //   stage 1            T + S (each unit's reduce-scatter input and shard)
  //   stages 2, 3        each slot's size + its shard
  //   HSDP (dp > 1)      + S (each unit's final shard over dp)
  // 0 for fp32 reductions, and where no data axis has two ranks.
  int64_t wire_bf16 = 0;

  StateBytes bytes() const;
};

// Keeps a bf16 copy of the parameters: asked for (a bf16 run) and whole.
inline bool keeps_bf16_params(int fsdp, FsdpStage stage, bool bf16_params) {
  return bf16_params && (fsdp == 1 || stage != FsdpStage::parameters);
}

// The plan for `layout` (built with units padded to fsdp) at this fsdp
// degree and stage (ignored at fsdp = 1), dp replicas and gradient
// reduction precision.
ShardedStatePlan plan_sharded_state(const ParameterLayout& layout, int fsdp, FsdpStage stage,
                                    bool bf16_params, int dp = 1,
                                    ComputeDType reduce_dtype = ComputeDType::fp32);
// The same from the unit sizes alone: what the planner asks for the units
// one pipeline stage holds (a size of 0 for the embedding or the head: the
// stage holds none, and its slot is empty).
ShardedStatePlan plan_sharded_state(const UnitSizes& units, int fsdp, FsdpStage stage,
                                    bool bf16_params, int dp = 1,
                                    ComputeDType reduce_dtype = ComputeDType::fp32);

}  // namespace gt
