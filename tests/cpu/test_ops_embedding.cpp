// CPU embedding_forward/backward against a double reference, finite
// differences, the accumulate invariant, determinism and bad-token errors.
#include <cstring>

#include "test_ops_common.hpp"

namespace gt::test {
namespace {

constexpr int64_t B = 2, T = 7, C = 12, V = 37, maxT = 9;

struct EmbeddingCase {
  std::vector<int32_t> tokens = random_ints(B * T, 11, 0, V);
  std::vector<float> wte = random_vector(V * C, 12);
  std::vector<float> wpe = random_vector(maxT * C, 13);
  std::vector<float> w = random_vector(B * T * C, 14);  // probe weights for L
  EmbeddingCase() {
    // Repeated tokens are what makes the backward a scatter-add.
    tokens[3] = tokens[0];
    tokens[T + 2] = tokens[0];
  }
  std::vector<float> forward(Ops& ops) {
    std::vector<float> out(B * T * C);
    ops.embedding_forward(f32(out, {B, T, C}), i32(tokens, {B, T}), f32(wte, {V, C}),
                          f32(wpe, {maxT, C}));
    return out;
  }
};

TEST(CpuEmbedding, ForwardMatchesReference) {
  auto ops = cpu_ops();
  EmbeddingCase k;
  std::vector<float> out = k.forward(*ops);
  std::vector<double> ref(B * T * C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        ref[(b * T + t) * C + c] = static_cast<double>(k.wte[k.tokens[b * T + t] * C + c]) +
                                   k.wpe[t * C + c];
  EXPECT_TRUE(all_close(out, to_float(ref), 1e-6f, 1e-6f));
}

TEST(CpuEmbedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  auto ops = cpu_ops();
  EmbeddingCase k;
  const float pre = 0.25f;
  std::vector<float> dwte(V * C, pre), dwpe(maxT * C, pre), dout(k.w);
  ops->embedding_backward(f32(dwte, {V, C}), f32(dwpe, {maxT, C}), f32(dout, {B, T, C}),
                          i32(k.tokens, {B, T}));
  auto loss = [&] { return weighted_sum(k.forward(*ops), k.w); };
  std::vector<float> g_wte = numeric_grad(k.wte, loss);
  std::vector<float> g_wpe = numeric_grad(k.wpe, loss);
  EXPECT_TRUE(grad_close(dwte, plus(g_wte, pre)));
  EXPECT_TRUE(grad_close(dwpe, plus(g_wpe, pre)));
  // Rows of wpe past T and tokens never seen receive nothing but the pre-fill.
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dwpe[(maxT - 1) * C + c], pre);
}

TEST(CpuEmbedding, BackwardMatchesReferenceOnWideChannels) {
  // C spans several channel blocks (64) with a ragged last block, so the
  // parallel split of the scatter is exercised.
  auto ops = cpu_ops();
  const int64_t b = 3, t = 50, c = 150, v = 11;
  std::vector<int32_t> tok = random_ints(b * t, 21, 0, v);
  std::vector<float> dout = random_vector(b * t * c, 22);
  std::vector<float> dwte(v * c, 1.f), dwpe(t * c, -1.f);
  ops->embedding_backward(f32(dwte, {v, c}), f32(dwpe, {t, c}), f32(dout, {b, t, c}),
                          i32(tok, {b, t}));
  std::vector<double> rte(v * c, 1.0), rpe(t * c, -1.0);
  for (int64_t i = 0; i < b * t; ++i)
    for (int64_t j = 0; j < c; ++j) {
      rte[tok[i] * c + j] += dout[i * c + j];
      rpe[(i % t) * c + j] += dout[i * c + j];
    }
  EXPECT_TRUE(all_close(dwte, to_float(rte), 1e-5f, 1e-5f));
  EXPECT_TRUE(all_close(dwpe, to_float(rpe), 1e-5f, 1e-5f));
}

TEST(CpuEmbedding, BackwardIsBitwiseDeterministicAcrossThreadCounts) {
  const int64_t b = 4, t = 64, c = 96, v = 5;  // few tokens: many collisions
  std::vector<int32_t> tok = random_ints(b * t, 31, 0, v);
  std::vector<float> dout = random_vector(b * t * c, 32);
  auto run = [&](int threads) {
    auto ops = cpu_ops(threads);
    std::vector<float> dwte(v * c, 0.f), dwpe(t * c, 0.f);
    ops->embedding_backward(f32(dwte, {v, c}), f32(dwpe, {t, c}), f32(dout, {b, t, c}),
                            i32(tok, {b, t}));
    dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
    return dwte;
  };
  std::vector<float> a = run(0), a2 = run(0), one = run(1);
  cpu_ops();  // restore the default thread count for later tests
  EXPECT_EQ(std::memcmp(a.data(), a2.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.data(), one.data(), a.size() * sizeof(float)), 0);
}

TEST(CpuEmbedding, OutOfRangeTokenThrowsNamingIt) {
  auto ops = cpu_ops();
  EmbeddingCase k;
  std::vector<float> out(B * T * C), dwte(V * C), dwpe(maxT * C);
  k.tokens[5] = static_cast<int32_t>(V);
  expect_error_containing([&] { k.forward(*ops); }, "token id 37");
  k.tokens[5] = -4;
  expect_error_containing(
      [&] {
        ops->embedding_backward(f32(dwte, {V, C}), f32(dwpe, {maxT, C}), f32(k.w, {B, T, C}),
                                i32(k.tokens, {B, T}));
      },
      "token id -4");
}

TEST(CpuEmbedding, RejectsSequenceLongerThanPositionTable) {
  auto ops = cpu_ops();
  std::vector<int32_t> tok(1 * 10, 0);
  std::vector<float> wte(V * C), wpe(maxT * C), out(10 * C);
  EXPECT_THROW(ops->embedding_forward(f32(out, {1, 10, C}), i32(tok, {1, 10}), f32(wte, {V, C}),
                                      f32(wpe, {maxT, C})),
               Error);
}

}  // namespace
}  // namespace gt::test
