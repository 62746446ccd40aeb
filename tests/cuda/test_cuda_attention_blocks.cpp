// Attention over blocks (context parallelism) on CUDA: the block kernels of
// attention.cu (SIMT) and attention_tc.cu (tensor cores), through CudaOps,
// against the CPU twin (CpuOps, kernels/cpu/attention_blocks.cpp):
//   * one block at a time, forward assigned, forward merged onto a previous
//     result (rows with lse -inf among it), backward accumulated from given
//     lse and delta, with q, k, v, dout, dq, dk, dv strided slices of packed
//     buffers and out, lse slices of wider ones (what lies outside a view
//     must stay as it was); Tq, Tk on and off the 64-row tiles, head sizes
//     5, 16, 20, 24, 32, 40, 48, 64, 80, 128 (odd ones take the scalar
//     loads), grouped-query heads (KV 1, 2, NH), and blocks that are
//     diagonal, fully visible, partially masked (rows that see no key among
//     them) and fully masked (nothing written when merged or in backward);
//     the backward bitwise repeatable;
//   * a sequence cut into load-balanced chunks (cp 2 and 3: a rank holds
//     chunks r and 2cp-1-r, and visits the key chunks in ring order, as in
//     tests/cpu/test_ops_attention_blocks.cpp) merges into the unsplit
//     attention's output, lse and gradients (CudaOps::attention_forward /
//     backward on the same kernel family);
//   * attention_row_dot for every dtype pair, cast_rows bit for bit.
// Each path is named explicitly: fp32 (SIMT), bf16 on the SIMT kernels
// (attention_tensor_cores off) and bf16 on the tensor cores (on).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/core/attention_kernels.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "test_util.hpp"

namespace {

using gt::DType;
using gt::TensorView;
using gt::test::all_close;
using gt::test::DeviceArray;
using gt::test::random_vector;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Which CudaOps kernels run, and the tolerances against CpuOps, from
// tests/cuda/test_cuda_attention.cpp:
//   * fp32 SIMT: check_fp32's (out 1e-5 + 1e-4 rel, lse 1e-5, gradients
//     5e-5 + 1e-4 rel): the same fp32 arithmetic summed in another order
//     (tiles, online softmax, expf against the CPU's fast exp).
//   * bf16 SIMT: the same fp32 ones, not kSimt's bf16 ones: the block ops
//     write fp32 (out, lse, dq, dk, dv are never rounded to bf16, which is
//     what kSimt's 1e-2 / 2e-2 allow for), and both backends do fp32 math on
//     the same bf16 inputs.
//   * bf16 tensor cores: kTensorCores' (out 1.5e-2, lse 1e-4, gradients
//     3e-2): P and dS are rounded to bf16 before their products.
struct Path {
  const char* name;
  DType dtype;
  bool tensor_cores;
  float out_atol, out_rtol, lse_tol, grad_atol, grad_rtol;
};
const Path kFp32{"fp32 SIMT", DType::f32, false, 1e-5f, 1e-4f, 1e-5f, 5e-5f, 1e-4f};
const Path kBf16Simt{"bf16 SIMT", DType::bf16, false, 1e-5f, 1e-4f, 1e-5f, 5e-5f, 1e-4f};
const Path kBf16TensorCores{"bf16 tensor cores", DType::bf16, true, 1.5e-2f, 1.5e-2f,
                            1e-4f, 3e-2f, 3e-2f};

// Against the unsplit attention on the same kernels, whose bf16 outputs
// (out, dqkv) are rounded to bf16: the unsplit tests' own tolerances
// (kSimt's for bf16 SIMT: out 1e-2, lse 1e-5, dqkv 2e-2).
const Path kBf16SimtUnsplit{"bf16 SIMT", DType::bf16, false, 1e-2f, 1e-2f, 1e-5f, 2e-2f, 2e-2f};

gt::CudaContextOptions options_for(const Path& p) {
  gt::CudaContextOptions o;
  o.attention_tensor_cores = p.tensor_cores;
  return o;
}

template <typename T>
constexpr DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::bf16;
}
// Random values in [lo, hi) of T (bf16: the bits of the rounded values).
template <typename T>
std::vector<T> random_of(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v = random_vector(n, seed, lo, hi);
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return gt::test::to_bf16(v);
}
template <typename T>
std::vector<float> values(const std::vector<T>& v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return gt::test::from_bf16(v);
}
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// One tensor on both backends: a host copy for CpuOps and a device copy for
// CudaOps, starting equal. A (B, rows, W) buffer; slice() views part of it.
template <typename T>
struct Twin {
  std::vector<T> host;
  DeviceArray<T> dev;
  int64_t B, rows, W;
  Twin(const std::vector<T>& init, int64_t b, int64_t r, int64_t w, cudaStream_t s)
      : host(init), dev(init, s), B(b), rows(r), W(w) {
    GT_CHECK(static_cast<int64_t>(init.size()) == B * rows * W, "Twin of the wrong size");
  }
  // Rows [t0, t0 + n) x columns [c0, c0 + w) as a strided (B, n, w) view.
  TensorView slice(bool gpu, int64_t t0, int64_t n, int64_t c0, int64_t w) {
    void* base = gpu ? static_cast<void*>(dev.get()) : static_cast<void*>(host.data());
    TensorView v = gt::make_view(static_cast<char*>(base) + (t0 * W + c0) * sizeof(T),
                                 dtype_of<T>(), gpu ? gt::Device::cuda : gt::Device::cpu,
                                 {B, n, w});
    v.strides = {rows * W, W, 1, 0};
    return v;
  }
  TensorView all(bool gpu) { return slice(gpu, 0, rows, 0, W); }
  std::vector<T> device() const { return dev.download(); }
};

