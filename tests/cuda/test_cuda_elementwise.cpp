// add / accumulate / add_bias / column sums / casts (kernels/cuda/elementwise.cu,
// cast.cu) against the CPU twin: fp32 and bf16, aligned (vector path) and
// offset-by-one (scalar path) pointers, odd sizes, poisoned outputs, and the
// bias gradient's column sums against CpuOps::matmul_backward's dbias.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "test_util.hpp"

namespace {

using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

using bf16 = __nv_bfloat16;
bf16* bf(const DeviceArray<uint16_t>& a, int64_t offset = 0) {
  return reinterpret_cast<bf16*>(a.get()) + offset;
}

struct Case {
  int64_t n, offset;
};
const Case kCases[] = {{1, 0}, {7, 0}, {1000, 0}, {1000, 1}, {1 << 20, 0}, {(1 << 20) + 3, 3}};

std::string name(const Case& c) {
  return "n=" + std::to_string(c.n) + " offset=" + std::to_string(c.offset);
}

std::vector<float> pad(int64_t offset, const std::vector<float>& v) {
  std::vector<float> out(offset, 0.f);
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

TEST(CudaElementwise, AddAndAccumulateMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  auto cpu = gt::make_cpu_ops(1);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const int64_t o = c.offset;
    auto a = random_vector(c.n, 1), b = random_vector(c.n, 2);
    std::vector<float> want_add(c.n), want_acc = a;
    cpu->add(gt::cpu_f32(want_add.data(), {c.n}), gt::cpu_f32(a.data(), {c.n}),
             gt::cpu_f32(b.data(), {c.n}));
    cpu->accumulate(gt::cpu_f32(want_acc.data(), {c.n}), gt::cpu_f32(b.data(), {c.n}));

    DeviceArray<float> d_a(pad(o, a), s), d_b(pad(o, b), s), d_out(c.n + o, s);
    d_out.poison();
    gt::cuda::add(d_out.get() + o, d_a.get() + o, d_b.get() + o, c.n, s);
    EXPECT_TRUE(all_close(d_out.download().data() + o, want_add.data(), c.n, 0.f, 0.f)) << "add";
    gt::cuda::accumulate(d_a.get() + o, d_b.get() + o, c.n, s);
    EXPECT_TRUE(all_close(d_a.download().data() + o, want_acc.data(), c.n, 0.f, 0.f))
        << "accumulate";

    // bf16: fp32 sum of bf16-exact inputs, rounded once.
    const auto a16 = gt::test::round_to_bf16(a), b16 = gt::test::round_to_bf16(b);
    std::vector<float> want16(c.n);
    for (int64_t i = 0; i < c.n; ++i) want16[i] = a16[i] + b16[i];
    DeviceArray<uint16_t> h_a(gt::test::to_bf16(pad(o, a16)), s), h_b(gt::test::to_bf16(pad(o, b16)), s),
        h_out(c.n + o, s);
    h_out.poison();
    gt::cuda::add(bf(h_out, o), bf(h_a, o), bf(h_b, o), c.n, s);
    const auto got16 = gt::test::from_bf16(h_out.download());
    EXPECT_TRUE(all_close(got16.data() + o, gt::test::round_to_bf16(want16).data(), c.n, 0.f, 0.f))
        << "bf16 add (round to nearest even of the fp32 sum)";
    gt::cuda::accumulate(bf(h_a, o), bf(h_b, o), c.n, s);
    const auto acc16 = gt::test::from_bf16(h_a.download());
    EXPECT_TRUE(all_close(acc16.data() + o, gt::test::round_to_bf16(want16).data(), c.n, 0.f, 0.f))
        << "bf16 accumulate";
  }
}

TEST(CudaElementwise, AddBiasMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  auto cpu = gt::make_cpu_ops(1);
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {5, 7}, {64, 768}, {33, 771}, {300, 8}};
  for (auto [R, C] : shapes) {
    SCOPED_TRACE("R=" + std::to_string(R) + " C=" + std::to_string(C));
    auto out0 = random_vector(R * C, 3), bias = random_vector(C, 4);
    std::vector<float> want = out0;
    cpu->add_bias(gt::cpu_f32(want.data(), {R, C}), gt::cpu_f32(bias.data(), {C}));
    DeviceArray<float> d_out(out0, s), d_bias(bias, s);
    gt::cuda::add_bias(d_out.get(), d_bias.get(), R, C, s);
    EXPECT_TRUE(all_close(d_out.download(), want, 0.f, 0.f)) << "fp32";

    const auto o16 = gt::test::round_to_bf16(out0), b16 = gt::test::round_to_bf16(bias);
    std::vector<float> want16 = o16;
    cpu->add_bias(gt::cpu_f32(want16.data(), {R, C}), gt::cpu_f32(const_cast<float*>(b16.data()), {C}));
    DeviceArray<uint16_t> h_out(gt::test::to_bf16(o16), s), h_bias(gt::test::to_bf16(b16), s);
    gt::cuda::add_bias(bf(h_out), bf(h_bias), R, C, s);
    EXPECT_TRUE(all_close(gt::test::from_bf16(h_out.download()), gt::test::round_to_bf16(want16),
                          0.f, 0.f))
        << "bf16";
  }
}

