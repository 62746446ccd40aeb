// Attention over blocks on the CPU (kernels/cpu/attention_blocks.cpp,
// Ops::attention_block_*): a causal attention cut into chunks of queries and
// keys, as context parallelism cuts a sequence, and merged gives the unsplit
// attention's output and gradients to fp32 rounding, with grouped-query
// heads, load-balanced chunks and blocks visited in ring order; one block
// against finite differences; the known ring-attention bug (each block's own
// lse in backward) visibly wrong; masked rows; bf16 inputs; cast_rows.
#include <cmath>
#include <limits>

#include "kernels/core/attention_kernels.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "test_ops_common.hpp"

namespace gt::test {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A (B, T, W) row-major buffer's rows [t0, t0 + n) x columns [c0, c0 + w) as
// a strided (B, n, w) view.
TensorView slice(void* base, DType dt, int64_t B, int64_t T, int64_t W, int64_t t0, int64_t n,
                 int64_t c0, int64_t w) {
  TensorView v = make_view(static_cast<char*>(base) + (t0 * W + c0) * dtype_size(dt), dt,
                           Device::cpu, {B, n, w});
  v.strides = {T * W, W, 1, 0};
  return v;
}
TensorView slice(std::vector<float>& buf, int64_t B, int64_t T, int64_t W, int64_t t0, int64_t n,
                 int64_t c0, int64_t w) {
  return slice(buf.data(), DType::f32, B, T, W, t0, n, c0, w);
}
// Rows [t0, t0 + n) of a (B, NH, T) statistic.
TensorView stat_slice(std::vector<float>& buf, int64_t B, int64_t NH, int64_t T, int64_t t0,
                      int64_t n) {
  TensorView v = make_view(buf.data() + t0, DType::f32, Device::cpu, {B, NH, n});
  v.strides = {NH * T, T, 1, 0};
  return v;
}

struct Case {
  int B = 2, T = 24, NH = 4, KV = 2, hs = 6;
  int W() const { return (NH + 2 * KV) * hs; }
  int C() const { return NH * hs; }
  int Ckv() const { return KV * hs; }
};

// The unsplit causal attention: out (B, T, C) and dqkv for a given dout.
struct Reference {
  std::vector<float> out, dqkv;
};
Reference unsplit(const Case& c, std::vector<float>& qkv, std::vector<float>& dout) {
  const int64_t B = c.B, T = c.T;
  Reference r;
  r.out.resize(static_cast<size_t>(B * T * c.C()));
  r.dqkv.resize(qkv.size());
  std::vector<float> att(static_cast<size_t>(B * c.NH * T * T)), scr(att.size());
  cpu::attention_forward(f32(r.out, {B, T, c.C()}), f32(att, {B, c.NH, T, T}),
                         f32(qkv, {B, T, c.W()}), c.NH, c.KV);
  cpu::attention_backward(f32(r.dqkv, {B, T, c.W()}), f32(scr, {B, c.NH, T, T}),
                          f32(dout, {B, T, c.C()}), f32(qkv, {B, T, c.W()}),
                          f32(r.out, {B, T, c.C()}), f32(att, {B, c.NH, T, T}), c.NH, c.KV);
  return r;
}

// The sequence in n_chunks chunks; a "rank" r of cp holds chunks r and
// 2cp-1-r (load balanced) and sees the key chunks in ring order: its own
// first, then rank r-1's, and so on. Every (query chunk, key chunk) pair
// with a key chunk not after the query chunk is one block call; blocks
// entirely in the future are skipped, as the context-parallel layer does.
struct Split {
  int cp = 3;
  int chunks() const { return 2 * cp; }
  std::vector<int> held(int r) const { return {r, 2 * cp - 1 - r}; }
};

// Runs the blocks of every rank; returns out (B, T, C) and lse (B, NH, T)
// and, given dout, dqkv (B, T, W) from the block backward. `own_lse_bug`:
// the backward uses each block's own lse and output, the bug others shipped.
struct Blocked {
  std::vector<float> out, lse, dqkv;
};
Blocked run_blocks(const Case& c, const Split& s, std::vector<float>& qkv,
                   std::vector<float>& dout, bool own_lse_bug = false) {
  const int64_t B = c.B, T = c.T, W = c.W(), C = c.C(), Ckv = c.Ckv(), NH = c.NH;
  const int64_t L = T / s.chunks();
  Blocked r;
  r.out.assign(static_cast<size_t>(B * T * C), 0.f);
  r.lse.assign(static_cast<size_t>(B * NH * T), 0.f);
  std::vector<float> dq(static_cast<size_t>(B * T * C), 0.f),
      dkv(static_cast<size_t>(B * T * 2 * Ckv), 0.f), delta(r.lse.size());
  std::vector<float> scratch(static_cast<size_t>(
      attention_block_scratch_elems(Device::cpu, c.B, c.NH, static_cast<int>(L),
                                    static_cast<int>(L))));
  auto q_of = [&](int ch) { return slice(qkv, B, T, W, ch * L, L, 0, C); };
  auto k_of = [&](int ch) { return slice(qkv, B, T, W, ch * L, L, C, Ckv); };
  auto v_of = [&](int ch) { return slice(qkv, B, T, W, ch * L, L, C + Ckv, Ckv); };
  auto ring = [&](int rank, const auto& visit) {
    for (int step = 0; step < s.cp; ++step) {
      const int owner = (rank - step + s.cp) % s.cp;
      for (int qc : s.held(rank))
        for (int kc : s.held(owner))
          if (kc <= qc) visit(qc, kc);
    }
  };
  auto scr = f32(scratch, {static_cast<int64_t>(scratch.size())});
  for (int rank = 0; rank < s.cp; ++rank) {
    std::vector<bool> started(static_cast<size_t>(s.chunks()), false);
    ring(rank, [&](int qc, int kc) {
      cpu::attention_block_forward(slice(r.out, B, T, C, qc * L, L, 0, C),
                                   stat_slice(r.lse, B, NH, T, qc * L, L), scr, q_of(qc), k_of(kc),
                                   v_of(kc), qc * L, kc * L, c.NH, c.KV, started[qc]);
      started[qc] = true;
    });
  }
  cpu::attention_row_dot(f32(delta, {B, NH, T}), f32(dout, {B, T, C}), f32(r.out, {B, T, C}),
                         c.NH);
  for (int rank = 0; rank < s.cp; ++rank)
    ring(rank, [&](int qc, int kc) {
      std::vector<float> lse_b, delta_b;
      TensorView lse = stat_slice(r.lse, B, NH, T, qc * L, L);
      TensorView dlt = stat_slice(delta, B, NH, T, qc * L, L);
      if (own_lse_bug) {  // this block alone: its own lse and its own output's delta
        std::vector<float> out_b(static_cast<size_t>(B * L * C));
        lse_b.resize(static_cast<size_t>(B * NH * L));
        delta_b.resize(lse_b.size());
        cpu::attention_block_forward(f32(out_b, {B, L, C}), f32(lse_b, {B, NH, L}), scr,
                                     q_of(qc), k_of(kc), v_of(kc), qc * L, kc * L, c.NH, c.KV,
                                     false);
        cpu::attention_row_dot(f32(delta_b, {B, NH, L}), slice(dout, B, T, C, qc * L, L, 0, C),
                               f32(out_b, {B, L, C}), c.NH);
        lse = f32(lse_b, {B, NH, L});
        dlt = f32(delta_b, {B, NH, L});
      }
      cpu::attention_block_backward(
          slice(dq, B, T, C, qc * L, L, 0, C), slice(dkv, B, T, 2 * Ckv, kc * L, L, 0, Ckv),
          slice(dkv, B, T, 2 * Ckv, kc * L, L, Ckv, Ckv), scr,
          slice(dout, B, T, C, qc * L, L, 0, C), q_of(qc), k_of(kc), v_of(kc), lse, dlt, qc * L,
          kc * L, c.NH, c.KV);
    });
  r.dqkv.resize(qkv.size());
  for (int64_t bt = 0; bt < B * T; ++bt) {
    for (int64_t i = 0; i < C; ++i) r.dqkv[bt * W + i] = dq[bt * C + i];
    for (int64_t i = 0; i < 2 * Ckv; ++i) r.dqkv[bt * W + C + i] = dkv[bt * 2 * Ckv + i];
  }
  return r;
}

// The log-sum-exp of every (b, h, t) row of the unsplit attention, in double.
std::vector<float> reference_lse(const Case& c, const std::vector<float>& qkv) {
  const int W = c.W(), group = c.NH / c.KV;
  std::vector<float> lse(static_cast<size_t>(c.B * c.NH * c.T));
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.hs));
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.NH; ++h)
      for (int i = 0; i < c.T; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1));
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < c.hs; ++d)
            dot += double(qkv[(b * c.T + i) * W + h * c.hs + d]) *
                   qkv[(b * c.T + j) * W + c.C() + (h / group) * c.hs + d];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        lse[(b * c.NH + h) * c.T + i] = static_cast<float>(mx + std::log(sum));
      }
  return lse;
}

