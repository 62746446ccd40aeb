// The mixture-of-experts CUDA ops (kernels/cuda/moe.cu through CudaOps)
// against their CPU twins (through CpuOps), from the same inputs: the router
// forward (ties to the lower expert, with and without a selection bias), its
// backward and statistics (counts exact, deterministic bits), the dispatch
// plan (dropless and with capacity drops, equal weights, a row whose every
// slot is dropped, several blocks of slots, an expert group longer than a
// block; positions and offsets exact), permute / combine and their
// backwards (rows no slot maps to keep their sentinel), the grouped GEMM
// (empty first, middle and last groups, groups across tile boundaries, rows
// past offsets[G] untouched, the weight gradient deterministic) and the
// load-balancing loss; fp32 and bf16 row storage, mixed where the CPU mixes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "test_util.hpp"
#if defined(TRAINER_CUDA_EMULATOR)
#include "gt_emu/control.hpp"
#endif

namespace {

using gt::DType;
using gt::TensorView;
using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

TensorView view_of(void* p, DType dt, gt::Device dev, const std::vector<int64_t>& shape) {
  switch (shape.size()) {
    case 1:
      return gt::make_view(p, dt, dev, {shape[0]});
    case 2:
      return gt::make_view(p, dt, dev, {shape[0], shape[1]});
    default:
      return gt::make_view(p, dt, dev, {shape[0], shape[1], shape[2]});
  }
}

// A float tensor on both sides: host values (bf16-exact for bf16), a CPU
// view and a device copy in the dtype asked for.
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
  TensorView cpu() {
    return view_of(dtype == DType::f32 ? static_cast<void*>(host.data()) : host16.data(), dtype,
                   gt::Device::cpu, shape);
  }
  TensorView dev() {
    return view_of(dtype == DType::f32 ? static_cast<void*>(d32.get()) : d16.get(), dtype,
                   gt::Device::cuda, shape);
  }
  std::vector<float> dev_values() const {
    return dtype == DType::f32 ? d32.download() : gt::test::from_bf16(d16.download());
  }
  std::vector<float> cpu_values() const {
    return dtype == DType::f32 ? host : gt::test::from_bf16(host16);
  }
  // The device copy := the CPU's current values (to feed both backends one
  // input that one of them computed).
  void cpu_to_dev() {
    if (dtype == DType::f32) d32.upload(host);
    else d16.upload(host16);
  }
};

// An int32 tensor on both sides.
struct Ints {
  std::vector<int32_t> host;
  std::vector<int64_t> shape;
  DeviceArray<int32_t> d;
  Ints(std::vector<int32_t> values, std::vector<int64_t> shp, cudaStream_t s)
      : host(std::move(values)), shape(std::move(shp)), d(host, s) {}
  TensorView cpu() { return view_of(host.data(), DType::i32, gt::Device::cpu, shape); }
  TensorView dev() { return view_of(d.get(), DType::i32, gt::Device::cuda, shape); }
  std::vector<int32_t> dev_values() const { return d.download(); }
  void cpu_to_dev() { d.upload(host); }
};

std::vector<float> filled(int64_t n, float v) { return std::vector<float>(n, v); }
std::vector<int32_t> filled_i(int64_t n, int32_t v) { return std::vector<int32_t>(n, v); }

// bf16 results may differ from the CPU's by one rounding (fp32 sums in
// another order); fp32 ones by summation order only.
float tol(DType dt) { return dt == DType::bf16 ? 1e-2f : 2e-5f; }

// k distinct experts per row, each in [0, E), and weights summing to 1 per
// row, quantised to multiples of 1/8 when `ties` (many equal weights).
struct Routing {
  std::vector<int32_t> expert;
  std::vector<float> weight;
};
Routing make_routing(int64_t R, int E, int k, uint64_t seed, bool ties, int experts_used) {
  Routing out;
  const auto pick = gt::test::random_ints(R * E, seed, 0, 1 << 30);
  const auto raw = random_vector(R * k, seed + 1, 0.05f, 1.f);
  for (int64_t r = 0; r < R; ++r) {
    std::vector<int32_t> order(experts_used);
    std::iota(order.begin(), order.end(), 0);
    // A row-seeded shuffle: the first k of a permutation of the used experts.
    for (int i = experts_used - 1; i > 0; --i)
      std::swap(order[i], order[pick[r * E + i] % (i + 1)]);
    float sum = 0.f;
    for (int j = 0; j < k; ++j) sum += raw[r * k + j];
    for (int j = 0; j < k; ++j) {
      out.expert.push_back(order[j]);
      float w = raw[r * k + j] / sum;
      if (ties) w = static_cast<float>(std::max(1, static_cast<int>(w * 8.f))) / 8.f;
      out.weight.push_back(w);
    }
  }
  return out;
}

