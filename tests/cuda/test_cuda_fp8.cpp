// The fp8 quantising kernels (kernels/cuda/fp8.cu) against the CPU twin
// (kernels/cpu/fp8_kernels.hpp), bit for bit: CUDA's own conversion
// (__nv_cvt_float_to_fp8, __NV_SATFINITE) on every midpoint between codes,
// the overflow band, infinities, NaN and subnormals; the amax of fp32 and
// bf16 tensors (empty, odd, large, with a NaN); the scales and their
// inverses; and rowwise quantisation with its power-of-two scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/core/bf16.hpp"
#include "kernels/core/fp8.hpp"
#include "kernels/cpu/fp8_kernels.hpp"
#include "kernels/cuda/fp8.cuh"
#include "test_util.hpp"

namespace {

using gt::Fp8Format;
using gt::test::DeviceArray;
using gt::test::random_vector;

const Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

// Every value the conversion must get right: the midpoints between
// neighbouring codes and a float either side, the band past the largest
// finite value, infinities, NaN, zeros and tiny values, both signs.
std::vector<float> hard_values(Fp8Format f) {
  std::vector<float> xs;
  for (int c = 0; c + 1 < 256; ++c) {
    const float a = gt::fp8_to_float(static_cast<uint8_t>(c), f);
    const float b = gt::fp8_to_float(static_cast<uint8_t>(c + 1), f);
    if (!std::isfinite(a) || !std::isfinite(b) || a < 0 || b <= a) continue;
    const float mid = (a + b) / 2;
    for (float x : {a, mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)})
      xs.insert(xs.end(), {x, -x});
  }
  const float max = gt::fp8_spec(f).max_finite;
  for (float x : {max * 1.03f, max * 1.07f, max * 1.2f, 1e30f, INFINITY, 0.f, 1e-30f,
                  std::numeric_limits<float>::denorm_min(), std::nanf("")})
    xs.insert(xs.end(), {x, -x});
  return xs;
}

TEST(CudaFp8, ConversionIsTheCpuRuleOnEveryHardValue) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  DeviceArray<float> one(std::vector<float>{1.f}, stream.get());
  for (Fp8Format f : kFormats) {
    const std::vector<float> xs = hard_values(f);
    DeviceArray<float> dx(xs, stream.get());
    DeviceArray<uint8_t> dq(xs.size(), stream.get());
    gt::cuda::fp8_quantize(dq.get(), dx.get(), xs.size(), one.get(), f, stream.get());
    const std::vector<uint8_t> got = dq.download();
    int wrong = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const uint8_t want = gt::fp8_from_float(xs[i], f, gt::Fp8Saturation::finite);
      if (got[i] != want && ++wrong <= 5)
        ADD_FAILURE() << (f == Fp8Format::e4m3 ? "e4m3 " : "e5m2 ") << xs[i] << ": device "
                      << int(got[i]) << ", CPU rule " << int(want);
    }
    EXPECT_EQ(wrong, 0);
  }
}

TEST(CudaFp8, AmaxMatchesTheCpuOnFp32AndBf16) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  DeviceArray<float> amax(1, stream.get());
  DeviceArray<float> scratch(gt::cuda::fp8_amax_scratch_floats(1000003), stream.get());
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{257}, int64_t{1000003}}) {
    std::vector<float> x = random_vector(n, 9, -2.f, 2.f);
    if (n > 1) x[n / 2] = -7.5f;  // the max is a negative value's magnitude
    DeviceArray<float> dx(x, stream.get());
    amax.poison();
    gt::cuda::fp8_amax(amax.get(), dx.get(), n, scratch.get(), stream.get());
    EXPECT_EQ(amax.download()[0], gt::cpu::fp8_amax(x.data(), n)) << "fp32 n=" << n;
    const std::vector<float> widened = gt::test::round_to_bf16(x);
    DeviceArray<uint16_t> dxb(gt::test::to_bf16(x), stream.get());
    amax.poison();
    gt::cuda::fp8_amax(amax.get(), reinterpret_cast<const __nv_bfloat16*>(dxb.get()), n,
                       scratch.get(), stream.get());
    EXPECT_EQ(amax.download()[0], gt::cpu::fp8_amax(widened.data(), n)) << "bf16 n=" << n;
  }
  // A NaN anywhere makes the amax NaN (the step is then skipped as non-finite).
  std::vector<float> x = random_vector(4099, 3, -1.f, 1.f);
  x[4000] = std::nanf("");
  DeviceArray<float> dx(x, stream.get());
  gt::cuda::fp8_amax(amax.get(), dx.get(), x.size(), scratch.get(), stream.get());
  EXPECT_TRUE(std::isnan(amax.download()[0]));
}

