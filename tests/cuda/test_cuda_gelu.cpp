// gelu_forward / gelu_backward (kernels/cuda/gelu.cu) against the CPU twin,
// fp32 and bf16, aligned (vector path) and offset-by-one (scalar path),
// with sizes that are not multiples of the pack width or the block.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/gelu.cuh"
#include "test_util.hpp"

namespace {

using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

struct Case {
  int64_t n;
  int64_t offset;  // elements: 1 misaligns every pointer -> scalar path
};
const Case kCases[] = {{1, 0}, {7, 0}, {1000, 0}, {1000003, 0}, {1000003, 1}, {4099, 3}};

std::string name(const Case& c) {
  return "n=" + std::to_string(c.n) + " offset=" + std::to_string(c.offset);
}

// The reference for inp: forward out and backward dinp from the CPU backend.
void cpu_reference(const std::vector<float>& inp, const std::vector<float>& dout,
                   std::vector<float>* out, std::vector<float>* dinp) {
  auto cpu = gt::make_cpu_ops(1);
  const int64_t n = static_cast<int64_t>(inp.size());
  out->assign(inp.size(), 0.f);
  dinp->assign(inp.size(), 0.f);
  std::vector<float> x = inp, g = dout;
  cpu->gelu_forward(gt::cpu_f32(out->data(), {n}), gt::cpu_f32(x.data(), {n}));
  cpu->gelu_backward(gt::cpu_f32(dinp->data(), {n}), gt::cpu_f32(x.data(), {n}),
                     gt::cpu_f32(g.data(), {n}));
}

TEST(CudaGelu, Fp32MatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const auto inp = random_vector(c.n, 11, -5.f, 5.f);
    const auto dout = random_vector(c.n, 12);
    std::vector<float> want_out, want_dinp;
    cpu_reference(inp, dout, &want_out, &want_dinp);

    std::vector<float> padded_inp(c.offset, 0.f), padded_dout(c.offset, 0.f);
    padded_inp.insert(padded_inp.end(), inp.begin(), inp.end());
    padded_dout.insert(padded_dout.end(), dout.begin(), dout.end());
    DeviceArray<float> d_inp(padded_inp, stream.get()), d_dout(padded_dout, stream.get());
    DeviceArray<float> d_out(c.n + c.offset, stream.get()), d_dinp(c.n + c.offset, stream.get());
    d_out.poison();
    d_dinp.poison();
    const int64_t o = c.offset;
    gt::cuda::gelu_forward(d_out.get() + o, d_inp.get() + o, c.n, stream.get());
    gt::cuda::gelu_backward(d_dinp.get() + o, d_inp.get() + o, d_dout.get() + o, c.n,
                            stream.get());
    const auto out = d_out.download(), dinp = d_dinp.download();
    EXPECT_TRUE(all_close(out.data() + o, want_out.data(), c.n, 1e-6f, 1e-5f)) << "forward";
    EXPECT_TRUE(all_close(dinp.data() + o, want_dinp.data(), c.n, 1e-5f, 1e-5f)) << "backward";
  }
}

TEST(CudaGelu, Fp32InPlace) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const int64_t n = 100003;
  const auto inp = random_vector(n, 21, -5.f, 5.f);
  const auto dout = random_vector(n, 22);
  std::vector<float> want_out, want_dinp;
  cpu_reference(inp, dout, &want_out, &want_dinp);

  DeviceArray<float> x(inp, stream.get()), x2(inp, stream.get()), g(dout, stream.get());
  gt::cuda::gelu_backward(g.get(), x.get(), g.get(), n, stream.get());  // dinp == dout
  gt::cuda::gelu_forward(x2.get(), x2.get(), n, stream.get());          // out == inp
  EXPECT_TRUE(all_close(x2.download(), want_out, 1e-6f, 1e-5f)) << "forward in place";
  EXPECT_TRUE(all_close(g.download(), want_dinp, 1e-5f, 1e-5f)) << "backward in place";
}

TEST(CudaGelu, Bf16MatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    // bf16-exact inputs so both sides start from the same values.
    const auto inp = gt::test::round_to_bf16(random_vector(c.n, 31, -5.f, 5.f));
    const auto dout = gt::test::round_to_bf16(random_vector(c.n, 32));
    std::vector<float> want_out, want_dinp;
    cpu_reference(inp, dout, &want_out, &want_dinp);

    std::vector<uint16_t> h_inp(c.offset, 0), h_dout(c.offset, 0);
    const auto b_inp = gt::test::to_bf16(inp), b_dout = gt::test::to_bf16(dout);
    h_inp.insert(h_inp.end(), b_inp.begin(), b_inp.end());
    h_dout.insert(h_dout.end(), b_dout.begin(), b_dout.end());
    DeviceArray<uint16_t> d_inp(h_inp, stream.get()), d_dout(h_dout, stream.get());
    DeviceArray<uint16_t> d_out(c.n + c.offset, stream.get()),
        d_dinp(c.n + c.offset, stream.get());
    d_out.poison();
    d_dinp.poison();
    auto bf = [&](const DeviceArray<uint16_t>& a) {
      return reinterpret_cast<__nv_bfloat16*>(a.get()) + c.offset;
    };
    gt::cuda::gelu_forward(bf(d_out), bf(d_inp), c.n, stream.get());
    gt::cuda::gelu_backward(bf(d_dinp), bf(d_inp), bf(d_dout), c.n, stream.get());
    const auto out = gt::test::from_bf16(d_out.download());
    const auto dinp = gt::test::from_bf16(d_dinp.download());
    EXPECT_TRUE(all_close(out.data() + c.offset, want_out.data(), c.n, 1e-2f, 1e-2f))
        << "forward";
    EXPECT_TRUE(all_close(dinp.data() + c.offset, want_dinp.data(), c.n, 1e-2f, 1e-2f))
        << "backward";
  }
}

}  // namespace