TEST(CudaMoe, RouterMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps cuda;
  auto cpu = gt::make_cpu_ops(1);
  const cudaStream_t s = cuda.stream();
  struct Case {
    int64_t R;
    int E, k;
    bool bias;
  };
  // E > 32 puts several experts on a lane; k = E takes them all; R = 700 is
  // three chunks of the statistics' first pass.
  for (const Case& cs : {Case{37, 8, 2, false}, Case{37, 8, 2, true}, Case{700, 70, 6, true},
                         Case{5, 3, 3, false}}) {
    const int64_t R = cs.R;
    const int E = cs.E, k = cs.k;
    SCOPED_TRACE("R=" + std::to_string(R) + " E=" + std::to_string(E) + " k=" +
                 std::to_string(k) + (cs.bias ? " bias" : ""));
    auto lv = random_vector(R * E, 11, -3.f, 3.f);
    // Row 0: all equal (every prob equal: the lowest experts win); row 1:
    // experts 1 and 2 tie for the top.
    for (int e = 0; e < E; ++e) lv[e] = 0.5f;
    if (E >= 3) {
      for (int e = 0; e < E; ++e) lv[E + e] = -1.f;
      lv[E + 1] = lv[E + 2] = 2.f;
    }
    Twin logits(lv, DType::f32, {R, E}, s);
    // DeepSeek-V3's selection bias: per expert, so it also orders the tied
    // experts of rows 0 and 1 (the checks of the tie rule run without it).
    Twin bias(random_vector(E, 12, -0.1f, 0.1f), DType::f32, {E}, s);
    Twin probs(filled(R * E, 9.f), DType::f32, {R, E}, s), lse(filled(R, 9.f), DType::f32, {R}, s),
        tw(filled(R * k, 9.f), DType::f32, {R, k}, s);
    Ints te(filled_i(R * k, -7), {R, k}, s);
    cpu->moe_router_forward(probs.cpu(), lse.cpu(), te.cpu(), tw.cpu(), logits.cpu(),
                            cs.bias ? bias.cpu() : TensorView{});
    cuda.moe_router_forward(probs.dev(), lse.dev(), te.dev(), tw.dev(), logits.dev(),
                            cs.bias ? bias.dev() : TensorView{});
    EXPECT_TRUE(all_close(probs.dev_values(), probs.cpu_values(), 1e-6f, 1e-5f)) << "probs";
    EXPECT_TRUE(all_close(lse.dev_values(), lse.cpu_values(), 1e-5f, 1e-5f)) << "lse";
    EXPECT_EQ(te.dev_values(), te.host) << "topk_expert";
    EXPECT_TRUE(all_close(tw.dev_values(), tw.cpu_values(), 1e-6f, 1e-5f)) << "topk_weight";
    if (!cs.bias) {
      for (int j = 0; j < k; ++j) EXPECT_EQ(te.host[j], j) << "row 0 ties to the lower experts";
      if (E >= 3) {
        EXPECT_EQ(te.host[k], 1) << "row 1: expert 1 before expert 2";
        if (k > 1) {
          EXPECT_EQ(te.host[k + 1], 2);
        }
      }
    }

    // Backward from one set of inputs: the CPU's forward outputs on both.
    probs.cpu_to_dev();
    lse.cpu_to_dev();
    te.cpu_to_dev();
    tw.cpu_to_dev();
    Twin dtw(random_vector(R * k, 13), DType::f32, {R, k}, s),
        shared(random_vector(E, 14, -0.05f, 0.05f), DType::f32, {E}, s),
        dlogits(filled(R * E, 9.f), DType::f32, {R, E}, s);
    for (bool with_shared : {false, true}) {
      SCOPED_TRACE(with_shared ? "dprob_shared, z-loss" : "no dprob_shared");
      const float z = with_shared ? 1e-3f : 0.f;
      cpu->moe_router_backward(dlogits.cpu(), dtw.cpu(), probs.cpu(), lse.cpu(), te.cpu(),
                               tw.cpu(), with_shared ? shared.cpu() : TensorView{}, z);
      cuda.moe_router_backward(dlogits.dev(), dtw.dev(), probs.dev(), lse.dev(), te.dev(),
                               tw.dev(), with_shared ? shared.dev() : TensorView{}, z);
      EXPECT_TRUE(all_close(dlogits.dev_values(), dlogits.cpu_values(), 1e-6f, 1e-4f))
          << "dlogits";
    }

    // Statistics accumulate onto what is there; counts exact.
    Twin counts(random_vector(E, 15, 0.f, 4.f), DType::f32, {E}, s),
        psums(random_vector(E, 16), DType::f32, {E}, s);
    cpu->moe_router_stats(counts.cpu(), psums.cpu(), probs.cpu(), te.cpu());
    cuda.moe_router_stats(counts.dev(), psums.dev(), probs.dev(), te.dev());
    EXPECT_TRUE(all_close(counts.dev_values(), counts.cpu_values(), 0.f, 0.f)) << "counts";
    EXPECT_TRUE(all_close(psums.dev_values(), psums.cpu_values(), 1e-5f, 1e-5f)) << "prob_sums";
    Twin c0(filled(E, 0.f), DType::f32, {E}, s), p0(filled(E, 0.f), DType::f32, {E}, s),
        c1(filled(E, 0.f), DType::f32, {E}, s), p1(filled(E, 0.f), DType::f32, {E}, s);
    cuda.moe_router_stats(c0.dev(), p0.dev(), probs.dev(), te.dev());
    cuda.moe_router_stats(c1.dev(), p1.dev(), probs.dev(), te.dev());
    EXPECT_TRUE(gt::test::bitwise_equal(p0.dev_values(), p1.dev_values())) << "prob_sums bits";
    EXPECT_TRUE(gt::test::bitwise_equal(c0.dev_values(), c1.dev_values())) << "counts bits";
  }
}

