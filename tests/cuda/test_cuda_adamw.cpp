// adamw_update (kernels/cuda/adamw.cu) against the CPU twin: aligned (vector
// path) and offset-by-one (scalar path) segments, odd n, first and late
// steps (bias correction), with and without the bf16 parameter copy.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/adamw.cuh"
#include "test_util.hpp"

namespace {

using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

struct Case {
  int64_t n, offset, t;
  bool bf16_copy;
};
const Case kCases[] = {{1, 0, 1, true},         {7, 0, 2, false},       {1000, 0, 1, true},
                       {1000003, 0, 1000, true}, {1000003, 1, 3, true}, {4099, 3, 10, false}};

std::string name(const Case& c) {
  return "n=" + std::to_string(c.n) + " offset=" + std::to_string(c.offset) +
         " t=" + std::to_string(c.t) + (c.bf16_copy ? " +bf16" : "");
}

std::vector<float> pad(int64_t offset, const std::vector<float>& v) {
  std::vector<float> out(offset, 0.f);
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

TEST(CudaAdamW, StepMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  auto cpu = gt::make_cpu_ops(1);
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    gt::Ops::AdamWParams p{};
    p.lr = 3e-4f;
    p.beta1 = 0.9f;
    p.beta2 = 0.95f;
    p.eps = 1e-8f;
    p.weight_decay = 0.1f;
    p.grad_scale = 0.7f;
    p.t = c.t;
    const auto param0 = random_vector(c.n, 1);
    const auto grad = random_vector(c.n, 2);
    const auto m0 = random_vector(c.n, 3, -0.1f, 0.1f);
    const auto v0 = random_vector(c.n, 4, 0.f, 0.01f);
    std::vector<float> want_p = param0, want_m = m0, want_v = v0, g = grad;
    cpu->adamw_update(gt::cpu_f32(want_p.data(), {c.n}), gt::cpu_f32(g.data(), {c.n}),
                      gt::cpu_f32(want_m.data(), {c.n}), gt::cpu_f32(want_v.data(), {c.n}), p);

    const int64_t o = c.offset;
    DeviceArray<float> d_p(pad(o, param0), stream.get()), d_g(pad(o, grad), stream.get()),
        d_m(pad(o, m0), stream.get()), d_v(pad(o, v0), stream.get());
    DeviceArray<uint16_t> d_p16(c.n + o, stream.get());
    d_p16.poison();
    __nv_bfloat16* p16 =
        c.bf16_copy ? reinterpret_cast<__nv_bfloat16*>(d_p16.get()) + o : nullptr;
    gt::cuda::adamw_update(d_p.get() + o, p16, d_g.get() + o, d_m.get() + o, d_v.get() + o, c.n,
                           p, stream.get());
    const auto got_p = d_p.download(), got_m = d_m.download(), got_v = d_v.download();
    EXPECT_TRUE(all_close(got_p.data() + o, want_p.data(), c.n, 1e-6f, 1e-5f)) << "param";
    EXPECT_TRUE(all_close(got_m.data() + o, want_m.data(), c.n, 1e-7f, 1e-5f)) << "m";
    EXPECT_TRUE(all_close(got_v.data() + o, want_v.data(), c.n, 1e-9f, 1e-5f)) << "v";
    EXPECT_TRUE(all_close(d_g.download().data() + o, grad.data(), c.n, 0.f, 0.f))
        << "grad must be read only";
    const auto got16 = gt::test::from_bf16(d_p16.download());
    if (c.bf16_copy) {
      EXPECT_TRUE(all_close(got16.data() + o, want_p.data(), c.n, 1e-2f, 1e-2f)) << "bf16 copy";
    } else {
      for (int64_t i = 0; i < c.n + o; ++i)
        ASSERT_TRUE(std::isnan(got16[i])) << "bf16 buffer written without being asked, i=" << i;
    }
  }
}

}  // namespace
