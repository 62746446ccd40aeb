// The Llama family's CUDA ops (kernels/cuda/llama.cu through CudaOps)
// against their CPU twins (kernels/cpu/llama_kernels.hpp through CpuOps):
// RMSNorm forward and backward (accumulating dinp and dweight, the weight
// gradient deterministic), the rotary embedding in place (rotated heads only,
// positions from first_row), SwiGLU, the residual add fused into RMSNorm
// and the backward's bf16 copy of dinp; fp32 and bf16 storage, odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "test_util.hpp"

namespace {

using gt::DType;
using gt::TensorView;
using gt::test::all_close;
using gt::test::dev_view;
using gt::test::DeviceArray;
using gt::test::random_vector;

// A tensor on both sides: host values (fp32, or bf16-exact for bf16), a
// CPU view and a device copy in the dtype asked for.
struct Twin {
  std::vector<float> host;
  std::vector<uint16_t> host16;
  DType dtype;
  std::vector<int64_t> shape;
  DeviceArray<float> d32;
  DeviceArray<uint16_t> d16;
  Twin(std::vector<float> values, DType dt, std::vector<int64_t> shp, cudaStream_t s)
      : host(dt == DType::bf16 ? gt::test::round_to_bf16(values) : std::move(values)),
        host16(gt::test::to_bf16(host)),
        dtype(dt),
        shape(std::move(shp)),
        d32(host, s),
        d16(host16, s) {}
  TensorView cpu() { return dtype == DType::f32 ? make(host.data()) : make(host16.data()); }
  TensorView dev() { return dtype == DType::f32 ? make(d32.get()) : make(d16.get()); }
  std::vector<float> dev_values() const {
    return dtype == DType::f32 ? d32.download() : gt::test::from_bf16(d16.download());
  }
  std::vector<float> cpu_values() const {
    return dtype == DType::f32 ? host : gt::test::from_bf16(host16);
  }

 private:
  TensorView make(void* p) {
    const gt::Device dev = p == d32.get() || p == d16.get() ? gt::Device::cuda : gt::Device::cpu;
    switch (shape.size()) {
      case 1:
        return gt::make_view(p, dtype, dev, {shape[0]});
      case 2:
        return gt::make_view(p, dtype, dev, {shape[0], shape[1]});
      default:
        return gt::make_view(p, dtype, dev, {shape[0], shape[1], shape[2]});
    }
  }
};

// bf16 results may differ from the CPU's by one rounding (fp32 sums in
// another order); fp32 ones by summation order only.
float tol(DType dt) { return dt == DType::bf16 ? 1e-2f : 2e-5f; }

// The norms' cases: fp32 and bf16, an odd and a warp-multiple width.
template <typename F>
void for_each_norm_case(F&& f) {
  gt::CudaOps cuda;
  auto cpu = gt::make_cpu_ops(1);
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [R, C] : {std::pair<int64_t, int64_t>{5, 37}, {300, 128}}) {
      SCOPED_TRACE(std::string(gt::dtype_name(dt)) + " R=" + std::to_string(R) +
                   " C=" + std::to_string(C));
      f(cuda, *cpu, cuda.stream(), dt, R, C);
    }
}

