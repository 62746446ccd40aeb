#include "trainer/sharding/gradient_reducer.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "kernels/core/error.hpp"

namespace gt {

namespace {

// What the strategies share: the context, views, the tp-partial sum and the
// HSDP all-reduce of a final shard.
class ReducerBase : public GradientReducer {
 protected:
  explicit ReducerBase(const GradientReducerContext& ctx)
      : c_(ctx), arena_(c_.ops, c_.plan.wire_bf16) {
    unit_dp_.resize(c_.layout.units().size());
    if (c_.dp.size() > 1 && c_.plan.fsdp > 1)
      for (size_t u = 0; u < unit_dp_.size(); ++u)
        unit_dp_[u] = wire(c_.geom.shard_size(static_cast<int>(u)), 0);
  }

  // A reduction at the configured precision; bf16 takes its copies (`in`
  // elements, and `out` for a reduce-scatter) from the arena.
  GradientWire wire(int64_t in, int64_t out) {
    if (c_.reduce_dtype != ComputeDType::bf16) return GradientWire::fp32(c_.ops);
    uint16_t* wire_in = arena_.take(in);
    return GradientWire::bf16(c_.ops, wire_in, out > 0 ? arena_.take(out) : nullptr);
  }
  // Every strategy calls this at the end of its constructor: the copies it
  // took are exactly what the state plan counts.
  void check_wire_plan() const {
    GT_CHECK(arena_.taken() == arena_.capacity(), "the gradient reducer took ", arena_.taken(),
             " bf16 wire elements of the state plan's ", arena_.capacity());
  }
  int64_t wire_bytes() const { return arena_.bytes(); }

  TensorView view(float* p, int64_t n) const {
    return make_view(p, DType::f32, c_.ops.device(), {n});
  }
  int64_t unit_begin(int unit) const { return c_.layout.units()[static_cast<size_t>(unit)].begin; }

  // Contiguous runs of tp-partial parameters (ln_1 weight+bias, ...) of the
  // unit's gradients at `base`: one all-reduce each, waited at once, since
  // the data-axis reduction needs the sum.
  void sum_tp_partial(int unit, float* base) {
    if (c_.tp.size() == 1) return;
    const int64_t begin = unit_begin(unit);
    int64_t lo = -1, hi = -1;
    auto flush = [&] {
      if (lo >= 0) c_.tp.all_reduce_sum(base + (lo - begin), hi - lo).wait();
      lo = hi = -1;
    };
    for (const auto& s : c_.layout.specs()) {
      if (s.unit != unit) continue;
      if (!s.tp_partial_grad) {
        flush();
        continue;
      }
      if (lo < 0) lo = s.offset;
      hi = s.offset + s.numel;
    }
    flush();
  }

  // HSDP: a final shard to its dp replicas (nothing at dp = 1).
  void start_dp_reduce(int unit, float* shard_grads) {
    if (c_.dp.size() == 1) return;
    unit_dp_[static_cast<size_t>(unit)].all_reduce(c_.dp, shard_grads + c_.geom.shard_storage(unit),
                                                   c_.geom.shard_size(unit));
  }
  void wait_dp_reduces() {
    for (auto& h : unit_dp_) h.wait();
  }
  void progress_dp_reduces() {
    for (auto& h : unit_dp_) h.test();
  }

  GradientReducerContext c_;
  bool last_micro_ = true;

 private:
  WireArena arena_;
  std::vector<GradientWire> unit_dp_;  // HSDP: the all-reduce of each unit's shard
};

// fsdp = 1: full gradients, all-reduced over dp in buckets on the last micro-batch.
class DdpBuckets final : public ReducerBase {
 public:
  explicit DdpBuckets(const GradientReducerContext& ctx) : ReducerBase(ctx) {
    grads_ = allocate_floats(c_.ops, c_.plan.grads);
    const int64_t T = c_.layout.total();
    if (c_.dp.size() > 1) {
      // Buckets cut from the end: the flat layout is in reverse backward order.
      const int64_t per =
          std::max<int64_t>(16, static_cast<int64_t>(c_.bucket_mb * 1024 * 1024 / 4));
      for (int64_t hi = T; hi > 0; hi -= per) {
        Bucket b;
        b.lo = std::max<int64_t>(0, hi - per);
        b.hi = hi;
        b.wire = wire(b.hi - b.lo, 0);
        buckets_.push_back(std::move(b));
      }
    }
    check_wire_plan();
  }

