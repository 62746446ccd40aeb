// Flash attention (kernels/cuda/attention.cu, and the tensor-core variant in
// attention_tc.cu) against the CPU twin: fp32 against CpuOps' fp32 attention,
// bf16 against CpuOps' bf16 attention (the fp32 attention of the bf16 values,
// outputs rounded to bf16). Head sizes on and between the three padded widths
// (5, 8, 16, 32, 48, 64, 72, 128: odd ones take the scalar loads), T inside
// one 64-row tile, on a tile boundary, one past it, and across many tiles (1,
// 7, 64, 65, 130, 200, 1024). Every output is poisoned first; the
// log-sum-exp is checked against a double-precision reference; backward must
// be bitwise repeatable. On a GPU, also GPT-2 124M's shape (B=4, 12 heads
// of 64, T=1024) through all three kernels.
// CudaAttentionGqa: grouped-query attention (KV < NH key/value heads)
// through CudaOps, each of the three kernels against CpuOps, and against
// the same kernel's multi-head attention with each key/value head repeated
// for its group: out, lse and dQ bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "test_util.hpp"

namespace {

using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

struct Case {
  int B, T, NH, hs;
  int KV = 0;  // key/value heads; 0: NH (multi-head attention)
  int kv() const { return KV > 0 ? KV : NH; }
};
const Case kCases[] = {{1, 1, 1, 8},    {2, 7, 3, 16},  {1, 64, 2, 64},  {2, 65, 2, 64},
                       {1, 130, 2, 128}, {2, 100, 3, 48}, {1, 200, 1, 32}, {1, 129, 2, 72},
                       {2, 33, 2, 5},    {1, 1024, 2, 64}};

// Several tiles, a partial tile and every head-size class stay in the small set.
bool small_case(const Case& c) { return c.T <= 130; }

std::string name(const Case& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " NH=" + std::to_string(c.NH) +
         " KV=" + std::to_string(c.kv()) + " hs=" + std::to_string(c.hs);
}

struct Sizes {
  int64_t B, T, NH, C, W, qkv, out, att, lse;  // W: qkv's row, (NH + 2 KV) hs
};
Sizes sizes(const Case& c) {
  Sizes s{c.B, c.T, c.NH, int64_t{c.NH} * c.hs, int64_t{c.NH + 2 * c.kv()} * c.hs, 0, 0, 0, 0};
  s.qkv = s.B * s.T * s.W;
  s.out = s.B * s.T * s.C;
  s.att = s.B * s.NH * s.T * s.T;
  s.lse = s.B * s.NH * s.T;
  return s;
}

struct CpuResult {
  std::vector<float> out, att;
};
CpuResult cpu_forward(const Case& c, std::vector<float> qkv, int threads) {
  const Sizes z = sizes(c);
  auto cpu = gt::make_cpu_ops(threads);
  CpuResult r{std::vector<float>(z.out), std::vector<float>(z.att)};
  cpu->attention_forward(gt::cpu_f32(r.out.data(), {z.B, z.T, z.C}),
                         gt::cpu_f32(r.att.data(), {z.att}),
                         gt::cpu_f32(qkv.data(), {z.B, z.T, z.W}), c.NH, c.kv());
  return r;
}

std::vector<float> cpu_backward(const Case& c, std::vector<float> qkv, std::vector<float> out,
                                std::vector<float> att, std::vector<float> dout, int threads) {
  const Sizes z = sizes(c);
  auto cpu = gt::make_cpu_ops(threads);
  std::vector<float> dqkv(z.qkv), scratch(z.att);
  cpu->attention_backward(
      gt::cpu_f32(dqkv.data(), {z.B, z.T, z.W}), gt::cpu_f32(scratch.data(), {z.att}),
      gt::cpu_f32(dout.data(), {z.B, z.T, z.C}), gt::cpu_f32(qkv.data(), {z.B, z.T, z.W}),
      gt::cpu_f32(out.data(), {z.B, z.T, z.C}), gt::cpu_f32(att.data(), {z.att}), c.NH, c.kv());
  return dqkv;
}

// CpuOps' bf16 attention: qkv, out, dout, dqkv bf16 bits; the saved
// probabilities and scratch fp32.
gt::TensorView cpu_bf16(std::vector<uint16_t>& v, std::initializer_list<int64_t> shape) {
  return gt::make_view(v.data(), gt::DType::bf16, gt::Device::cpu, shape);
}

struct CpuBf16Result {
  std::vector<uint16_t> out;
  std::vector<float> att;
};
CpuBf16Result cpu_forward_bf16(const Case& c, std::vector<uint16_t> qkv, int threads) {
  const Sizes z = sizes(c);
  auto cpu = gt::make_cpu_ops(threads);
  CpuBf16Result r{std::vector<uint16_t>(z.out), std::vector<float>(z.att)};
  cpu->attention_forward(cpu_bf16(r.out, {z.B, z.T, z.C}), gt::cpu_f32(r.att.data(), {z.att}),
                         cpu_bf16(qkv, {z.B, z.T, z.W}), c.NH, c.kv());
  return r;
}

std::vector<uint16_t> cpu_backward_bf16(const Case& c, std::vector<uint16_t> qkv,
                                        std::vector<uint16_t> out, std::vector<float> att,
                                        std::vector<uint16_t> dout, int threads) {
  const Sizes z = sizes(c);
  auto cpu = gt::make_cpu_ops(threads);
  std::vector<uint16_t> dqkv(z.qkv);
  std::vector<float> scratch(z.att);
  cpu->attention_backward(cpu_bf16(dqkv, {z.B, z.T, z.W}), gt::cpu_f32(scratch.data(), {z.att}),
                          cpu_bf16(dout, {z.B, z.T, z.C}), cpu_bf16(qkv, {z.B, z.T, z.W}),
                          cpu_bf16(out, {z.B, z.T, z.C}), gt::cpu_f32(att.data(), {z.att}), c.NH,
                          c.kv());
  return dqkv;
}

// log sum_{j<=t} exp(q_t . k_j / sqrt(hs)) per (b, h, t), in double; query
// head h reads key head h / (NH / KV).
std::vector<float> reference_lse(const Case& c, const std::vector<float>& qkv) {
  const Sizes z = sizes(c);
  std::vector<float> lse(z.lse);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.hs));
  for (int64_t b = 0; b < z.B; ++b)
    for (int64_t h = 0; h < z.NH; ++h)
      for (int64_t t = 0; t < z.T; ++t) {
        const float* q = &qkv[(b * z.T + t) * z.W + h * c.hs];
        const int64_t kv = h / (c.NH / c.kv());
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          const float* k = &qkv[(b * z.T + j) * z.W + z.C + kv * c.hs];
          double d = 0.0;
          for (int e = 0; e < c.hs; ++e) d += static_cast<double>(q[e]) * k[e];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[j] - mx);
        lse[(b * z.NH + h) * z.T + t] = static_cast<float>(mx + std::log(sum));
      }
  return lse;
}

