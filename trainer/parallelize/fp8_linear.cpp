#include "trainer/parallelize/fp8_linear.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/core/error.hpp"

namespace gt {

Fp8Settings fp8_settings(const RuntimeConfig& r) {
  Fp8Settings s;
  s.recipe = r.fp8;
  s.fast_accum = r.fp8_fast_accum;
  s.min_dim = r.fp8_min_dim;
  s.check_amax = r.fp8_check_amax;
  return s;
}

Fp8Linear::Fp8Linear(Ops& ops, TpMappings& maps, const Fp8Settings& settings,
                     const ContextParallelGroup& cp, Fp8WeightSource* weights)
    : ops_(ops), maps_(maps), settings_(settings), cp_(cp), weights_(weights) {
  GT_CHECK(settings.on(), "Fp8Linear built with runtime.fp8=off");
}

Fp8Linear::Weight Fp8Linear::gathered_weight(const TensorView& w32) const {
  Weight out;
  if (rowwise() || !weights_ || w32.dtype != DType::f32) return out;
  TensorView codes, scale;
  if (!weights_->fp8_weight(w32.f32(), w32.numel(), &codes, &scale)) return out;
  GT_CHECK(w32.ndim == 2, "a linear weight is (out, in), got ", w32.shape_str());
  out.codes = make_view(codes.data, DType::u8, codes.device, {w32.shape[0], w32.shape[1]});
  out.scale = scale;
  return out;
}

bool Fp8Linear::applies(int64_t out_features, int64_t in_features) const {
  return std::min(out_features, in_features) >= settings_.min_dim;
}

namespace {

// runtime.fp8_check_amax: the producer's amaxes `got` against `want`, taken
// by a pass of their own over the same operand; equal bit for bit (the max
// is exact), else a named error.
void check_producer_amax(Ops& ops, const TensorView& got, const TensorView& want,
                         const std::string& layer, const TensorView& x, Fp8Reduce over) {
  std::vector<float> a(static_cast<size_t>(got.numel())), b(a.size());
  ops.download(a.data(), got);
  ops.download(b.data(), want);
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) == 0) continue;
    fail("runtime.fp8_check_amax: ", layer.empty() ? std::string("a linear layer") : layer,
         ": the ", fp8_reduce_name(over), " amax [", i, "] of its ", x.shape_str(),
         " operand taken by the operand's producer is ", a[i], ", its own pass gives ", b[i]);
  }
}

}  // namespace

std::vector<TensorView> Fp8Linear::prepare(const std::vector<Request>& requests, Slot slot,
                                           const std::string& layer) {
  // Segments in the order [tp only | tp and cp | cp only | local], so that
  // what tp reduces and what cp reduces are each one contiguous range.
  static constexpr unsigned kOrder[] = {over_tp, over_tp_cp, over_cp, local};
  std::vector<int64_t> offset(requests.size());
  int64_t total = 0, tp_end = 0, cp_begin = 0, cp_end = 0;
  for (unsigned span : kOrder) {
    if (span == over_tp_cp) cp_begin = total;
    for (size_t i = 0; i < requests.size(); ++i) {
      const Request& r = requests[i];
      if (r.span != span) continue;
      GT_CHECK(r.x.ndim == 2, "fp8 scales of a ", r.x.shape_str(), " tensor: expected (rows, cols)");
      offset[i] = total;
      total += r.over == Fp8Reduce::tensor ? 1 : r.over == Fp8Reduce::rows ? r.x.shape[0]
                                                                          : r.x.shape[1];
    }
    if (span == over_tp_cp) tp_end = total;
    if (span == over_cp) cp_end = total;
  }
  Buffer& buf = slots_[slot];
  const size_t need = static_cast<size_t>(total) * sizeof(float);
  if (buf.bytes() < need) buf = ops_.allocate(need);
  float* base = static_cast<float*>(buf.data());
  const Device dev = ops_.device();
  std::vector<TensorView> amax(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    const int64_t n = r.over == Fp8Reduce::tensor ? 1 : r.over == Fp8Reduce::rows ? r.x.shape[0]
                                                                                 : r.x.shape[1];
    amax[i] = make_view(base + offset[i], DType::f32, dev, {n});
    if (r.row_amax.empty()) {
      ops_.fp8_amax(amax[i], r.x, r.over);
      continue;
    }
    // The producer's row amaxes: as they are, or their max (R floats read
    // instead of the R x C tensor).
    const int64_t rows = r.x.shape[0];
    GT_CHECK(r.over != Fp8Reduce::cols && r.row_amax.numel() == rows, "fp8 scales of ",
             r.x.shape_str(), " by ", fp8_reduce_name(r.over), " from ", r.row_amax.shape_str(),
             " row amaxes");
    if (r.over == Fp8Reduce::rows)
      ops_.copy(amax[i], r.row_amax);
    else
      ops_.fp8_amax(amax[i], make_view(r.row_amax.data, DType::f32, dev, {rows, 1}),
                    Fp8Reduce::tensor);
    if (settings_.check_amax) {
      if (check_.bytes() < static_cast<size_t>(n) * sizeof(float))
        check_ = ops_.allocate(static_cast<size_t>(n) * sizeof(float));
      const TensorView own = make_view(check_.data(), DType::f32, dev, {n});
      ops_.fp8_amax(own, r.x, r.over);
      check_producer_amax(ops_, amax[i], own, layer, r.x, r.over);
    }
  }
  if (tp_end > 0 && maps_.size() > 1)
    maps_.all_reduce_max(make_view(base, DType::f32, dev, {tp_end}));
  if (cp_end > cp_begin && cp_.size() > 1)
    cp_.comm->all_reduce_max(base + cp_begin, cp_end - cp_begin).wait();
  for (size_t i = 0; i < requests.size(); ++i)
    ops_.fp8_scale_from_amax(amax[i], amax[i], requests[i].format, rowwise());
  return amax;
}

TensorView Fp8Linear::producer_row_amax(Consumer consumer, int64_t rows) {
  Buffer& buf = produced_[consumer];
  const size_t need = static_cast<size_t>(rows) * sizeof(float);
  if (buf.bytes() < need) buf = ops_.allocate(need);
  return make_view(buf.data(), DType::f32, ops_.device(), {rows});
}

void Fp8Linear::gemm(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                     TensorView b_scale, TensorView bias, Fp8MatmulSpec spec, bool forward) {
  spec.fast_accum = forward && settings_.fast_accum;
  ops_.fp8_matmul(out, a, a_scale, b, b_scale, bias, spec);
}

}  // namespace gt
