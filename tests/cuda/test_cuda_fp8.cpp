// The fp8 quantising kernels (kernels/cuda/fp8.cu) against the CPU twin
// (kernels/cpu/fp8_kernels.hpp), bit for bit: CUDA's own conversion
// (__nv_cvt_float_to_fp8, __NV_SATFINITE) on every midpoint between codes,
// the overflow band, infinities, NaN and subnormals; the amax of fp32 and
// bf16 tensors (empty, odd, large, with a NaN); the scales and their
// inverses; rowwise quantisation with its power-of-two scales; and the fp8
// GEMM (Fp8GemmContext, cuBLASLt) on those codes and scales against the
// twin's scaled GEMM, to fp32 rounding (the library's summation order is
// its own), with its fp8 rules refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/core/bf16.hpp"
#include "kernels/core/fp8.hpp"
#include "kernels/cpu/fp8_kernels.hpp"
#include "kernels/cuda/fp8.cuh"
#include "kernels/cuda/matmul_fp8.cuh"
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

// The codes and inverse scales the quantising kernels made, through
// cuBLASLt, against fp8_scaled_gemm of the same codes: each element within
// fp32 rounding of its sum of |products| (bf16 D: half a bf16 step more).
TEST(CudaFp8, GemmOfTheQuantisedOperandsMatchesTheTwin) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  gt::cuda::Fp8GemmContext gemm;
  const int64_t M = 40, N = 24, K = 96;
  const std::vector<float> a = random_vector(M * K, 4, -2.f, 2.f);
  const std::vector<float> b = random_vector(N * K, 5, -0.02f, 0.02f);
  DeviceArray<float> da(a, stream.get()), db(b, stream.get());
  DeviceArray<uint8_t> qa(a.size(), stream.get()), qb(b.size(), stream.get());
  DeviceArray<float> sa(M, stream.get()), sb(N, stream.get()), ia(M, stream.get()),
      ib(N, stream.get()), amax(1, stream.get());
  DeviceArray<float> scratch(gt::cuda::fp8_amax_scratch_floats(M * K), stream.get());
  for (bool rowwise : {false, true})
    for (gt::DType d_type : {gt::DType::f32, gt::DType::bf16}) {
      const Fp8Format fb = rowwise ? Fp8Format::e4m3 : Fp8Format::e5m2;
      if (rowwise) {
        gt::cuda::fp8_quantize_rows(qa.get(), sa.get(), ia.get(), da.get(), M, K,
                                    Fp8Format::e4m3, stream.get());
        gt::cuda::fp8_quantize_rows(qb.get(), sb.get(), ib.get(), db.get(), N, K, fb,
                                    stream.get());
      } else {
        gt::cuda::fp8_amax(amax.get(), da.get(), a.size(), scratch.get(), stream.get());
        gt::cuda::fp8_scales(sa.get(), ia.get(), amax.get(), 1, Fp8Format::e4m3, false,
                             stream.get());
        gt::cuda::fp8_quantize(qa.get(), da.get(), a.size(), sa.get(), Fp8Format::e4m3,
                               stream.get());
        gt::cuda::fp8_amax(amax.get(), db.get(), b.size(), scratch.get(), stream.get());
        gt::cuda::fp8_scales(sb.get(), ib.get(), amax.get(), 1, fb, false, stream.get());
        gt::cuda::fp8_quantize(qb.get(), db.get(), b.size(), sb.get(), fb, stream.get());
      }
      const size_t d_bytes = d_type == gt::DType::bf16 ? 2 : 4;
      DeviceArray<uint8_t> dd(M * N * d_bytes, stream.get());
      gt::cuda::Fp8GemmArgs g;
      g.M = M;
      g.N = N;
      g.K = K;
      g.A = qa.get();
      g.B = qb.get();
      g.b_format = fb;
      g.a_scale = ia.get();
      g.b_scale = ib.get();
      g.rowwise = rowwise;
      g.D = dd.get();
      g.d_type = d_type;
      gemm.run(g, stream.get());
      const std::vector<uint8_t> raw = dd.download();
      // The twin on the device's own codes and scales.
      const std::vector<uint8_t> ha = qa.download(), hb = qb.download();
      std::vector<float> hsa = sa.download(), hsb = sb.download();
      if (!rowwise) {
        hsa.resize(1);
        hsb.resize(1);
      }
      std::vector<float> want(M * N);
      gt::cpu::fp8_scaled_gemm(ha.data(), Fp8Format::e4m3, hsa.data(), rowwise, hb.data(), fb,
                               hsb.data(), rowwise, want.data(), M, N, K);
      int bad = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double mag = 0;
          for (int64_t k = 0; k < K; ++k)
            mag += std::fabs(double(gt::fp8_to_float(ha[m * K + k], Fp8Format::e4m3)) *
                             gt::fp8_to_float(hb[n * K + k], fb));
          mag /= double(hsa[rowwise ? m : 0]) * hsb[rowwise ? n : 0];
          float got;
          if (d_type == gt::DType::bf16) {
            uint16_t h;
            std::memcpy(&h, raw.data() + 2 * (m * N + n), 2);
            got = gt::bf16_to_float(h);
          } else {
            std::memcpy(&got, raw.data() + 4 * (m * N + n), 4);
          }
          const double tol = 1e-5 * mag + (d_type == gt::DType::bf16 ? 4e-3 * std::fabs(want[m * N + n]) : 0.0);
          if (std::fabs(got - want[m * N + n]) > tol + 1e-30 && ++bad <= 3)
            ADD_FAILURE() << (rowwise ? "rowwise " : "tensorwise ") << gt::dtype_name(d_type)
                          << " (" << m << ", " << n << "): " << got << " vs twin "
                          << want[m * N + n];
        }
      EXPECT_EQ(bad, 0);
    }
  // The library's fp8 rules, refused here by name before cuBLASLt sees them.
  gt::cuda::Fp8GemmArgs bad;
  bad.M = M;
  bad.N = N;
  bad.K = 40;  // a row stride of 40 bytes: not a multiple of 16
  bad.A = qa.get();
  bad.B = qb.get();
  bad.D = qa.get();
  EXPECT_NE(gt::test::error_message([&] { gemm.run(bad, stream.get()); }).find("multiples of 16"),
            std::string::npos);
  bad.K = K;
  bad.a_format = bad.b_format = Fp8Format::e5m2;
  EXPECT_NE(gt::test::error_message([&] { gemm.run(bad, stream.get()); }).find("both be e5m2"),
            std::string::npos);
}

}  // namespace
