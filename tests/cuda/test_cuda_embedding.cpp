// embedding_forward / embedding_backward (kernels/cuda/embedding.cu) against
// the CPU twin: odd C (scalar path), C % 4 == 0 (vector path), C past one
// 256-column slice, tiny vocabularies (every token repeated many times) and
// GPT-2's V, accumulation into pre-filled gradients, the nullptr-skip of one
// gradient, and bitwise run-to-run determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/embedding.cuh"
#include "test_util.hpp"

namespace {

using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

struct Case {
  int B, T, C, V, maxT;
};
const Case kCases[] = {{1, 1, 1, 1, 1},        {2, 5, 771, 97, 8},    {4, 64, 64, 50257, 64},
                       {3, 17, 768, 1000, 32}, {8, 33, 260, 3, 40},   {4, 1024, 48, 50257, 1024}};

bool small_case(const Case& c) { return c.V <= 1000 && c.T <= 64; }

std::string name(const Case& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " C=" + std::to_string(c.C) +
         " V=" + std::to_string(c.V) + " maxT=" + std::to_string(c.maxT);
}

TEST(CudaEmbedding, ForwardMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  auto cpu = gt::make_cpu_ops(1);
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    const int64_t BT = int64_t{c.B} * c.T;
    auto tokens = gt::test::random_ints(BT, 1, 0, c.V);
    auto wte = random_vector(int64_t{c.V} * c.C, 2);
    auto wpe = random_vector(int64_t{c.maxT} * c.C, 3);
    std::vector<float> want(BT * c.C);
    cpu->embedding_forward(gt::cpu_f32(want.data(), {c.B, c.T, c.C}),
                           gt::cpu_i32(tokens.data(), {c.B, c.T}),
                           gt::cpu_f32(wte.data(), {c.V, c.C}),
                           gt::cpu_f32(wpe.data(), {c.maxT, c.C}));

    DeviceArray<int32_t> d_tok(tokens, stream.get());
    DeviceArray<float> d_wte(wte, stream.get()), d_wpe(wpe, stream.get());
    DeviceArray<float> out(BT * c.C, stream.get());
    out.poison();
    gt::cuda::embedding_forward(out.get(), d_tok.get(), d_wte.get(), d_wpe.get(), c.B, c.T, c.C,
                                c.V, stream.get());
    // One fp32 add per element on both sides: exact.
    EXPECT_TRUE(all_close(out.download(), want, 0.f, 0.f));
  }
}

TEST(CudaEmbedding, BackwardAccumulatesLikeCpuAndIsDeterministic) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  auto cpu = gt::make_cpu_ops(1);
  for (const Case& c : gt::test::select_cases(kCases, small_case)) {
    SCOPED_TRACE(name(c));
    const int64_t BT = int64_t{c.B} * c.T;
    auto tokens = gt::test::random_ints(BT, 10, 0, c.V);
    auto dout = random_vector(BT * c.C, 11);
    // Pre-filled: both gradients accumulate.
    const auto dwte0 = random_vector(int64_t{c.V} * c.C, 12);
    const auto dwpe0 = random_vector(int64_t{c.maxT} * c.C, 13);
    std::vector<float> want_wte = dwte0, want_wpe = dwpe0;
    cpu->embedding_backward(gt::cpu_f32(want_wte.data(), {c.V, c.C}),
                            gt::cpu_f32(want_wpe.data(), {c.maxT, c.C}),
                            gt::cpu_f32(dout.data(), {c.B, c.T, c.C}),
                            gt::cpu_i32(tokens.data(), {c.B, c.T}));

    DeviceArray<int32_t> d_tok(tokens, stream.get());
    DeviceArray<float> d_dout(dout, stream.get());
    DeviceArray<float> d_wte(dwte0, stream.get()), d_wpe(dwpe0, stream.get());
    gt::cuda::embedding_backward(d_wte.get(), d_wpe.get(), d_dout.get(), d_tok.get(), c.B, c.T,
                                 c.C, c.V, stream.get());
    const auto got_wte = d_wte.download(), got_wpe = d_wpe.download();
    EXPECT_TRUE(all_close(got_wte, want_wte, 1e-5f, 1e-5f)) << "dwte";
    EXPECT_TRUE(all_close(got_wpe, want_wpe, 1e-5f, 1e-5f)) << "dwpe";

    // Again from the same start: bit-identical.
    d_wte.upload(dwte0);
    d_wpe.upload(dwpe0);
    gt::cuda::embedding_backward(d_wte.get(), d_wpe.get(), d_dout.get(), d_tok.get(), c.B, c.T,
                                 c.C, c.V, stream.get());
    EXPECT_TRUE(gt::test::bitwise_equal(d_wte.download(), got_wte)) << "dwte not deterministic";
    EXPECT_TRUE(gt::test::bitwise_equal(d_wpe.download(), got_wpe)) << "dwpe not deterministic";

    // nullptr skips one gradient and leaves the other as before.
    d_wte.upload(dwte0);
    d_wpe.upload(dwpe0);
    gt::cuda::embedding_backward(d_wte.get(), nullptr, d_dout.get(), d_tok.get(), c.B, c.T, c.C,
                                 c.V, stream.get());
    EXPECT_TRUE(gt::test::bitwise_equal(d_wte.download(), got_wte)) << "dwte alone";
    EXPECT_TRUE(gt::test::bitwise_equal(d_wpe.download(), dwpe0)) << "dwpe must be untouched";
    gt::cuda::embedding_backward(nullptr, d_wpe.get(), d_dout.get(), d_tok.get(), c.B, c.T, c.C,
                                 c.V, stream.get());
    EXPECT_TRUE(gt::test::bitwise_equal(d_wpe.download(), got_wpe)) << "dwpe alone";
  }
}

TEST(CudaEmbedding, OutOfRangeTokenGivesNanRowWithoutReadingOutOfBounds) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const int B = 1, T = 3, C = 8, V = 4;
  DeviceArray<int32_t> tok(std::vector<int32_t>{1, -1, 4}, stream.get());
  DeviceArray<float> wte(random_vector(V * C, 1), stream.get()),
      wpe(random_vector(T * C, 2), stream.get());
  DeviceArray<float> out(B * T * C, stream.get());
  out.poison();
  gt::cuda::embedding_forward(out.get(), tok.get(), wte.get(), wpe.get(), B, T, C, V,
                              stream.get());
  const auto o = out.download();
  for (int c = 0; c < C; ++c) {
    EXPECT_FALSE(std::isnan(o[c])) << "valid row, c=" << c;
    EXPECT_TRUE(std::isnan(o[C + c])) << "token -1, c=" << c;
    EXPECT_TRUE(std::isnan(o[2 * C + c])) << "token V, c=" << c;
  }
}

}  // namespace