TEST(CpuAttentionBlocks, LoadBalancedChunksInRingOrderEqualUnsplitAttentionWithGqa) {
  const Case c;
  const Split s;  // cp 3: 6 chunks of 4 rows
  std::vector<float> qkv = random_vector(static_cast<size_t>(c.B * c.T * c.W()), 11, -2.f, 2.f);
  std::vector<float> dout = random_vector(static_cast<size_t>(c.B * c.T * c.C()), 12);
  const Reference ref = unsplit(c, qkv, dout);
  const Blocked got = run_blocks(c, s, qkv, dout);
  EXPECT_TRUE(all_close(got.out, ref.out, 1e-6f, 1e-5f)) << "merged output";
  EXPECT_TRUE(all_close(got.lse, reference_lse(c, qkv), 1e-5f, 1e-5f)) << "merged lse";
  EXPECT_TRUE(all_close(got.dqkv, ref.dqkv, 1e-5f, 1e-4f)) << "dq, dk, dv";
}

TEST(CpuAttentionBlocks, MultiHeadAndOneKeyValueHead) {
  for (int kv : {4, 1}) {
    Case c;
    c.KV = kv;
    c.T = 16;
    Split s;
    s.cp = 2;
    std::vector<float> qkv = random_vector(static_cast<size_t>(c.B * c.T * c.W()), 21 + kv);
    std::vector<float> dout = random_vector(static_cast<size_t>(c.B * c.T * c.C()), 31 + kv);
    const Reference ref = unsplit(c, qkv, dout);
    const Blocked got = run_blocks(c, s, qkv, dout);
    EXPECT_TRUE(all_close(got.out, ref.out, 1e-6f, 1e-5f)) << "KV=" << kv;
    EXPECT_TRUE(all_close(got.dqkv, ref.dqkv, 1e-5f, 1e-4f)) << "KV=" << kv;
  }
}

