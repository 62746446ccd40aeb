#include "trainer/sharding/unit_parameters.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "kernels/core/error.hpp"

namespace gt {

namespace {

class WholeParameters final : public UnitParameters {
 public:
  WholeParameters(const ParameterLayout& layout, const Buffer& params)
      : layout_(layout), params_(params) {}
  float* unit_params(int unit) override {
    return params_.f32() + layout_.units()[static_cast<size_t>(unit)].begin;
  }
  void begin_forward(bool) override {}
  void before_forward(int) override {}
  void after_forward(int) override {}
  void before_backward(int) override {}
  void after_backward(int) override {}
  void progress() override {}
  int64_t slot_bytes() const override { return 0; }

 private:
  const ParameterLayout& layout_;
  const Buffer& params_;
};

// Stage 3. Invariants, for any sequence of whole passes (a pipeline stage
// interleaves forwards and backwards of different micro-batches):
//   * every unit has one slot (unit_slot: embed or its mirror, head, and the
//     blocks alternating between two), so a unit is never in two slots;
//   * a slot's `unit` is what its buffer holds or is being gathered into
//     (`pending`), -1 for nothing; a buffer is regathered only after its
//     gather in flight is waited, and never while its unit is open (between
//     before_* and after_*): at most one block is open at a time and a
//     prefetch targets the block next to it, in the other slot;
//   * what a slot holds is the current parameters': they change only between
//     optimizer steps (or by loading), and every forward starts with
//     begin_forward, which empties the slots. Within a step a gathered unit
//     serves any pass of any micro-batch (1F1B's B0 reads F1's gathers);
//   * the gathers started depend only on the hook sequence and the layout,
//     never on completion, so every rank of the fsdp group starts the same
//     ones in the same order.
class GatheredParameters final : public UnitParameters {
 public:
  GatheredParameters(const ParameterLayout& layout, const ShardGeometry& geom,
                     const ShardedStatePlan& plan, const Buffer& shard, Ops& ops,
                     Communicator& fsdp, Communicator& tp, const Fp8GatherOptions& fp8)
      : layout_(layout), geom_(geom), shard_(shard), fsdp_(fsdp) {
    if (fp8.on) fp8_ = std::make_unique<Fp8GatheredWeights>(layout, geom, ops, fsdp, tp, fp8.min_dim);
    for (int i = 0; i < kUnitSlots; ++i) {
      Slot& s = slots_[static_cast<size_t>(i)];
      s.buf = allocate_floats(ops, plan.slot_size[i]);
      // With fp8 all-gather a slot that takes fp8-gathered units (the
      // blocks') also holds their codes (a byte per element) and the fp32
      // side of the widest of them, sent and gathered.
      if (!fp8_ || !fp8_->plan().slot_codes[static_cast<size_t>(i)]) continue;
      const int64_t side = fp8_->plan().slot_side[static_cast<size_t>(i)];
      s.codes = ops.allocate(static_cast<size_t>(plan.slot_size[i]));
      s.send = allocate_floats(ops, side);
      s.side = allocate_floats(ops, side * geom.fsdp());
    }
  }

  float* unit_params(int unit) override {
    Slot& s = slot(unit);
    GT_CHECK(s.unit == unit && s.pending.done() && s.unpacked, "unit ", name(unit),
             " used while not gathered");
    return s.buf.f32();
  }
  void begin_forward(bool backward_follows) override {
    backward_follows_ = backward_follows;
    // Each forward gathers afresh (the parameters may have changed). No unit
    // is open between passes, unless a pass threw on its way.
    for (auto& s : slots_) {
      s.pending.wait();
      s.side_pending.wait();
      s.unit = -1;
      s.open = false;
    }
    // The fp8 codes of the current parameters (collective; a no-op until
    // they change again).
    if (fp8_) fp8_->refresh(shard_);
  }
  void parameters_changed() override {
    if (fp8_) fp8_->invalidate();
  }
  bool fp8_weight(const float* w, int64_t numel, TensorView* codes, TensorView* scale) override {
    if (!fp8_) return false;
    for (const Slot& s : slots_) {
      if (s.unit < 0 || !s.open || !fp8_->gathers(s.unit)) continue;
      const float* base = s.buf.f32();
      if (w < base || w >= base + layout_.units()[static_cast<size_t>(s.unit)].size()) continue;
      return fp8_->find(s.unit, base, s.codes, w, numel, codes, scale);
    }
    return false;
  }
  void before_forward(int unit) override {
    open(unit);
    start_gather(forward_prefetch(layout_, unit));
  }
  void after_forward(int unit) override {
    slot(unit).open = false;
    // Without a backward, embed and head are not kept to the end.
    if (!backward_follows_ && is_embed_or_head(unit)) slot(unit).unit = -1;
  }
  void before_backward(int unit) override {
    open(unit);
    start_gather(backward_prefetch(layout_, unit));
  }
  void after_backward(int unit) override {
    slot(unit).open = false;
    if (is_embed_or_head(unit)) slot(unit).unit = -1;
  }
  void progress() override {
    for (auto& s : slots_) s.pending.test();
  }
  int64_t slot_bytes() const override {
    int64_t n = fp8_ ? fp8_->bytes() : 0;
    for (const auto& s : slots_)
      n += static_cast<int64_t>(s.buf.bytes() + s.codes.bytes() + s.send.bytes() + s.side.bytes());
    return n;
  }