  void begin_step() override {
    c_.ops.zero(view(grads_.f32(), c_.layout.total()));
    for (auto& b : buckets_) b.started = false;
  }
  void begin_micro_batch(bool last) override {
    last_micro_ = last;
    watermark_ = c_.layout.total();
  }
  float* unit_grads(int unit) override { return grads_.f32() + unit_begin(unit); }
  void before_backward(int) override {}
  void after_backward(int unit) override {
    if (!last_micro_) return;  // the micro-batches accumulate until the last
    sum_tp_partial(unit, unit_grads(unit));
    watermark_ = unit_begin(unit);
    start_ready_buckets();
  }
  void finish() override {
    watermark_ = 0;
    start_ready_buckets();
    for (auto& b : buckets_) b.wire.wait();
  }
  void progress() override {
    for (auto& b : buckets_) b.wire.test();
  }
  const Buffer& owned() const override { return grads_; }
  int64_t bytes() const override { return static_cast<int64_t>(grads_.bytes()) + wire_bytes(); }

 private:
  struct Bucket {
    int64_t lo = 0, hi = 0;
    bool started = false;
    GradientWire wire;
  };
  // Every bucket whose gradients are final (at or above the watermark).
  void start_ready_buckets() {
    for (auto& b : buckets_)
      if (!b.started && b.lo >= watermark_) {
        b.wire.all_reduce(c_.dp, grads_.f32() + b.lo, b.hi - b.lo);
        b.started = true;
      }
  }

  Buffer grads_;                 // T
  std::vector<Bucket> buckets_;  // dp > 1
  int64_t watermark_ = 0;        // flat offsets >= it have final gradients
};

// Stage 1: full gradients accumulate; after the last micro-batch each unit is
// reduce-scattered into the shard.
class ShardAfterLastMicroBatch final : public ReducerBase {
 public:
  explicit ShardAfterLastMicroBatch(const GradientReducerContext& ctx) : ReducerBase(ctx) {
    grads_ = allocate_floats(c_.ops, c_.plan.grads);
    shard_grads_ = allocate_floats(c_.ops, c_.plan.shard_grads);
    for (size_t u = 0; u < c_.layout.units().size(); ++u) {
      const int64_t shard = c_.geom.shard_size(static_cast<int>(u));
      unit_rs_.push_back(wire(shard * c_.geom.fsdp(), shard));
    }
    check_wire_plan();
  }

  void begin_step() override {
    c_.ops.zero(view(grads_.f32(), c_.layout.total()));
    c_.ops.zero(view(shard_grads_.f32(), c_.geom.storage_total()));
  }
  void begin_micro_batch(bool last) override { last_micro_ = last; }
  float* unit_grads(int unit) override { return grads_.f32() + unit_begin(unit); }
  void before_backward(int) override {}
  void after_backward(int unit) override {
    if (!last_micro_) return;
    sum_tp_partial(unit, unit_grads(unit));
    unit_rs_[static_cast<size_t>(unit)].reduce_scatter(
        c_.fsdp, grads_.f32() + unit_begin(unit), shard_grads_.f32() + c_.geom.shard_storage(unit),
        c_.geom.shard_size(unit));
  }
  void finish() override {
    for (size_t u = 0; u < unit_rs_.size(); ++u) {
      unit_rs_[u].wait();
      start_dp_reduce(static_cast<int>(u), shard_grads_.f32());
    }
    wait_dp_reduces();
  }
  void progress() override {
    for (auto& w : unit_rs_) w.test();
    progress_dp_reduces();
  }
  const Buffer& owned() const override { return shard_grads_; }
  int64_t bytes() const override {
    return static_cast<int64_t>(grads_.bytes() + shard_grads_.bytes()) + wire_bytes();
  }

 private:
  Buffer grads_;                       // T
  Buffer shard_grads_;                 // S
  std::vector<GradientWire> unit_rs_;  // each unit's reduce-scatter into the shard
};

// Stages 2-3: each unit's gradients in a slot, reduce-scattered into the
// shard every micro-batch. Invariants, for the whole model and a pipeline
// stage's units ([embed] blocks [mirror head]: embed only on the first
// stage, head and the mirror of embed (a tied head) on the last) alike:
//   * every unit has one slot (unit_slot: embed or its mirror, head, blocks
//     alternating), so a unit's reductions complete in the order they
//     started, and the step's last one is the last accumulated into the
//     shard before its dp all-reduce (HSDP) starts;
//   * a slot is taken by a unit (before_backward) only once the unit before
//     it there has had its after_backward: at most one block is open at a
//     time, and embed (or the mirror) and head have slots of their own;
//   * forwards touch no gradients, so backwards of different micro-batches
//     may interleave with any forwards (a pipeline schedule): the reductions
//     of one backward complete in a later backward or in finish(), and
//     begin_micro_batch(last) before each backward says which is the last.
// The mirror's gradient is stored like any unit's: the executor sums it
// with the first stage's over the owned shard.
class ShardEveryMicroBatch final : public ReducerBase {
 public:
  explicit ShardEveryMicroBatch(const GradientReducerContext& ctx) : ReducerBase(ctx) {
    shard_grads_ = allocate_floats(c_.ops, c_.plan.shard_grads);
    for (int i = 0; i < kUnitSlots; ++i) {
      const int64_t size = c_.plan.slot_size[i];
      slots_[static_cast<size_t>(i)].buf = allocate_floats(c_.ops, size);
      slots_[static_cast<size_t>(i)].out = allocate_floats(c_.ops, size / c_.geom.fsdp());
      slots_[static_cast<size_t>(i)].wire = wire(size, size / c_.geom.fsdp());
    }
    check_wire_plan();
  }