// The ring-attention bug users of other trainers hit: each block's backward
// with the block's own lse and output instead of the global ones. Every
// gradient comes out far off (measured: dq, dk and dv each differ from the
// unsplit ones by 1.6x, 1.7x and 2.1x their norm), so the comparison above
// would catch it.
TEST(CpuAttentionBlocks, BackwardWithEachBlocksOwnLseIsWrong) {
  const Case c;
  const Split s;
  std::vector<float> qkv = random_vector(static_cast<size_t>(c.B * c.T * c.W()), 41, -2.f, 2.f);
  std::vector<float> dout = random_vector(static_cast<size_t>(c.B * c.T * c.C()), 42);
  const Reference ref = unsplit(c, qkv, dout);
  const Blocked bad = run_blocks(c, s, qkv, dout, /*own_lse_bug=*/true);
  // The relative norm of the difference in each of the q, k and v columns.
  const int64_t first[3] = {0, c.C(), c.C() + c.Ckv()}, width[3] = {c.C(), c.Ckv(), c.Ckv()};
  for (int part = 0; part < 3; ++part) {
    double diff = 0, norm = 0;
    for (int64_t bt = 0; bt < int64_t(c.B) * c.T; ++bt)
      for (int64_t i = first[part]; i < first[part] + width[part]; ++i) {
        const double a = bad.dqkv[bt * c.W() + i], b = ref.dqkv[bt * c.W() + i];
        diff += (a - b) * (a - b);
        norm += b * b;
      }
    EXPECT_GT(std::sqrt(diff / norm), 0.5) << "q, k, v part " << part;
  }
}

