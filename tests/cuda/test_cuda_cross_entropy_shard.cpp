// Vocab-parallel cross-entropy (kernels/cuda/cross_entropy.cu, the three
// shard passes) against the CPU twin running the same protocol: the
// vocabulary split into unequal shards, the all-reduces done on the host
// between the passes, targets in every shard, separate and in-place dlogits.
// The combined loss is also checked against the fused CPU op. Padded
// vocabularies put the vocabulary's end inside a shard and leave whole shards
// of padding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cross_entropy.cuh"
#include "test_util.hpp"

namespace {

using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

struct Case {
  int64_t R, V;
  std::vector<int64_t> bounds;  // shard starts, then V
  float grad_scale;
  int64_t vocab = 0;  // columns [vocab, V) are padding; 0 = none
  int64_t real() const { return vocab ? vocab : V; }
};

struct ShardResult {
  std::vector<float> losses;
  std::vector<std::vector<float>> dlogits;  // per shard
};

// Runs the three passes on every shard with `ops`-like callables, reducing
// on the host between them exactly as the tp all-reduces would.
template <typename MaxFn, typename SumsFn, typename FinishFn>
ShardResult run_protocol(const Case& c, MaxFn max_fn, SumsFn sums_fn, FinishFn finish_fn) {
  const size_t n_shards = c.bounds.size() - 1;
  std::vector<float> row_max(c.R, -INFINITY), sumexp(c.R, 0.f), target_logit(c.R, 0.f);
  for (size_t k = 0; k < n_shards; ++k) {
    const auto m = max_fn(k);
    for (int64_t r = 0; r < c.R; ++r) row_max[r] = std::max(row_max[r], m[r]);
  }
  for (size_t k = 0; k < n_shards; ++k) {
    std::vector<float> se, tl;
    sums_fn(k, row_max, se, tl);
    for (int64_t r = 0; r < c.R; ++r) {
      sumexp[r] += se[r];
      target_logit[r] += tl[r];
    }
  }
  ShardResult res;
  for (size_t k = 0; k < n_shards; ++k) {
    std::vector<float> losses, d;
    finish_fn(k, row_max, sumexp, target_logit, losses, d);
    res.losses = losses;  // identical on every shard
    res.dlogits.push_back(d);
  }
  return res;
}

TEST(CudaCrossEntropyShard, ThreePassesMatchCpuAndTheFusedLoss) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const cudaStream_t s = stream.get();
  auto cpu = gt::make_cpu_ops(1);
  const Case cases[] = {{1, 1, {0, 1}, 1.f},
                        {7, 10, {0, 3, 10}, 1.f},
                        {33, 1000, {0, 300, 1000}, 1.f / 33},
                        {64, 50257, {0, 12565, 25129, 37693, 50257}, 0.5f},
                        {5, 771, {0, 1, 770, 771}, -2.f},
                        {9, 256, {0, 64, 128, 192, 256}, 0.5f, 150},
                        {64, 50304, {0, 12576, 25152, 37728, 50304}, 0.5f, 50257}};
  for (const Case& c : gt::test::select_cases(cases, [](const Case& k) { return k.R * k.V <= 200000; })) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE("R=" + std::to_string(c.R) + " V=" + std::to_string(c.V) + " shards=" +
                   std::to_string(c.bounds.size() - 1) + (in_place ? " in place" : ""));
      auto logits = random_vector(c.R * c.V, 1, -8.f, 8.f);
      for (int64_t r = 0; r < c.R; ++r)  // padding above every real logit: it must not count
        for (int64_t j = c.real(); j < c.V; ++j) logits[r * c.V + j] = 20.f;
      auto targets = gt::test::random_ints(c.R, 2, 0, static_cast<int32_t>(c.real()));
      auto shard_logits = [&](size_t k) {
        const int64_t v0 = c.bounds[k], vs = c.bounds[k + 1] - v0;
        std::vector<float> out(c.R * vs);
        for (int64_t r = 0; r < c.R; ++r)
          std::copy(logits.begin() + r * c.V + v0, logits.begin() + r * c.V + v0 + vs,
                    out.begin() + r * vs);
        return out;
      };
      auto vs_of = [&](size_t k) { return c.bounds[k + 1] - c.bounds[k]; };