TEST(CudaMoe, DispatchPlanMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps cuda;
  auto cpu = gt::make_cpu_ops(1);
  const cudaStream_t s = cuda.stream();
  struct Case {
    int64_t R;
    int E, k;
    int64_t capacity;
    bool ties;
    int experts_used;  // < E: the last experts get no slot (empty groups)
  };
  const Case cases[] = {
      {37, 8, 2, 0, false, 8},     {37, 8, 2, 5, false, 8},  {37, 8, 2, 5, true, 8},
      {700, 16, 3, 0, false, 13},  // 2100 slots: 9 blocks; experts 13-15 empty
      {700, 16, 3, 100, true, 14}, {700, 4, 2, 300, true, 4},  // groups of ~350 > a block
      {9, 6, 2, 1000, false, 6},   // capacity above every group: nothing dropped
      {1, 4, 1, 1, false, 4},
  };
  for (const Case& cs : cases) {
    const int64_t R = cs.R, cap = cs.capacity;
    const int E = cs.E, k = cs.k;
    SCOPED_TRACE("R=" + std::to_string(R) + " E=" + std::to_string(E) + " k=" +
                 std::to_string(k) + " capacity=" + std::to_string(cap) +
                 (cs.ties ? " ties" : ""));
    Routing rt = make_routing(R, E, k, 21 + R + cap, cs.ties, cs.experts_used);
    // The last row loses every slot when capacity binds: the lowest weights.
    if (cap > 0 && R > 1)
      for (int j = 0; j < k; ++j) rt.weight[(R - 1) * k + j] = 0.f;
    Ints te(rt.expert, {R, k}, s), pos(filled_i(R * k, -9), {R, k}, s),
        off(filled_i(E + 1, -9), {E + 1}, s);
    Twin tw(rt.weight, DType::f32, {R, k}, s);
    cpu->moe_dispatch_plan(pos.cpu(), off.cpu(), te.cpu(), tw.cpu(), cap);
    cuda.moe_dispatch_plan(pos.dev(), off.dev(), te.dev(), tw.dev(), cap);
    EXPECT_EQ(pos.dev_values(), pos.host) << "positions";
    EXPECT_EQ(off.dev_values(), off.host) << "offsets";
    // What the cases are meant to cover, on the reference's plan.
    const int64_t dropped = std::count(pos.host.begin(), pos.host.end(), -1);
    std::vector<int64_t> group(E, 0);
    for (int32_t e : rt.expert) ++group[e];
    bool last_row_over = cap > 0 && R > 1;
    for (int j = 0; j < k; ++j)
      last_row_over = last_row_over && group[rt.expert[(R - 1) * k + j]] > cap;
    if (last_row_over) {
      EXPECT_GT(dropped, 0);
      for (int j = 0; j < k; ++j) EXPECT_EQ(pos.host[(R - 1) * k + j], -1) << "last row dropped";
    }
    if (cap == 0 || cap >= R * k) {
      EXPECT_EQ(dropped, 0);
    }
    if (cs.experts_used < E) {
      EXPECT_EQ(off.host[E], off.host[cs.experts_used]) << "empty tail";
    }
  }
}

