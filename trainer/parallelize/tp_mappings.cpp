#include "trainer/parallelize/tp_mappings.hpp"

#include "kernels/core/error.hpp"
#include "parallel/collective_matmul.hpp"

namespace gt {

TensorView rows_of(const TensorView& t, int64_t first, int64_t n) {
  const int64_t cols = t.numel() / t.shape[0];
  char* base = static_cast<char*>(t.data) + first * cols * int64_t(dtype_size(t.dtype));
  return make_view(base, t.dtype, t.device, {n, cols});
}

TensorView TpMappings::own_rows(const TensorView& full) const {
  const int64_t Rl = full.shape[0] / size();
  return rows_of(full, rank() * Rl, Rl);
}

void TpMappings::gather_from_sequence(Activation& in, const RowsCompute& compute,
                                      const std::string& layer) {
  expect_tp(in, AxisPlacement::shard(ActDim::sequence), layer + " (gather_from_sequence)", "input",
            log_);
  in.placement.tp = AxisPlacement::replicated();
  const TensorView& full = in.view;
  const int64_t R = full.shape[0], cols = full.numel() / R;
  if (size() == 1) return compute(0, R);
  const int64_t Rl = R / size();
  // The all-gather copies bits: rows of 2-byte elements travel as pairs in
  // each 4-byte word (half the bytes), so a chunk must hold an even count.
  const int64_t per_word = int64_t(sizeof(float) / dtype_size(full.dtype));
  GT_CHECK((Rl * cols) % per_word == 0, "tensor parallelism gathers (R/tp, cols) = (", Rl, ", ",
           cols, ") ", dtype_name(full.dtype), " rows as 4-byte words: their count must be even");
  all_gather_then_compute(
      *group_.comm, static_cast<float*>(full.data), Rl * cols / per_word,
      [&](int c0, int n) { compute(c0 * Rl, n * Rl); }, group_.overlap);
}

Activation TpMappings::reduce_scatter_to_sequence(const TensorView& result,
                                                  const RowsPartial& partial, float* workspace,
                                                  const AxisPlacement& cp, std::string name,
                                                  const std::string& layer) {
  GT_CHECK(result.dtype == DType::f32, "reduce_scatter_to_sequence sums into fp32, not ",
           dtype_name(result.dtype));
  Activation out{result, {AxisPlacement::shard(ActDim::sequence), cp}, std::move(name)};
  const int64_t Rl = result.shape[0], cols = result.numel() / Rl;
  if (size() == 1) {
    partial(0, Rl, result);
    return given(out, layer + " (reduce_scatter_to_sequence)", "output", log_);
  }
  const Device device = result.device;
  compute_then_reduce_scatter(
      *group_.comm, result.f32(), Rl * cols,
      [&](int c0, int n, float* out) {
        partial(c0 * Rl, n * Rl, make_view(out, DType::f32, device, {n * Rl, cols}));
      },
      group_.overlap, workspace,
      // acc += x on the backend: the ring's sum of partials.
      [this, device](float* acc, const float* x, int64_t n) {
        ops_.accumulate(make_view(acc, DType::f32, device, {n}),
                        make_view(const_cast<float*>(x), DType::f32, device, {n}));
      });
  return given(out, layer + " (reduce_scatter_to_sequence)", "output", log_);
}

void TpMappings::all_reduce_max(const TensorView& x) {
  if (size() > 1) group_.comm->all_reduce_max(x.f32(), x.numel()).wait();
}

void TpMappings::all_reduce_sum(const TensorView& x) {
  if (size() > 1) group_.comm->all_reduce_sum(x.f32(), x.numel()).wait();
}

}  // namespace gt