// CpuOps (one thread: a reference, and no OpenMP pool under the sanitizers)
// and CudaOps on one path.
struct Backends {
  std::unique_ptr<gt::Ops> cpu = gt::make_cpu_ops(1);
  gt::CudaOps cuda;
  explicit Backends(const Path& p) : cuda(options_for(p)) {}
  gt::Ops& on(bool gpu) { return gpu ? static_cast<gt::Ops&>(cuda) : *cpu; }
  cudaStream_t stream() const { return cuda.stream(); }
};

// ---- one block against the CPU twin ---------------------------------------------

struct BlockCase {
  int B, Tq, Tk, NH, KV, hs;
  int64_t q_pos, k_pos;
  const char* mask;  // what the positions make of the block
  bool small;        // kept with GT_TEST_SHAPES=small (the sanitizer passes)
};
// Query i sees key j iff k_pos + j <= q_pos + i, i.e. j <= i + (q_pos - k_pos).
// The small set keeps every mask kind, head-size class (scalar and vector
// loads, each padded width of both families) and group size.
const BlockCase kBlockCases[] = {
    {2, 70, 70, 4, 2, 64, 70, 70, "diagonal", false},
    {1, 65, 100, 3, 3, 80, 300, 150, "fully visible", false},
    {2, 70, 100, 4, 1, 16, 130, 100, "partial: row i sees keys 0..i+30", false},
    {1, 100, 70, 2, 2, 128, 40, 60, "partial: rows 0..19 see no key", true},
    {1, 33, 40, 2, 1, 48, 0, 40, "fully masked", true},
    {1, 7, 130, 6, 2, 24, 100, 0, "partial across key tiles", true},
    {2, 130, 7, 2, 2, 48, 10, 20, "Tq > Tk: rows 0..9 see no key", true},
    {1, 50, 60, 2, 1, 20, 5, 0, "partial, hs 20", true},
    {1, 40, 40, 4, 4, 40, 10, 0, "partial, hs 40", true},
    {1, 64, 64, 2, 2, 5, 0, 0, "diagonal, one tile, hs 5", true},
    {1, 128, 128, 2, 1, 32, 64, 64, "diagonal, unmasked tiles below it", false},
    // Tile edges: with off = 62 the first 64-key tile lacks one key for query
    // row 0 (masked), with off = 63 it is entire (unmasked); with off = 1 key
    // 64 is first seen by query row 63, in the first query tile.
    {1, 70, 130, 2, 1, 64, 62, 0, "partial, off 62", true},
    {1, 70, 130, 2, 2, 16, 63, 0, "partial, off 63", false},
    {1, 100, 130, 2, 2, 48, 1, 0, "partial, off 1", true},
};
bool small_block_case(const BlockCase& c) { return c.small; }

std::string name(const BlockCase& c) {
  return "B=" + std::to_string(c.B) + " Tq=" + std::to_string(c.Tq) + " Tk=" +
         std::to_string(c.Tk) + " NH=" + std::to_string(c.NH) + " KV=" + std::to_string(c.KV) +
         " hs=" + std::to_string(c.hs) + " q_pos=" + std::to_string(c.q_pos) + " k_pos=" +
         std::to_string(c.k_pos) + " (" + c.mask + ")";
}

