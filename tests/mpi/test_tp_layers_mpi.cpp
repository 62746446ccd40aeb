// The tensor-parallel layers (trainer/parallelize/tp_layers.hpp) at the
// running world size as the tp group, each against the same layer on one
// rank (where it is the plain op), with the ring overlap on and off:
//   ColumnParallelLinear  out = this rank's columns, dx = its rows (the
//                         reduce-scatter), dw/db = its rows;
//   RowParallelLinear     out = its rows, dx/dw = its columns, db complete;
//   VocabParallelEmbedding out = its rows, dwte = its vocabulary rows, dwpe
//                         a partial sum that adds up over the ranks;
//   VocabParallelCrossEntropy  the same losses on every rank, dlogits = its
//                         vocabulary columns, the padding columns masked.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/core/bf16.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "mpi_test_util.hpp"
#include "trainer/parallelize/tp_layers.hpp"

namespace gt::test {
namespace {

constexpr float kAtol = 1e-5f, kRtol = 1e-5f;
constexpr int kB = 2, kT = 4, kR = kB * kT, kC = 8;

std::vector<float> rows(const std::vector<float>& m, int64_t cols, int64_t r0, int64_t n) {
  return std::vector<float>(m.begin() + r0 * cols, m.begin() + (r0 + n) * cols);
}
std::vector<float> cols(const std::vector<float>& m, int64_t ncols, int64_t c0, int64_t n) {
  std::vector<float> out;
  for (size_t r = 0; r < m.size() / static_cast<size_t>(ncols); ++r)
    for (int64_t c = c0; c < c0 + n; ++c) out.push_back(m[r * ncols + c]);
  return out;
}
TensorView v(std::vector<float>& x, std::initializer_list<int64_t> shape) {
  return cpu_f32(x.data(), shape);
}
// Activations as the model hands them over (activation_placement.hpp): this
// rank's rows of the sequence, or features cut along `d`.
Activation rows_of_seq(TensorView t, const char* name) { return {t, sequence_shard(), name}; }
Activation features(TensorView t, ActDim d, const char* name) {
  return {t, {AxisPlacement::shard(d), AxisPlacement::shard(ActDim::sequence)}, name};
}
Activation all_rows(TensorView t, const char* name) {
  return {t, {AxisPlacement::replicated(), AxisPlacement::shard(ActDim::sequence)}, name};
}

// One layer context per group (tp = 1 for the reference), fp32.
struct Context {
  TpLayerContext ctx;
  Context(Ops& ops, Communicator* comm, bool overlap)
      : ctx(ops, TensorParallelGroup{comm, overlap}, ComputeDType::fp32,
            TpLayerContext::scratch(comm ? comm->size() : 1, overlap, ComputeDType::fp32, kR, kC),
            {}) {}
};

class TpLayersMpi : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    world = test_world();
    p = world->size();
    rank = world->rank();
    // The shapes split over tp = 1, 2 and 4 (a config with tp = 3 would be refused).
    if (kR % p != 0 || kC % p != 0)
      GTEST_SKIP() << kR << " rows and " << kC << " channels do not split over tp=" << p;
    ops = make_cpu_ops(1);
    one = std::make_unique<Context>(*ops, nullptr, GetParam());
    tp = std::make_unique<Context>(*ops, world.get(), GetParam());
  }
  std::unique_ptr<MpiCommunicator> world;
  int p = 1, rank = 0;
  std::unique_ptr<Ops> ops;
  std::unique_ptr<Context> one, tp;
};