      // CPU protocol.
      const ShardResult want = run_protocol(
          c,
          [&](size_t k) {
            auto x = shard_logits(k);
            std::vector<float> m(c.R);
            cpu->cross_entropy_shard_max(gt::cpu_f32(m.data(), {c.R}),
                                         gt::cpu_f32(x.data(), {c.R, vs_of(k)}), c.bounds[k],
                                         c.real());
            return m;
          },
          [&](size_t k, std::vector<float> mx, std::vector<float>& se, std::vector<float>& tl) {
            auto x = shard_logits(k);
            se.assign(c.R, 0.f);
            tl.assign(c.R, 0.f);
            cpu->cross_entropy_shard_sums(
                gt::cpu_f32(se.data(), {c.R}), gt::cpu_f32(tl.data(), {c.R}),
                gt::cpu_f32(x.data(), {c.R, vs_of(k)}), gt::cpu_i32(targets.data(), {c.R}),
                gt::cpu_f32(mx.data(), {c.R}), c.bounds[k], c.real());
          },
          [&](size_t k, std::vector<float> mx, std::vector<float> se, std::vector<float> tl,
              std::vector<float>& losses, std::vector<float>& d) {
            auto x = shard_logits(k);
            losses.assign(c.R, 0.f);
            d.assign(x.size(), 0.f);
            cpu->cross_entropy_shard_finish(
                gt::cpu_f32(losses.data(), {c.R}), gt::cpu_f32(d.data(), {c.R, vs_of(k)}),
                gt::cpu_f32(x.data(), {c.R, vs_of(k)}), gt::cpu_i32(targets.data(), {c.R}),
                gt::cpu_f32(mx.data(), {c.R}), gt::cpu_f32(se.data(), {c.R}),
                gt::cpu_f32(tl.data(), {c.R}), c.bounds[k], c.real(), c.grad_scale);
          });

      // GPU protocol.
      DeviceArray<int32_t> d_tgt(targets, s);
      const ShardResult got = run_protocol(
          c,
          [&](size_t k) {
            DeviceArray<float> x(shard_logits(k), s), m(c.R, s);
            m.poison();
            gt::cuda::cross_entropy_shard_max(m.get(), x.get(), c.R, vs_of(k), c.bounds[k],
                                              c.real(), s);
            return m.download();
          },
          [&](size_t k, std::vector<float> mx, std::vector<float>& se, std::vector<float>& tl) {
            DeviceArray<float> x(shard_logits(k), s), d_mx(mx, s), d_se(c.R, s), d_tl(c.R, s);
            d_se.poison();
            d_tl.poison();
            gt::cuda::cross_entropy_shard_sums(d_se.get(), d_tl.get(), x.get(), d_tgt.get(),
                                               d_mx.get(), c.R, vs_of(k), c.bounds[k], c.real(), s);
            se = d_se.download();
            tl = d_tl.download();
          },
          [&](size_t k, std::vector<float> mx, std::vector<float> se, std::vector<float> tl,
              std::vector<float>& losses, std::vector<float>& d) {
            DeviceArray<float> x(shard_logits(k), s), d_mx(mx, s), d_se(se, s), d_tl(tl, s),
                d_loss(c.R, s), d_d(c.R * vs_of(k), s);
            d_loss.poison();
            d_d.poison();
            float* dl = in_place ? x.get() : d_d.get();
            gt::cuda::cross_entropy_shard_finish(d_loss.get(), dl, x.get(), d_tgt.get(), d_mx.get(),
                                                 d_se.get(), d_tl.get(), c.R, vs_of(k), c.bounds[k],
                                                 c.real(), c.grad_scale, s);
            losses = d_loss.download();
            d = in_place ? x.download() : d_d.download();
          });

      EXPECT_TRUE(all_close(got.losses, want.losses, 1e-5f, 1e-5f)) << "losses";
      for (size_t k = 0; k + 1 < c.bounds.size(); ++k) {
        EXPECT_TRUE(all_close(got.dlogits[k], want.dlogits[k], 1e-6f, 1e-4f)) << "dlogits shard " << k;
        const int64_t vs = vs_of(k);
        for (int64_t r = 0; r < c.R; ++r)
          for (int64_t j = std::max<int64_t>(c.real() - c.bounds[k], 0); j < vs; ++j)
            ASSERT_EQ(got.dlogits[k][r * vs + j], 0.f) << "padding shard " << k << " row " << r;
      }

      // The shards together are the fused op.
      std::vector<float> fused(c.R), x = logits;
      cpu->softmax_cross_entropy(gt::cpu_f32(fused.data(), {c.R}), gt::TensorView{},
                                 gt::cpu_f32(x.data(), {c.R, c.V}),
                                 gt::cpu_i32(targets.data(), {c.R}), c.real(), 1.f);
      EXPECT_TRUE(all_close(got.losses, fused, 1e-5f, 1e-5f)) << "vs the fused loss";
    }
  }
}

}  // namespace
