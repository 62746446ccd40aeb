#include "trainer/sharding/unit_parameters.hpp"

#include <array>

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

class GatheredParameters final : public UnitParameters {
 public:
  GatheredParameters(const ParameterLayout& layout, const ShardGeometry& geom,
                     const ShardedStatePlan& plan, const Buffer& shard, Ops& ops,
                     Communicator& fsdp)
      : layout_(layout), geom_(geom), shard_(shard), fsdp_(fsdp) {
    for (int i = 0; i < kUnitSlots; ++i)
      slots_[static_cast<size_t>(i)].buf = allocate_floats(ops, plan.slot_size[i]);
  }

  float* unit_params(int unit) override {
    Slot& s = slot(unit);
    GT_CHECK(s.unit == unit && s.pending.done(), "unit ",
             layout_.units()[static_cast<size_t>(unit)].name, " used while not gathered");
    return s.buf.f32();
  }
  void begin_forward(bool backward_follows) override {
    backward_follows_ = backward_follows;
    for (auto& s : slots_) {  // each micro-batch gathers afresh
      s.pending.wait();
      s.unit = -1;
    }
  }
  void before_forward(int unit) override {
    ensure_gathered(unit);
    const int next = next_forward(unit);
    if (next >= 0) start_gather(next);
  }
  void after_forward(int unit) override {
    // Without a backward, embed and head are not kept to the end.
    if (!backward_follows_ && is_embed_or_head(unit)) slot(unit).unit = -1;
  }
  void before_backward(int unit) override {
    ensure_gathered(unit);
    const int next = next_backward(unit);
    if (next >= 0) start_gather(next);
  }
  void after_backward(int unit) override {
    if (is_embed_or_head(unit)) slot(unit).unit = -1;
  }
  void progress() override {
    for (auto& s : slots_) s.pending.test();
  }
  int64_t slot_bytes() const override {
    int64_t n = 0;
    for (const auto& s : slots_) n += static_cast<int64_t>(s.buf.bytes());
    return n;
  }

 private:
  struct Slot {  // holds one unit's gathered parameters at a time
    Buffer buf;
    int unit = -1;
    CommHandle pending;  // the gather in flight
  };
  Slot& slot(int unit) { return slots_[static_cast<size_t>(unit_slot(layout_, unit))]; }
  bool is_embed_or_head(int unit) const {
    return unit == layout_.embed_unit() || unit == layout_.head_unit();
  }
  int next_forward(int unit) const {
    return unit == layout_.head_unit() ? -1 : unit + 1;  // embed, blocks, head
  }
  int next_backward(int unit) const {
    if (unit == layout_.embed_unit()) return layout_.head_unit();
    if (unit == layout_.head_unit())
      return layout_.head_unit() - 1 > 0 ? layout_.head_unit() - 1 : -1;
    return unit - 1 > 0 ? unit - 1 : -1;  // the block below, none below block 0
  }
  void start_gather(int unit) {
    Slot& s = slot(unit);
    if (s.unit == unit) return;  // resident or in flight
    GT_CHECK(s.pending.done(), "gather into a busy buffer");
    s.unit = unit;
    s.pending = fsdp_.all_gather(shard_.f32() + geom_.shard_storage(unit), s.buf.f32(),
                                 geom_.shard_size(unit));
  }
  void ensure_gathered(int unit) {
    start_gather(unit);
    slot(unit).pending.wait();
  }

  const ParameterLayout& layout_;
  const ShardGeometry& geom_;
  const Buffer& shard_;
  Communicator& fsdp_;
  std::array<Slot, kUnitSlots> slots_;
  bool backward_follows_ = false;
};

}  // namespace

std::unique_ptr<UnitParameters> make_unit_parameters(const ParameterLayout& layout,
                                                     const ShardGeometry& geom,
                                                     const ShardedStatePlan& plan,
                                                     const Buffer& params, Ops& ops,
                                                     Communicator& fsdp) {
  if (plan.full_params) return std::make_unique<WholeParameters>(layout, params);
  // The prefetch order below (embed, blocks, head; then back) is the whole
  // model's; a pipeline stage's order is left for the pipeline executor.
  if (!layout.whole_model())
    fail(
        "parallel.fsdp_stage=3 is not supported with parallel.pp > 1 yet (the stage-3 "
        "prefetch assumes the whole model's units); use parallel.fsdp_stage=1 or 2");
  return std::make_unique<GatheredParameters>(layout, geom, plan, params, ops, fsdp);
}

}  // namespace gt