bool fully_masked(const BlockCase& c) { return c.q_pos + c.Tq - 1 < c.k_pos; }

// The block's tensors on both backends:
//   q     rows [1, 1 + Tq) x columns [0, C) of a packed (B, Tq + 1, W) qkv
//   k, v  columns [C, C + Ckv) and [C + Ckv, W) of a packed (B, Tk, W) qkv
//   dout  columns [C, 2C) of a (B, Tq, 2C) buffer
//   out   columns [4, 4 + C) of a (B, Tq, C + 8) fp32 buffer
//   lse   rows [1, 1 + Tq) of a (B, NH, Tq + 3) fp32 buffer
//   dq    columns [0, C) of a packed (B, Tq, W) fp32 gradient
//   dk, dv columns [0, Ckv) and [Ckv, 2 Ckv) of a (B, Tk, 2 Ckv) fp32 one
template <typename T>
struct BlockTensors {
  const BlockCase& c;
  int64_t C, Ckv, W;
  Twin<T> qbuf, kbuf, gbuf;
  Twin<float> obuf, lbuf, delta, dqbuf, dkvbuf;
  std::vector<float> cpu_scratch;
  BlockTensors(const BlockCase& cs, cudaStream_t s)
      : c(cs),
        C(int64_t{cs.NH} * cs.hs),
        Ckv(int64_t{cs.KV} * cs.hs),
        W(C + 2 * Ckv),
        qbuf(random_of<T>(cs.B * (cs.Tq + 1) * W, 1, -2.f, 2.f), cs.B, cs.Tq + 1, W, s),
        kbuf(random_of<T>(cs.B * cs.Tk * W, 2, -2.f, 2.f), cs.B, cs.Tk, W, s),
        gbuf(random_of<T>(cs.B * cs.Tq * 2 * C, 3), cs.B, cs.Tq, 2 * C, s),
        obuf(random_vector(cs.B * cs.Tq * (C + 8), 4), cs.B, cs.Tq, C + 8, s),
        lbuf(random_vector(int64_t{cs.B} * cs.NH * (cs.Tq + 3), 5), cs.B, cs.NH, cs.Tq + 3, s),
        delta(std::vector<float>(int64_t{cs.B} * cs.NH * cs.Tq), cs.B, cs.NH, cs.Tq, s),
        dqbuf(random_vector(cs.B * cs.Tq * W, 6), cs.B, cs.Tq, W, s),
        dkvbuf(random_vector(cs.B * cs.Tk * 2 * Ckv, 7), cs.B, cs.Tk, 2 * Ckv, s),
        cpu_scratch(static_cast<size_t>(
            gt::attention_block_scratch_elems(gt::Device::cpu, cs.B, cs.NH, cs.Tq, cs.Tk))) {}
  TensorView q(bool gpu) { return qbuf.slice(gpu, 1, c.Tq, 0, C); }
  TensorView k(bool gpu) { return kbuf.slice(gpu, 0, c.Tk, C, Ckv); }
  TensorView v(bool gpu) { return kbuf.slice(gpu, 0, c.Tk, C + Ckv, Ckv); }
  TensorView dout(bool gpu) { return gbuf.slice(gpu, 0, c.Tq, C, C); }
  TensorView out(bool gpu) { return obuf.slice(gpu, 0, c.Tq, 4, C); }
  TensorView lse(bool gpu) { return lbuf.slice(gpu, 0, c.NH, 1, c.Tq); }
  TensorView dq(bool gpu) { return dqbuf.slice(gpu, 0, c.Tq, 0, C); }
  TensorView dk(bool gpu) { return dkvbuf.slice(gpu, 0, c.Tk, 0, Ckv); }
  TensorView dv(bool gpu) { return dkvbuf.slice(gpu, 0, c.Tk, Ckv, Ckv); }
  TensorView scratch(bool gpu) {
    if (gpu) return TensorView{};  // CudaOps needs none (attention_block_scratch_elems is 0)
    return gt::cpu_f32(cpu_scratch.data(), {static_cast<int64_t>(cpu_scratch.size())});
  }
  void forward(gt::Ops& ops, bool gpu, bool accumulate) {
    ops.attention_block_forward(out(gpu), lse(gpu), scratch(gpu), q(gpu), k(gpu), v(gpu), c.q_pos,
                                c.k_pos, c.NH, c.KV, accumulate);
  }
  void backward(gt::Ops& ops, bool gpu) {
    ops.attention_block_backward(dq(gpu), dk(gpu), dv(gpu), scratch(gpu), dout(gpu), q(gpu),
                                 k(gpu), v(gpu), lse(gpu), delta.all(gpu), c.q_pos, c.k_pos, c.NH,
                                 c.KV);
  }
  // Sets the out and lse views (both backends) to a previous partial result:
  // random rows, every third row's lse -inf with its out row 0 ("nothing
  // yet"), the rest of both buffers `fill`.
  void previous_result(uint64_t seed, float fill) {
    std::vector<float> o(obuf.host.size(), fill), l(lbuf.host.size(), fill);
    const std::vector<float> ro = random_vector(o.size(), seed), rl = random_vector(l.size(), seed + 1, -1.f, 3.f);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.NH; ++h)
        for (int64_t t = 0; t < c.Tq; ++t) {
          const int64_t at = (b * c.NH + h) * (c.Tq + 3) + 1 + t;
          l[at] = t % 3 == 1 ? kNegInf : rl[at];
          for (int64_t d = 0; d < c.hs; ++d) {
            const int64_t oat = (b * c.Tq + t) * (C + 8) + 4 + h * c.hs + d;
            o[oat] = t % 3 == 1 ? 0.f : ro[oat];
          }
        }
    obuf.host = o;
    obuf.dev.upload(o);
    lbuf.host = l;
    lbuf.dev.upload(l);
  }
};

