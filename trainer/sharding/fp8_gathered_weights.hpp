// Fp8GatheredWeights: parallel.fp8_allgather. Under ZeRO-3 (each block's
// parameters all-gathered before use) with tensorwise fp8 linear layers,
// the blocks' fp8 weights are quantised on their shards and gathered as fp8
// codes, a quarter of the fp32 gather's bytes (torchao's float8 all-gather
// under FSDP2). What each rank does, per optimizer step:
//   1. refresh(), at the first forward after the parameters changed (AdamW,
//      loading): each weight's amax over the bf16 rounding of its elements
//      in this rank's shard; one max all-reduce of every weight's amax over
//      the shard group and one over tp (a weight is split over both); the
//      scales (format max / amax, as Fp8Linear computes them); the shard's
//      codes, fp8(bf16(w) x scale).
//   2. start() per unit gather: the unit's codes (its shard's bytes, as
//      floats: units are padded to 4 x the shard degree) and, beside them,
//      its other parameters (norms, biases, a mixture's router and experts,
//      linears under runtime.fp8_min_dim) in fp32, packed from each shard
//      into a vector as long as the longest shard's share (side_floats).
//   3. unpack(): the fp32 parameters into the unit's slot. The fp8 weights'
//      places in the slot are not written: the layers read them only as
//      codes, through find().
// So the codes a layer multiplies, and their scale, are bit for bit what it
// would have computed from the gathered fp32 weight: the same amax, scale
// and rounding (tests/layouts/fp8_layouts.py holds fsdp2 stage 3 with and
// without it to one rank).
//
// Which weights and how a unit is cut: trainer/sharding/fp8_gather_plan.hpp.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/sharding/fp8_gather_plan.hpp"
#include "trainer/sharding/shard_geometry.hpp"

namespace gt {

struct Fp8GatherOptions {
  bool on = false;      // parallel.fp8_allgather in effect (fp8_allgather_applies)
  int64_t min_dim = 0;  // runtime.fp8_min_dim
};

class Fp8GatheredWeights {
 public:
  // `fsdp` is the shard group, `tp` the tensor-parallel one; all outlive this.
  Fp8GatheredWeights(const ParameterLayout& layout, const ShardGeometry& geom, Ops& ops,
                     Communicator& fsdp, Communicator& tp, int64_t min_dim);

  const Fp8GatherPlan& plan() const { return plan_; }
  bool gathers(int unit) const { return plan_.units[static_cast<size_t>(unit)].gathers(); }
  // Floats of the unit's fp32 side vector per shard.
  int64_t side_floats(int unit) const { return plan_.units[static_cast<size_t>(unit)].side_floats; }

  // The parameters changed: the next refresh() recomputes.
  void invalidate() { stale_ = true; }
  // Step 1 above from `shard` (this rank's shard storage), when stale.
  // Collective over the shard group and tp, in the same place on every rank.
  void refresh(const Buffer& shard);
  // Step 2: starts `unit`'s two gathers, into `codes` (the unit's size in
  // bytes) and `side` (shard degree x side_floats), packing the fp32 side
  // from `shard` through `send` (side_floats) first.
  std::pair<CommHandle, CommHandle> start(int unit, const Buffer& shard, Buffer& send,
                                          Buffer& codes, Buffer& side);
  // Step 3, after both gathers are waited: the side into `slot` (the unit's
  // fp32 slot).
  void unpack(int unit, const Buffer& side, float* slot);
  // The fp8 form of the weight at `w` (numel elements) in `unit`'s slot,
  // whose codes were gathered into `codes`: its codes and scale (1). false
  // when `w` is not an fp8 weight here; an error when it lies inside one
  // but is not exactly it.
  bool find(int unit, const float* slot, const Buffer& codes, const float* w, int64_t numel,
            TensorView* w_codes, TensorView* scale) const;

  int64_t bytes() const;

 private:
  // The unit-local [lo, hi) of [begin, end) within shard `rank` of `unit`.
  std::pair<int64_t, int64_t> in_shard(int unit, int rank, int64_t begin, int64_t end) const {
    return within_shard(geom_.shard_size(unit), rank, begin, end);
  }

  const ParameterLayout& layout_;
  const ShardGeometry& geom_;
  Ops& ops_;
  Communicator& fsdp_;
  Communicator& tp_;
  Fp8GatherPlan plan_;
  Buffer codes_;       // u8, this rank's shard storage of codes (zero outside the weights)
  Buffer scales_;      // fp32 (plan_.weights): the amaxes, then in place the scales
  Buffer bf16_;        // the bf16 rounding of one weight's shard part
  bool stale_ = true;
};

}  // namespace gt