  void begin_step() override {
    c_.ops.zero(view(shard_grads_.f32(), c_.geom.storage_total()));
    for (auto& s : slots_) s.open = false;  // none is, unless a backward threw on its way
  }
  void begin_micro_batch(bool last) override { last_micro_ = last; }
  float* unit_grads(int unit) override {
    Slot& s = slot(unit);
    GT_CHECK(s.unit == unit, "gradients of unit ",
             c_.layout.units()[static_cast<size_t>(unit)].name, " used outside its backward");
    return s.buf.f32();
  }
  void before_backward(int unit) override {
    Slot& s = slot(unit);
    GT_CHECK(!s.open, "backward of unit ", c_.layout.units()[static_cast<size_t>(unit)].name,
             " while unit ", c_.layout.units()[static_cast<size_t>(s.unit)].name,
             " holds its gradient slot");
    complete(s);  // the unit that used this buffer before (fixed schedule)
    s.unit = unit;
    s.open = true;
    c_.ops.zero(view(s.buf.f32(), c_.layout.units()[static_cast<size_t>(unit)].size()));
  }
  void after_backward(int unit) override {
    Slot& s = slot(unit);
    s.open = false;
    sum_tp_partial(unit, s.buf.f32());
    s.wire.reduce_scatter(c_.fsdp, s.buf.f32(), s.out.f32(), c_.geom.shard_size(unit));
    s.busy = true;
    s.last = last_micro_;
  }
  void finish() override {
    for (auto& s : slots_) complete(s);
    wait_dp_reduces();
  }
  void progress() override {
    for (auto& s : slots_) s.wire.test();
    progress_dp_reduces();
  }
  const Buffer& owned() const override { return shard_grads_; }
  int64_t bytes() const override {
    int64_t n = static_cast<int64_t>(shard_grads_.bytes());
    for (const auto& s : slots_) n += static_cast<int64_t>(s.buf.bytes() + s.out.bytes());
    return n + wire_bytes();
  }

 private:
  struct Slot {  // holds one unit's gradients at a time
    Buffer buf;  // the unit's gradients
    Buffer out;  // the reduce-scatter's output (one shard)
    int unit = -1;
    bool open = false;   // between the unit's before_backward and after_backward
    GradientWire wire;   // the reduce-scatter in flight
    bool busy = false;   // its result waits to be accumulated into the shard
    bool last = false;   // ... and it is the step's last micro-batch's
  };
  Slot& slot(int unit) { return slots_[static_cast<size_t>(unit_slot(c_.layout, unit))]; }
  // Accumulates the slot's reduced shard, once its reduce-scatter is done.
  void complete(Slot& s) {
    if (!s.busy) return;
    s.wire.wait();
    s.busy = false;
    const int64_t n = c_.geom.shard_size(s.unit);
    c_.ops.accumulate(view(shard_grads_.f32() + c_.geom.shard_storage(s.unit), n),
                      view(s.out.f32(), n));
    // Completed late (in the next micro-batch's backward) or not, only the
    // last micro-batch's sum is final and goes to the dp replicas.
    if (s.last) start_dp_reduce(s.unit, shard_grads_.f32());
  }

  Buffer shard_grads_;  // S
  std::array<Slot, kUnitSlots> slots_;
};

}  // namespace

std::unique_ptr<GradientReducer> make_gradient_reducer(const GradientReducerContext& ctx) {
  GT_CHECK(ctx.bucket_mb > 0, "bucket_mb ", ctx.bucket_mb);
  // Every strategy reduces a unit once its backward is done, and a unit's
  // backward comes once per micro-batch, in reverse flat order. Not so for
  // "embed" on a rank holding both ends of a tied model in two chunks: the
  // LM head's share would be reduced before the embedding's arrives.
  if (ctx.layout.embed_read_by_two_chunks() && (ctx.dp.size() > 1 || ctx.fsdp.size() > 1))
    fail("a pipeline rank holding the first and the last of ", ctx.layout.chunks().size(),
         " chunks of a tied model cannot reduce its gradients over dp=", ctx.dp.size(),
         " x fsdp=", ctx.fsdp.size(),
         " ranks yet (the embedding's gradient is written by two chunks); with parallel.pp > 1 "
         "the first and the last chunk are on different ranks");
  if (ctx.plan.fsdp == 1) return std::make_unique<DdpBuckets>(ctx);
  if (ctx.plan.full_grads) return std::make_unique<ShardAfterLastMicroBatch>(ctx);
  return std::make_unique<ShardEveryMicroBatch>(ctx);
}

}  // namespace gt