TEST(CudaMoe, PermuteAndCombineMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps cuda;
  auto cpu = gt::make_cpu_ops(1);
  const cudaStream_t s = cuda.stream();
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t cap : {int64_t{0}, int64_t{5}}) {
      const int64_t R = 37, C = 45;
      const int E = 8, k = 2;
      const int64_t N = R * k;
      SCOPED_TRACE(std::string(gt::dtype_name(dt)) + " capacity=" + std::to_string(cap));
      Routing rt = make_routing(R, E, k, 31, false, E);
      if (cap > 0)
        for (int j = 0; j < k; ++j) rt.weight[(R - 1) * k + j] = 0.f;  // a fully dropped row
      Ints te(rt.expert, {R, k}, s), pos(filled_i(N, 0), {R, k}, s),
          off(filled_i(E + 1, 0), {E + 1}, s);
      Twin tw(rt.weight, DType::f32, {R, k}, s);
      cpu->moe_dispatch_plan(pos.cpu(), off.cpu(), te.cpu(), tw.cpu(), cap);
      pos.cpu_to_dev();  // one plan for both backends
      if (cap > 0) {
        ASSERT_EQ(pos.host[(R - 1) * k], -1);
        ASSERT_EQ(pos.host[(R - 1) * k + 1], -1);
      }

      // Permute: the rows no slot maps to keep their sentinel.
      Twin inp(random_vector(R * C, 32), dt, {R, C}, s), out(filled(N * C, 7.f), dt, {N, C}, s);
      cpu->moe_permute(out.cpu(), inp.cpu(), pos.cpu());
      cuda.moe_permute(out.dev(), inp.dev(), pos.dev());
      EXPECT_TRUE(all_close(out.dev_values(), out.cpu_values(), 0.f, 0.f)) << "permute";
      // Its backward: a gather; 0 on the fully dropped row.
      Twin dout(random_vector(N * C, 33), dt, {N, C}, s), dinp(filled(R * C, 9.f), dt, {R, C}, s);
      cpu->moe_permute_backward(dinp.cpu(), dout.cpu(), pos.cpu());
      cuda.moe_permute_backward(dinp.dev(), dout.dev(), pos.dev());
      EXPECT_TRUE(all_close(dinp.dev_values(), dinp.cpu_values(), tol(dt), tol(dt)))
          << "permute_backward";
      if (cap > 0) {
        const auto got = dinp.dev_values();
        for (int64_t c = 0; c < C; ++c) EXPECT_EQ(got[(R - 1) * C + c], 0.f) << "dropped row";
      }

      // Combine and its backward.
      Twin eo(random_vector(N * C, 34), dt, {N, C}, s), y(filled(R * C, 9.f), dt, {R, C}, s);
      cpu->moe_combine_forward(y.cpu(), eo.cpu(), pos.cpu(), tw.cpu());
      cuda.moe_combine_forward(y.dev(), eo.dev(), pos.dev(), tw.dev());
      EXPECT_TRUE(all_close(y.dev_values(), y.cpu_values(), tol(dt), tol(dt))) << "combine";
      Twin dy(random_vector(R * C, 35), dt, {R, C}, s), deo(filled(N * C, 7.f), dt, {N, C}, s),
          dtw(filled(R * k, 9.f), DType::f32, {R, k}, s);
      cpu->moe_combine_backward(deo.cpu(), dtw.cpu(), dy.cpu(), eo.cpu(), pos.cpu(), tw.cpu());
      cuda.moe_combine_backward(deo.dev(), dtw.dev(), dy.dev(), eo.dev(), pos.dev(), tw.dev());
      EXPECT_TRUE(all_close(deo.dev_values(), deo.cpu_values(), tol(dt), tol(dt)))
          << "dexpert_out";
      EXPECT_TRUE(all_close(dtw.dev_values(), dtw.cpu_values(), 1e-4f, 1e-4f)) << "dtopk_weight";
    }
}

