#include "trainer/sharding/fp8_gathered_weights.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

Fp8GatheredWeights::Fp8GatheredWeights(const ParameterLayout& layout, const ShardGeometry& geom,
                                       Ops& ops, Communicator& fsdp, Communicator& tp,
                                       int64_t min_dim)
    : layout_(layout),
      geom_(geom),
      ops_(ops),
      fsdp_(fsdp),
      tp_(tp),
      plan_(plan_fp8_gather(layout, geom.fsdp(), min_dim)) {
  codes_ = ops.allocate(static_cast<size_t>(geom.storage_total()));
  scales_ = allocate_floats(ops, std::max(plan_.weights, 1));
  bf16_ = ops.allocate(static_cast<size_t>(std::max<int64_t>(plan_.widest, 1)) *
                       dtype_size(DType::bf16));
}

void Fp8GatheredWeights::refresh(const Buffer& shard) {
  if (!stale_) return;
  const Device dev = ops_.device();
  const int me = geom_.fsdp_rank();
  auto scale = [&](int i) { return make_view(scales_.f32() + i, DType::f32, dev, {1}); };
  // This rank's part of weight `w` of `unit` as its bf16 rounding, (1, n);
  // n = 0: none.
  auto rounded = [&](int unit, const Fp8GatheredWeight& w, int64_t* storage) -> TensorView {
    const auto [lo, hi] = in_shard(unit, me, w.begin, w.begin + w.size);
    *storage = geom_.shard_storage(unit) + (lo - me * geom_.shard_size(unit));
    if (hi == lo) return {};
    const TensorView b = make_view(bf16_.data(), DType::bf16, dev, {1, hi - lo});
    ops_.cast(make_view(bf16_.data(), DType::bf16, dev, {hi - lo}),
              make_view(shard.f32() + *storage, DType::f32, dev, {hi - lo}));
    return b;
  };
  for (size_t u = 0; u < plan_.units.size(); ++u)
    for (const Fp8GatheredWeight& w : plan_.units[u].weights) {
      int64_t storage = 0;
      const TensorView b = rounded(static_cast<int>(u), w, &storage);
      if (b.empty()) ops_.zero(scale(w.index));  // no element here: |.| >= 0 elsewhere
      else ops_.fp8_amax(scale(w.index), b, Fp8Reduce::tensor);
    }
  // The whole weight's amax: over the shards, then over its tp pieces.
  fsdp_.all_reduce_max(scales_.f32(), plan_.weights).wait();
  if (tp_.size() > 1) tp_.all_reduce_max(scales_.f32(), plan_.weights).wait();
  const TensorView all = make_view(scales_.f32(), DType::f32, dev, {plan_.weights});
  ops_.fp8_scale_from_amax(all, all, Fp8Format::e4m3, false);
  for (size_t u = 0; u < plan_.units.size(); ++u)
    for (const Fp8GatheredWeight& w : plan_.units[u].weights) {
      int64_t storage = 0;
      const TensorView b = rounded(static_cast<int>(u), w, &storage);
      if (b.empty()) continue;
      ops_.fp8_quantize(
          make_view(static_cast<uint8_t*>(codes_.data()) + storage, DType::u8, dev, {b.numel()}),
          make_view(b.data, DType::bf16, dev, {b.numel()}), scale(w.index), Fp8Format::e4m3);
    }
  stale_ = false;
}

std::pair<CommHandle, CommHandle> Fp8GatheredWeights::start(int unit, const Buffer& shard,
                                                            Buffer& send, Buffer& codes,
                                                            Buffer& side) {
  GT_CHECK(!stale_, "fp8 all-gather of unit ", layout_.units()[static_cast<size_t>(unit)].name,
           " before its codes were refreshed");
  const Device dev = ops_.device();
  const int me = geom_.fsdp_rank();
  const int64_t S = geom_.shard_size(unit), M = side_floats(unit);
  const size_t u = static_cast<size_t>(unit);
  std::pair<CommHandle, CommHandle> h;
  const auto* my_codes = static_cast<const uint8_t*>(codes_.data()) + geom_.shard_storage(unit);
  h.first = fsdp_.all_gather(reinterpret_cast<const float*>(my_codes), codes.f32(), S / 4);
  if (M == 0) return h;
  int64_t pos = 0;
  for (const auto& [b, e] : plan_.units[u].side_runs) {
    const auto [lo, hi] = in_shard(unit, me, b, e);
    if (hi == lo) continue;
    ops_.copy(make_view(send.f32() + pos, DType::f32, dev, {hi - lo}),
              make_view(shard.f32() + geom_.shard_storage(unit) + (lo - me * S), DType::f32, dev,
                        {hi - lo}));
    pos += hi - lo;
  }
  h.second = fsdp_.all_gather(send.f32(), side.f32(), M);
  return h;
}

void Fp8GatheredWeights::unpack(int unit, const Buffer& side, float* slot) {
  const Device dev = ops_.device();
  const int64_t M = side_floats(unit);
  for (int r = 0; r < geom_.fsdp(); ++r) {
    int64_t pos = 0;
    for (const auto& [b, e] : plan_.units[static_cast<size_t>(unit)].side_runs) {
      const auto [lo, hi] = in_shard(unit, r, b, e);
      if (hi == lo) continue;
      ops_.copy(make_view(slot + lo, DType::f32, dev, {hi - lo}),
                make_view(side.f32() + r * M + pos, DType::f32, dev, {hi - lo}));
      pos += hi - lo;
    }
  }
}

bool Fp8GatheredWeights::find(int unit, const float* slot, const Buffer& codes, const float* w,
                              int64_t numel, TensorView* w_codes, TensorView* scale) const {
  const int64_t off = w - slot;
  for (const Fp8GatheredWeight& g : plan_.units[static_cast<size_t>(unit)].weights) {
    if (off < g.begin || off >= g.begin + g.size) continue;
    GT_CHECK(off == g.begin && numel == g.size, "fp8 all-gather: the linear layer's weight at ",
             off, " (", numel, " elements) of unit ",
             layout_.units()[static_cast<size_t>(unit)].name,
             " is not the gathered fp8 weight at ", g.begin, " (", g.size,
             " elements): the layer fuses its weights differently from fp8_gathered_weights()");
    *w_codes = make_view(static_cast<uint8_t*>(codes.data()) + off, DType::u8, ops_.device(),
                         {numel});
    *scale = make_view(scales_.f32() + g.index, DType::f32, ops_.device(), {1});
    return true;
  }
  return false;
}

int64_t Fp8GatheredWeights::bytes() const {
  return static_cast<int64_t>(codes_.bytes() + scales_.bytes() + bf16_.bytes());
}

}  // namespace gt