template <typename T>
void check_block(const BlockCase& c, const Path& path) {
  SCOPED_TRACE(name(c) + ", " + path.name);
  Backends be(path);
  BlockTensors<T> x(c, be.stream());
  const float nan = std::numeric_limits<float>::quiet_NaN();

  // Assigned: every element of the views written (they start NaN), nothing
  // outside them.
  x.previous_result(8, 0.5f);
  {
    std::vector<float> o = x.obuf.host, l = x.lbuf.host;
    for (int64_t bt = 0; bt < int64_t{c.B} * c.Tq; ++bt)
      for (int64_t i = 0; i < x.C; ++i) o[bt * (x.C + 8) + 4 + i] = nan;
    for (int64_t bh = 0; bh < int64_t{c.B} * c.NH; ++bh)
      for (int64_t t = 0; t < c.Tq; ++t) l[bh * (c.Tq + 3) + 1 + t] = nan;
    x.obuf.host = o;
    x.obuf.dev.upload(o);
    x.lbuf.host = l;
    x.lbuf.dev.upload(l);
  }
  for (bool gpu : {false, true}) x.forward(be.on(gpu), gpu, false);
  EXPECT_TRUE(all_close(x.obuf.device(), x.obuf.host, path.out_atol, path.out_rtol)) << "out";
  EXPECT_TRUE(all_close(x.lbuf.device(), x.lbuf.host, path.lse_tol, path.lse_tol)) << "lse";
  if (fully_masked(c)) {
    for (int64_t bt = 0; bt < int64_t{c.B} * c.Tq; ++bt)
      for (int64_t i = 0; i < x.C; ++i)
        ASSERT_EQ(x.obuf.host[bt * (x.C + 8) + 4 + i], 0.f) << "the CPU twin's out";
  }

  // Merged onto a previous result (rows with lse -inf among it).
  x.previous_result(9, 0.25f);
  const std::vector<float> out_before = x.obuf.device(), lse_before = x.lbuf.device();
  for (bool gpu : {false, true}) x.forward(be.on(gpu), gpu, true);
  const std::vector<float> out_merged = x.obuf.device(), lse_merged = x.lbuf.device();
  EXPECT_TRUE(all_close(out_merged, x.obuf.host, path.out_atol, path.out_rtol)) << "merged out";
  EXPECT_TRUE(all_close(lse_merged, x.lbuf.host, path.lse_tol, path.lse_tol)) << "merged lse";
  if (fully_masked(c)) {
    EXPECT_TRUE(same_bits(out_merged, out_before)) << "merging a fully masked block changed out";
    EXPECT_TRUE(same_bits(lse_merged, lse_before)) << "merging a fully masked block changed lse";
  }

  // Backward from the CPU's merged lse and its row dot, on both backends
  // (the same inputs), accumulated onto random gradients. Every seventh row's
  // lse is then made -inf, the mark of a row that sees no key anywhere:
  // whatever it sees here, it must add nothing (the CPU twin's rule), and no
  // exp(s - -inf) may overflow into the sums.
  be.cpu->attention_row_dot(x.delta.all(false), x.dout(false), x.out(false), c.NH);
  for (int64_t bh = 0; bh < int64_t{c.B} * c.NH; ++bh)
    for (int64_t t = 3; t < c.Tq; t += 7) x.lbuf.host[bh * (c.Tq + 3) + 1 + t] = kNegInf;
  x.lbuf.dev.upload(x.lbuf.host);
  x.delta.dev.upload(x.delta.host);
  const std::vector<float> dq0 = x.dqbuf.host, dkv0 = x.dkvbuf.host;
  for (bool gpu : {false, true}) x.backward(be.on(gpu), gpu);
  const std::vector<float> dq = x.dqbuf.device(), dkv = x.dkvbuf.device();
  EXPECT_TRUE(all_close(dq, x.dqbuf.host, path.grad_atol, path.grad_rtol)) << "dq";
  EXPECT_TRUE(all_close(dkv, x.dkvbuf.host, path.grad_atol, path.grad_rtol)) << "dk, dv";
  if (fully_masked(c)) {
    EXPECT_TRUE(same_bits(dq, dq0)) << "a fully masked block's backward changed dq";
    EXPECT_TRUE(same_bits(dkv, dkv0)) << "a fully masked block's backward changed dk, dv";
  }

  // Deterministic: the same accumulation again from the same start.
  x.dqbuf.dev.upload(dq0);
  x.dkvbuf.dev.upload(dkv0);
  x.backward(be.cuda, true);
  EXPECT_TRUE(same_bits(x.dqbuf.device(), dq)) << "dq not repeatable";
  EXPECT_TRUE(same_bits(x.dkvbuf.device(), dkv)) << "dk, dv not repeatable";
}