// One case of each kernel against the CPU twin (threads: the CPU twin's; the
// production shape needs them all).
void check_fp32(const Case& c, cudaStream_t s, int threads = 1) {
  SCOPED_TRACE(name(c));
  const Sizes z = sizes(c);
  const auto qkv = random_vector(z.qkv, 1, -2.f, 2.f);
  const auto dout = random_vector(z.out, 2);
  const CpuResult fwd = cpu_forward(c, qkv, threads);
  const auto want_dqkv = cpu_backward(c, qkv, fwd.out, fwd.att, dout, threads);

  DeviceArray<float> d_qkv(qkv, s), d_dout(dout, s), d_out(z.out, s), d_lse(z.lse, s),
      d_dqkv(z.qkv, s), d_scratch(z.lse, s);
  d_out.poison();
  d_lse.poison();
  gt::cuda::attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), c.B, c.T, c.NH, c.kv(), c.hs,
                              s);
  EXPECT_TRUE(all_close(d_out.download(), fwd.out, 1e-5f, 1e-4f)) << "out";
  EXPECT_TRUE(all_close(d_lse.download(), reference_lse(c, qkv), 1e-5f, 1e-5f)) << "lse";

  d_dqkv.poison();
  d_scratch.poison();
  gt::cuda::attention_backward(d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(),
                               d_out.get(), d_lse.get(), c.B, c.T, c.NH, c.kv(), c.hs, s);
  const auto dqkv = d_dqkv.download();
  EXPECT_TRUE(all_close(dqkv, want_dqkv, 5e-5f, 1e-4f)) << "dqkv";

  d_dqkv.poison();
  gt::cuda::attention_backward(d_dqkv.get(), d_scratch.get(), d_dout.get(), d_qkv.get(),
                               d_out.get(), d_lse.get(), c.B, c.T, c.NH, c.kv(), c.hs, s);
  EXPECT_TRUE(gt::test::bitwise_equal(d_dqkv.download(), dqkv)) << "backward not repeatable";
}