TEST_P(TpLayersMpi, ColumnParallelLinearIsTheMatmulsColumnsAndItsGradientsRows) {
  const int64_t N = 12, Nl = N / p, Rl = kR / p;
  auto X = random_vector(kR * kC, 1), W = random_vector(N * kC, 2), b = random_vector(N, 3);
  auto dOut = random_vector(kR * N, 4);
  std::vector<float> out_ref(kR * N), dx_ref(kR * kC), dw_ref(N * kC, 0.f), db_ref(N, 0.f);
  ColumnParallelLinear ref(one->ctx, "ref", ActDim::hidden);
  Activation x_ref = rows_of_seq(v(X, {kR, kC}), "X");
  ref.forward({v(out_ref, {kR, N}), "out"}, x_ref, v(W, {N, kC}), v(b, {N}));
  ref.backward({v(dx_ref, {kR, kC}), "dx"}, v(dw_ref, {N, kC}), v(db_ref, {N}),
               features(v(dOut, {kR, N}), ActDim::hidden, "dOut"), x_ref, v(W, {N, kC}));

  // Other ranks' rows are NaN: they must arrive, not be there already.
  std::vector<float> x(kR * kC, std::numeric_limits<float>::quiet_NaN());
  std::copy(X.begin() + rank * Rl * kC, X.begin() + (rank + 1) * Rl * kC,
            x.begin() + rank * Rl * kC);
  auto w = rows(W, kC, rank * Nl, Nl), bl = rows(b, 1, rank * Nl, Nl);
  auto dout = cols(dOut, N, rank * Nl, Nl);
  std::vector<float> out(kR * Nl), dx(Rl * kC), dw(Nl * kC, 0.f), db(Nl, 0.f);
  ColumnParallelLinear layer(tp->ctx, "c_fc", ActDim::hidden);
  Activation xa = rows_of_seq(v(x, {kR, kC}), "x");
  const Activation y = layer.forward({v(out, {kR, Nl}), "y"}, xa, v(w, {Nl, kC}), v(bl, {Nl}));
  EXPECT_TRUE(exactly(x, X)) << "the input rows are gathered in place";
  EXPECT_EQ(xa.placement.tp, AxisPlacement::replicated()) << "and say so";
  EXPECT_EQ(y.placement.tp, AxisPlacement::shard(ActDim::hidden));
  EXPECT_TRUE(all_close(out, cols(out_ref, N, rank * Nl, Nl), kAtol, kRtol));
  const Activation dxa = layer.backward({v(dx, {Rl, kC}), "dx"}, v(dw, {Nl, kC}), v(db, {Nl}),
                                        features(v(dout, {kR, Nl}), ActDim::hidden, "dout"), xa,
                                        v(w, {Nl, kC}));
  EXPECT_EQ(dxa.placement, sequence_shard());
  EXPECT_TRUE(all_close(dx, rows(dx_ref, kC, rank * Rl, Rl), kAtol, kRtol));
  EXPECT_TRUE(all_close(dw, rows(dw_ref, kC, rank * Nl, Nl), kAtol, kRtol));
  EXPECT_TRUE(all_close(db, rows(db_ref, 1, rank * Nl, Nl), kAtol, kRtol));
}

TEST_P(TpLayersMpi, RowParallelLinearIsTheMatmulsRowsAndItsGradientsColumns) {
  const int64_t K = 16, Kl = K / p, Rl = kR / p;
  auto X = random_vector(kR * K, 5), W = random_vector(kC * K, 6), b = random_vector(kC, 7);
  auto dOut = random_vector(kR * kC, 8);
  std::vector<float> out_ref(kR * kC), dx_ref(kR * K), dw_ref(kC * K, 0.f), db_ref(kC, 0.f);
  RowParallelLinear ref(one->ctx, "ref", ActDim::hidden);
  ref.forward({v(out_ref, {kR, kC}), "out"}, features(v(X, {kR, K}), ActDim::hidden, "X"),
              v(W, {kC, K}), v(b, {kC}));
  ref.backward({v(dx_ref, {kR, K}), "dx"}, v(dw_ref, {kC, K}), v(db_ref, {kC}),
               rows_of_seq(v(dOut, {kR, kC}), "dOut"),
               features(v(X, {kR, K}), ActDim::hidden, "X"), v(W, {kC, K}));

  auto x = cols(X, K, rank * Kl, Kl), w = cols(W, K, rank * Kl, Kl);
  auto dout = rows(dOut, kC, rank * Rl, Rl);
  std::vector<float> out(Rl * kC), dx(kR * Kl), dw(kC * Kl, 0.f), db(kC, 0.f);
  RowParallelLinear layer(tp->ctx, "mlp.c_proj", ActDim::hidden);
  const Activation xa = features(v(x, {kR, Kl}), ActDim::hidden, "x");
  const Activation z = layer.forward({v(out, {Rl, kC}), "z"}, xa, v(w, {kC, Kl}), v(b, {kC}));
  EXPECT_EQ(z.placement, sequence_shard()) << "the partial sums reduce-scattered";
  EXPECT_TRUE(all_close(out, rows(out_ref, kC, rank * Rl, Rl), kAtol, kRtol));
  layer.backward({v(dx, {kR, Kl}), "dx"}, v(dw, {kC, Kl}), v(db, {kC}),
                 rows_of_seq(v(dout, {Rl, kC}), "dout"), xa, v(w, {kC, Kl}));
  EXPECT_TRUE(all_close(dx, cols(dx_ref, K, rank * Kl, Kl), kAtol, kRtol));
  EXPECT_TRUE(all_close(dw, cols(dw_ref, K, rank * Kl, Kl), kAtol, kRtol));
  EXPECT_TRUE(all_close(db, db_ref, kAtol, kRtol)) << "the bias gradient is complete on every rank";
}