TEST(CudaAttentionBlocks, Fp32BlocksMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const BlockCase& c : gt::test::select_cases(kBlockCases, small_block_case))
    check_block<float>(c, kFp32);
}

TEST(CudaAttentionBlocks, Bf16SimtBlocksMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const BlockCase& c : gt::test::select_cases(kBlockCases, small_block_case))
    check_block<uint16_t>(c, kBf16Simt);
}

// Head sizes that are not a multiple of 16 fall back to the SIMT kernels, as
// the unsplit attention does; the others run on the tensor cores.
TEST(CudaAttentionBlocks, Bf16TensorCoreBlocksMatchCpu) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (const BlockCase& c : gt::test::select_cases(kBlockCases, small_block_case))
    check_block<uint16_t>(c, gt::cuda::attention_tc_supported(c.hs) ? kBf16TensorCores
                                                                     : kBf16Simt);
}

// The option picks different kernels: the tensor cores' bf16 P makes their
// output differ from the SIMT kernels' in the last bits.
TEST(CudaAttentionBlocks, TensorCoreOptionRunsOtherKernels) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const BlockCase c{1, 70, 70, 2, 1, 64, 0, 0, "diagonal", true};
  std::vector<float> outs[2];
  for (int tc = 0; tc < 2; ++tc) {
    Backends be(tc ? kBf16TensorCores : kBf16Simt);
    BlockTensors<uint16_t> x(c, be.stream());
    x.forward(be.cuda, true, false);
    outs[tc] = x.obuf.device();
  }
  EXPECT_FALSE(same_bits(outs[0], outs[1]));
  EXPECT_TRUE(all_close(outs[1], outs[0], kBf16TensorCores.out_atol, kBf16TensorCores.out_rtol));
}

TEST(CudaAttentionBlocks, HeadSizeAbove128IsAnErrorNamingTheOp) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const BlockCase c{1, 4, 4, 1, 1, 136, 0, 0, "diagonal", true};
  Backends be(kFp32);
  BlockTensors<float> x(c, be.stream());
  const std::string msg = gt::test::error_message([&] { x.forward(be.cuda, true, false); });
  EXPECT_NE(msg.find("CudaOps::attention_block_forward: head size 136 > 128"), std::string::npos)
      << msg;
  const std::string bwd = gt::test::error_message([&] { x.backward(be.cuda, true); });
  EXPECT_NE(bwd.find("CudaOps::attention_block_backward: head size 136 > 128"), std::string::npos)
      << bwd;
}

// ---- chunks in ring order against the unsplit attention ------------------------