__nv_bfloat16* bf(const DeviceArray<uint16_t>& a) {
  return reinterpret_cast<__nv_bfloat16*>(a.get());
}

// The two bf16 paths: the SIMT kernels (fp32 math on bf16 storage) and the
// tensor-core kernels (attention_tc.cu), whose P and dS are rounded to bf16 before
// their products, hence looser tolerances; and whose S sums exact bf16
// products in the tensor cores' fp32 accumulators (not IEEE's rounding to the
// last bit), hence near-fp32 statistics rather than fp32-accurate ones.
struct Bf16Kernels {
  bool tensor_cores;
  float out_tol, lse_tol, dqkv_tol;
  uint64_t seed;
};
const Bf16Kernels kSimt{false, 1e-2f, 1e-5f, 2e-2f, 11};
const Bf16Kernels kTensorCores{true, 1.5e-2f, 1e-4f, 3e-2f, 31};

void check_bf16(const Case& c, cudaStream_t s, const Bf16Kernels& k, int threads = 1) {
  SCOPED_TRACE(name(c) + (k.tensor_cores ? " tensor cores" : " SIMT"));
  if (k.tensor_cores) {
    ASSERT_TRUE(gt::cuda::attention_tc_supported(c.hs));
  }
  const Sizes z = sizes(c);
  const auto qkv16 = gt::test::to_bf16(random_vector(z.qkv, k.seed, -2.f, 2.f));
  const auto dout16 = gt::test::to_bf16(random_vector(z.out, k.seed + 1));
  const auto qkv = gt::test::from_bf16(qkv16);
  const CpuBf16Result fwd = cpu_forward_bf16(c, qkv16, threads);
  const auto want_out = gt::test::from_bf16(fwd.out);
  const auto want_dqkv =
      gt::test::from_bf16(cpu_backward_bf16(c, qkv16, fwd.out, fwd.att, dout16, threads));

  DeviceArray<uint16_t> d_qkv(qkv16, s), d_dout(dout16, s), d_out(z.out, s), d_dqkv(z.qkv, s);
  DeviceArray<float> d_lse(z.lse, s), d_scratch(z.lse, s);
  auto backward = [&] {
    // The bf16 forward output feeds D = rowsum(dout * out), as in training.
    if (k.tensor_cores)
      gt::cuda::attention_backward_tc(bf(d_dqkv), d_scratch.get(), bf(d_dout), bf(d_qkv), bf(d_out),
                                      d_lse.get(), c.B, c.T, c.NH, c.kv(), c.hs, s);
    else
      gt::cuda::attention_backward(bf(d_dqkv), d_scratch.get(), bf(d_dout), bf(d_qkv), bf(d_out),
                                   d_lse.get(), c.B, c.T, c.NH, c.kv(), c.hs, s);
  };
  d_out.poison();
  d_lse.poison();
  if (k.tensor_cores)
    gt::cuda::attention_forward_tc(bf(d_out), d_lse.get(), bf(d_qkv), c.B, c.T, c.NH, c.kv(), c.hs,
                                   s);
  else
    gt::cuda::attention_forward(bf(d_out), d_lse.get(), bf(d_qkv), c.B, c.T, c.NH, c.kv(), c.hs, s);
  EXPECT_TRUE(all_close(gt::test::from_bf16(d_out.download()), want_out, k.out_tol, k.out_tol))
      << "out";
  EXPECT_TRUE(all_close(d_lse.download(), reference_lse(c, qkv), k.lse_tol, k.lse_tol)) << "lse";

  d_dqkv.poison();
  d_scratch.poison();
  backward();
  const auto dqkv = d_dqkv.download();
  EXPECT_TRUE(all_close(gt::test::from_bf16(dqkv), want_dqkv, k.dqkv_tol, k.dqkv_tol)) << "dqkv";
  d_dqkv.poison();
  backward();
  EXPECT_TRUE(d_dqkv.download() == dqkv) << "backward not repeatable";
}