 private:
  struct Slot {  // holds one unit's gathered parameters at a time
    Buffer buf;
    int unit = -1;
    bool open = false;   // `unit` is in use (between its before_* and after_*)
    CommHandle pending;  // the gather in flight
    // fp8 all-gather: the codes, the fp32 side (sent, gathered) and its
    // gather; `unpacked` once the side is in buf.
    Buffer codes, send, side;
    CommHandle side_pending;
    bool unpacked = true;
  };
  Slot& slot(int unit) { return slots_[static_cast<size_t>(unit_slot(layout_, unit))]; }
  const std::string& name(int unit) const {
    static const std::string none = "(none)";
    return unit < 0 ? none : layout_.units()[static_cast<size_t>(unit)].name;
  }
  bool is_embed_or_head(int unit) const {
    return unit == layout_.embed_unit() || unit == layout_.head_unit();
  }
  // Gathered (resident, or started now) and waited; in use until its after_*.
  void open(int unit) {
    start_gather(unit);
    Slot& s = slot(unit);
    s.pending.wait();
    s.side_pending.wait();
    if (!s.unpacked) {
      fp8_->unpack(unit, s.side, s.buf.f32());
      s.unpacked = true;
    }
    s.open = true;
  }
  // Starts gathering `unit` into its slot unless it is there or on its way
  // (nothing for -1).
  void start_gather(int unit) {
    if (unit < 0) return;
    Slot& s = slot(unit);
    if (s.unit == unit) return;  // resident or in flight
    GT_CHECK(!s.open, "gathering unit ", name(unit), " into the slot of unit ", name(s.unit),
             ", which is in use");
    s.pending.wait();  // an earlier gather into this buffer (a prefetch no pass read)
    s.side_pending.wait();
    s.unit = unit;
    if (fp8_ && fp8_->gathers(unit)) {
      auto h = fp8_->start(unit, shard_, s.send, s.codes, s.side);
      s.pending = std::move(h.first);
      s.side_pending = std::move(h.second);
      s.unpacked = false;
      return;
    }
    s.pending = fsdp_.all_gather(shard_.f32() + geom_.shard_storage(unit), s.buf.f32(),
                                 geom_.shard_size(unit));
    s.unpacked = true;
  }

  const ParameterLayout& layout_;
  const ShardGeometry& geom_;
  const Buffer& shard_;
  Communicator& fsdp_;
  std::unique_ptr<Fp8GatheredWeights> fp8_;  // parallel.fp8_allgather, else null
  std::array<Slot, kUnitSlots> slots_;
  bool backward_follows_ = false;
};

// The block units of the chunk holding block unit `unit` (a pipeline rank
// may hold several chunks: interleaved_1f1b), and whether that chunk starts
// the model (its first block follows the embedding) or ends it (its last
// block precedes the head). Blocks' units are consecutive within a chunk.
struct ChunkUnits {
  int first = -1, last = -1;
  bool starts_model = false, ends_model = false;
};
ChunkUnits chunk_units(const ParameterLayout& layout, int unit) {
  const auto& chunks = layout.chunks();  // in block order: a head follows the last
  for (size_t i = 0; i < chunks.size(); ++i) {
    const StageSpan& c = chunks[i];
    const ChunkUnits u{layout.block_unit(c.first_layer), layout.block_unit(c.end_layer - 1),
                       c.first_layer == 0, layout.head_unit() >= 0 && i + 1 == chunks.size()};
    if (unit >= u.first && unit <= u.last) return u;
  }
  return {};
}
// The last stage's copy of embed (a tied head), -1 when the layout has none.
int mirror_unit(const ParameterLayout& layout) {
  const int e = layout.embed_unit();
  return e >= 0 && layout.units()[static_cast<size_t>(e)].mirror ? e : -1;
}
// The first block of the chunk that starts the model, and the last of the
// one that ends it (-1 where this rank holds neither).
int model_first_block(const ParameterLayout& layout) { return layout.block_unit(0); }
int model_last_block(const ParameterLayout& layout) {
  const StageSpan& c = layout.chunks().back();  // chunks in block order
  return layout.head_unit() >= 0 ? layout.block_unit(c.end_layer - 1) : -1;
}

}  // namespace

// Within a chunk the next block in the pass's direction; past a chunk's end
// only what the same pass runs next (the head after the model's last block,
// the embedding before its first), never another chunk's block: the next
// pass may be any chunk's.
int forward_prefetch(const ParameterLayout& layout, int unit) {
  if (unit == layout.head_unit()) return mirror_unit(layout);
  if (unit == layout.embed_unit())
    return unit == mirror_unit(layout) ? -1 : model_first_block(layout);
  const ChunkUnits c = chunk_units(layout, unit);
  if (unit != c.last) return unit + 1;
  return c.ends_model ? layout.head_unit() : -1;
}

int backward_prefetch(const ParameterLayout& layout, int unit) {
  if (unit == layout.embed_unit()) return layout.head_unit();  // embed, or the mirror
  if (unit == layout.head_unit()) return model_last_block(layout);
  const ChunkUnits c = chunk_units(layout, unit);
  if (unit != c.first) return unit - 1;  // the block below
  if (!c.starts_model) return -1;
  const int embed = layout.embed_unit();  // a first stage's embed, not a later one's mirror
  return embed == mirror_unit(layout) ? -1 : embed;
}

std::unique_ptr<UnitParameters> make_unit_parameters(const ParameterLayout& layout,
                                                     const ShardGeometry& geom,
                                                     const ShardedStatePlan& plan,
                                                     const Buffer& params, Ops& ops,
                                                     Communicator& fsdp, Communicator& tp,
                                                     const Fp8GatherOptions& fp8) {
  if (plan.full_params) return std::make_unique<WholeParameters>(layout, params);
  return std::make_unique<GatheredParameters>(layout, geom, plan, params, ops, fsdp, tp, fp8);
}

}  // namespace gt