// One block at offsets (q rows at 5.., keys at 2..: the first rows see part
// of the block) against central differences of L = sum(out o w), its own lse
// being the global one.
TEST(CpuAttentionBlocks, OneBlockMatchesFiniteDifferences) {
  const int64_t B = 1, Tq = 5, Tk = 7, NH = 2, KV = 1, hs = 4, C = NH * hs, Ckv = KV * hs;
  const int64_t q_pos = 5, k_pos = 2;  // row 0 sees keys 0..3, row 4 all 7
  std::vector<float> q = random_vector(static_cast<size_t>(B * Tq * C), 51);
  std::vector<float> k = random_vector(static_cast<size_t>(B * Tk * Ckv), 52);
  std::vector<float> v = random_vector(static_cast<size_t>(B * Tk * Ckv), 53);
  std::vector<float> w = random_vector(static_cast<size_t>(B * Tq * C), 54);
  std::vector<float> scratch(static_cast<size_t>(
      attention_block_scratch_elems(Device::cpu, B, NH, Tq, Tk)));
  auto scr = f32(scratch, {static_cast<int64_t>(scratch.size())});
  std::vector<float> out(w.size()), lse(static_cast<size_t>(B * NH * Tq));
  auto forward = [&] {
    cpu::attention_block_forward(f32(out, {B, Tq, C}), f32(lse, {B, NH, Tq}), scr,
                                 f32(q, {B, Tq, C}), f32(k, {B, Tk, Ckv}), f32(v, {B, Tk, Ckv}),
                                 q_pos, k_pos, NH, KV, false);
    return weighted_sum(out, w);
  };
  forward();
  std::vector<float> delta(lse.size()), dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
  cpu::attention_row_dot(f32(delta, {B, NH, Tq}), f32(w, {B, Tq, C}), f32(out, {B, Tq, C}), NH);
  cpu::attention_block_backward(f32(dq, {B, Tq, C}), f32(dk, {B, Tk, Ckv}), f32(dv, {B, Tk, Ckv}),
                                scr, f32(w, {B, Tq, C}), f32(q, {B, Tq, C}), f32(k, {B, Tk, Ckv}),
                                f32(v, {B, Tk, Ckv}), f32(lse, {B, NH, Tq}),
                                f32(delta, {B, NH, Tq}), q_pos, k_pos, NH, KV);
  EXPECT_TRUE(grad_close(dq, numeric_grad(q, forward)));
  EXPECT_TRUE(grad_close(dk, numeric_grad(k, forward)));
  EXPECT_TRUE(grad_close(dv, numeric_grad(v, forward)));
}