TEST(CudaAttention, Fp32ForwardAndBackwardMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  for (const Case& c : gt::test::select_cases(kCases, small_case)) check_fp32(c, stream.get());
}

TEST(CudaAttention, Bf16ForwardAndBackwardMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  for (const Case& c : gt::test::select_cases(kCases, small_case))
    check_bf16(c, stream.get(), kSimt);
}

TEST(CudaAttention, Bf16TensorCoreForwardAndBackwardMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  const Case cases[] = {{1, 1, 1, 16},   {2, 7, 3, 16},   {1, 64, 2, 64},  {2, 65, 2, 64},
                        {1, 130, 2, 128}, {2, 100, 3, 48}, {1, 200, 1, 32}, {1, 1024, 2, 64}};
  for (const Case& c : gt::test::select_cases(cases, small_case))
    check_bf16(c, stream.get(), kTensorCores);
  EXPECT_FALSE(gt::cuda::attention_tc_supported(72));
  EXPECT_FALSE(gt::cuda::attention_tc_supported(8));
}

// GPT-2 124M's attention at B=4 (12 heads of 64, T=1024): every kernel, the
// CPU twin on all cores. A real GPU only (scripts/gpu_check.sh runs it).
TEST(CudaAttention, AllThreeKernelsMatchCpuAtProductionShape) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  if (const char* why = gt::test::production_shapes_skipped()) GTEST_SKIP() << why;
  gt::cuda::CudaStream stream;
  const Case c{4, 1024, 12, 64};
  check_fp32(c, stream.get(), 0);
  check_bf16(c, stream.get(), kSimt, 0);
  check_bf16(c, stream.get(), kTensorCores, 0);
}

TEST(CudaAttention, HeadSizeAbove128IsAnError) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  DeviceArray<float> qkv(3 * 129, stream.get()), out(129, stream.get()), lse(1, stream.get());
  const std::string msg = gt::test::error_message([&] {
    gt::cuda::attention_forward(out.get(), lse.get(), qkv.get(), 1, 1, 1, 1, 129, stream.get());
  });
  EXPECT_NE(msg.find("head size 129"), std::string::npos) << msg;
}

// ---- grouped-query attention through CudaOps -------------------------------------

// One of the three kernels CudaOps picks from (storage dtype and
// CudaContextOptions::attention_tensor_cores) with the tolerances of its
// multi-head tests above: check_fp32's, kSimt's, kTensorCores'.
struct OpsPath {
  const char* name;
  bool tensor_cores;
  float out_atol, out_rtol, lse_tol, dqkv_atol, dqkv_rtol;
};
const OpsPath kFp32Path{"fp32 SIMT", false, 1e-5f, 1e-4f, 1e-5f, 5e-5f, 1e-4f};
OpsPath bf16_path(const char* name, const Bf16Kernels& k) {
  return {name, k.tensor_cores, k.out_tol, k.out_tol, k.lse_tol, k.dqkv_tol, k.dqkv_tol};
}

// Partial tiles (T = 150: two full tiles and 22 rows; T = 70), groups of 2,
// 3 and 6 (KV = 1), heads padded to each width (32, 64, 128 in the SIMT
// kernels; 64, 128 in the tensor-core ones), and hs = 5 (the SIMT kernels'
// scalar loads; the tensor cores take multiples of 16 only).
const Case kGqaCases[] = {{2, 150, 6, 16, 2}, {2, 150, 6, 32, 2}, {2, 150, 6, 16, 1},
                          {1, 70, 4, 5, 2},   {1, 70, 4, 48, 2},  {1, 70, 4, 128, 2}};