TEST(CudaLlama, RmsNormMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for_each_norm_case([](gt::CudaOps& cuda, gt::Ops& cpu_ops, cudaStream_t s, DType dt, int64_t R,
                      int64_t C) {
    gt::Ops* cpu = &cpu_ops;
    Twin x(random_vector(R * C, 1, -2.f, 2.f), dt, {R, C}, s),
        out(std::vector<float>(R * C, 0.f), dt, {R, C}, s),
        w(random_vector(C, 2, 0.5f, 1.5f), DType::f32, {C}, s),
        rs(std::vector<float>(R, 0.f), DType::f32, {R}, s);
    cpu->rmsnorm_forward(out.cpu(), rs.cpu(), x.cpu(), w.cpu(), 1e-5f);
    cuda.rmsnorm_forward(out.dev(), rs.dev(), x.dev(), w.dev(), 1e-5f);
    EXPECT_TRUE(all_close(out.dev_values(), out.cpu_values(), tol(dt), tol(dt))) << "out";
    EXPECT_TRUE(all_close(rs.dev_values(), rs.cpu_values(), 1e-6f, 1e-5f)) << "rstd";

    // Backward: dinp and dweight accumulate onto what is there.
    Twin dy(random_vector(R * C, 3), dt, {R, C}, s),
        dx(random_vector(R * C, 4), DType::f32, {R, C}, s),
        dw(random_vector(C, 5), DType::f32, {C}, s);
    cpu->rmsnorm_backward(dx.cpu(), dw.cpu(), dy.cpu(), x.cpu(), w.cpu(), rs.cpu());
    cuda.rmsnorm_backward(dx.dev(), dw.dev(), dy.dev(), x.dev(), w.dev(), rs.dev());
    EXPECT_TRUE(all_close(dx.dev_values(), dx.cpu_values(), 1e-4f, 1e-4f)) << "dinp";
    EXPECT_TRUE(all_close(dw.dev_values(), dw.cpu_values(), 1e-3f, 1e-4f)) << "dweight";
    // Deterministic: the same call on the same zeros gives the same bits.
    Twin z0(std::vector<float>(C, 0.f), DType::f32, {C}, s),
        z1(std::vector<float>(C, 0.f), DType::f32, {C}, s);
    cuda.rmsnorm_backward(dx.dev(), z0.dev(), dy.dev(), x.dev(), w.dev(), rs.dev());
    cuda.rmsnorm_backward(dx.dev(), z1.dev(), dy.dev(), x.dev(), w.dev(), rs.dev());
    EXPECT_TRUE(gt::test::bitwise_equal(z0.dev_values(), z1.dev_values())) << "dweight bits";
  });
}

// The residual add fused into RMSNorm's forward equals add then
// rmsnorm_forward on the device bit for bit (the same rounding of the sum,
// the same row reduction), and the CPU twin to summation order; the
// backward's bf16 copy of dinp is dinp rounded, in the same call, leaving
// dinp and dweight as they are without it.
TEST(CudaLlama, FusedResidualAddAndBf16GradientCopyEqualTheSeparatePasses) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for_each_norm_case([](gt::CudaOps& cuda, gt::Ops& cpu_ops, cudaStream_t s, DType dt, int64_t R,
                      int64_t C) {
    gt::Ops* cpu = &cpu_ops;
    auto zeros = [&](DType t, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      return Twin(std::vector<float>(static_cast<size_t>(n), 0.f), t, shape, s);
    };
    Twin a(random_vector(R * C, 11, -2.f, 2.f), dt, {R, C}, s),
        b(random_vector(R * C, 12, -2.f, 2.f), dt, {R, C}, s),
        w(random_vector(C, 13, 0.5f, 1.5f), DType::f32, {C}, s);
    Twin res = zeros(dt, {R, C}), out = zeros(dt, {R, C}), rs = zeros(DType::f32, {R});
    Twin sum = zeros(dt, {R, C}), out2 = zeros(dt, {R, C}), rs2 = zeros(DType::f32, {R});
    cuda.add_rmsnorm_forward(res.dev(), out.dev(), rs.dev(), a.dev(), b.dev(), w.dev(), 1e-5f);
    cuda.add(sum.dev(), a.dev(), b.dev());
    cuda.rmsnorm_forward(out2.dev(), rs2.dev(), sum.dev(), w.dev(), 1e-5f);
    EXPECT_TRUE(gt::test::bitwise_equal(res.dev_values(), sum.dev_values())) << "res";
    EXPECT_TRUE(gt::test::bitwise_equal(out.dev_values(), out2.dev_values())) << "out";
    EXPECT_TRUE(gt::test::bitwise_equal(rs.dev_values(), rs2.dev_values())) << "rstd";
    cpu->add_rmsnorm_forward(res.cpu(), out.cpu(), rs.cpu(), a.cpu(), b.cpu(), w.cpu(), 1e-5f);
    EXPECT_TRUE(gt::test::bitwise_equal(res.dev_values(), res.cpu_values())) << "res (CPU)";
    EXPECT_TRUE(all_close(out.dev_values(), out.cpu_values(), tol(dt), tol(dt))) << "out (CPU)";
    EXPECT_TRUE(all_close(rs.dev_values(), rs.cpu_values(), 1e-6f, 1e-5f)) << "rstd (CPU)";

    // Backward with and without the copy, onto equal starting values.
    Twin dy(random_vector(R * C, 14), dt, {R, C}, s);
    Twin dx(random_vector(R * C, 15), DType::f32, {R, C}, s),
        dx2(random_vector(R * C, 15), DType::f32, {R, C}, s);
    Twin dw = zeros(DType::f32, {C}), dw2 = zeros(DType::f32, {C});
    Twin copy = zeros(DType::bf16, {R, C});
    cuda.rmsnorm_backward(dx.dev(), dw.dev(), dy.dev(), res.dev(), w.dev(), rs.dev(), copy.dev());
    cuda.rmsnorm_backward(dx2.dev(), dw2.dev(), dy.dev(), res.dev(), w.dev(), rs.dev());
    EXPECT_TRUE(gt::test::bitwise_equal(dx.dev_values(), dx2.dev_values())) << "dinp";
    EXPECT_TRUE(gt::test::bitwise_equal(dw.dev_values(), dw2.dev_values())) << "dweight";
    EXPECT_TRUE(gt::test::bitwise_equal(copy.dev_values(),
                                        gt::test::round_to_bf16(dx.dev_values())))
        << "dinp_bf16 is dinp rounded";
    cpu->rmsnorm_backward(dx.cpu(), dw.cpu(), dy.cpu(), res.cpu(), w.cpu(), rs.cpu(), copy.cpu());
    EXPECT_TRUE(gt::test::bitwise_equal(copy.cpu_values(),
                                        gt::test::round_to_bf16(dx.cpu_values())))
        << "the CPU twin's copy";
    EXPECT_TRUE(all_close(copy.dev_values(), copy.cpu_values(), 1e-2f, 1e-2f)) << "copy (CPU)";
  });
}

