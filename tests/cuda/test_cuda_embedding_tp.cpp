// The split embedding of tensor parallelism (kernels/cuda/embedding.cu):
// token_embedding_forward/backward over vocabulary shards (first, middle and
// last shard, tokens in and out of the shard) and position_embedding_forward/
// backward from several first_row offsets, against the CPU twin. The adds run
// in the CPU's order, so results must be bit-identical.
#include <gtest/gtest.h>

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

struct TokenCase {
  int64_t N;
  int C, V, shards, shard;
};
const TokenCase kTokenCases[] = {{1, 1, 1, 1, 0},     {37, 771, 97, 2, 0}, {37, 771, 97, 2, 1},
                                 {256, 64, 1000, 4, 2}, {1024, 768, 50257, 2, 1},
                                 {300, 260, 3, 3, 1}};

TEST(CudaEmbeddingTp, TokenShardForwardAndBackwardMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  auto cpu = gt::make_cpu_ops(1);
  for (const TokenCase& c :
       gt::test::select_cases(kTokenCases, [](const TokenCase& t) { return t.V <= 1000; })) {
    const int64_t per = (c.V + c.shards - 1) / c.shards;
    const int64_t start = per * c.shard;
    const int64_t Vs = std::min<int64_t>(per, c.V - start);
    SCOPED_TRACE("N=" + std::to_string(c.N) + " C=" + std::to_string(c.C) + " shard [" +
                 std::to_string(start) + ", " + std::to_string(start + Vs) + ")");
    auto tokens = gt::test::random_ints(c.N, 1, 0, c.V);
    auto wte = random_vector(Vs * c.C, 2);
    std::vector<float> want(c.N * c.C);
    cpu->token_embedding_forward(gt::cpu_f32(want.data(), {c.N, c.C}),
                                 gt::cpu_i32(tokens.data(), {c.N}),
                                 gt::cpu_f32(wte.data(), {Vs, c.C}), start);
    DeviceArray<int32_t> d_tok(tokens, s);
    DeviceArray<float> d_wte(wte, s), d_out(c.N * c.C, s);
    d_out.poison();
    gt::cuda::token_embedding_forward(d_out.get(), d_tok.get(), d_wte.get(), c.N, c.C,
                                      static_cast<int>(Vs), start, s);
    EXPECT_TRUE(all_close(d_out.download(), want, 0.f, 0.f)) << "forward";

    auto dout = random_vector(c.N * c.C, 3);
    const auto dwte0 = random_vector(Vs * c.C, 4);
    std::vector<float> want_dw = dwte0;
    cpu->token_embedding_backward(gt::cpu_f32(want_dw.data(), {Vs, c.C}),
                                  gt::cpu_f32(dout.data(), {c.N, c.C}),
                                  gt::cpu_i32(tokens.data(), {c.N}), start);
    DeviceArray<float> d_dout(dout, s), d_dw(dwte0, s);
    gt::cuda::token_embedding_backward(d_dw.get(), d_dout.get(), d_tok.get(), c.N, c.C,
                                       static_cast<int>(Vs), start, s);
    EXPECT_TRUE(gt::test::bitwise_equal(d_dw.download(), want_dw)) << "backward";
  }
}

struct PositionCase {
  int64_t N, first_row;
  int C, T, maxT;
};
const PositionCase kPositionCases[] = {{1, 0, 1, 1, 1},        {64, 0, 768, 64, 64},
                                       {96, 32, 64, 64, 128},   {100, 7, 771, 13, 20},
                                       {4096, 1024, 768, 1024, 1024}, {50, 999, 33, 17, 17}};

TEST(CudaEmbeddingTp, PositionForwardAndBackwardMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  auto cpu = gt::make_cpu_ops(1);
  for (const PositionCase& c : gt::test::select_cases(
           kPositionCases, [](const PositionCase& p) { return p.N <= 1024; })) {
    SCOPED_TRACE("N=" + std::to_string(c.N) + " first_row=" + std::to_string(c.first_row) +
                 " C=" + std::to_string(c.C) + " T=" + std::to_string(c.T));
    auto wpe = random_vector(int64_t{c.maxT} * c.C, 5);
    const auto out0 = random_vector(c.N * c.C, 6);
    std::vector<float> want = out0;
    cpu->position_embedding_forward(gt::cpu_f32(want.data(), {c.N, c.C}),
                                    gt::cpu_f32(wpe.data(), {c.maxT, c.C}), c.first_row, c.T);
    DeviceArray<float> d_wpe(wpe, s), d_out(out0, s);
    gt::cuda::position_embedding_forward(d_out.get(), d_wpe.get(), c.N, c.C, c.first_row, c.T, s);
    EXPECT_TRUE(gt::test::bitwise_equal(d_out.download(), want)) << "forward accumulates";

    auto dout = random_vector(c.N * c.C, 7);
    const auto dwpe0 = random_vector(int64_t{c.maxT} * c.C, 8);
    std::vector<float> want_dw = dwpe0;
    cpu->position_embedding_backward(gt::cpu_f32(want_dw.data(), {c.maxT, c.C}),
                                     gt::cpu_f32(dout.data(), {c.N, c.C}), c.first_row, c.T);
    DeviceArray<float> d_dout(dout, s), d_dw(dwpe0, s);
    gt::cuda::position_embedding_backward(d_dw.get(), d_dout.get(), c.N, c.C, c.first_row, c.T,
                                          s);
    EXPECT_TRUE(gt::test::bitwise_equal(d_dw.download(), want_dw)) << "backward";
  }
}

}  // namespace