// Llama's o_proj and down_proj have no bias: an empty b and db, as at tp = 1.
TEST_P(TpLayersMpi, RowParallelLinearWithoutBias) {
  const int64_t K = 16, Kl = K / p, Rl = kR / p;
  auto X = random_vector(kR * K, 9), W = random_vector(kC * K, 10), dOut = random_vector(kR * kC, 11);
  std::vector<float> out_ref(kR * kC), dx_ref(kR * K), dw_ref(kC * K, 0.f);
  const TensorView none;
  RowParallelLinear ref(one->ctx, "ref", ActDim::heads);
  ref.forward({v(out_ref, {kR, kC}), "out"}, features(v(X, {kR, K}), ActDim::heads, "X"),
              v(W, {kC, K}), none);
  ref.backward({v(dx_ref, {kR, K}), "dx"}, v(dw_ref, {kC, K}), none,
               rows_of_seq(v(dOut, {kR, kC}), "dOut"), features(v(X, {kR, K}), ActDim::heads, "X"),
               v(W, {kC, K}));

  auto x = cols(X, K, rank * Kl, Kl), w = cols(W, K, rank * Kl, Kl);
  auto dout = rows(dOut, kC, rank * Rl, Rl);
  std::vector<float> out(Rl * kC), dx(kR * Kl), dw(kC * Kl, 0.f);
  RowParallelLinear layer(tp->ctx, "o_proj", ActDim::heads);
  const Activation xa = features(v(x, {kR, Kl}), ActDim::heads, "x");
  layer.forward({v(out, {Rl, kC}), "z"}, xa, v(w, {kC, Kl}), none);
  EXPECT_TRUE(all_close(out, rows(out_ref, kC, rank * Rl, Rl), kAtol, kRtol));
  layer.backward({v(dx, {kR, Kl}), "dx"}, v(dw, {kC, Kl}), none,
                 rows_of_seq(v(dout, {Rl, kC}), "dout"), xa, v(w, {kC, Kl}));
  EXPECT_TRUE(all_close(dx, cols(dx_ref, K, rank * Kl, Kl), kAtol, kRtol));
  EXPECT_TRUE(all_close(dw, cols(dw_ref, K, rank * Kl, Kl), kAtol, kRtol));
}

TEST_P(TpLayersMpi, VocabParallelEmbeddingLooksUpEachTokenOnItsOwner) {
  const int64_t V = 16, Vl = V / p, Rl = kR / p;
  auto wte = random_vector(V * kC, 9), wpe = random_vector(kT * kC, 10);
  auto dOut = random_vector(kR * kC, 11);
  std::vector<int32_t> tokens(kR);
  for (int i = 0; i < kR; ++i) tokens[i] = (7 * i + 3) % V;
  const Activation tok = all_rows(cpu_i32(tokens.data(), {kB, kT}), "tokens");
  std::vector<float> out_ref(kR * kC), dwte_ref(V * kC, 0.f), dwpe_ref(kT * kC, 0.f);
  VocabParallelEmbedding ref(one->ctx);
  ref.forward({v(out_ref, {kR, kC}), "out"}, tok, v(wte, {V, kC}), v(wpe, {kT, kC}));
  ref.backward(v(dwte_ref, {V, kC}), v(dwpe_ref, {kT, kC}), rows_of_seq(v(dOut, {kR, kC}), "d"),
               tok);

  auto wte_l = rows(wte, kC, rank * Vl, Vl), dout = rows(dOut, kC, rank * Rl, Rl);
  std::vector<float> out(Rl * kC), dwte(Vl * kC, 0.f), dwpe(kT * kC, 0.f);
  VocabParallelEmbedding layer(tp->ctx);
  layer.forward({v(out, {Rl, kC}), "out"}, tok, v(wte_l, {Vl, kC}), v(wpe, {kT, kC}));
  EXPECT_TRUE(all_close(out, rows(out_ref, kC, rank * Rl, Rl), kAtol, kRtol));
  layer.backward(v(dwte, {Vl, kC}), v(dwpe, {kT, kC}), rows_of_seq(v(dout, {Rl, kC}), "d"), tok);
  EXPECT_TRUE(all_close(dwte, rows(dwte_ref, kC, rank * Vl, Vl), kAtol, kRtol));
  // dwpe covers this rank's rows only: the ranks' partial sums add up to it.
  world->all_reduce_sum(dwpe.data(), static_cast<int64_t>(dwpe.size())).wait();
  EXPECT_TRUE(all_close(dwpe, dwpe_ref, kAtol, kRtol));
}