bool small_gqa_case(const Case& c) { return c.T <= 130; }

// The multi-head qkv (B,T,3C) of a grouped one (B,T,(NH + 2 KV) hs): query
// head h's keys and values are its key/value head's, repeated (HF's repeat_kv).
template <typename T>
std::vector<T> repeat_kv(const Case& c, const std::vector<T>& qkv) {
  const Sizes g = sizes(c);
  const Case m{c.B, c.T, c.NH, c.hs};
  const Sizes z = sizes(m);
  std::vector<T> out(z.qkv);
  for (int64_t bt = 0; bt < z.B * z.T; ++bt)
    for (int h = 0; h < c.NH; ++h) {
      const int kv = h / (c.NH / c.kv());
      for (int i = 0; i < c.hs; ++i) {
        const T* src = &qkv[bt * g.W];
        T* dst = &out[bt * z.W];
        dst[h * c.hs + i] = src[h * c.hs + i];
        dst[z.C + h * c.hs + i] = src[g.C + kv * c.hs + i];
        dst[2 * z.C + h * c.hs + i] = src[g.C + c.kv() * c.hs + kv * c.hs + i];
      }
    }
  return out;
}

// The dQ columns of a (B, T, W) gradient (the first C of each row).
template <typename T>
std::vector<T> dq_part(const std::vector<T>& dqkv, const Sizes& z) {
  std::vector<T> dq;
  for (int64_t bt = 0; bt < z.B * z.T; ++bt)
    dq.insert(dq.end(), dqkv.begin() + bt * z.W, dqkv.begin() + bt * z.W + z.C);
  return dq;
}

// Attention through one CudaOps: the tensors (T: float, or uint16_t bf16
// bits) on its stream, every output poisoned before the op writes it.
template <typename T>
struct OpsRun {
  gt::CudaOps& ops;
  Case c;
  Sizes z;
  gt::DType dtype;
  DeviceArray<T> qkv, dout, out, dqkv;
  DeviceArray<float> lse, scratch;
  OpsRun(gt::CudaOps& o, const Case& cs, const std::vector<T>& q, const std::vector<T>& g)
      : ops(o),
        c(cs),
        z(sizes(cs)),
        dtype(std::is_same_v<T, float> ? gt::DType::f32 : gt::DType::bf16),
        qkv(q, o.stream()),
        dout(g, o.stream()),
        out(z.out, o.stream()),
        dqkv(z.qkv, o.stream()),
        lse(o.attention_saved_elems(cs.B, cs.NH, cs.T), o.stream()),
        scratch(o.attention_scratch_elems(cs.B, cs.NH, cs.T), o.stream()) {}
  gt::TensorView flat(const DeviceArray<float>& a) {
    return gt::test::dev_view(a, gt::DType::f32, {static_cast<int64_t>(a.size())});
  }
  void forward() {
    out.poison();
    lse.poison();
    ops.attention_forward(gt::test::dev_view(out, dtype, {z.B, z.T, z.C}), flat(lse),
                          gt::test::dev_view(qkv, dtype, {z.B, z.T, z.W}), c.NH, c.kv());
  }
  std::vector<T> backward() {
    dqkv.poison();
    scratch.poison();
    ops.attention_backward(gt::test::dev_view(dqkv, dtype, {z.B, z.T, z.W}), flat(scratch),
                           gt::test::dev_view(dout, dtype, {z.B, z.T, z.C}),
                           gt::test::dev_view(qkv, dtype, {z.B, z.T, z.W}),
                           gt::test::dev_view(out, dtype, {z.B, z.T, z.C}), flat(lse), c.NH,
                           c.kv());
    return dqkv.download();
  }
};

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T>
std::vector<float> values(const std::vector<T>& v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return gt::test::from_bf16(v);
}

