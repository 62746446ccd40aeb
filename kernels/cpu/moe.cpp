// The MoE dispatch on the CPU (moe_kernels.hpp): the plan (a stable counting
// sort of the slots by expert, with capacity drops), the permutation of rows
// into the expert-sorted buffer and back, and the weighted combine. The plan
// is one sequential pass (O(R k), next to nothing beside the expert GEMMs);
// the row loops run in parallel over rows, each row's sums in slot order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/core/bf16.hpp"
#include "kernels/cpu/fp32_access.hpp"
#include "kernels/cpu/moe_kernels.hpp"

namespace gt::cpu {

namespace {

// Throws naming op unless every position (int32, host) is -1 or a row of a
// buffer of N rows.
void check_positions(const TensorView& positions, int64_t N, const char* op) {
  const int32_t* pos = positions.i32();
  const int64_t n = positions.numel();
  for (int64_t s = 0; s < n; ++s)
    if (pos[s] < -1 || pos[s] >= N)
      fail(op, ": positions[", s, "] = ", pos[s], " is neither -1 nor a row in [0, ", N, ")");
}

// positions (R, k) int32, rows (R, C) and buf (R k, C) of row dtypes. Returns k.
int64_t check_slots(const TensorView& positions, const TensorView& rows, const char* rows_what,
                    const TensorView& buf, const char* buf_what, const char* op) {
  GT_CHECK(positions.ndim == 2 && rows.ndim == 2, op, ": positions ", positions.shape_str(), " ",
           rows_what, " ", rows.shape_str());
  const int64_t R = positions.shape[0], k = positions.shape[1], C = rows.shape[1];
  expect_i32(positions, {R, k}, "moe positions");
  expect_storage_any(rows, rows.dtype, rows_what);
  expect_shape(rows, {R, C}, rows_what);
  expect_storage_any(buf, buf.dtype, buf_what);
  expect_shape(buf, {R * k, C}, buf_what);
  check_positions(positions, R * k, op);
  return k;
}

// A weight's key in capacity drops: NaN ranks lowest (dropped first), so the
// order stays total.
float drop_key(float w) { return std::isnan(w) ? -std::numeric_limits<float>::infinity() : w; }

}  // namespace

void moe_dispatch_plan(TensorView positions, TensorView offsets, TensorView topk_expert,
                       TensorView topk_weight, int64_t capacity) {
  GT_CHECK(offsets.ndim == 1 && topk_expert.ndim == 2, "moe dispatch offsets ",
           offsets.shape_str(), " topk_expert ", topk_expert.shape_str());
  const int64_t E = offsets.shape[0] - 1, R = topk_expert.shape[0], k = topk_expert.shape[1];
  const int64_t N = R * k;
  GT_CHECK(E >= 1 && capacity >= 0, "moe dispatch: E = ", E, ", capacity = ", capacity);
  expect_i32(positions, {R, k}, "moe dispatch positions");
  expect_i32(offsets, {E + 1}, "moe dispatch offsets");
  expect_i32(topk_expert, {R, k}, "moe dispatch topk_expert");
  expect_f32(topk_weight, {R, k}, "moe dispatch topk_weight");
  check_experts(topk_expert, E, "moe_dispatch_plan");
  const int32_t* ex = topk_expert.i32();
  const float* w = topk_weight.f32();
  int32_t* pos = positions.i32();
  int32_t* off = offsets.i32();

  // Slots s = r k + j grouped by expert, in slot order (a counting sort).
  std::vector<int64_t> count(static_cast<size_t>(E), 0), start(static_cast<size_t>(E + 1), 0);
  for (int64_t s = 0; s < N; ++s) ++count[ex[s]];
  for (int64_t e = 0; e < E; ++e) start[e + 1] = start[e] + count[e];
  std::vector<int64_t> by_expert(static_cast<size_t>(N)), cursor(start.begin(), start.end() - 1);
  for (int64_t s = 0; s < N; ++s) by_expert[cursor[ex[s]]++] = s;

  // Capacity: an expert over it keeps the `capacity` slots first in the
  // order (weight descending, then slot ascending): the dropped ones are
  // those of the lowest weight, ties dropping the later slot first.
  std::vector<char> kept(static_cast<size_t>(N), 1);
  if (capacity > 0) {
    std::vector<int64_t> slots;
    for (int64_t e = 0; e < E; ++e) {
      if (count[e] <= capacity) continue;
      slots.assign(by_expert.begin() + start[e], by_expert.begin() + start[e + 1]);
      std::nth_element(slots.begin(), slots.begin() + capacity, slots.end(),
                       [w](int64_t a, int64_t b) {
                         const float ka = drop_key(w[a]), kb = drop_key(w[b]);
                         return ka > kb || (ka == kb && a < b);
                       });
      for (auto it = slots.begin() + capacity; it != slots.end(); ++it) kept[*it] = 0;
      count[e] = capacity;
    }
  }
  off[0] = 0;
  for (int64_t e = 0; e < E; ++e) off[e + 1] = static_cast<int32_t>(off[e] + count[e]);
  // The kept slots of each expert at its group's rows, in slot order.
  for (int64_t e = 0; e < E; ++e) {
    int32_t next = off[e];
    for (int64_t i = start[e]; i < start[e + 1]; ++i) {
      const int64_t s = by_expert[i];
      pos[s] = kept[s] ? next++ : -1;
    }
  }
}

void moe_permute(TensorView out, TensorView inp, TensorView positions) {
  const int64_t k = check_slots(positions, inp, "moe permute inp", out, "moe permute out",
                                "moe_permute");
  GT_CHECK(out.dtype == inp.dtype, "moe_permute: out is ", dtype_name(out.dtype), " but inp is ",
           dtype_name(inp.dtype));
  const int64_t R = inp.shape[0], C = inp.shape[1];
  // A copy of each row's bits: exact in either dtype.
  const size_t row_bytes = static_cast<size_t>(C) * dtype_size(inp.dtype);
  const char* x = static_cast<const char*>(inp.data);
  char* y = static_cast<char*>(out.data);
  const int32_t* pos = positions.i32();
#pragma omp parallel for if (R * k * C >= kParallelMin)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t p = pos[r * k + j];
      if (p >= 0) std::memcpy(y + p * row_bytes, x + r * row_bytes, row_bytes);
    }
}

