// Fp8GatherPlan: how parallel.fp8_allgather cuts a layout's units, as data.
// Fp8GatheredWeights and the stage-3 unit slots (unit_parameters.cpp)
// allocate and gather by it; the planner (trainer/plan/step_model.hpp) sums
// the same plan for its state bytes and its fsdp bytes, so a prediction is
// what a run holds and sends.
//
// A unit is cut into `shards` equal shards of S = size / shards floats
// (ShardGeometry). Its fp8 weights (fp8_gathered_weights below) travel as
// codes, a byte per element: the whole shard's S bytes, zero outside the
// weights. Everything else in the unit (norms, biases, a mixture's router
// and experts, linears under runtime.fp8_min_dim: the "side runs") travels in
// fp32, packed from each shard into a vector of side_floats, the most any
// shard holds of them. Per unit gather each rank so sends (shards - 1) x
// (S + 4 side_floats) bytes where the fp32 gather sends (shards - 1) x 4 S.
// The codes travel as floats (S / 4 of them), so the units are padded to
// 4 x shards.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "trainer/model/parameter_layout.hpp"
#include "trainer/sharding/state_plan.hpp"

namespace gt {

// One fp8 weight: unit-local flat elements [begin, begin + size).
struct Fp8GatheredWeight {
  int64_t begin = 0, size = 0;
  int index = 0;  // into the amax / scale vector
};

// The weights the linear layers quantise as one tensor (Fp8Linear): in a
// block, each run of consecutive column-parallel 2-D weights (GPT-2's c_attn
// and c_fc; Llama's q|k|v and gate|up, which its layers read as one fused
// weight) and each row-parallel 2-D weight (attn.c_proj / o_proj, mlp.c_proj
// / down_proj), when no dimension of the whole weight is under `min_dim`
// (runtime.fp8_min_dim). A mixture's router and experts are neither and stay
// fp32 here, as they stay bf16 in the layers. Per unit, in flat order.
std::vector<std::vector<Fp8GatheredWeight>> fp8_gathered_weights(const ParameterLayout& layout,
                                                                 int64_t min_dim);

struct Fp8UnitGather {
  std::vector<Fp8GatheredWeight> weights;  // empty: the unit is gathered in fp32
  // The unit-local runs between and after the weights (gathered in fp32).
  std::vector<std::pair<int64_t, int64_t>> side_runs;
  int64_t side_floats = 0;  // the most side floats one shard holds
  int64_t widest = 0;       // the widest part of one weight in one shard
  bool gathers() const { return !weights.empty(); }
};

struct Fp8GatherPlan {
  std::vector<Fp8UnitGather> units;  // per unit of the layout
  int weights = 0;                   // amaxes and scales in all
  int64_t widest = 0;                // over every unit
  // Per unit slot (state_plan.hpp): the most side floats of the units it
  // takes, and whether any of them gathers fp8 (it then holds codes).
  std::array<int64_t, kUnitSlots> slot_side{};
  std::array<bool, kUnitSlots> slot_codes{};
};
// Refuses a unit with fp8 weights whose shard is not a multiple of 4.
Fp8GatherPlan plan_fp8_gather(const ParameterLayout& layout, int shards, int64_t min_dim);

// The unit-local [lo, hi) of [begin, end) within shard `rank` (of S floats)
// of a unit; lo == hi when they do not meet.
inline std::pair<int64_t, int64_t> within_shard(int64_t S, int rank, int64_t begin, int64_t end) {
  const int64_t lo = begin > rank * S ? begin : rank * S;
  const int64_t hi = end < (rank + 1) * S ? end : (rank + 1) * S;
  return {lo, hi > lo ? hi : lo};
}

}  // namespace gt
