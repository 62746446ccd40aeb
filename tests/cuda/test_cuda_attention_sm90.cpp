// The Hopper attention forward (kernels/cuda/attention_sm90.cu: TMA copies
// through an mbarrier pipeline, warpgroup MMAs) against a double-precision
// reference of causal attention on the same bf16 inputs, and against the
// mma.sync tensor-core forward (attention_tc.cu), whose P is rounded to bf16
// the same way: head sizes 64 and 128, multi-head and grouped-query, T on a
// tile boundary, inside one and across several (with the last partial), two
// sequences sharing the copy engine's 2-D view. Every output is poisoned
// first. On the emulated device (sm_90 by default) the copies, barriers and
// MMAs run under their PTX rules; on a GPU only an sm_90 one runs them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "test_util.hpp"
#if defined(TRAINER_CUDA_EMULATOR)
#include "gt_emu/control.hpp"
#endif

namespace {

using gt::test::all_close;
using gt::test::DeviceArray;

struct Case {
  int B, T, NH, KV, hs;
};

std::string name(const Case& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " NH=" + std::to_string(c.NH) +
         " KV=" + std::to_string(c.KV) + " hs=" + std::to_string(c.hs);
}

bool sm90_device() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
}

__nv_bfloat16* bf(const DeviceArray<uint16_t>& a) {
  return reinterpret_cast<__nv_bfloat16*>(a.get());
}

// Causal attention in double: out (B,T,NH hs) and lse (B,NH,T), query head h
// reading key/value head h / (NH / KV).
void reference(const Case& c, const std::vector<float>& qkv, std::vector<float>* out,
               std::vector<float>* lse) {
  const int64_t W = int64_t{c.NH + 2 * c.KV} * c.hs, C = int64_t{c.NH} * c.hs;
  out->assign(static_cast<size_t>(c.B) * c.T * C, 0.f);
  lse->assign(static_cast<size_t>(c.B) * c.NH * c.T, 0.f);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.hs));
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.NH; ++h) {
      const int kv = h / (c.NH / c.KV);
      for (int t = 0; t < c.T; ++t) {
        const float* q = &qkv[static_cast<size_t>((int64_t{b} * c.T + t) * W + h * c.hs)];
        std::vector<double> s(static_cast<size_t>(t) + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          const float* k =
              &qkv[static_cast<size_t>((int64_t{b} * c.T + j) * W + C + int64_t{kv} * c.hs)];
          double d = 0;
          for (int e = 0; e < c.hs; ++e) d += static_cast<double>(q[e]) * k[e];
          s[static_cast<size_t>(j)] = d * scale;
          mx = std::max(mx, d * scale);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int e = 0; e < c.hs; ++e) {
          double acc = 0;
          for (int j = 0; j <= t; ++j)
            acc += s[static_cast<size_t>(j)] *
                   qkv[static_cast<size_t>((int64_t{b} * c.T + j) * W + C +
                                           int64_t{c.KV + kv} * c.hs + e)];
          (*out)[static_cast<size_t>((int64_t{b} * c.T + t) * C + h * c.hs + e)] =
              static_cast<float>(acc / sum);
        }
        (*lse)[static_cast<size_t>((int64_t{b} * c.NH + h) * c.T + t)] =
            static_cast<float>(mx + std::log(sum));
      }
    }
}

void check(const Case& c, cudaStream_t s) {
  SCOPED_TRACE(name(c));
  ASSERT_TRUE(gt::cuda::attention_sm90_supported(c.hs));
  const int64_t W = int64_t{c.NH + 2 * c.KV} * c.hs, C = int64_t{c.NH} * c.hs;
  const auto qkv16 =
      gt::test::to_bf16(gt::test::random_vector(static_cast<size_t>(c.B * c.T * W), 41, -2.f, 2.f));
  const auto qkv = gt::test::from_bf16(qkv16);
  std::vector<float> want_out, want_lse;
  reference(c, qkv, &want_out, &want_lse);

  const size_t n_out = static_cast<size_t>(c.B * c.T * C), n_lse = static_cast<size_t>(c.B) * c.NH * c.T;
  DeviceArray<uint16_t> d_qkv(qkv16, s), d_out(n_out, s), d_out_tc(n_out, s);
  DeviceArray<float> d_lse(n_lse, s), d_lse_tc(n_lse, s);
  d_out.poison();
  d_lse.poison();
  gt::cuda::attention_forward_sm90(bf(d_out), d_lse.get(), bf(d_qkv), c.B, c.T, c.NH, c.KV, c.hs, s);
  gt::cuda::attention_forward_tc(bf(d_out_tc), d_lse_tc.get(), bf(d_qkv), c.B, c.T, c.NH, c.KV,
                                 c.hs, s);
  const auto out = gt::test::from_bf16(d_out.download());
  const auto lse = d_lse.download();
  // P rounded to bf16 before P V, and the output to bf16: the tensor-core
  // kernels' tolerances (test_cuda_attention.cpp's kTensorCores).
  EXPECT_TRUE(all_close(out, want_out, 1.5e-2f, 1.5e-2f)) << "out against the reference";
  EXPECT_TRUE(all_close(lse, want_lse, 1e-4f, 1e-4f)) << "lse against the reference";
  EXPECT_TRUE(all_close(out, gt::test::from_bf16(d_out_tc.download()), 1.5e-2f, 1.5e-2f))
      << "out against the mma.sync kernel";
  EXPECT_TRUE(all_close(lse, d_lse_tc.download(), 1e-4f, 1e-4f)) << "lse against the mma.sync kernel";
}