TEST_P(TpLayersMpi, VocabParallelCrossEntropyAgreesOnEveryRankAndMasksThePadding) {
  const int64_t V = 16, Vl = V / p, vocab = 13;  // columns 13..15 are padding
  auto logits_all = random_vector(kR * V, 12, -3.f, 3.f);
  std::vector<int32_t> targets(kR);
  for (int i = 0; i < kR; ++i) targets[i] = (5 * i + 1) % vocab;
  const Activation tgt = all_rows(cpu_i32(targets.data(), {kR}), "targets");
  std::vector<float> losses_ref(kR), dlogits_ref = logits_all;
  VocabParallelCrossEntropy ref(one->ctx);
  ref.forward({v(losses_ref, {kR}), "losses"}, v(dlogits_ref, {kR, V}),
              features(v(dlogits_ref, {kR, V}), ActDim::vocabulary, "logits"), tgt, vocab, 0.25f);

  auto logits = cols(logits_all, V, rank * Vl, Vl);
  std::vector<float> losses(kR);
  VocabParallelCrossEntropy layer(tp->ctx);
  layer.forward({v(losses, {kR}), "losses"}, v(logits, {kR, Vl}),
                features(v(logits, {kR, Vl}), ActDim::vocabulary, "logits"), tgt, vocab, 0.25f);
  EXPECT_TRUE(all_close(losses, losses_ref, kAtol, kRtol));
  EXPECT_TRUE(all_close(logits, cols(dlogits_ref, V, rank * Vl, Vl), kAtol, kRtol));
  for (int64_t c = 0; c < Vl; ++c) {
    if (rank * Vl + c < vocab) continue;
    for (int r = 0; r < kR; ++r) EXPECT_EQ(logits[r * Vl + c], 0.f) << "padding column";
  }
}