// Each row tensor of permute_backward and the combine in its own dtype.
TEST(CudaMoe, MixedRowDtypesMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps cuda;
  auto cpu = gt::make_cpu_ops(1);
  const cudaStream_t s = cuda.stream();
  const int64_t R = 19, C = 33;
  const int E = 4, k = 2;
  const int64_t N = R * k;
  Routing rt = make_routing(R, E, k, 61, false, E);
  Ints te(rt.expert, {R, k}, s), pos(filled_i(N, 0), {R, k}, s),
      off(filled_i(E + 1, 0), {E + 1}, s);
  Twin tw(rt.weight, DType::f32, {R, k}, s);
  cpu->moe_dispatch_plan(pos.cpu(), off.cpu(), te.cpu(), tw.cpu(), 6);
  pos.cpu_to_dev();
  for (DType a : {DType::f32, DType::bf16})
    for (DType b : {DType::f32, DType::bf16}) {
      if (a == b) continue;
      SCOPED_TRACE(std::string(gt::dtype_name(a)) + " from " + gt::dtype_name(b));
      Twin dout(random_vector(N * C, 62), b, {N, C}, s), dinp(filled(R * C, 9.f), a, {R, C}, s);
      cpu->moe_permute_backward(dinp.cpu(), dout.cpu(), pos.cpu());
      cuda.moe_permute_backward(dinp.dev(), dout.dev(), pos.dev());
      EXPECT_TRUE(all_close(dinp.dev_values(), dinp.cpu_values(), 1e-2f, 1e-2f))
          << "permute_backward";
      Twin eo(random_vector(N * C, 63), b, {N, C}, s), y(filled(R * C, 9.f), a, {R, C}, s);
      cpu->moe_combine_forward(y.cpu(), eo.cpu(), pos.cpu(), tw.cpu());
      cuda.moe_combine_forward(y.dev(), eo.dev(), pos.dev(), tw.dev());
      EXPECT_TRUE(all_close(y.dev_values(), y.cpu_values(), 1e-2f, 1e-2f)) << "combine";
      // dexpert_out in a, dout in b, expert_out in a.
      Twin dy(random_vector(R * C, 64), b, {R, C}, s), eo2(random_vector(N * C, 65), a, {N, C}, s),
          deo(filled(N * C, 7.f), a, {N, C}, s), dtw(filled(R * k, 9.f), DType::f32, {R, k}, s);
      cpu->moe_combine_backward(deo.cpu(), dtw.cpu(), dy.cpu(), eo2.cpu(), pos.cpu(), tw.cpu());
      cuda.moe_combine_backward(deo.dev(), dtw.dev(), dy.dev(), eo2.dev(), pos.dev(), tw.dev());
      EXPECT_TRUE(all_close(deo.dev_values(), deo.cpu_values(), 1e-2f, 1e-2f)) << "dexpert_out";
      EXPECT_TRUE(all_close(dtw.dev_values(), dtw.cpu_values(), 1e-4f, 1e-4f)) << "dtopk_weight";
    }
}

