#include "trainer/sharding/shard_optimizer.hpp"

#include <cmath>

#include "kernels/core/error.hpp"
#include "trainer/parallelize/placement.hpp"

namespace gt {

ShardOptimizer::ShardOptimizer(Ops& ops, Communicator& world, const std::vector<Share>& shares,
                               int tp_rank)
    : ops_(ops), world_(world) {
  GT_CHECK(!shares.empty(), "ShardOptimizer of no state");
  for (const Share& share : shares) {
    const ShardGeometry& geom = *share.geom;
    ShareState st;
    // State offsets: the flat ones at fsdp = 1, the shard storage's otherwise.
    for (const auto& seg : geom.owned()) {
      const int64_t state = geom.fsdp() == 1 ? seg.flat : seg.storage;
      append_run(st.adamw_runs,
                 {share.full_params ? seg.flat : seg.storage, state, seg.size(), seg.spec->decay});
      // The norm reads only state offsets (param and decay are placeholders).
      // A pipeline stage's mirror of wte is counted by the first stage.
      if (owns_replica(seg.spec->split, share.replica_rank, tp_rank) && !seg.spec->mirror)
        append_run(st.norm_runs, {state, state, seg.size(), true});
    }
    st.m = allocate_floats(ops, share.moments);
    st.v = allocate_floats(ops, share.moments);
    shares_.push_back(std::move(st));
  }
  stats_ = allocate_floats(ops, 4);
}

int64_t ShardOptimizer::moment_bytes() const {
  int64_t n = 0;
  for (const ShareState& st : shares_) n += static_cast<int64_t>(st.m.bytes() + st.v.bytes());
  return n;
}

TensorView ShardOptimizer::view(float* p, std::initializer_list<int64_t> shape) const {
  return make_view(p, DType::f32, ops_.device(), shape);
}

void ShardOptimizer::reduce_stats(const States& s, const TensorView& losses) {
  GT_CHECK(s.size() == shares_.size(), "ShardOptimizer: ", s.size(), " states for ",
           shares_.size(), " shares");
  float* stats = stats_.f32();
  const TensorView grads = s.front().grads;
  ops_.sum_squares_runs(view(stats, {1}), grads, shares_.front().norm_runs);
  for (size_t i = 1; i < shares_.size(); ++i) {  // each further share's, added in
    ops_.sum_squares_runs(view(stats + 3, {1}), s[i].grads, shares_[i].norm_runs);
    ops_.add(view(stats, {1}), view(stats, {1}), view(stats + 3, {1}));
  }
  // Squares of the losses: finite exactly when every loss is (they are far
  // from overflowing a float), summed like the gradients' squares; none: 0.
  if (losses.empty())
    ops_.sum_squares_runs(view(stats + 1, {1}), grads, {});
  else
    ops_.sum_squares_runs(view(stats + 1, {1}), losses, {{0, 0, losses.numel(), true}});
  if (world_.size() > 1) world_.all_reduce_sum(stats, 2).wait();
}

double ShardOptimizer::grad_norm(const States& s) {
  reduce_stats(s, TensorView{});
  float sq = 0.f;
  ops_.download(&sq, view(stats_.f32(), {1}));
  return std::sqrt(static_cast<double>(sq));
}

void ShardOptimizer::step(const States& s, const TrainConfig& tc, double lr, float clip, int64_t t) {
  update(s, tc, lr, clip, TensorView{}, t);
}

void ShardOptimizer::clipped_step(const States& s, const TrainConfig& tc, double lr, int64_t t,
                                  TensorView losses) {
  GT_CHECK(!losses.empty() && losses.ndim == 1 && losses.dtype == DType::f32,
           "clipped_adamw_step: the step's losses must be a 1-D fp32 view, got ",
           losses.shape_str());
  reduce_stats(s, losses);
  const TensorView scale = view(stats_.f32() + 2, {1});
  ops_.clip_scale(scale, view(stats_.f32(), {2}), static_cast<float>(tc.grad_clip));
  update(s, tc, lr, 1.f, scale, t);
}

ShardOptimizer::Outcome ShardOptimizer::outcome() {
  float stats[3];
  ops_.download(stats, view(stats_.f32(), {3}));
  return {std::sqrt(static_cast<double>(stats[0])), std::isfinite(stats[2])};
}

void ShardOptimizer::update(const States& s, const TrainConfig& tc, double lr, float clip,
                            TensorView scale, int64_t t) {
  const Ops::AdamWParams p{static_cast<float>(lr),
                           static_cast<float>(tc.beta1),
                           static_cast<float>(tc.beta2),
                           static_cast<float>(tc.eps),
                           static_cast<float>(tc.weight_decay),
                           clip,
                           t};
  for (size_t i = 0; i < shares_.size(); ++i) {
    ShareState& st = shares_[i];
    ops_.adamw_update_runs(s[i].params, s[i].grads, st.m.f32_view({st.m.floats()}),
                           st.v.f32_view({st.v.floats()}), s[i].params_bf16, scale, st.adamw_runs,
                           p);
  }
}

}  // namespace gt
