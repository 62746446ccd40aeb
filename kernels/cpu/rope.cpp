// Rotary position embedding, HF rotate_half convention, in place: see
// llama_kernels.hpp. Forward rotates each (i, i + D/2) pair by its angle,
// backward by minus it (the rotation's transpose), so backward(forward(x))
// is x up to rounding.
#include "kernels/cpu/fp32_access.hpp"
#include "kernels/cpu/llama_kernels.hpp"

namespace gt::cpu {

namespace {

void rope(TensorView x, TensorView cos_sin, int rot_heads, int64_t first_row, int T,
          float direction, const char* what) {
  GT_CHECK(x.ndim == 3, what, " must be (N, heads, head size), got ", x.shape_str());
  const int64_t N = x.shape[0], H = x.shape[1], D = x.shape[2];
  expect_f32_or_bf16(x, {N, H, D}, what);
  GT_CHECK(D % 2 == 0, what, ": the head size ", D, " must be even (pairs of channels turn)");
  GT_CHECK(rot_heads >= 0 && rot_heads <= H, what, ": rot_heads ", rot_heads, " of ", H, " heads");
  GT_CHECK(cos_sin.ndim == 2 && cos_sin.shape[1] == D, "rope cos_sin must be (max_T, ", D,
           "), got ", cos_sin.shape_str());
  expect_f32(cos_sin, {cos_sin.shape[0], D}, "rope cos_sin");
  GT_CHECK(T >= 1 && T <= cos_sin.shape[0], "rope T ", T, " outside the table's ", cos_sin.shape[0],
           " positions");
  GT_CHECK(first_row >= 0, "rope first_row ", first_row);

  Fp32Out io(x, /*load=*/true);
  float* v = io.get();
  const float* table = cos_sin.f32();
  const int64_t half = D / 2;
#pragma omp parallel for if (N * H * D >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* cs = table + ((first_row + n) % T) * D;
    for (int64_t h = 0; h < rot_heads; ++h) {
      float* xh = v + (n * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[i], s = direction * cs[half + i];
        const float a = xh[i], b = xh[i + half];
        xh[i] = a * c - b * s;
        xh[i + half] = b * c + a * s;
      }
    }
  }
  io.store();
}

}  // namespace

void rope_forward(TensorView qk, TensorView cos_sin, int rot_heads, int64_t first_row, int T) {
  rope(qk, cos_sin, rot_heads, first_row, T, 1.f, "rope qk");
}

void rope_backward(TensorView dqk, TensorView cos_sin, int rot_heads, int64_t first_row, int T) {
  rope(dqk, cos_sin, rot_heads, first_row, T, -1.f, "rope dqk");
}

}  // namespace gt::cpu