TEST(CudaMoe, GroupedMatmulMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps cuda;
  auto cpu = gt::make_cpu_ops(1);
  const cudaStream_t s = cuda.stream();
  struct Case {
    std::vector<int32_t> sizes;
    int64_t N, C, OC;
  };
  // Empty first, middle and last groups; groups that end inside a 64-row
  // tile; rows past offsets[G] (171..199); OC and C over one 64-wide tile.
  const Case cases[] = {{{0, 70, 0, 101, 0}, 200, 40, 72},
                        {{1, 63, 130}, 194, 67, 17},
                        {{0, 0, 0}, 8, 16, 16}};
  for (DType dt : {DType::f32, DType::bf16})
    for (const Case& cs : cases) {
      const int G = static_cast<int>(cs.sizes.size());
      const int64_t N = cs.N, C = cs.C, OC = cs.OC;
      SCOPED_TRACE(std::string(gt::dtype_name(dt)) + " G=" + std::to_string(G) +
                   " N=" + std::to_string(N) + " C=" + std::to_string(C) +
                   " OC=" + std::to_string(OC));
      std::vector<int32_t> offsets{0};
      for (int32_t n : cs.sizes) offsets.push_back(offsets.back() + n);
      const int64_t used = offsets.back();
      Ints off(offsets, {G + 1}, s);
      Twin inp(random_vector(N * C, 41), dt, {N, C}, s),
          w(random_vector(G * OC * C, 42, -0.5f, 0.5f), dt, {G, OC, C}, s),
          out(filled(N * OC, 7.f), dt, {N, OC}, s);
      cpu->grouped_matmul_forward(out.cpu(), inp.cpu(), w.cpu(), off.cpu());
      cuda.grouped_matmul_forward(out.dev(), inp.dev(), w.dev(), off.dev());
      const auto got = out.dev_values();
      EXPECT_TRUE(all_close(got, out.cpu_values(), tol(dt), tol(dt))) << "out";
      for (int64_t i = used * OC; i < N * OC; ++i) ASSERT_EQ(got[i], 7.f) << "out row " << i / OC;

      Twin dout(random_vector(N * OC, 43), dt, {N, OC}, s),
          dinp(filled(N * C, 7.f), dt, {N, C}, s),
          dw(random_vector(G * OC * C, 44), DType::f32, {G, OC, C}, s);
      cpu->grouped_matmul_backward(dinp.cpu(), dw.cpu(), dout.cpu(), inp.cpu(), w.cpu(), off.cpu());
      cuda.grouped_matmul_backward(dinp.dev(), dw.dev(), dout.dev(), inp.dev(), w.dev(), off.dev());
      const auto gdinp = dinp.dev_values();
      EXPECT_TRUE(all_close(gdinp, dinp.cpu_values(), tol(dt), tol(dt))) << "dinp";
      for (int64_t i = used * C; i < N * C; ++i) ASSERT_EQ(gdinp[i], 7.f) << "dinp row " << i / C;
      EXPECT_TRUE(all_close(dw.dev_values(), dw.cpu_values(), 1e-4f, 1e-4f)) << "dweight";

      // dinp may be skipped; dweight's bits do not depend on the run.
      Twin z0(filled(G * OC * C, 0.f), DType::f32, {G, OC, C}, s),
          z1(filled(G * OC * C, 0.f), DType::f32, {G, OC, C}, s);
      cuda.grouped_matmul_backward(TensorView{}, z0.dev(), dout.dev(), inp.dev(), w.dev(),
                                   off.dev());
      cuda.grouped_matmul_backward(TensorView{}, z1.dev(), dout.dev(), inp.dev(), w.dev(),
                                   off.dev());
      EXPECT_TRUE(gt::test::bitwise_equal(z0.dev_values(), z1.dev_values())) << "dweight bits";
    }
}

TEST(CudaMoe, LoadBalanceMatchesCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::CudaOps cuda;
  auto cpu = gt::make_cpu_ops(1);
  const cudaStream_t s = cuda.stream();
  const int64_t E = 8;
  std::vector<float> cv;
  for (int32_t v : gt::test::random_ints(E, 51, 0, 60)) cv.push_back(static_cast<float>(v));
  Twin counts(cv, DType::f32, {E}, s), psums(random_vector(E, 52, 0.f, 30.f), DType::f32, {E}, s),
      aux(filled(1, 9.f), DType::f32, {1}, s), dprob(filled(E, 9.f), DType::f32, {E}, s);
  cpu->moe_load_balance(aux.cpu(), dprob.cpu(), counts.cpu(), psums.cpu(), 123.0, 0.01f);
  cuda.moe_load_balance(aux.dev(), dprob.dev(), counts.dev(), psums.dev(), 123.0, 0.01f);
  EXPECT_TRUE(all_close(aux.dev_values(), aux.cpu_values(), 1e-7f, 1e-6f)) << "aux";
  EXPECT_TRUE(all_close(dprob.dev_values(), dprob.cpu_values(), 1e-9f, 1e-6f)) << "dprob";
}