// One grouped case through CudaOps on `path` against CpuOps (out, dqkv), the
// double-precision lse, a rerun (bitwise), and multi-head attention of the
// repeated key/value heads on the same kernel (out, lse, dQ bitwise: each
// query head's arithmetic is the same; dK, dV are the group's sums there).
template <typename T>
void check_gqa(const Case& c, const OpsPath& path) {
  SCOPED_TRACE(name(c) + " " + path.name);
  gt::CudaContextOptions options;
  options.attention_tensor_cores = path.tensor_cores;
  gt::CudaOps ops(options);
  const Sizes z = sizes(c);
  std::vector<T> qkv, dout;
  std::vector<float> want_out, want_dqkv;
  if constexpr (std::is_same_v<T, float>) {
    qkv = random_vector(z.qkv, 41, -2.f, 2.f);
    dout = random_vector(z.out, 42);
    const CpuResult fwd = cpu_forward(c, qkv, 1);
    want_out = fwd.out;
    want_dqkv = cpu_backward(c, qkv, fwd.out, fwd.att, dout, 1);
  } else {
    qkv = gt::test::to_bf16(random_vector(z.qkv, 43, -2.f, 2.f));
    dout = gt::test::to_bf16(random_vector(z.out, 44));
    const CpuBf16Result fwd = cpu_forward_bf16(c, qkv, 1);
    want_out = gt::test::from_bf16(fwd.out);
    want_dqkv = gt::test::from_bf16(cpu_backward_bf16(c, qkv, fwd.out, fwd.att, dout, 1));
  }

  OpsRun<T> run(ops, c, qkv, dout);
  run.forward();
  const std::vector<T> out = run.out.download();
  const std::vector<float> lse = run.lse.download();
  EXPECT_TRUE(all_close(values(out), want_out, path.out_atol, path.out_rtol)) << "out";
  EXPECT_TRUE(all_close(lse, reference_lse(c, values(qkv)), path.lse_tol, path.lse_tol)) << "lse";
  const std::vector<T> dqkv = run.backward();
  EXPECT_TRUE(all_close(values(dqkv), want_dqkv, path.dqkv_atol, path.dqkv_rtol)) << "dqkv";
  EXPECT_TRUE(same_bits(run.backward(), dqkv)) << "backward not repeatable";

  const Case m{c.B, c.T, c.NH, c.hs};
  OpsRun<T> mha(ops, m, repeat_kv(c, qkv), dout);
  mha.forward();
  EXPECT_TRUE(same_bits(mha.out.download(), out)) << "out differs from multi-head, repeated k/v";
  EXPECT_TRUE(same_bits(mha.lse.download(), lse)) << "lse differs from multi-head, repeated k/v";
  EXPECT_TRUE(same_bits(dq_part(mha.backward(), sizes(m)), dq_part(dqkv, z)))
      << "dQ differs from multi-head, repeated k/v";
}

TEST(CudaAttentionGqa, Fp32MatchesCpuAndRepeatedHeads) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : gt::test::select_cases(kGqaCases, small_gqa_case))
    check_gqa<float>(c, kFp32Path);
}

TEST(CudaAttentionGqa, Bf16MatchesCpuAndRepeatedHeads) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : gt::test::select_cases(kGqaCases, small_gqa_case))
    check_gqa<uint16_t>(c, bf16_path("bf16 SIMT", kSimt));
}

TEST(CudaAttentionGqa, Bf16TensorCoreMatchesCpuAndRepeatedHeads) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const Case& c : gt::test::select_cases(kGqaCases, small_gqa_case))
    if (gt::cuda::attention_tc_supported(c.hs))
      check_gqa<uint16_t>(c, bf16_path("bf16 tensor cores", kTensorCores));
}

// The launchers check the head counts themselves (CudaOps' entry did before
// them): key/value heads that do not divide the query heads are an error.
TEST(CudaAttentionGqa, KvHeadsThatDoNotDivideTheHeadsAreAnError) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gt::cuda::CudaStream stream;
  DeviceArray<float> qkv(10 * 8, stream.get()), out(4 * 8, stream.get()), lse(4, stream.get());
  const std::string msg = gt::test::error_message([&] {
    gt::cuda::attention_forward(out.get(), lse.get(), qkv.get(), 1, 1, 4, 3, 8, stream.get());
  });
  EXPECT_NE(msg.find("KV = 3 key/value heads must divide NH = 4"), std::string::npos) << msg;
}

}  // namespace