TEST(CudaAttentionSm90, ForwardMatchesTheReferenceAndTheMmaSyncKernel) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!sm90_device()) GTEST_SKIP() << "the sm_90 kernels need an sm_90 device";
  gt::cuda::CudaStream stream;
  const Case cases[] = {{1, 64, 2, 2, 64}, {2, 100, 4, 2, 64}, {1, 130, 2, 1, 128},
                        {2, 65, 2, 2, 128}, {1, 1, 1, 1, 64}};
  for (const Case& c : cases) check(c, stream.get());
}

// GPT-2 124M's attention at B=4 (12 heads of 64, T=1024) and a Llama-like
// grouped shape (32 heads of 128 over 8, T=2048): a real GPU only.
TEST(CudaAttentionSm90, ForwardMatchesAtProductionShape) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!sm90_device()) GTEST_SKIP() << "the sm_90 kernels need an sm_90 device";
  if (const char* why = gt::test::production_shapes_skipped()) GTEST_SKIP() << why;
  gt::cuda::CudaStream stream;
  check({4, 1024, 12, 12, 64}, stream.get());
  check({1, 2048, 32, 8, 128}, stream.get());
}

// CudaOps under runtime.attention=wgmma (CudaContextOptions::attention_wgmma):
// the forward is the sm_90 kernel's, bit for bit, and the backward the
// tensor-core kernel's on that forward's outputs.
TEST(CudaAttentionSm90, CudaOpsRunsTheForwardOnItAndTheBackwardOnTheTensorCores) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (!sm90_device()) GTEST_SKIP() << "the sm_90 kernels need an sm_90 device";
  gt::CudaContextOptions options;
  options.attention_tensor_cores = true;
  options.attention_wgmma = true;
  gt::CudaOps ops(options);
  const cudaStream_t s = ops.stream();
  const Case c{2, 100, 4, 2, 64};
  const int64_t W = int64_t{c.NH + 2 * c.KV} * c.hs, C = int64_t{c.NH} * c.hs;
  const auto qkv16 =
      gt::test::to_bf16(gt::test::random_vector(static_cast<size_t>(c.B * c.T * W), 5, -2.f, 2.f));
  const auto dout16 =
      gt::test::to_bf16(gt::test::random_vector(static_cast<size_t>(c.B * c.T * C), 6));
  const int64_t n_lse = ops.attention_saved_elems(c.B, c.NH, c.T);
  DeviceArray<uint16_t> qkv(qkv16, s), dout(dout16, s), out(static_cast<size_t>(c.B * c.T * C), s),
      out2(static_cast<size_t>(c.B * c.T * C), s), dqkv(qkv16.size(), s), dqkv2(qkv16.size(), s);
  DeviceArray<float> lse(static_cast<size_t>(n_lse), s), lse2(static_cast<size_t>(n_lse), s),
      scratch(static_cast<size_t>(ops.attention_scratch_elems(c.B, c.NH, c.T)), s);
  auto view = [](const auto& a, std::initializer_list<int64_t> shape) {
    return gt::test::dev_view(a, gt::DType::bf16, shape);
  };
  auto flat = [](const DeviceArray<float>& a) {
    return gt::test::dev_view(a, gt::DType::f32, {static_cast<int64_t>(a.size())});
  };
  out.poison();
  lse.poison();
  ops.attention_forward(view(out, {c.B, c.T, C}), flat(lse), view(qkv, {c.B, c.T, W}), c.NH, c.KV);
  gt::cuda::attention_forward_sm90(bf(out2), lse2.get(), bf(qkv), c.B, c.T, c.NH, c.KV, c.hs, s);
  EXPECT_TRUE(out.download() == out2.download()) << "out: not the sm_90 kernel's";
  EXPECT_TRUE(lse.download() == lse2.download()) << "lse: not the sm_90 kernel's";
  dqkv.poison();
  ops.attention_backward(view(dqkv, {c.B, c.T, W}), flat(scratch), view(dout, {c.B, c.T, C}),
                         view(qkv, {c.B, c.T, W}), view(out, {c.B, c.T, C}), flat(lse), c.NH,
                         c.KV);
  gt::cuda::attention_backward_tc(bf(dqkv2), scratch.get(), bf(dout), bf(qkv), bf(out), lse.get(),
                                  c.B, c.T, c.NH, c.KV, c.hs, s);
  EXPECT_TRUE(dqkv.download() == dqkv2.download()) << "dqkv: not the tensor-core kernel's";
}

#if defined(TRAINER_CUDA_EMULATOR)
// On a GPU that is not sm_90 the backend refuses runtime.attention=wgmma at
// start, naming the device, rather than launch a kernel it cannot run.
TEST(CudaAttentionSm90, CudaOpsRefusesWgmmaOnAnotherGpu) {
  gt::emu::set_compute_capability(80);
  struct Restore {
    ~Restore() { gt::emu::set_compute_capability(90); }
  } restore;
  gt::CudaContextOptions options;
  options.attention_wgmma = true;
  const std::string msg = gt::test::error_message([&] { gt::CudaOps ops(options); });
  EXPECT_NE(msg.find("runtime.attention=wgmma needs an sm_90 GPU"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is sm_80"), std::string::npos) << msg;
}
#endif

TEST(CudaAttentionSm90, AnUnsupportedHeadSizeIsAnError) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_FALSE(gt::cuda::attention_sm90_supported(48));
  EXPECT_FALSE(gt::cuda::attention_sm90_supported(256));
  gt::cuda::CudaStream stream;
  DeviceArray<uint16_t> qkv(3 * 48, stream.get()), out(48, stream.get());
  DeviceArray<float> lse(1, stream.get());
  const std::string msg = gt::test::error_message([&] {
    gt::cuda::attention_forward_sm90(bf(out), lse.get(), bf(qkv), 1, 1, 1, 1, 48, stream.get());
  });
  EXPECT_NE(msg.find("head size 48"), std::string::npos) << msg;
}

}  // namespace