// A block entirely after its queries: every row sees no key (out 0, lse
// -inf); accumulated onto a real result it changes nothing; a partially
// masked block's fully masked rows stay -inf and add nothing in backward.
TEST(CpuAttentionBlocks, RowsThatSeeNoKey) {
  const int64_t B = 1, T = 4, NH = 2, hs = 4, C = NH * hs;
  std::vector<float> q = random_vector(static_cast<size_t>(B * T * C), 61);
  std::vector<float> k = random_vector(q.size(), 62), v = random_vector(q.size(), 63);
  std::vector<float> scratch(static_cast<size_t>(
      attention_block_scratch_elems(Device::cpu, B, NH, T, T)));
  auto scr = f32(scratch, {static_cast<int64_t>(scratch.size())});
  std::vector<float> out(q.size(), 3.f), lse(static_cast<size_t>(B * NH * T), 3.f);
  cpu::attention_block_forward(f32(out, {B, T, C}), f32(lse, {B, NH, T}), scr,
                               f32(q, {B, T, C}), f32(k, {B, T, C}), f32(v, {B, T, C}), 0, 8, NH,
                               NH, false);
  for (float x : out) EXPECT_EQ(x, 0.f);
  for (float x : lse) EXPECT_EQ(x, kNegInf);
  // The diagonal block, then the future one merged in: unchanged.
  cpu::attention_block_forward(f32(out, {B, T, C}), f32(lse, {B, NH, T}), scr,
                               f32(q, {B, T, C}), f32(k, {B, T, C}), f32(v, {B, T, C}), 8, 8, NH,
                               NH, false);
  const std::vector<float> out_diag = out, lse_diag = lse;
  cpu::attention_block_forward(f32(out, {B, T, C}), f32(lse, {B, NH, T}), scr,
                               f32(q, {B, T, C}), f32(k, {B, T, C}), f32(v, {B, T, C}), 8, 12, NH,
                               NH, true);
  EXPECT_EQ(out, out_diag);
  EXPECT_EQ(lse, lse_diag);
  // Backward of the future block adds exactly nothing.
  std::vector<float> delta(lse.size(), 0.5f), dq(q.size(), 1.f), dk(k.size(), 2.f),
      dv(v.size(), 3.f);
  const std::vector<float> dq0 = dq, dk0 = dk, dv0 = dv;
  cpu::attention_block_backward(f32(dq, {B, T, C}), f32(dk, {B, T, C}), f32(dv, {B, T, C}), scr,
                                f32(v, {B, T, C}), f32(q, {B, T, C}), f32(k, {B, T, C}),
                                f32(v, {B, T, C}), f32(lse, {B, NH, T}), f32(delta, {B, NH, T}), 8,
                                12, NH, NH);
  EXPECT_EQ(dq, dq0);
  EXPECT_EQ(dk, dk0);
  EXPECT_EQ(dv, dv0);
}

// bf16 q, k, v, dout: bit for bit the fp32 blocks on the bf16 values.
TEST(CpuAttentionBlocks, Bf16InputsAreTheFp32BlocksOfTheBf16Values) {
  const int64_t B = 2, Tq = 6, Tk = 6, NH = 4, KV = 2, hs = 4, C = NH * hs, Ckv = KV * hs;
  std::vector<float> q = round_to_bf16(random_vector(static_cast<size_t>(B * Tq * C), 71));
  std::vector<float> k = round_to_bf16(random_vector(static_cast<size_t>(B * Tk * Ckv), 72));
  std::vector<float> v = round_to_bf16(random_vector(k.size(), 73));
  std::vector<float> dout = round_to_bf16(random_vector(q.size(), 74));
  std::vector<uint16_t> qh = to_bf16(q), kh = to_bf16(k), vh = to_bf16(v), doh = to_bf16(dout);
  std::vector<float> scratch(static_cast<size_t>(
      attention_block_scratch_elems(Device::cpu, B, NH, Tq, Tk)));
  auto scr = f32(scratch, {static_cast<int64_t>(scratch.size())});
  auto run = [&](bool bf16) {
    std::vector<float> out(q.size()), lse(static_cast<size_t>(B * NH * Tq)), delta(lse.size());
    std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
    auto in = [&](std::vector<float>& f, std::vector<uint16_t>& h, int64_t T, int64_t W) {
      return bf16 ? bf16_view(h, {B, T, W}) : f32(f, {B, T, W});
    };
    cpu::attention_block_forward(f32(out, {B, Tq, C}), f32(lse, {B, NH, Tq}), scr,
                                 in(q, qh, Tq, C), in(k, kh, Tk, Ckv), in(v, vh, Tk, Ckv), 3, 1,
                                 NH, KV, false);
    cpu::attention_row_dot(f32(delta, {B, NH, Tq}), in(dout, doh, Tq, C), f32(out, {B, Tq, C}),
                           NH);
    cpu::attention_block_backward(f32(dq, {B, Tq, C}), f32(dk, {B, Tk, Ckv}),
                                  f32(dv, {B, Tk, Ckv}), scr, in(dout, doh, Tq, C),
                                  in(q, qh, Tq, C), in(k, kh, Tk, Ckv), in(v, vh, Tk, Ckv),
                                  f32(lse, {B, NH, Tq}), f32(delta, {B, NH, Tq}), 3, 1, NH, KV);
    out.insert(out.end(), dq.begin(), dq.end());
    out.insert(out.end(), dk.begin(), dk.end());
    out.insert(out.end(), dv.begin(), dv.end());
    return out;
  };
  EXPECT_EQ(run(true), run(false));
}

