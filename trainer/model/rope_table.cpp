#include "trainer/model/rope_table.hpp"

#include <cmath>

#include "kernels/core/error.hpp"

namespace gt {

std::vector<float> rope_inv_freq(const ModelConfig& m) {
  const int D = m.head_size();
  GT_CHECK(D % 2 == 0, "rope: odd head size ", D);
  std::vector<float> f(static_cast<size_t>(D / 2));
  const float base = static_cast<float>(m.rope_theta);
  for (int i = 0; i < D / 2; ++i)
    f[static_cast<size_t>(i)] =
        1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(D));
  const RopeScaling& rs = m.rope_scaling;
  if (!rs.enabled()) return f;
  const float factor = static_cast<float>(rs.factor);
  const float low = static_cast<float>(rs.low_freq_factor);
  const float high = static_cast<float>(rs.high_freq_factor);
  const float old_len = static_cast<float>(rs.original_max_position);
  const float low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
  constexpr float kTwoPi = 6.283185307179586f;
  for (float& inv : f) {
    const float wavelen = kTwoPi / inv;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies: unchanged
    if (wavelen > low_freq_wavelen) {
      inv /= factor;  // low frequencies: stretched by the factor
      continue;
    }
    const float smooth = (old_len / wavelen - low) / (high - low);
    inv = (1.0f - smooth) * inv / factor + smooth * inv;
  }
  return f;
}

std::vector<float> rope_cos_sin(const ModelConfig& m, int max_seq) {
  GT_CHECK(max_seq >= 1, "rope table of ", max_seq, " positions");
  const std::vector<float> inv = rope_inv_freq(m);
  const size_t half = inv.size(), D = 2 * half;
  std::vector<float> t(static_cast<size_t>(max_seq) * D);
  for (int p = 0; p < max_seq; ++p)
    for (size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv[i];  // fp32, as HF's matmul
      t[static_cast<size_t>(p) * D + i] = std::cos(angle);
      t[static_cast<size_t>(p) * D + half + i] = std::sin(angle);
    }
  return t;
}

}  // namespace gt