// bf16 storage: the column-parallel layer gathers bf16 rows (two to a 4-byte
// word) and the row-parallel layer adds its partial sums in fp32 and rounds
// the total once, so both equal their one-rank results up to the rounding of
// one bf16 step (the fp32 sums are added in another order).
TEST_P(TpLayersMpi, Bf16RowsAreGatheredAsBitsAndSummedInFp32) {
  const int64_t N = 12, Nl = N / p, K = 16, Kl = K / p, Rl = kR / p;
  const ComputeDType bf16 = ComputeDType::bf16;
  // The fp32 weights and biases are rounded per call; the row layer's bias
  // is widened back to fp32 under tp, added after the sum.
  const LinearPrecision::Sizes weights{0, 0, K * kC, std::max<int64_t>(N, kC), kC};
  auto context = [&](Communicator* comm) {
    const int size = comm ? comm->size() : 1;
    return std::make_unique<TpLayerContext>(*ops, TensorParallelGroup{comm, GetParam()}, bf16,
                                            TpLayerContext::scratch(size, GetParam(), bf16, kR, kC),
                                            weights);
  };
  auto ref_ctx = context(nullptr), tp_ctx = context(world.get());
  auto to_bf16 = [](const std::vector<float>& x) {
    std::vector<uint16_t> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_from_float(x[i]);
    return out;
  };
  auto to_f32 = [](const std::vector<uint16_t>& x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_float(x[i]);
    return out;
  };
  auto bv = [](std::vector<uint16_t>& x, std::initializer_list<int64_t> shape) {
    return make_view(x.data(), DType::bf16, Device::cpu, shape);
  };

  // Column: y (R, N/p) from the gathered bf16 rows of X (R, C).
  auto X = random_vector(kR * kC, 21), W = random_vector(N * kC, 22), b = random_vector(N, 23);
  auto Xb = to_bf16(X);
  std::vector<uint16_t> y_ref(kR * N), x(kR * kC, 0), y(kR * Nl);
  Activation xr = rows_of_seq(bv(Xb, {kR, kC}), "X");
  ColumnParallelLinear(*ref_ctx, "ref", ActDim::hidden)
      .forward({bv(y_ref, {kR, N}), "y"}, xr, v(W, {N, kC}), v(b, {N}));
  std::copy(Xb.begin() + rank * Rl * kC, Xb.begin() + (rank + 1) * Rl * kC,
            x.begin() + rank * Rl * kC);
  auto w = rows(W, kC, rank * Nl, Nl), bl = rows(b, 1, rank * Nl, Nl);
  Activation xt = rows_of_seq(bv(x, {kR, kC}), "x");
  ColumnParallelLinear(*tp_ctx, "c_fc", ActDim::hidden)
      .forward({bv(y, {kR, Nl}), "y"}, xt, v(w, {Nl, kC}), v(bl, {Nl}));
  EXPECT_EQ(x, Xb) << "the bf16 rows arrive bit for bit";
  EXPECT_TRUE(all_close(to_f32(y), cols(to_f32(y_ref), N, rank * Nl, Nl), 1e-2f, 8e-3f))
      << "within one bf16 rounding of the one-rank result";

  // Row: z (R/p, C) = the fp32 sum of the ranks' partials, rounded once.
  auto Z = random_vector(kR * K, 24), V = random_vector(kC * K, 25), c = random_vector(kC, 26);
  auto Zb = to_bf16(Z);
  std::vector<uint16_t> z_ref(kR * kC), z(Rl * kC);
  RowParallelLinear(*ref_ctx, "ref", ActDim::hidden)
      .forward({bv(z_ref, {kR, kC}), "z"}, features(bv(Zb, {kR, K}), ActDim::hidden, "Z"),
               v(V, {kC, K}), v(c, {kC}));
  auto zl = to_bf16(cols(to_f32(Zb), K, rank * Kl, Kl));
  auto vl = cols(V, K, rank * Kl, Kl);
  RowParallelLinear(*tp_ctx, "mlp.c_proj", ActDim::hidden)
      .forward({bv(z, {Rl, kC}), "z"}, features(bv(zl, {kR, Kl}), ActDim::hidden, "z"),
               v(vl, {kC, Kl}), v(c, {kC}));
  EXPECT_TRUE(all_close(to_f32(z), rows(to_f32(z_ref), kC, rank * Rl, Rl), 1e-2f, 8e-3f))
      << "within one bf16 rounding of the one-rank result";
}