TEST(CpuAttentionBlocks, EntryPointsCheckShapesAndStrides) {
  auto ops = cpu_ops(1);
  const int64_t B = 1, T = 4, NH = 2, hs = 4, C = NH * hs;
  std::vector<float> q(static_cast<size_t>(B * T * C)), out(q.size()), lse(B * NH * T),
      scratch(static_cast<size_t>(ops->attention_block_scratch_elems(1, 2, 4, 4)));
  auto scr = f32(scratch, {static_cast<int64_t>(scratch.size())});
  // k with 3 heads' worth of columns: not n_kv_head heads of q's size.
  std::vector<float> k3(static_cast<size_t>(B * T * 12));
  try {
    ops->attention_block_forward(f32(out, {B, T, C}), f32(lse, {B, NH, T}), scr,
                                 f32(q, {B, T, C}), f32(k3, {B, T, 12}), f32(k3, {B, T, 12}), 0,
                                 0, NH, 1, false);
    FAIL() << "a k of the wrong width was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_block_forward: k (1, 4, 12)"),
              std::string::npos)
        << e.what();
  }
  // A view whose last dimension is strided.
  TensorView strided = f32(q, {B, T, C});
  strided.strides[2] = 2;
  EXPECT_THROW(ops->attention_block_forward(f32(out, {B, T, C}), f32(lse, {B, NH, T}), scr,
                                            strided, f32(q, {B, T, C}), f32(q, {B, T, C}), 0, 0,
                                            NH, NH, false),
               Error);
  // Scratch too small.
  EXPECT_THROW(ops->attention_block_forward(f32(out, {B, T, C}), f32(lse, {B, NH, T}),
                                            f32(scratch, {3}), f32(q, {B, T, C}),
                                            f32(q, {B, T, C}), f32(q, {B, T, C}), 0, 0, NH, NH,
                                            false),
               Error);
}

TEST(CpuCastRows, MovesColumnsOutOfAndIntoWiderRowsConverting) {
  auto ops = cpu_ops(1);
  const int64_t R = 5, W = 7, c0 = 2, n = 3;
  std::vector<float> wide = random_vector(static_cast<size_t>(R * W), 81);
  std::vector<uint16_t> packed(static_cast<size_t>(R * n), 0);
  TensorView cols = make_view(wide.data() + c0, DType::f32, Device::cpu, {R, n});
  cols.strides = {W, 1, 0, 0};
  ops->cast_rows(bf16_view(packed, {R, n}), cols);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < n; ++c)
      EXPECT_EQ(packed[r * n + c], bf16_from_float(wide[r * W + c0 + c]));
  // And back into other columns of an fp32 tensor, widened exactly.
  std::vector<float> dst(static_cast<size_t>(R * W), -1.f);
  TensorView into = make_view(dst.data() + 4, DType::f32, Device::cpu, {R, n});
  into.strides = {W, 1, 0, 0};
  ops->cast_rows(into, bf16_view(packed, {R, n}));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < W; ++c)
      EXPECT_EQ(dst[r * W + c], c >= 4 ? bf16_to_float(packed[r * n + c - 4]) : -1.f);
  // Rows that would overlap are refused.
  TensorView bad = into;
  bad.strides[0] = 2;
  EXPECT_THROW(ops->cast_rows(bad, bf16_view(packed, {R, n})), Error);
}

}  // namespace
}  // namespace gt::test