TEST(CudaLlama, RopeAndSwiGluMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps cuda;
  auto cpu = gt::make_cpu_ops(1);
  const cudaStream_t s = cuda.stream();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(gt::dtype_name(dt));
    // 7 rows of 5 heads of 16 (3 rotated: q and k of a packed q|k|v row),
    // positions (first_row 5 + n) % T=4 from a 6-position table.
    const int64_t N = 7, H = 5, D = 16;
    std::vector<float> table(6 * D);
    for (int p = 0; p < 6; ++p)
      for (int i = 0; i < D / 2; ++i) {
        const double a = p * std::pow(10000.0, -2.0 * i / D);
        table[p * D + i] = static_cast<float>(std::cos(a));
        table[p * D + D / 2 + i] = static_cast<float>(std::sin(a));
      }
    Twin cs(table, DType::f32, {6, D}, s), qk(random_vector(N * H * D, 6), dt, {N, H, D}, s);
    cpu->rope_forward(qk.cpu(), cs.cpu(), 3, 5, 4);
    cuda.rope_forward(qk.dev(), cs.dev(), 3, 5, 4);
    EXPECT_TRUE(all_close(qk.dev_values(), qk.cpu_values(), tol(dt), tol(dt))) << "rope forward";
    cpu->rope_backward(qk.cpu(), cs.cpu(), 3, 5, 4);
    cuda.rope_backward(qk.dev(), cs.dev(), 3, 5, 4);
    EXPECT_TRUE(all_close(qk.dev_values(), qk.cpu_values(), tol(dt), tol(dt))) << "rope backward";

    const int64_t R = 9, F = 23;
    Twin gu(random_vector(R * 2 * F, 7, -4.f, 4.f), dt, {R, 2 * F}, s),
        out(std::vector<float>(R * F, 0.f), dt, {R, F}, s),
        dy(random_vector(R * F, 8), dt, {R, F}, s),
        dgu(std::vector<float>(R * 2 * F, 99.f), dt, {R, 2 * F}, s);
    cpu->swiglu_forward(out.cpu(), gu.cpu());
    cuda.swiglu_forward(out.dev(), gu.dev());
    EXPECT_TRUE(all_close(out.dev_values(), out.cpu_values(), tol(dt), tol(dt))) << "swiglu";
    cpu->swiglu_backward(dgu.cpu(), dy.cpu(), gu.cpu());
    cuda.swiglu_backward(dgu.dev(), dy.dev(), gu.dev());
    EXPECT_TRUE(all_close(dgu.dev_values(), dgu.cpu_values(), tol(dt), tol(dt))) << "dswiglu";
  }
}

}  // namespace