struct RingCase {
  int B, NH, KV, hs;
  int cp, L;  // ranks, rows per chunk: T = 2 cp L
};

// The unsplit attention (CudaOps::attention_forward / backward) against the
// sequence cut into 2 cp chunks of L rows: rank r holds chunks r and
// 2cp-1-r and visits the key chunks of rank r, r-1, ... in turn (ring
// order), each (query chunk, key chunk) pair not in the future one block
// call, merged (forward) or accumulated (backward) as the context-parallel
// layer does; delta from attention_row_dot of the merged output.
template <typename T>
void check_ring(const RingCase& rc, const Path& path) {
  const int64_t B = rc.B, NH = rc.NH, L = rc.L, T_ = 2 * int64_t{rc.cp} * rc.L;
  const int64_t C = NH * rc.hs, Ckv = int64_t{rc.KV} * rc.hs, W = C + 2 * Ckv;
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T_) + " NH=" +
               std::to_string(NH) + " KV=" + std::to_string(rc.KV) + " hs=" +
               std::to_string(rc.hs) + " cp=" + std::to_string(rc.cp) + ", " + path.name);
  gt::CudaOps ops(options_for(path));
  cudaStream_t s = ops.stream();
  const DType dt = dtype_of<T>();

  Twin<T> qkv(random_of<T>(B * T_ * W, 21, -2.f, 2.f), B, T_, W, s);
  Twin<T> dout(random_of<T>(B * T_ * C, 22), B, T_, C, s);

  // The unsplit attention on the same kernel family.
  DeviceArray<T> out_u(B * T_ * C, s), dqkv_u(B * T_ * W, s);
  DeviceArray<float> lse_u(ops.attention_saved_elems(rc.B, rc.NH, static_cast<int>(T_)), s),
      scratch_u(ops.attention_scratch_elems(rc.B, rc.NH, static_cast<int>(T_)), s);
  auto flat = [](const DeviceArray<float>& a) {
    return gt::test::dev_view(a, DType::f32, {static_cast<int64_t>(a.size())});
  };
  ops.attention_forward(gt::test::dev_view(out_u, dt, {B, T_, C}), flat(lse_u), qkv.all(true),
                        rc.NH, rc.KV);
  ops.attention_backward(gt::test::dev_view(dqkv_u, dt, {B, T_, W}), flat(scratch_u),
                         dout.all(true), qkv.all(true), gt::test::dev_view(out_u, dt, {B, T_, C}),
                         flat(lse_u), rc.NH, rc.KV);

  // The blocks. out, lse start as NaN: the first block of each query chunk
  // assigns them.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Twin<float> out(std::vector<float>(B * T_ * C, nan), B, T_, C, s);
  Twin<float> lse(std::vector<float>(B * NH * T_, nan), B, NH, T_, s);
  Twin<float> delta(std::vector<float>(B * NH * T_, nan), B, NH, T_, s);
  Twin<float> dq(std::vector<float>(B * T_ * C, 0.f), B, T_, C, s);
  Twin<float> dkv(std::vector<float>(B * T_ * 2 * Ckv, 0.f), B, T_, 2 * Ckv, s);
  auto held = [&](int r) { return std::vector<int>{r, 2 * rc.cp - 1 - r}; };
  auto ring = [&](int rank, const auto& visit) {
    for (int step = 0; step < rc.cp; ++step) {
      const int owner = (rank - step + rc.cp) % rc.cp;
      for (int qc : held(rank))
        for (int kc : held(owner))
          if (kc <= qc) visit(qc, kc);
    }
  };
  for (int rank = 0; rank < rc.cp; ++rank) {
    std::vector<bool> started(static_cast<size_t>(2 * rc.cp), false);
    ring(rank, [&](int qc, int kc) {
      ops.attention_block_forward(out.slice(true, qc * L, L, 0, C),
                                  lse.slice(true, 0, NH, qc * L, L), TensorView{},
                                  qkv.slice(true, qc * L, L, 0, C),
                                  qkv.slice(true, kc * L, L, C, Ckv),
                                  qkv.slice(true, kc * L, L, C + Ckv, Ckv), qc * L, kc * L,
                                  rc.NH, rc.KV, started[qc]);
      started[qc] = true;
    });
  }
  ops.attention_row_dot(delta.all(true), dout.all(true), out.all(true), rc.NH);
  for (int rank = 0; rank < rc.cp; ++rank)
    ring(rank, [&](int qc, int kc) {
      ops.attention_block_backward(
          dq.slice(true, qc * L, L, 0, C), dkv.slice(true, kc * L, L, 0, Ckv),
          dkv.slice(true, kc * L, L, Ckv, Ckv), TensorView{}, dout.slice(true, qc * L, L, 0, C),
          qkv.slice(true, qc * L, L, 0, C), qkv.slice(true, kc * L, L, C, Ckv),
          qkv.slice(true, kc * L, L, C + Ckv, Ckv), lse.slice(true, 0, NH, qc * L, L),
          delta.slice(true, 0, NH, qc * L, L), qc * L, kc * L, rc.NH, rc.KV);
    });

  EXPECT_TRUE(all_close(out.device(), values(out_u.download()), path.out_atol, path.out_rtol))
      << "merged out";
  EXPECT_TRUE(all_close(lse.device(), lse_u.download(), path.lse_tol, path.lse_tol))
      << "merged lse";
  const std::vector<float> want = values(dqkv_u.download()), got_q = dq.device(),
                           got_kv = dkv.device();
  std::vector<float> got(want.size());
  for (int64_t bt = 0; bt < B * T_; ++bt) {
    for (int64_t i = 0; i < C; ++i) got[bt * W + i] = got_q[bt * C + i];
    for (int64_t i = 0; i < 2 * Ckv; ++i) got[bt * W + C + i] = got_kv[bt * 2 * Ckv + i];
  }
  EXPECT_TRUE(all_close(got, want, path.grad_atol, path.grad_rtol)) << "dq, dk, dv";
}

