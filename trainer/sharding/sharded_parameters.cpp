#include "trainer/sharding/sharded_parameters.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/core/error.hpp"

namespace gt {

ShardedParameters::ShardedParameters(const ParameterLayout& layout, const DeviceMesh& mesh,
                                     FsdpStage fsdp_stage, double bucket_mb, Ops& ops,
                                     bool bf16_params)
    : layout_(layout),
      geom_(layout, mesh.dims().fsdp, mesh.coord().fsdp),
      ops_(ops),
      dp_(mesh.dp()),
      fsdp_(mesh.fsdp()),
      tp_(mesh.tp()),
      world_(mesh.world()),
      dp_rank_(mesh.coord().dp),
      tp_rank_(mesh.coord().tp),
      stage_(fsdp_stage) {
  GT_CHECK(bucket_mb > 0, "bucket_mb ", bucket_mb);
  const int64_t T = layout.total();
  const auto& units = layout.units();
  // Every buffer as the state plan sizes it (the planner sums the same plan).
  const ShardedStatePlan plan = plan_sharded_state(layout, geom_.fsdp(), stage_, bf16_params);
  GT_CHECK(plan.full_params == full_params() && plan.full_grads == full_grads(),
           "the state plan and the store disagree on what is whole");
  // Ops::allocate zero-fills: padding elements stay zero (never written by an op).
  auto zeroed = [&ops](int64_t n) {
    return ops.allocate(static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(float));
  };
  params_ = zeroed(plan.params);
  if (plan.params_bf16 > 0)
    params_bf16_ = ops.allocate(static_cast<size_t>(plan.params_bf16) * dtype_size(DType::bf16));
  step_stats_ = zeroed(plan.step_stats);
  // Counted in the norm: each replica by its owner only (owns_replica,
  // trainer/parallelize/placement.hpp).
  for (const auto& seg : geom_.owned()) {
    const int64_t state = geom_.fsdp() == 1 ? seg.flat : seg.storage;
    append_run(adamw_runs_,
               {full_params() ? seg.flat : seg.storage, state, seg.size(), seg.spec->decay});
    // The norm reads only state offsets (param and decay are placeholders).
    if (owns_replica(seg.spec->split, dp_rank_, tp_rank_))
      append_run(norm_runs_, {state, state, seg.size(), true});
  }
  if (plan.grads > 0) grads_ = zeroed(plan.grads);
  if (plan.shard_grads > 0) shard_grads_ = zeroed(plan.shard_grads);
  m_ = zeroed(plan.moments);
  v_ = zeroed(plan.moments);
  for (int i = 0; i < kUnitSlots; ++i) {
    const int64_t size = plan.slot_size[i];
    if (plan.param_slots) param_slots_[static_cast<size_t>(i)].buf = zeroed(size);
    if (plan.grad_slots) {
      grad_slots_[static_cast<size_t>(i)].buf = zeroed(size);
      grad_slots_[static_cast<size_t>(i)].out = zeroed(size / geom_.fsdp());
    }
  }
  unit_rs_.resize(units.size());
  unit_dp_.resize(units.size());
  if (geom_.fsdp() == 1 && dp_.size() > 1) {
    // Buckets cut from the end: the flat layout is in reverse backward order.
    const int64_t per = std::max<int64_t>(16, static_cast<int64_t>(bucket_mb * 1024 * 1024 / 4));
    for (int64_t hi = T; hi > 0; hi -= per) {
      Bucket b;
      b.lo = std::max<int64_t>(0, hi - per);
      b.hi = hi;
      buckets_.push_back(std::move(b));
    }
  }
}

ShardedParameters::~ShardedParameters() = default;

// ---- Where a unit lives -------------------------------------------------------

int ShardedParameters::slot_of(int unit) const {
  if (unit == layout_.embed_unit()) return kEmbedSlot;
  if (unit == layout_.head_unit()) return kHeadSlot;
  return kBlockSlot + (unit - 1) % 2;
}

int ShardedParameters::next_forward(int unit) const {
  return unit == layout_.head_unit() ? -1 : unit + 1;  // embed, blocks, head
}

int ShardedParameters::next_backward(int unit) const {
  if (unit == layout_.embed_unit()) return layout_.head_unit();
  if (unit == layout_.head_unit()) return layout_.head_unit() - 1 > 0 ? layout_.head_unit() - 1 : -1;
  return unit - 1 > 0 ? unit - 1 : -1;  // the block below, none below block 0
}

float* ShardedParameters::unit_params(int unit) {
  if (full_params()) return params_.f32() + layout_.units()[static_cast<size_t>(unit)].begin;
  Slot& s = param_slots_[static_cast<size_t>(slot_of(unit))];
  GT_CHECK(s.unit == unit && s.pending.done(), "unit ", layout_.units()[static_cast<size_t>(unit)].name,
           " used while not gathered");
  return s.buf.f32();
}

float* ShardedParameters::unit_grads(int unit) {
  if (full_grads()) return grads_.f32() + layout_.units()[static_cast<size_t>(unit)].begin;
  Slot& s = grad_slots_[static_cast<size_t>(slot_of(unit))];
  GT_CHECK(s.unit == unit, "gradients of unit ", layout_.units()[static_cast<size_t>(unit)].name,
           " used outside its backward");
  return s.buf.f32();
}

// ---- Parameter gathers (stage 3) ------------------------------------------------

void ShardedParameters::start_gather(int unit) {
  Slot& s = param_slots_[static_cast<size_t>(slot_of(unit))];
  if (s.unit == unit) return;  // resident or in flight
  GT_CHECK(s.pending.done(), "gather into a busy buffer");
  s.unit = unit;
  s.pending = fsdp_.all_gather(params_.f32() + geom_.shard_storage(unit), s.buf.f32(),
                               geom_.shard_size(unit));
}

void ShardedParameters::ensure_gathered(int unit) {
  start_gather(unit);
  param_slots_[static_cast<size_t>(slot_of(unit))].pending.wait();
}

void ShardedParameters::progress() {
  // MPI moves non-blocking collectives only inside MPI calls: poll them here,
  // between ops, so they advance while compute goes on. Completion never
  // launches anything (that would break the common order across ranks).
  for (auto& s : param_slots_) s.pending.test();
  for (auto& s : grad_slots_) s.pending.test();
  for (auto& h : unit_rs_) h.test();
  for (auto& h : unit_dp_) h.test();
  for (auto& b : buckets_) b.h.test();
}

const uint16_t* ShardedParameters::unit_params_bf16(int unit) {
  if (!keeps_bf16_params()) return nullptr;
  GT_CHECK(!params_bf16_stale_,
           "the bf16 copy of the parameters was read before begin_forward "
           "refreshed it");
  return static_cast<const uint16_t*>(params_bf16_.data()) +
         layout_.units()[static_cast<size_t>(unit)].begin;
}

void ShardedParameters::refresh_bf16_params() {
  const int64_t T = layout_.total();
  ops_.cast(make_view(params_bf16_.data(), DType::bf16, ops_.device(), {T}),
            view(params_.f32(), {T}));
  params_bf16_stale_ = false;
}

void ShardedParameters::begin_forward(bool backward_follows) {
  backward_follows_ = backward_follows;
  if (keeps_bf16_params() && params_bf16_stale_) refresh_bf16_params();
  if (!full_params())  // each micro-batch gathers afresh (parameters may have changed)
    for (auto& s : param_slots_) {
      s.pending.wait();
      s.unit = -1;
    }
}

void ShardedParameters::before_forward(int unit) {
  if (!full_params()) {
    ensure_gathered(unit);
    const int next = next_forward(unit);
    if (next >= 0) start_gather(next);
  }
  progress();
}

void ShardedParameters::after_forward(int unit) {
  if (!full_params() && !backward_follows_ &&
      (unit == layout_.embed_unit() || unit == layout_.head_unit()))
    param_slots_[static_cast<size_t>(slot_of(unit))].unit = -1;
}

// ---- Gradients ------------------------------------------------------------------

bool ShardedParameters::reduce_now() const {
  // Stage 2/3 keep only the shard of the gradients: every micro-batch's unit
  // gradients are reduced away. Otherwise they accumulate until the last.
  return last_micro_ || !full_grads();
}

void ShardedParameters::begin_step() {
  if (full_grads()) ops_.zero(view(grads_.f32(), {layout_.total()}));
  if (geom_.fsdp() > 1) ops_.zero(view(shard_grads_.f32(), {geom_.storage_total()}));
  for (auto& b : buckets_) b.started = false;
}

void ShardedParameters::begin_micro_batch(bool last) {
  last_micro_ = last;
  watermark_ = layout_.total();
}

void ShardedParameters::before_backward(int unit) {
  if (!full_params()) {
    ensure_gathered(unit);
    const int next = next_backward(unit);
    if (next >= 0) start_gather(next);
  }
  if (!full_grads()) {
    Slot& s = grad_slots_[static_cast<size_t>(slot_of(unit))];
    complete_grad_slot(s);  // the unit that used this buffer before (fixed schedule)
    s.unit = unit;
    ops_.zero(view(s.buf.f32(), {layout_.units()[static_cast<size_t>(unit)].size()}));
  }
  progress();
}

void ShardedParameters::after_backward(int unit) {
  if (reduce_now()) {
    sum_tp_partial(unit);
    const int64_t begin = layout_.units()[static_cast<size_t>(unit)].begin;
    if (geom_.fsdp() == 1) {
      watermark_ = begin;
      start_ready_buckets();
    } else if (full_grads()) {  // stage 1: the shard straight into shard_grads_
      unit_rs_[static_cast<size_t>(unit)] = fsdp_.reduce_scatter_sum(
          grads_.f32() + begin, shard_grads_.f32() + geom_.shard_storage(unit),
          geom_.shard_size(unit));
    } else {
      Slot& s = grad_slots_[static_cast<size_t>(slot_of(unit))];
      s.pending = fsdp_.reduce_scatter_sum(s.buf.f32(), s.out.f32(), geom_.shard_size(unit));
      s.busy = true;
      s.last = last_micro_;
    }
  }
  if (!full_params() && (unit == layout_.embed_unit() || unit == layout_.head_unit()))
    param_slots_[static_cast<size_t>(slot_of(unit))].unit = -1;
  progress();
}

void ShardedParameters::complete_grad_slot(Slot& s) {
  if (!s.busy) return;
  s.pending.wait();
  s.busy = false;
  const int64_t n = geom_.shard_size(s.unit);
  ops_.accumulate(view(shard_grads_.f32() + geom_.shard_storage(s.unit), {n}),
                  view(s.out.f32(), {n}));
  // Completed late (in the next micro-batch's backward) or not, only the
  // last micro-batch's sum is final and goes to the dp replicas.
  if (s.last) start_dp_reduce(s.unit);
}

void ShardedParameters::start_dp_reduce(int unit) {
  if (dp_.size() == 1) return;
  unit_dp_[static_cast<size_t>(unit)] = dp_.all_reduce_sum(
      shard_grads_.f32() + geom_.shard_storage(unit), geom_.shard_size(unit));
}

void ShardedParameters::sum_tp_partial(int unit) {
  if (tp_.size() == 1) return;
  // Contiguous runs of tp-partial parameters (ln_1 weight+bias, ...): one
  // all-reduce each, waited at once: the data-axis reduction needs the sum.
  float* base = unit_grads(unit);
  const int64_t begin = layout_.units()[static_cast<size_t>(unit)].begin;
  int64_t lo = -1, hi = -1;
  auto flush = [&] {
    if (lo >= 0) tp_.all_reduce_sum(base + (lo - begin), hi - lo).wait();
    lo = hi = -1;
  };
  for (const auto& s : layout_.specs()) {
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

void ShardedParameters::start_ready_buckets() {
  for (auto& b : buckets_)
    if (!b.started && b.lo >= watermark_) {
      b.h = dp_.all_reduce_sum(grads_.f32() + b.lo, b.hi - b.lo);
      b.started = true;
    }
}

void ShardedParameters::finish_gradients() {
  const size_t n_units = layout_.units().size();
  if (geom_.fsdp() == 1) {
    watermark_ = 0;
    start_ready_buckets();
    for (auto& b : buckets_) b.h.wait();
    return;
  }
  if (full_grads()) {
    for (size_t u = 0; u < n_units; ++u) {
      unit_rs_[u].wait();
      start_dp_reduce(static_cast<int>(u));
    }
  } else {
    for (auto& s : grad_slots_) complete_grad_slot(s);
  }
  for (auto& h : unit_dp_) h.wait();
}

// ---- Norm and optimizer -----------------------------------------------------------

float* ShardedParameters::owned_grads(const ParamSegment& s) {
  return geom_.fsdp() == 1 ? grads_.f32() + s.flat : shard_grads_.f32() + s.storage;
}
float* ShardedParameters::owned_params(const ParamSegment& s) {
  return full_params() ? params_.f32() + s.flat : params_.f32() + s.storage;
}

void ShardedParameters::reduce_step_stats(TensorView losses) {
  const Buffer& grads = geom_.fsdp() == 1 ? grads_ : shard_grads_;
  const TensorView g = view(grads.f32(), {int64_t(grads.bytes() / sizeof(float))});
  float* stats = step_stats_.f32();
  ops_.sum_squares_runs(view(stats, {1}), g, norm_runs_);
  // Squares of the losses: finite exactly when every loss is (they are far
  // from overflowing a float), summed like the gradients' squares; none: 0.
  if (losses.empty())
    ops_.sum_squares_runs(view(stats + 1, {1}), g, {});
  else
    ops_.sum_squares_runs(view(stats + 1, {1}), losses, {{0, 0, losses.numel(), true}});
  if (world_.size() > 1) world_.all_reduce_sum(stats, 2).wait();
}

double ShardedParameters::grad_norm() {
  reduce_step_stats(TensorView{});
  float sq = 0.f;
  ops_.download(&sq, view(step_stats_.f32(), {1}));
  return std::sqrt(static_cast<double>(sq));
}

void ShardedParameters::clipped_adamw_step(const TrainConfig& tc, double lr, int64_t t,
                                           TensorView losses) {
  GT_CHECK(!losses.empty() && losses.ndim == 1 && losses.dtype == DType::f32,
           "clipped_adamw_step: the step's losses must be a 1-D fp32 view, got ",
           losses.shape_str());
  reduce_step_stats(losses);
  const TensorView scale = view(step_stats_.f32() + 2, {1});
  ops_.clip_scale(scale, view(step_stats_.f32(), {2}), static_cast<float>(tc.grad_clip));
  update(tc, lr, 1.f, scale, t);
}

ShardedParameters::StepOutcome ShardedParameters::step_outcome() {
  float stats[3];
  ops_.download(stats, view(step_stats_.f32(), {3}));
  return {std::sqrt(static_cast<double>(stats[0])), std::isfinite(stats[2])};
}

void ShardedParameters::adamw_step(const TrainConfig& tc, double lr, float clip, int64_t t) {
  update(tc, lr, clip, TensorView{}, t);
}

void ShardedParameters::update(const TrainConfig& tc, double lr, float clip, TensorView scale,
                               int64_t t) {
  const Ops::AdamWParams p{static_cast<float>(lr),
                           static_cast<float>(tc.beta1),
                           static_cast<float>(tc.beta2),
                           static_cast<float>(tc.eps),
                           static_cast<float>(tc.weight_decay),
                           clip,
                           t};
  const Buffer& grads = geom_.fsdp() == 1 ? grads_ : shard_grads_;
  auto flat = [this](const Buffer& b) {
    return view(b.f32(), {static_cast<int64_t>(b.bytes() / sizeof(float))});
  };
  // fsdp = 1: the runs cover the whole parameters, so AdamW writes the bf16
  // copy too. Stages 1-2 update a shard and gather: the copy is cast after.
  const bool copy_here = keeps_bf16_params() && geom_.fsdp() == 1;
  const TensorView bf16 =
      copy_here ? make_view(params_bf16_.data(), DType::bf16, ops_.device(), {layout_.total()})
                : TensorView{};
  ops_.adamw_update_runs(flat(params_), flat(grads), flat(m_), flat(v_), bf16, scale, adamw_runs_,
                         p);
  params_bf16_stale_ = !copy_here;
  if (geom_.fsdp() > 1 && full_params()) {  // stage 1/2: everyone gets the updated shards
    std::vector<CommHandle> gathers;
    for (size_t u = 0; u < layout_.units().size(); ++u) {
      const int unit = static_cast<int>(u);
      gathers.push_back(fsdp_.all_gather(params_.f32() + geom_.shard_begin(unit),
                                         params_.f32() + layout_.units()[u].begin,
                                         geom_.shard_size(unit)));
    }
    for (auto& h : gathers) h.wait();
  }
  if (keeps_bf16_params() && params_bf16_stale_) refresh_bf16_params();
}

// ---- Initial values and checkpoints ------------------------------------------------

TensorView ShardedParameters::view(float* p, std::initializer_list<int64_t> shape) const {
  return make_view(p, DType::f32, ops_.device(), shape);
}

void ShardedParameters::load_global(const std::string& name, const float* data) {
  const ParamSpec& spec = layout_.at(name);
  const int64_t gcols = cols_2d(spec.global_shape);
  std::vector<float> box_data;  // one box, contiguous on the host, then one upload
  for (const auto& seg : full_params() ? geom_.whole() : geom_.owned()) {
    if (seg.spec != &spec) continue;
    float* dst = full_params() ? params_.f32() + seg.flat : params_.f32() + seg.storage;
    for (const auto& b : segment_boxes(layout_, spec, seg.local_begin, seg.local_end)) {
      box_data.resize(static_cast<size_t>(b.rows * b.cols));
      for (int64_t r = 0; r < b.rows; ++r)
        std::copy(data + (b.row0 + r) * gcols + b.col0,
                  data + (b.row0 + r) * gcols + b.col0 + b.cols, box_data.data() + r * b.cols);
      ops_.upload(view(dst + b.offset, {b.rows * b.cols}), box_data.data());
    }
  }
  params_bf16_stale_ = true;
}

std::vector<TensorPiece> ShardedParameters::pieces(const std::vector<ParamSegment>& segs,
                                                   bool params, bool moments, bool dedup) {
  std::vector<TensorPiece> out;
  for (const auto& seg : segs) {
    // Deduplicated: each replica written by its owner only.
    if (dedup && !owns_replica(seg.spec->split, dp_rank_, tp_rank_)) continue;
    const int64_t at = geom_.fsdp() == 1 ? seg.flat : seg.storage;
    for (const auto& b : segment_boxes(layout_, *seg.spec, seg.local_begin, seg.local_end)) {
      const TensorBox box{b.row0, b.rows, b.col0, b.cols};
      if (params)
        out.push_back({"param." + seg.spec->name, seg.spec->global_shape, box,
                       owned_params(seg) + b.offset});
      if (moments) {
        out.push_back({"adam_m." + seg.spec->name, seg.spec->global_shape, box,
                       m_.f32() + at + b.offset});
        out.push_back({"adam_v." + seg.spec->name, seg.spec->global_shape, box,
                       v_.f32() + at + b.offset});
      }
    }
  }
  return out;
}

std::vector<TensorPiece> ShardedParameters::stage_on_host(std::vector<TensorPiece> pieces,
                                                         bool download) {
  staged_.clear();
  if (ops_.device() == Device::cpu) return pieces;  // already host memory
  int64_t total = 0;
  for (const auto& p : pieces) total += p.box.rows * p.box.cols;
  host_stage_.assign(static_cast<size_t>(total), 0.f);
  int64_t at = 0;
  for (auto& p : pieces) {
    const int64_t n = p.box.rows * p.box.cols;
    float* host = host_stage_.data() + at;
    if (download) ops_.download(host, view(p.data, {n}));
    staged_.push_back({p.data, host, n});
    p.data = host;
    at += n;
  }
  return pieces;
}

std::vector<TensorPiece> ShardedParameters::pieces_to_save() {
  return stage_on_host(pieces(geom_.owned(), true, true, true), true);
}

std::vector<TensorPiece> ShardedParameters::pieces_to_load() {
  std::vector<TensorPiece> out = pieces(geom_.owned(), !full_params() || geom_.fsdp() == 1, true, false);
  if (full_params() && geom_.fsdp() > 1) {  // every parameter whole, moments for the shard
    std::vector<TensorPiece> whole = pieces(geom_.whole(), true, false, false);
    out.insert(out.end(), whole.begin(), whole.end());
  }
  return stage_on_host(std::move(out), false);
}

void ShardedParameters::finish_load() {
  params_bf16_stale_ = true;  // the parameters were just read in
  for (const auto& s : staged_) ops_.upload(view(s.device, {s.n}), s.host);
  staged_.clear();
  host_stage_ = {};
}

MemoryFigures ShardedParameters::memory() const {
  auto bytes = [](const Buffer& b) { return static_cast<int64_t>(b.bytes()); };
  MemoryFigures f;
  f.params = bytes(params_) + bytes(params_bf16_);
  f.grads = bytes(grads_) + bytes(shard_grads_);
  for (const auto& s : param_slots_) f.params += bytes(s.buf);
  for (const auto& s : grad_slots_) f.grads += bytes(s.buf) + bytes(s.out);
  f.optimizer = bytes(m_) + bytes(v_);
  const int64_t T = layout_.total() * static_cast<int64_t>(sizeof(float));
  f.params_unsharded = T;
  f.grads_unsharded = T;
  f.optimizer_unsharded = 2 * T;
  return f;
}

}  // namespace gt