TEST(CudaFp8, ScalesAndInversesMatchTheCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const std::vector<float> amaxes = {0.f, 1e-20f, 1.75f, 3.f, 0.37f, 1e6f, 3.4e38f,
                                     std::nanf("")};
  DeviceArray<float> da(amaxes, stream.get());
  DeviceArray<float> scale(amaxes.size(), stream.get()), inv(amaxes.size(), stream.get());
  for (Fp8Format f : kFormats)
    for (bool pow2 : {false, true}) {
      scale.poison();
      inv.poison();
      gt::cuda::fp8_scales(scale.get(), inv.get(), da.get(), amaxes.size(), f, pow2,
                           stream.get());
      const std::vector<float> s = scale.download(), v = inv.download();
      for (size_t i = 0; i < amaxes.size(); ++i) {
        const float want = gt::cpu::fp8_scale_from_amax(amaxes[i], f, pow2);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(s[i])) << amaxes[i];
          continue;
        }
        EXPECT_EQ(s[i], want) << "amax " << amaxes[i] << (pow2 ? " pow2" : "");
        EXPECT_EQ(v[i], 1.f / want) << "amax " << amaxes[i];
      }
    }
}

TEST(CudaFp8, TensorwiseAndRowwiseQuantisationMatchTheCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const int64_t rows = 37, cols = 300;
  std::vector<float> x = random_vector(rows * cols, 21, -3.f, 3.f);
  for (int64_t c = 0; c < cols; ++c) x[5 * cols + c] *= 1e-4f;  // a row of small values
  DeviceArray<float> dx(x, stream.get());
  DeviceArray<uint8_t> dq(x.size(), stream.get());
  DeviceArray<float> amax(1, stream.get()), scale(1, stream.get()), inv(1, stream.get());
  DeviceArray<float> scratch(gt::cuda::fp8_amax_scratch_floats(x.size()), stream.get());
  DeviceArray<float> rs(rows, stream.get()), rinv(rows, stream.get());
  for (Fp8Format f : kFormats) {
    // Tensorwise: amax, scale, quantise, all on the device.
    gt::cuda::fp8_amax(amax.get(), dx.get(), x.size(), scratch.get(), stream.get());
    gt::cuda::fp8_scales(scale.get(), inv.get(), amax.get(), 1, f, false, stream.get());
    gt::cuda::fp8_quantize(dq.get(), dx.get(), x.size(), scale.get(), f, stream.get());
    std::vector<uint8_t> want(x.size());
    const float s = gt::cpu::fp8_scale_from_amax(gt::cpu::fp8_amax(x.data(), x.size()), f, false);
    gt::cpu::fp8_quantize(x.data(), x.size(), s, f, want.data());
    EXPECT_EQ(dq.download(), want) << "tensorwise";
    // Rowwise.
    rs.poison();
    rinv.poison();
    gt::cuda::fp8_quantize_rows(dq.get(), rs.get(), rinv.get(), dx.get(), rows, cols, f,
                                stream.get());
    std::vector<float> want_scales(rows);
    gt::cpu::fp8_quantize_rows(x.data(), rows, cols, f, want.data(), want_scales.data());
    EXPECT_EQ(dq.download(), want) << "rowwise";
    EXPECT_EQ(rs.download(), want_scales);
    const std::vector<float> got_inv = rinv.download();
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got_inv[r], 1.f / want_scales[r]) << r;
  }
}

}  // namespace