void moe_permute_backward(TensorView dinp, TensorView dout, TensorView positions) {
  const int64_t k = check_slots(positions, dinp, "moe permute dinp", dout, "moe permute dout",
                                "moe_permute_backward");
  const int64_t R = dinp.shape[0], C = dinp.shape[1];
  const Fp32In dy_in(dout);
  Fp32Out dx_out(dinp);
  const float* dy = dy_in.get();
  float* dx = dx_out.get();
  const int32_t* pos = positions.i32();
#pragma omp parallel for if (R * k * C >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    float* row = dx + r * C;
    std::fill(row, row + C, 0.f);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t p = pos[r * k + j];
      if (p < 0) continue;
      const float* src = dy + p * C;
      for (int64_t c = 0; c < C; ++c) row[c] += src[c];
    }
  }
  dx_out.store();
}

void moe_combine_forward(TensorView out, TensorView expert_out, TensorView positions,
                         TensorView topk_weight) {
  const int64_t k = check_slots(positions, out, "moe combine out", expert_out,
                                "moe combine expert_out", "moe_combine_forward");
  const int64_t R = out.shape[0], C = out.shape[1];
  expect_f32(topk_weight, {R, k}, "moe combine topk_weight");
  const Fp32In eo_in(expert_out);
  Fp32Out y_out(out);
  const float* eo = eo_in.get();
  float* y = y_out.get();
  const int32_t* pos = positions.i32();
  const float* w = topk_weight.f32();
#pragma omp parallel for if (R * k * C >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    float* row = y + r * C;
    std::fill(row, row + C, 0.f);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t p = pos[r * k + j];
      if (p < 0) continue;
      const float wj = w[r * k + j];
      const float* src = eo + p * C;
      for (int64_t c = 0; c < C; ++c) row[c] += wj * src[c];
    }
  }
  y_out.store();
}

void moe_combine_backward(TensorView dexpert_out, TensorView dtopk_weight, TensorView dout,
                          TensorView expert_out, TensorView positions, TensorView topk_weight) {
  const int64_t k = check_slots(positions, dout, "moe combine dout", expert_out,
                                "moe combine expert_out", "moe_combine_backward");
  const int64_t R = dout.shape[0], C = dout.shape[1];
  expect_storage_any(dexpert_out, dexpert_out.dtype, "moe combine dexpert_out");
  expect_shape(dexpert_out, {R * k, C}, "moe combine dexpert_out");
  expect_f32(dtopk_weight, {R, k}, "moe combine dtopk_weight");
  expect_f32(topk_weight, {R, k}, "moe combine topk_weight");
  const Fp32In dy_in(dout), eo_in(expert_out);
  const float* dy = dy_in.get();
  const float* eo = eo_in.get();
  const int32_t* pos = positions.i32();
  const float* w = topk_weight.f32();
  float* dw = dtopk_weight.f32();
  // Only the kept rows of dexpert_out are written (the others are left), so
  // each is rounded on its own rather than through a whole-tensor buffer.
  const bool bf16 = dexpert_out.dtype == DType::bf16;
  float* dx32 = bf16 ? nullptr : dexpert_out.f32();
  uint16_t* dx16 = bf16 ? static_cast<uint16_t*>(dexpert_out.data) : nullptr;
#pragma omp parallel for if (R * k * C >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const float* g = dy + r * C;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t p = pos[r * k + j];
      if (p < 0) {
        dw[r * k + j] = 0.f;
        continue;
      }
      const float wj = w[r * k + j];
      const float* x = eo + p * C;
      float dot = 0.f;
      for (int64_t c = 0; c < C; ++c) dot += g[c] * x[c];
      dw[r * k + j] = dot;
      if (bf16) {
        for (int64_t c = 0; c < C; ++c) dx16[p * C + c] = bf16_from_float(wj * g[c]);
      } else {
        for (int64_t c = 0; c < C; ++c) dx32[p * C + c] = wj * g[c];
      }
    }
  }
}

}  // namespace gt::cpu
