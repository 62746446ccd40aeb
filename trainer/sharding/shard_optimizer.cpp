#include "trainer/sharding/shard_optimizer.hpp"

#include <cmath>

#include "kernels/core/error.hpp"
#include "trainer/parallelize/placement.hpp"

namespace gt {

ShardOptimizer::ShardOptimizer(Ops& ops, Communicator& world, const ShardGeometry& geom,
                               bool full_params, int64_t moments, int dp_rank, int tp_rank)
    : ops_(ops), world_(world) {
  // State offsets: the flat ones at fsdp = 1, the shard storage's otherwise.
  for (const auto& seg : geom.owned()) {
    const int64_t state = geom.fsdp() == 1 ? seg.flat : seg.storage;
    append_run(adamw_runs_,
               {full_params ? seg.flat : seg.storage, state, seg.size(), seg.spec->decay});
    // The norm reads only state offsets (param and decay are placeholders).
    // A pipeline stage's mirror of wte is counted by the first stage.
    if (owns_replica(seg.spec->split, dp_rank, tp_rank) && !seg.spec->mirror)
      append_run(norm_runs_, {state, state, seg.size(), true});
  }
  m_ = allocate_floats(ops, moments);
  v_ = allocate_floats(ops, moments);
  stats_ = allocate_floats(ops, 3);
}

TensorView ShardOptimizer::view(float* p, std::initializer_list<int64_t> shape) const {
  return make_view(p, DType::f32, ops_.device(), shape);
}

void ShardOptimizer::reduce_stats(const TensorView& grads, const TensorView& losses) {
  float* stats = stats_.f32();
  ops_.sum_squares_runs(view(stats, {1}), grads, norm_runs_);
  // Squares of the losses: finite exactly when every loss is (they are far
  // from overflowing a float), summed like the gradients' squares; none: 0.
  if (losses.empty())
    ops_.sum_squares_runs(view(stats + 1, {1}), grads, {});
  else
    ops_.sum_squares_runs(view(stats + 1, {1}), losses, {{0, 0, losses.numel(), true}});
  if (world_.size() > 1) world_.all_reduce_sum(stats, 2).wait();
}

double ShardOptimizer::grad_norm(const State& s) {
  reduce_stats(s.grads, TensorView{});
  float sq = 0.f;
  ops_.download(&sq, view(stats_.f32(), {1}));
  return std::sqrt(static_cast<double>(sq));
}

void ShardOptimizer::step(const State& s, const TrainConfig& tc, double lr, float clip, int64_t t) {
  update(s, tc, lr, clip, TensorView{}, t);
}

void ShardOptimizer::clipped_step(const State& s, const TrainConfig& tc, double lr, int64_t t,
                                  TensorView losses) {
  GT_CHECK(!losses.empty() && losses.ndim == 1 && losses.dtype == DType::f32,
           "clipped_adamw_step: the step's losses must be a 1-D fp32 view, got ",
           losses.shape_str());
  reduce_stats(s.grads, losses);
  const TensorView scale = view(stats_.f32() + 2, {1});
  ops_.clip_scale(scale, view(stats_.f32(), {2}), static_cast<float>(tc.grad_clip));
  update(s, tc, lr, 1.f, scale, t);
}

ShardOptimizer::Outcome ShardOptimizer::outcome() {
  float stats[3];
  ops_.download(stats, view(stats_.f32(), {3}));
  return {std::sqrt(static_cast<double>(stats[0])), std::isfinite(stats[2])};
}

void ShardOptimizer::update(const State& s, const TrainConfig& tc, double lr, float clip,
                            TensorView scale, int64_t t) {
  const Ops::AdamWParams p{static_cast<float>(lr),
                           static_cast<float>(tc.beta1),
                           static_cast<float>(tc.beta2),
                           static_cast<float>(tc.eps),
                           static_cast<float>(tc.weight_decay),
                           clip,
                           t};
  ops_.adamw_update_runs(s.params, s.grads, m_.f32_view({m_.floats()}), v_.f32_view({v_.floats()}),
                         s.params_bf16, scale, adamw_runs_, p);
}

}  // namespace gt