// runtime.fp8: the column- and row-parallel layers with fp8 GEMMs at tp = p
// against the same layers at tp = 1, for both recipes. Each operand's amax
// is reduced over the tp ranks that hold the rest of its slice
// (fp8_linear.hpp), so every rank quantises with one rank's scales and the
// results differ only in fp32 summation order; a scale taken from one
// rank's shard alone would move outputs by whole e4m3 steps (~6%).
TEST_P(TpLayersMpi, Fp8LayersQuantiseWithOneRanksScales) {
  const int64_t N = 12, Nl = N / p, K = 16, Kl = K / p, Rl = kR / p;
  for (Fp8Recipe recipe : {Fp8Recipe::tensorwise, Fp8Recipe::rowwise}) {
    SCOPED_TRACE(to_string(recipe));
    Fp8Settings f8;
    f8.recipe = recipe;
    one->ctx.enable_fp8(f8, {});
    tp->ctx.enable_fp8(f8, {});
    constexpr float kFp8Tol = 1e-4f;
    {  // column-parallel, with a bias
      auto X = random_vector(kR * kC, 21), W = random_vector(N * kC, 22),
           b = random_vector(N, 23), dOut = random_vector(kR * N, 24);
      std::vector<float> out_ref(kR * N), dx_ref(kR * kC), dw_ref(N * kC, 0.f), db_ref(N, 0.f);
      ColumnParallelLinear ref(one->ctx, "ref", ActDim::hidden);
      Activation x_ref = rows_of_seq(v(X, {kR, kC}), "X");
      ref.forward({v(out_ref, {kR, N}), "out"}, x_ref, v(W, {N, kC}), v(b, {N}));
      ref.backward({v(dx_ref, {kR, kC}), "dx"}, v(dw_ref, {N, kC}), v(db_ref, {N}),
                   features(v(dOut, {kR, N}), ActDim::hidden, "dOut"), x_ref, v(W, {N, kC}));
      // fp8 is not the fp32 matmul: the reference must show the quantisation.
      std::vector<float> exact(kR * N), none(0);
      make_cpu_ops(1)->matmul_forward(v(exact, {kR, N}), v(X, {kR, kC}), v(W, {N, kC}),
                                      v(b, {N}));
      EXPECT_FALSE(all_close(out_ref, exact, 1e-4f, 1e-4f)) << "the reference is not in fp8";

      std::vector<float> x(kR * kC, 0.f);
      std::copy(X.begin() + rank * Rl * kC, X.begin() + (rank + 1) * Rl * kC,
                x.begin() + rank * Rl * kC);
      auto w = rows(W, kC, rank * Nl, Nl), bl = rows(b, 1, rank * Nl, Nl);
      auto dout = cols(dOut, N, rank * Nl, Nl);
      std::vector<float> out(kR * Nl), dx(Rl * kC), dw(Nl * kC, 0.f), db(Nl, 0.f);
      ColumnParallelLinear layer(tp->ctx, "c_fc", ActDim::hidden);
      Activation xa = rows_of_seq(v(x, {kR, kC}), "x");
      layer.forward({v(out, {kR, Nl}), "y"}, xa, v(w, {Nl, kC}), v(bl, {Nl}));
      EXPECT_TRUE(all_close(out, cols(out_ref, N, rank * Nl, Nl), kFp8Tol, kFp8Tol));
      layer.backward({v(dx, {Rl, kC}), "dx"}, v(dw, {Nl, kC}), v(db, {Nl}),
                     features(v(dout, {kR, Nl}), ActDim::hidden, "dout"), xa, v(w, {Nl, kC}));
      EXPECT_TRUE(all_close(dx, rows(dx_ref, kC, rank * Rl, Rl), kFp8Tol, kFp8Tol));
      EXPECT_TRUE(all_close(dw, rows(dw_ref, kC, rank * Nl, Nl), kFp8Tol, kFp8Tol));
      EXPECT_TRUE(all_close(db, rows(db_ref, 1, rank * Nl, Nl), kFp8Tol, kFp8Tol));
    }
    {  // row-parallel, with a bias
      auto X = random_vector(kR * K, 25), W = random_vector(kC * K, 26),
           b = random_vector(kC, 27), dOut = random_vector(kR * kC, 28);
      std::vector<float> out_ref(kR * kC), dx_ref(kR * K), dw_ref(kC * K, 0.f), db_ref(kC, 0.f);
      RowParallelLinear ref(one->ctx, "ref", ActDim::hidden);
      ref.forward({v(out_ref, {kR, kC}), "out"}, features(v(X, {kR, K}), ActDim::hidden, "X"),
                  v(W, {kC, K}), v(b, {kC}));
      ref.backward({v(dx_ref, {kR, K}), "dx"}, v(dw_ref, {kC, K}), v(db_ref, {kC}),
                   rows_of_seq(v(dOut, {kR, kC}), "dOut"),
                   features(v(X, {kR, K}), ActDim::hidden, "X"), v(W, {kC, K}));
      auto x = cols(X, K, rank * Kl, Kl), w = cols(W, K, rank * Kl, Kl);
      auto dout = rows(dOut, kC, rank * Rl, Rl);
      std::vector<float> out(Rl * kC), dx(kR * Kl), dw(kC * Kl, 0.f), db(kC, 0.f);
      RowParallelLinear layer(tp->ctx, "mlp.c_proj", ActDim::hidden);
      const Activation xa = features(v(x, {kR, Kl}), ActDim::hidden, "x");
      layer.forward({v(out, {Rl, kC}), "z"}, xa, v(w, {kC, Kl}), v(b, {kC}));
      EXPECT_TRUE(all_close(out, rows(out_ref, kC, rank * Rl, Rl), kFp8Tol, kFp8Tol));
      layer.backward({v(dx, {kR, Kl}), "dx"}, v(dw, {kC, Kl}), v(db, {kC}),
                     rows_of_seq(v(dout, {Rl, kC}), "dout"), xa, v(w, {kC, Kl}));
      EXPECT_TRUE(all_close(dx, cols(dx_ref, K, rank * Kl, Kl), kFp8Tol, kFp8Tol));
      EXPECT_TRUE(all_close(dw, cols(dw_ref, K, rank * Kl, Kl), kFp8Tol, kFp8Tol));
      EXPECT_TRUE(all_close(db, db_ref, kFp8Tol, kFp8Tol));
    }
  }
  one->ctx.enable_fp8({}, {});
  tp->ctx.enable_fp8({}, {});
}

INSTANTIATE_TEST_SUITE_P(Overlap, TpLayersMpi, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "ring" : "plain"; });

}  // namespace
}  // namespace gt::test
