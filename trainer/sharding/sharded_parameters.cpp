#include "trainer/sharding/sharded_parameters.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/core/error.hpp"
#include "parallel/in_process_communicator.hpp"

namespace gt {

ShardedParameters::ShardedParameters(const ParameterLayout& layout, const DeviceMesh& mesh,
                                     FsdpStage fsdp_stage, double bucket_mb, Ops& ops,
                                     bool bf16_params, ComputeDType reduce_dtype,
                                     const Fp8GatherOptions& fp8,
                                     std::vector<std::unique_ptr<ParameterLayout>> parts)
    : layout_(layout),
      ops_(ops),
      tp_(mesh.tp()),
      world_(mesh.world()),
      tp_rank_(mesh.coord().tp),
      stage_(fsdp_stage) {
  const ParallelDims& d = mesh.dims();
  Communicator& dp = mesh.axis(replica_axis(d));
  Communicator& fsdp = mesh.axis(shard_axis(d));
  // A layout of every expert on an ep mesh would store experts its ranks
  // never run (and the mixture refuses their weights): the two must agree.
  GT_CHECK(d.ep == layout.experts().ep, "a layout for parallel.ep=", layout.experts().ep,
           " in a mesh of ", d.str());
  if (layout.experts().ep == 1) {
    GT_CHECK(parts.empty(), "ShardedParameters: layout parts at parallel.ep=1");
    add_part(layout, nullptr, dp, fsdp, 0, bucket_mb, bf16_params, reduce_dtype, fp8);
  } else {
    GT_CHECK(parts.size() == 2 && parts[0] && parts[1] &&
                 parts[0]->part() == LayoutPart::dense && parts[1]->part() == LayoutPart::experts,
             "ShardedParameters at parallel.ep=", layout.experts().ep,
             ": expected the dense and the expert layout parts");
    // Experts: sharded over all of edp (fsdp > 1) or replicated over it.
    self_ = std::make_unique<InProcessCommunicator>("self");
    Communicator& edp = mesh.edp();
    Communicator& edp_replicas = d.fsdp > 1 ? *self_ : edp;
    Communicator& edp_shards = d.fsdp > 1 ? edp : *self_;
    const int dense_units = static_cast<int>(parts[0]->units().size());
    const ParameterLayout &dense = *parts[0], &experts = *parts[1];
    add_part(dense, std::move(parts[0]), dp, fsdp, 0, bucket_mb, bf16_params, reduce_dtype, fp8);
    // The experts keep a bf16 copy exactly when the dense part does: the
    // model reads one or casts itself, for every weight alike (stage 3 with
    // a one-rank edp group stores the experts whole, yet the model casts).
    const bool dense_copy = parts_.front()->params_bf16.bytes() > 0;
    add_part(experts, std::move(parts[1]), edp_replicas, edp_shards, dense_units, bucket_mb,
             dense_copy, reduce_dtype, Fp8GatherOptions{});
    GT_CHECK(dense_units + static_cast<int>(parts_[1]->layout->units().size()) ==
                 static_cast<int>(layout.units().size()),
             "the layout parts' units do not add up to the whole layout's");
  }
  keeps_bf16_ = parts_.front()->params_bf16.bytes() > 0;
  // Each block's expert unit goes with the block's hooks.
  experts_with_.assign(layout.units().size(), -1);
  if (parts_.size() == 2)
    for (const StageSpan& c : layout.chunks())
      for (int l = c.first_layer; l < c.end_layer; ++l)
        experts_with_[static_cast<size_t>(layout.block_unit(l))] =
            parts_[1]->layout->block_unit(l);
  std::vector<ShardOptimizer::Share> shares;
  for (const auto& p : parts_)
    shares.push_back({p->geom.get(), p->full_params(), p->plan.moments, p->dp->rank()});
  optimizer_ = std::make_unique<ShardOptimizer>(ops, world_, shares, tp_rank_);
}

void ShardedParameters::add_part(const ParameterLayout& layout,
                                 std::unique_ptr<ParameterLayout> own, Communicator& dp,
                                 Communicator& fsdp, int first_unit, double bucket_mb,
                                 bool bf16_params, ComputeDType reduce_dtype,
                                 const Fp8GatherOptions& fp8) {
  // On the heap: the reducer and unit strategy hold references into it.
  auto owned = std::make_unique<Part>();
  Part& q = *owned;
  q.layout = &layout;
  q.own_layout = std::move(own);
  q.first_unit = first_unit;
  q.dp = &dp;
  q.fsdp = &fsdp;
  q.geom = std::make_unique<ShardGeometry>(layout, fsdp.size(), fsdp.rank());
  q.plan = plan_sharded_state(layout, q.geom->fsdp(), stage_, bf16_params, dp.size(), reduce_dtype);
  // Every buffer as the state plan sizes it (the planner sums the same plan).
  q.params = allocate_floats(ops_, q.plan.params);
  if (q.plan.params_bf16 > 0)
    q.params_bf16 =
        ops_.allocate(static_cast<size_t>(q.plan.params_bf16) * dtype_size(DType::bf16));
  q.reducer = make_gradient_reducer(
      {*q.layout, *q.geom, q.plan, ops_, *q.dp, *q.fsdp, tp_, bucket_mb, reduce_dtype});
  q.units = make_unit_parameters(*q.layout, *q.geom, q.plan, q.params, ops_, *q.fsdp, tp_, fp8);
  parts_.push_back(std::move(owned));
}

ShardedParameters::~ShardedParameters() = default;

// ---- Where a unit lives -------------------------------------------------------

ShardedParameters::Part& ShardedParameters::part_of(int unit, int* local) {
  GT_CHECK(unit >= 0 && unit < static_cast<int>(layout_.units().size()), "unit ", unit, " of ",
           layout_.units().size());
  Part& p = parts_.size() == 2 && unit >= parts_[1]->first_unit ? *parts_[1] : *parts_[0];
  *local = unit - p.first_unit;
  return p;
}

int ShardedParameters::experts_with(int unit) const {
  return unit >= 0 && unit < static_cast<int>(experts_with_.size())
             ? experts_with_[static_cast<size_t>(unit)]
             : -1;
}

float* ShardedParameters::unit_params(int unit) {
  int local = 0;
  Part& p = part_of(unit, &local);
  return p.units->unit_params(local);
}

float* ShardedParameters::unit_grads(int unit) {
  int local = 0;
  Part& p = part_of(unit, &local);
  return p.reducer->unit_grads(local);
}

void ShardedParameters::progress() {
  // MPI moves non-blocking collectives only inside MPI calls: poll them here,
  // between ops, so they advance while compute goes on. Completion never
  // launches anything (that would break the common order across ranks).
  for (const auto& owned : parts_) {
    Part& p = *owned;
    p.units->progress();
    p.reducer->progress();
  }
}

const uint16_t* ShardedParameters::unit_params_bf16(int unit) {
  if (!keeps_bf16_params()) return nullptr;
  int local = 0;
  Part& p = part_of(unit, &local);
  GT_CHECK(!p.params_bf16_stale,
           "the bf16 copy of the parameters was read before begin_forward "
           "refreshed it");
  return static_cast<const uint16_t*>(p.params_bf16.data()) +
         p.layout->units()[static_cast<size_t>(local)].begin;
}

void ShardedParameters::refresh_bf16_params(Part& p) {
  const int64_t T = p.layout->total();
  ops_.cast(make_view(p.params_bf16.data(), DType::bf16, ops_.device(), {T}),
            view(p.params.f32(), {T}));
  p.params_bf16_stale = false;
}

void ShardedParameters::begin_forward(bool backward_follows) {
  for (const auto& owned : parts_) {
    Part& p = *owned;
    if (p.params_bf16.bytes() > 0 && p.params_bf16_stale) refresh_bf16_params(p);
    p.units->begin_forward(backward_follows);
  }
}

// A block's expert unit is gathered with the block (after it, in the same
// order on every rank) and released after it; in backward its gradients are
// final before the block's (the experts' backward runs inside the block's).
void ShardedParameters::before_forward(int unit) {
  int local = 0;
  part_of(unit, &local).units->before_forward(local);
  if (const int e = experts_with(unit); e >= 0) parts_[1]->units->before_forward(e);
  progress();
}

void ShardedParameters::after_forward(int unit) {
  if (const int e = experts_with(unit); e >= 0) parts_[1]->units->after_forward(e);
  int local = 0;
  part_of(unit, &local).units->after_forward(local);
}

// ---- Gradients (the GradientReducer) ------------------------------------------

void ShardedParameters::begin_step() {
  for (const auto& p : parts_) p->reducer->begin_step();
}

void ShardedParameters::begin_micro_batch(bool last) {
  for (const auto& p : parts_) p->reducer->begin_micro_batch(last);
}

void ShardedParameters::before_backward(int unit) {
  int local = 0;
  Part& p = part_of(unit, &local);
  p.units->before_backward(local);
  p.reducer->before_backward(local);
  if (const int e = experts_with(unit); e >= 0) {
    parts_[1]->units->before_backward(e);
    parts_[1]->reducer->before_backward(e);
  }
  progress();
}

void ShardedParameters::after_backward(int unit) {
  if (const int e = experts_with(unit); e >= 0) {
    parts_[1]->reducer->after_backward(e);
    parts_[1]->units->after_backward(e);
  }
  int local = 0;
  Part& p = part_of(unit, &local);
  p.reducer->after_backward(local);
  p.units->after_backward(local);
  progress();
}

void ShardedParameters::finish_gradients() {
  for (const auto& p : parts_) p->reducer->finish();
}

TensorView ShardedParameters::owned_unit_grads(int unit) {
  int local = 0;
  Part& p = part_of(unit, &local);
  const ParamUnit& u = p.layout->units().at(static_cast<size_t>(local));
  // owned(): the flat gradients at fsdp = 1, shard storage otherwise.
  float* base = p.reducer->owned().f32();
  if (p.geom->fsdp() == 1) return view(base + u.begin, {u.size()});
  return view(base + p.geom->shard_storage(local), {p.geom->shard_size(local)});
}

// ---- Norm and optimizer -----------------------------------------------------------

ShardOptimizer::States ShardedParameters::optimizer_states() {
  ShardOptimizer::States out;
  for (const auto& owned : parts_) {
    Part& p = *owned;
    const Buffer& grads = p.reducer->owned();
    // fsdp = 1: the runs cover the whole parameters, so AdamW writes the bf16
    // copy too. Stages 1-2 update a shard and gather: the copy is cast after.
    const bool copy_here = p.params_bf16.bytes() > 0 && p.geom->fsdp() == 1;
    const TensorView bf16 = copy_here ? make_view(p.params_bf16.data(), DType::bf16,
                                                  ops_.device(), {p.layout->total()})
                                      : TensorView{};
    out.push_back(
        {p.params.f32_view({p.params.floats()}), grads.f32_view({grads.floats()}), bf16});
  }
  return out;
}

double ShardedParameters::grad_norm() { return optimizer_->grad_norm(optimizer_states()); }

void ShardedParameters::clipped_adamw_step(const TrainConfig& tc, double lr, int64_t t,
                                           TensorView losses) {
  const ShardOptimizer::States states = optimizer_states();
  optimizer_->clipped_step(states, tc, lr, t, losses);
  after_update(states);
}

ShardedParameters::StepOutcome ShardedParameters::step_outcome() { return optimizer_->outcome(); }

void ShardedParameters::adamw_step(const TrainConfig& tc, double lr, float clip, int64_t t) {
  const ShardOptimizer::States states = optimizer_states();
  optimizer_->step(states, tc, lr, clip, t);
  after_update(states);
}

bool ShardedParameters::fp8_weight(const float* w, int64_t numel, TensorView* codes,
                                   TensorView* scale) {
  return parts_.front()->units->fp8_weight(w, numel, codes, scale);  // the experts stay bf16
}

void ShardedParameters::after_update(const ShardOptimizer::States& states) {
  for (size_t i = 0; i < parts_.size(); ++i) {
    Part& p = *parts_[i];
    p.params_bf16_stale = states[i].params_bf16.empty();
    p.units->parameters_changed();
    if (p.geom->fsdp() > 1 && p.full_params()) {  // stage 1/2: everyone gets the updated shards
      std::vector<CommHandle> gathers;
      for (size_t u = 0; u < p.layout->units().size(); ++u) {
        const int unit = static_cast<int>(u);
        gathers.push_back(p.fsdp->all_gather(p.params.f32() + p.geom->shard_begin(unit),
                                             p.params.f32() + p.layout->units()[u].begin,
                                             p.geom->shard_size(unit)));
      }
      for (auto& h : gathers) h.wait();
    }
    if (p.params_bf16.bytes() > 0 && p.params_bf16_stale) refresh_bf16_params(p);
  }
}

// ---- Initial values and checkpoints ------------------------------------------------

TensorView ShardedParameters::view(float* p, std::initializer_list<int64_t> shape) const {
  return make_view(p, DType::f32, ops_.device(), shape);
}

void ShardedParameters::parameters_loaded() {
  for (const auto& owned : parts_) {
    Part& p = *owned;
    p.params_bf16_stale = true;
    p.units->parameters_changed();
  }
}

void ShardedParameters::load_global(const std::string& name, const float* data) {
  // A pipeline stage is fed every tensor of the model and keeps its own (an
  // ep rank its own experts); a name no stage holds is an error, as at() says.
  if (!layout_.find(name) && layout_.in_model(name)) return;
  layout_.at(name);
  Part* part = nullptr;
  for (const auto& p : parts_)
    if (p->layout->find(name)) part = p.get();
  GT_CHECK(part, "parameter '", name, "' is in no part of the store");
  Part& p = *part;
  const ParamSpec& spec = p.layout->at(name);
  const int64_t gcols = cols_2d(spec.global_shape);
  std::vector<float> box_data;  // one box, contiguous on the host, then one upload
  for (const auto& seg : p.full_params() ? p.geom->whole() : p.geom->owned()) {
    if (seg.spec != &spec) continue;
    float* dst = p.full_params() ? p.params.f32() + seg.flat : p.params.f32() + seg.storage;
    for (const auto& b : segment_boxes(*p.layout, spec, seg.local_begin, seg.local_end)) {
      box_data.resize(static_cast<size_t>(b.rows * b.cols));
      for (int64_t r = 0; r < b.rows; ++r)
        std::copy(data + (b.row0 + r) * gcols + b.col0,
                  data + (b.row0 + r) * gcols + b.col0 + b.cols, box_data.data() + r * b.cols);
      ops_.upload(view(dst + b.offset, {b.rows * b.cols}), box_data.data());
    }
  }
  parameters_loaded();
}

std::vector<TensorPiece> ShardedParameters::pieces(size_t part,
                                                   const std::vector<ParamSegment>& segs,
                                                   bool params, bool moments, bool dedup) {
  Part& p = *parts_[part];
  std::vector<TensorPiece> out;
  for (const auto& seg : segs) {
    // Deduplicated: each replica written by its owner only, a pipeline
    // stage's mirror of wte by the first stage.
    if (dedup && (!owns_replica(seg.spec->split, p.dp->rank(), tp_rank_) || seg.spec->mirror))
      continue;
    const int64_t at = p.geom->fsdp() == 1 ? seg.flat : seg.storage;
    const ParamSpec& spec = *seg.spec;
    const std::vector<int64_t> shape = spec.saved_shape();
    const bool vocab = spec.pad_rows > 0;
    float* param_base = p.full_params() ? p.params.f32() + seg.flat : p.params.f32() + seg.storage;
    for (const auto& b : segment_boxes(*p.layout, spec, seg.local_begin, seg.local_end)) {
      // The padding rows are not saved: a box is cut at the real rows (a
      // partial-row box is one row, wholly in or out; a box of whole rows
      // keeps its start, so its offset holds).
      const int64_t rows = std::min(b.rows, spec.real_rows() - b.row0);
      if (rows <= 0) continue;
      const TensorBox box{b.row0, rows, b.col0, b.cols};
      if (params) out.push_back({"param." + spec.name, shape, box, param_base + b.offset, vocab});
      if (moments) {
        out.push_back(
            {"adam_m." + spec.name, shape, box, optimizer_->m(part) + at + b.offset, vocab});
        out.push_back(
            {"adam_v." + spec.name, shape, box, optimizer_->v(part) + at + b.offset, vocab});
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
  std::vector<TensorPiece> out;
  for (size_t i = 0; i < parts_.size(); ++i) {
    std::vector<TensorPiece> mine = pieces(i, parts_[i]->geom->owned(), true, true, true);
    out.insert(out.end(), mine.begin(), mine.end());
  }
  return stage_on_host(std::move(out), true);
}

std::vector<TensorPiece> ShardedParameters::pieces_to_load() {
  std::vector<TensorPiece> out;
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Part& p = *parts_[i];
    const bool gathered = p.full_params() && p.geom->fsdp() > 1;
    std::vector<TensorPiece> mine = pieces(i, p.geom->owned(), !gathered, true, false);
    out.insert(out.end(), mine.begin(), mine.end());
    if (gathered) {  // every parameter whole, moments for the shard
      std::vector<TensorPiece> whole = pieces(i, p.geom->whole(), true, false, false);
      out.insert(out.end(), whole.begin(), whole.end());
    }
  }
  return stage_on_host(std::move(out), false);
}

void ShardedParameters::finish_load() {
  parameters_loaded();  // the parameters were just read in
  for (const auto& s : staged_) ops_.upload(view(s.device, {s.n}), s.host);
  staged_.clear();
  host_stage_ = {};
}

MemoryFigures ShardedParameters::memory() const {
  auto bytes = [](const Buffer& b) { return static_cast<int64_t>(b.bytes()); };
  MemoryFigures f;
  for (const auto& owned : parts_) {
    const Part& p = *owned;
    f.params += bytes(p.params) + bytes(p.params_bf16) + p.units->slot_bytes();
    f.grads += p.reducer->bytes();
  }
  // Unsharded: this tp shard with every expert (each ep rank's expert part
  // is as large as this one's).
  int64_t T = parts_.front()->layout->total();
  if (parts_.size() == 2) T += layout_.experts().ep * parts_[1]->layout->total();
  T *= static_cast<int64_t>(sizeof(float));
  f.optimizer = optimizer_->moment_bytes();
  f.params_unsharded = T;
  f.grads_unsharded = T;
  f.optimizer_unsharded = 2 * T;
  return f;
}

}  // namespace gt
