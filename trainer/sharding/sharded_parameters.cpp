#include "trainer/sharding/sharded_parameters.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/core/error.hpp"

namespace gt {

ShardedParameters::ShardedParameters(const ParameterLayout& layout, const DeviceMesh& mesh,
                                     FsdpStage fsdp_stage, double bucket_mb, Ops& ops,
                                     bool bf16_params, ComputeDType reduce_dtype,
                                     const Fp8GatherOptions& fp8)
    : layout_(layout),
      geom_(layout, mesh.axis(shard_axis(mesh.dims())).size(),
            mesh.axis(shard_axis(mesh.dims())).rank()),
      ops_(ops),
      dp_(mesh.axis(replica_axis(mesh.dims()))),
      fsdp_(mesh.axis(shard_axis(mesh.dims()))),
      tp_(mesh.tp()),
      world_(mesh.world()),
      dp_rank_(dp_.rank()),
      tp_rank_(mesh.coord().tp),
      stage_(fsdp_stage),
      plan_(plan_sharded_state(layout, geom_.fsdp(), stage_, bf16_params, dp_.size(),
                               reduce_dtype)) {
  // Every buffer as the state plan sizes it (the planner sums the same plan).
  const ShardedStatePlan& plan = plan_;
  params_ = allocate_floats(ops, plan.params);
  if (plan.params_bf16 > 0)
    params_bf16_ = ops.allocate(static_cast<size_t>(plan.params_bf16) * dtype_size(DType::bf16));
  reducer_ = make_gradient_reducer(
      {layout_, geom_, plan_, ops_, dp_, fsdp_, tp_, bucket_mb, reduce_dtype});
  optimizer_ = std::make_unique<ShardOptimizer>(ops, world_, geom_, full_params(), plan.moments,
                                                dp_rank_, tp_rank_);
  units_ = make_unit_parameters(layout_, geom_, plan_, params_, ops_, fsdp_, tp_, fp8);
}

ShardedParameters::~ShardedParameters() = default;

// ---- Where a unit lives -------------------------------------------------------

float* ShardedParameters::unit_params(int unit) { return units_->unit_params(unit); }

float* ShardedParameters::unit_grads(int unit) { return reducer_->unit_grads(unit); }

void ShardedParameters::progress() {
  // MPI moves non-blocking collectives only inside MPI calls: poll them here,
  // between ops, so they advance while compute goes on. Completion never
  // launches anything (that would break the common order across ranks).
  units_->progress();
  reducer_->progress();
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
  if (keeps_bf16_params() && params_bf16_stale_) refresh_bf16_params();
  units_->begin_forward(backward_follows);
}

void ShardedParameters::before_forward(int unit) {
  units_->before_forward(unit);
  progress();
}

void ShardedParameters::after_forward(int unit) { units_->after_forward(unit); }

// ---- Gradients (the GradientReducer) ------------------------------------------

void ShardedParameters::begin_step() { reducer_->begin_step(); }

void ShardedParameters::begin_micro_batch(bool last) { reducer_->begin_micro_batch(last); }

void ShardedParameters::before_backward(int unit) {
  units_->before_backward(unit);
  reducer_->before_backward(unit);
  progress();
}

void ShardedParameters::after_backward(int unit) {
  reducer_->after_backward(unit);
  units_->after_backward(unit);
  progress();
}

void ShardedParameters::finish_gradients() { reducer_->finish(); }

TensorView ShardedParameters::owned_unit_grads(int unit) {
  const ParamUnit& u = layout_.units().at(static_cast<size_t>(unit));
  // owned(): the flat gradients at fsdp = 1, shard storage otherwise.
  float* base = reducer_->owned().f32();
  if (geom_.fsdp() == 1) return view(base + u.begin, {u.size()});
  return view(base + geom_.shard_storage(unit), {geom_.shard_size(unit)});
}

// ---- Norm and optimizer -----------------------------------------------------------

float* ShardedParameters::owned_params(const ParamSegment& s) {
  return full_params() ? params_.f32() + s.flat : params_.f32() + s.storage;
}

ShardOptimizer::State ShardedParameters::optimizer_state() {
  const Buffer& grads = reducer_->owned();
  // fsdp = 1: the runs cover the whole parameters, so AdamW writes the bf16
  // copy too. Stages 1-2 update a shard and gather: the copy is cast after.
  const bool copy_here = keeps_bf16_params() && geom_.fsdp() == 1;
  const TensorView bf16 =
      copy_here ? make_view(params_bf16_.data(), DType::bf16, ops_.device(), {layout_.total()})
                : TensorView{};
  return {params_.f32_view({params_.floats()}), grads.f32_view({grads.floats()}), bf16};
}

double ShardedParameters::grad_norm() { return optimizer_->grad_norm(optimizer_state()); }

void ShardedParameters::clipped_adamw_step(const TrainConfig& tc, double lr, int64_t t,
                                           TensorView losses) {
  const ShardOptimizer::State state = optimizer_state();
  optimizer_->clipped_step(state, tc, lr, t, losses);
  after_update(!state.params_bf16.empty());
}

ShardedParameters::StepOutcome ShardedParameters::step_outcome() { return optimizer_->outcome(); }

void ShardedParameters::adamw_step(const TrainConfig& tc, double lr, float clip, int64_t t) {
  const ShardOptimizer::State state = optimizer_state();
  optimizer_->step(state, tc, lr, clip, t);
  after_update(!state.params_bf16.empty());
}

bool ShardedParameters::fp8_weight(const float* w, int64_t numel, TensorView* codes,
                                   TensorView* scale) {
  return units_->fp8_weight(w, numel, codes, scale);
}

void ShardedParameters::after_update(bool wrote_bf16_copy) {
  params_bf16_stale_ = !wrote_bf16_copy;
  units_->parameters_changed();
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
  // A pipeline stage is fed every tensor of the model and keeps its own; a
  // name no stage holds is an error, as at() says.
  if (!layout_.find(name) && layout_.in_model(name)) return;
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
  units_->parameters_changed();
}

std::vector<TensorPiece> ShardedParameters::pieces(const std::vector<ParamSegment>& segs,
                                                   bool params, bool moments, bool dedup) {
  std::vector<TensorPiece> out;
  for (const auto& seg : segs) {
    // Deduplicated: each replica written by its owner only, a pipeline
    // stage's mirror of wte by the first stage.
    if (dedup && (!owns_replica(seg.spec->split, dp_rank_, tp_rank_) || seg.spec->mirror)) continue;
    const int64_t at = geom_.fsdp() == 1 ? seg.flat : seg.storage;
    const ParamSpec& spec = *seg.spec;
    const std::vector<int64_t> shape = spec.saved_shape();
    const bool vocab = spec.pad_rows > 0;
    for (const auto& b : segment_boxes(layout_, spec, seg.local_begin, seg.local_end)) {
      // The padding rows are not saved: a box is cut at the real rows (a
      // partial-row box is one row, wholly in or out; a box of whole rows
      // keeps its start, so its offset holds).
      const int64_t rows = std::min(b.rows, spec.real_rows() - b.row0);
      if (rows <= 0) continue;
      const TensorBox box{b.row0, rows, b.col0, b.cols};
      if (params)
        out.push_back({"param." + spec.name, shape, box, owned_params(seg) + b.offset, vocab});
      if (moments) {
        out.push_back({"adam_m." + spec.name, shape, box, optimizer_->m() + at + b.offset, vocab});
        out.push_back({"adam_v." + spec.name, shape, box, optimizer_->v() + at + b.offset, vocab});
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
  units_->parameters_changed();
  for (const auto& s : staged_) ops_.upload(view(s.device, {s.n}), s.host);
  staged_.clear();
  host_stage_ = {};
}

MemoryFigures ShardedParameters::memory() const {
  auto bytes = [](const Buffer& b) { return static_cast<int64_t>(b.bytes()); };
  MemoryFigures f;
  f.params = bytes(params_) + bytes(params_bf16_);
  f.grads = reducer_->bytes();
  f.params += units_->slot_bytes();
  f.optimizer = optimizer_->moment_bytes();
  const int64_t T = layout_.total() * static_cast<int64_t>(sizeof(float));
  f.params_unsharded = T;
  f.grads_unsharded = T;
  f.optimizer_unsharded = 2 * T;
  return f;
}

}  // namespace gt