// Chunks of 40 rows cross the 64-row tiles; small shapes keep 16.
int chunk_rows() { return gt::test::small_shapes() ? 16 : 40; }

TEST(CudaAttentionBlocks, Fp32ChunksInRingOrderEqualUnsplitAttention) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int cp : {2, 3}) {
    check_ring<float>({2, 4, 2, 24, cp, chunk_rows()}, kFp32);
    check_ring<float>({1, 3, 1, 40, cp, chunk_rows()}, kFp32);
  }
}

TEST(CudaAttentionBlocks, Bf16SimtChunksInRingOrderEqualUnsplitAttention) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int cp : {2, 3}) check_ring<uint16_t>({1, 4, 4, 24, cp, chunk_rows()}, kBf16SimtUnsplit);
}

TEST(CudaAttentionBlocks, Bf16TensorCoreChunksInRingOrderEqualUnsplitAttention) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int cp : {2, 3}) {
    check_ring<uint16_t>({1, 4, 2, 64, cp, chunk_rows()}, kBf16TensorCores);
    check_ring<uint16_t>({1, 2, 1, 48, cp, chunk_rows()}, kBf16TensorCores);
  }
}

// ---- attention_row_dot and cast_rows ----------------------------------------------

// delta for every (dout, out) dtype pair, both strided slices, delta a slice
// of a wider (B, NH, T + 2): the CPU twin's fp32 sum of at most 128 products
// of magnitude <= 1 in another order (lanes, then a tree): 1e-5.
template <typename G, typename Y>
void check_row_dot(int B, int T_, int NH, int hs) {
  SCOPED_TRACE("hs=" + std::to_string(hs) + (std::is_same_v<G, float> ? " dout fp32" : " dout bf16") +
               (std::is_same_v<Y, float> ? " out fp32" : " out bf16"));
  Backends be(kFp32);
  const int64_t C = int64_t{NH} * hs;
  Twin<G> g(random_of<G>(B * T_ * (C + 3), 31), B, T_, C + 3, be.stream());
  Twin<Y> y(random_of<Y>(B * (T_ + 1) * 2 * C, 32), B, T_ + 1, 2 * C, be.stream());
  Twin<float> d(random_vector(int64_t{B} * NH * (T_ + 2), 33), B, NH, T_ + 2, be.stream());
  for (bool gpu : {false, true})
    be.on(gpu).attention_row_dot(d.slice(gpu, 0, NH, 2, T_), g.slice(gpu, 0, T_, 3, C),
                                 y.slice(gpu, 1, T_, C, C), NH);
  EXPECT_TRUE(all_close(d.device(), d.host, 1e-5f, 1e-5f));
}

TEST(CudaAttentionBlocks, RowDotMatchesCpuForEveryDtypePair) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  for (int hs : {5, 40, 128}) {
    check_row_dot<float, float>(2, 37, 3, hs);
    check_row_dot<float, uint16_t>(2, 37, 3, hs);
    check_row_dot<uint16_t, float>(2, 37, 3, hs);
    check_row_dot<uint16_t, uint16_t>(2, 37, 3, hs);
  }
}