TEST(CudaElementwise, ColumnSumAccumulatesLikeCpuDbiasAndIsDeterministic) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  auto cpu = gt::make_cpu_ops(1);
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {7, 5}, {64, 768}, {1030, 129}, {70001, 3}};
  for (auto [R, C] : shapes) {
    SCOPED_TRACE("R=" + std::to_string(R) + " C=" + std::to_string(C));
    auto dout = random_vector(R * C, 5);
    const auto db0 = random_vector(C, 6);
    // The CPU twin: matmul_backward's dbias (with a 1-wide dummy product).
    std::vector<float> want = db0, inp(R, 0.f), w(C, 0.f), dw(C, 0.f);
    cpu->matmul_backward(gt::TensorView{}, gt::cpu_f32(dw.data(), {C, 1}),
                         gt::cpu_f32(want.data(), {C}), gt::cpu_f32(dout.data(), {R, C}),
                         gt::cpu_f32(inp.data(), {R, 1}), gt::cpu_f32(w.data(), {C, 1}));
    DeviceArray<float> d_dout(dout, s), d_db(db0, s),
        scratch(gt::cuda::column_sum_scratch_floats(R, C), s);
    scratch.poison();
    gt::cuda::column_sum_accumulate(d_db.get(), d_dout.get(), R, C, scratch.get(), s);
    const auto got = d_db.download();
    EXPECT_TRUE(all_close(got, want, 1e-5f + 1e-6f * static_cast<float>(R), 1e-5f));
    d_db.upload(db0);
    gt::cuda::column_sum_accumulate(d_db.get(), d_dout.get(), R, C, scratch.get(), s);
    EXPECT_TRUE(gt::test::bitwise_equal(d_db.download(), got)) << "not deterministic";

    // bf16 input, fp32 accumulation.
    const auto dout16 = gt::test::round_to_bf16(dout);
    std::vector<float> want16 = db0;
    cpu->matmul_backward(gt::TensorView{}, gt::cpu_f32(dw.data(), {C, 1}),
                         gt::cpu_f32(want16.data(), {C}),
                         gt::cpu_f32(const_cast<float*>(dout16.data()), {R, C}),
                         gt::cpu_f32(inp.data(), {R, 1}), gt::cpu_f32(w.data(), {C, 1}));
    DeviceArray<uint16_t> h_dout(gt::test::to_bf16(dout16), s);
    d_db.upload(db0);
    gt::cuda::column_sum_accumulate(d_db.get(), bf(h_dout), R, C, scratch.get(), s);
    EXPECT_TRUE(all_close(d_db.download(), want16, 1e-5f + 1e-6f * static_cast<float>(R), 1e-5f))
        << "bf16 input";
  }
}

TEST(CudaCast, RoundsToNearestEvenAndBackExactly) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  auto cpu = gt::make_cpu_ops(1);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const int64_t o = c.offset;
    auto x = random_vector(c.n, 7, -100.f, 100.f);
    if (c.n >= 7) {  // ties and specials
      x[0] = 1.f + 1.f / 256.f;  // exactly halfway between two bf16: rounds to even (1.0)
      x[1] = 3.4e38f;            // past the largest bf16: rounds to inf
      x[2] = -0.f;
      x[3] = 1e-40f;             // subnormal
      x[4] = -std::numeric_limits<float>::infinity();
      x[5] = std::numeric_limits<float>::quiet_NaN();   // -> the canonical 0x7FFF
      x[6] = -std::numeric_limits<float>::quiet_NaN();  // sign dropped, as on the CPU
    }
    DeviceArray<float> d_x(pad(o, x), s), d_back(c.n + o, s);
    DeviceArray<uint16_t> d_b(c.n + o, s);
    d_b.poison();
    d_back.poison();
    gt::cuda::cast(bf(d_b, o), d_x.get() + o, c.n, s);
    const auto bits = d_b.download();
    // The CPU backend's cast is the reference, bit for bit (NaN included).
    std::vector<uint16_t> want_bits(c.n);
    cpu->cast(gt::make_view(want_bits.data(), gt::DType::bf16, gt::Device::cpu, {c.n}),
              gt::cpu_f32(x.data(), {c.n}));
    for (int64_t i = 0; i < c.n; ++i)
      ASSERT_EQ(bits[i + o], want_bits[i]) << "i=" << i << " x=" << x[i];
    gt::cuda::cast(d_back.get() + o, bf(d_b, o), c.n, s);
    const auto back = d_back.download();
    const auto want_back = gt::test::from_bf16(want_bits);
    EXPECT_TRUE(gt::test::bitwise_equal(std::vector<float>(back.begin() + o, back.end()), want_back));
  }
}

}  // namespace