#if defined(TRAINER_CUDA_EMULATOR)
// A GPU runs the blocks of a grid in any order: the MoE layer's ops give the
// same bits with the emulator's blocks (and the threads of each block) run
// forward and in reverse (the router statistics, the multi-block plan with
// capacity, the grouped GEMMs' weight gradient included).
TEST(CudaMoe, TheLayerGivesTheSameBitsInEitherGridOrder) {
  const int64_t R = 300, C = 40, F = 24;
  const int E = 6, k = 2;
  const int64_t N = R * k;
  const std::string saved = gt::emu::block_order();
  auto run = [&](const char* order) {
    EXPECT_TRUE(gt::emu::set_block_order(order));
    gt::CudaOps cuda;
    const cudaStream_t s = cuda.stream();
    Twin logits(random_vector(R * E, 71, -2.f, 2.f), DType::f32, {R, E}, s),
        probs(filled(R * E, 0.f), DType::f32, {R, E}, s), lse(filled(R, 0.f), DType::f32, {R}, s),
        tw(filled(N, 0.f), DType::f32, {R, k}, s), counts(filled(E, 0.f), DType::f32, {E}, s),
        psums(filled(E, 0.f), DType::f32, {E}, s),
        x(random_vector(R * C, 72), DType::bf16, {R, C}, s),
        buf(filled(N * C, 0.f), DType::bf16, {N, C}, s),
        w(random_vector(E * F * C, 73, -0.3f, 0.3f), DType::bf16, {E, F, C}, s),
        h(filled(N * F, 0.f), DType::bf16, {N, F}, s),
        y(filled(R * C, 0.f), DType::bf16, {R, C}, s),
        dh(random_vector(N * F, 74), DType::bf16, {N, F}, s),
        dbuf(filled(N * C, 0.f), DType::bf16, {N, C}, s),
        dw(filled(E * F * C, 0.f), DType::f32, {E, F, C}, s),
        dy(random_vector(R * C, 75), DType::bf16, {R, C}, s),
        deo(filled(N * C, 0.f), DType::bf16, {N, C}, s), dtw(filled(N, 0.f), DType::f32, {R, k}, s),
        dlogits(filled(R * E, 0.f), DType::f32, {R, E}, s);
    Ints te(filled_i(N, 0), {R, k}, s), pos(filled_i(N, 0), {R, k}, s),
        off(filled_i(E + 1, 0), {E + 1}, s);
    cuda.moe_router_forward(probs.dev(), lse.dev(), te.dev(), tw.dev(), logits.dev(), TensorView{});
    cuda.moe_router_stats(counts.dev(), psums.dev(), probs.dev(), te.dev());
    cuda.moe_dispatch_plan(pos.dev(), off.dev(), te.dev(), tw.dev(), 90);
    cuda.moe_permute(buf.dev(), x.dev(), pos.dev());
    cuda.grouped_matmul_forward(h.dev(), buf.dev(), w.dev(), off.dev());
    cuda.grouped_matmul_backward(dbuf.dev(), dw.dev(), dh.dev(), buf.dev(), w.dev(), off.dev());
    cuda.moe_combine_forward(y.dev(), buf.dev(), pos.dev(), tw.dev());
    cuda.moe_combine_backward(deo.dev(), dtw.dev(), dy.dev(), buf.dev(), pos.dev(), tw.dev());
    cuda.moe_router_backward(dlogits.dev(), dtw.dev(), probs.dev(), lse.dev(), te.dev(), tw.dev(),
                             counts.dev(), 1e-3f);
    std::vector<std::vector<float>> out;
    for (Twin* t : {&probs, &lse, &tw, &counts, &psums, &h, &dbuf, &dw, &y, &deo, &dtw, &dlogits})
      out.push_back(t->dev_values());
    std::vector<float> ints;
    for (Ints* t : {&te, &pos, &off})
      for (int32_t v : t->dev_values()) ints.push_back(static_cast<float>(v));
    out.push_back(ints);
    return out;
  };
  const auto forward = run("forward"), reverse = run("reverse");
  gt::emu::set_block_order(saved);
  ASSERT_EQ(forward.size(), reverse.size());
  for (size_t i = 0; i < forward.size(); ++i)
    EXPECT_TRUE(gt::test::bitwise_equal(forward[i], reverse[i])) << "output " << i;
  // The capacity binds somewhere, so the capacity pass ran.
  EXPECT_NE(std::find(forward.back().begin(), forward.back().end(), -1.f), forward.back().end());
}
#endif

}  // namespace