// fp32 values whose bf16 rounding is a corner of the rule (kernels/core/
// bf16.hpp): ties both ways, the carry into the exponent, overflow to inf,
// subnormals, signed zero, infinities, NaNs with payloads; then random ones.
std::vector<float> cast_corners(size_t n) {
  const uint32_t bits[] = {0x3F808000u, 0x3F818000u, 0x3F80FFFFu, 0x7F7FFFFFu, 0x7F7F8000u,
                           0x00000001u, 0x00018000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                           0x7FC00001u, 0xFFA12345u, 0x3F7FFFFFu, 0xC0490FDBu};
  std::vector<float> v = random_vector(n, 41, -3.f, 3.f);
  for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]) && i < n; ++i)
    std::memcpy(&v[i * 3 % n], &bits[i], sizeof(float));
  return v;
}

// dst (R, n) = columns [c0, c0 + n) of a (R, W) src, each side a slice of
// its own buffer (starting at column dc0 of a (R, Wd) dst): CudaOps against
// CpuOps, every bit of both buffers.
template <typename To, typename From>
void check_cast_rows(int64_t R, int64_t W, int64_t c0, int64_t n, int64_t Wd, int64_t dc0) {
  SCOPED_TRACE("R=" + std::to_string(R) + " W=" + std::to_string(W) + " c0=" +
               std::to_string(c0) + " n=" + std::to_string(n) + " Wd=" + std::to_string(Wd) +
               " dc0=" + std::to_string(dc0) + (std::is_same_v<From, float> ? " fp32" : " bf16") +
               (std::is_same_v<To, float> ? " -> fp32" : " -> bf16"));
  Backends be(kFp32);
  std::vector<From> src_init;
  if constexpr (std::is_same_v<From, float>)
    src_init = cast_corners(static_cast<size_t>(R * W));
  else {  // bf16 bits, with NaN payloads that a same-dtype copy must keep
    src_init = gt::test::to_bf16(cast_corners(static_cast<size_t>(R * W)));
    src_init[0] = 0x7FC1;
    if (src_init.size() > 5) src_init[5] = 0xFF81;
  }
  Twin<From> src(src_init, 1, R, W, be.stream());
  std::vector<To> dst_init(static_cast<size_t>(R * Wd));
  std::memset(dst_init.data(), 0x5A, dst_init.size() * sizeof(To));
  Twin<To> dst(dst_init, 1, R, Wd, be.stream());
  auto view2d = [](TensorView v) {  // (1, R, n) -> (R, n) with the row stride
    TensorView t = v;
    t.ndim = 2;
    t.shape = {v.shape[1], v.shape[2], 0, 0};
    t.strides = {v.strides[1], 1, 0, 0};
    return t;
  };
  for (bool gpu : {false, true})
    be.on(gpu).cast_rows(view2d(dst.slice(gpu, 0, R, dc0, n)), view2d(src.slice(gpu, 0, R, c0, n)));
  EXPECT_TRUE(same_bits(dst.device(), dst.host));
}

TEST(CudaAttentionBlocks, CastRowsIsBitForBitTheCpus) {
  if (!gt::cuda_available()) GTEST_SKIP() << "no CUDA device";
  // Quads: 12 columns, strides and offsets multiples of 4.
  check_cast_rows<uint16_t, float>(9, 36, 12, 12, 16, 4);
  check_cast_rows<float, uint16_t>(9, 36, 12, 12, 16, 4);
  check_cast_rows<float, float>(9, 36, 12, 12, 16, 4);
  check_cast_rows<uint16_t, uint16_t>(9, 36, 12, 12, 16, 4);
  // Scalar: odd widths, strides and offsets.
  check_cast_rows<uint16_t, float>(7, 23, 5, 7, 9, 1);
  check_cast_rows<float, uint16_t>(7, 23, 5, 7, 9, 1);
  check_cast_rows<float, float>(7, 23, 5, 7, 9, 1);
  check_cast_rows<uint16_t, uint16_t>(7, 23, 5, 7, 9, 1);
  // One row; a row of one column.
  check_cast_rows<uint16_t, float>(1, 40, 3, 33, 40, 2);
  check_cast_rows<float, uint16_t>(6, 3, 2, 1, 2, 1);
}

}  // namespace
