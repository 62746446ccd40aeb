// The context-parallel attention layer (trainer/parallelize/
// context_parallel.hpp) with the running world as the cp group (2 and 4
// ranks), in both modes, load balanced and not, with grouped-query heads:
// each rank's output rows and its rows of dq, dk, dv equal the unsplit
// causal attention's (CpuOps, one process, the same random qkv) to fp32
// rounding. Also: a backward after another forward regathers (never the
// keys of a previous micro-batch), and the bytes on the cp axis are the
// modes' formulas (tests/layouts/cp_layouts.py cp_bytes, per layer).
#include "kernels/cpu/cpu_ops.hpp"
#include "mpi_test_util.hpp"
#include "trainer/parallelize/context_parallel.hpp"

namespace gt::test {
namespace {

struct Sizes {
  int B = 2, NH = 4, KV = 2, hs = 8;
  int T = 16;  // 2 cp chunks of 2 at cp 4
  int W() const { return (NH + 2 * KV) * hs; }
  int C() const { return NH * hs; }
};

// Rows of a (B, T, W) tensor at the given positions of each sequence.
std::vector<float> rows_at(const std::vector<float>& all, const Sizes& s, int W,
                           const std::vector<int32_t>& positions) {
  std::vector<float> out;
  for (int b = 0; b < s.B; ++b)
    for (int32_t t : positions)
      out.insert(out.end(), all.begin() + (int64_t(b) * s.T + t) * W,
                 all.begin() + (int64_t(b) * s.T + t + 1) * W);
  return out;
}

struct Unsplit {
  std::vector<float> out, dqkv;
};
Unsplit unsplit(Ops& ops, const Sizes& s, std::vector<float>& qkv, std::vector<float>& dout) {
  Unsplit u;
  u.out.resize(size_t(s.B) * s.T * s.C());
  u.dqkv.resize(qkv.size());
  std::vector<float> saved(size_t(ops.attention_saved_elems(s.B, s.NH, s.T))),
      scratch(size_t(ops.attention_scratch_elems(s.B, s.NH, s.T)));
  const TensorView q = cpu_f32(qkv.data(), {s.B, s.T, s.W()});
  ops.attention_forward(cpu_f32(u.out.data(), {s.B, s.T, s.C()}),
                        cpu_f32(saved.data(), {int64_t(saved.size())}), q, s.NH, s.KV);
  ops.attention_backward(cpu_f32(u.dqkv.data(), {s.B, s.T, s.W()}),
                         cpu_f32(scratch.data(), {int64_t(scratch.size())}),
                         cpu_f32(dout.data(), {s.B, s.T, s.C()}), q,
                         cpu_f32(u.out.data(), {s.B, s.T, s.C()}),
                         cpu_f32(saved.data(), {int64_t(saved.size())}), s.NH, s.KV);
  return u;
}

const ActivationPlacement kHeadsSeq{AxisPlacement::shard(ActDim::heads),
                                    AxisPlacement::shard(ActDim::sequence)};

struct Case {
  CpComm mode;
  bool balance;
};

class ContextParallelMpi : public ::testing::TestWithParam<Case> {};

TEST_P(ContextParallelMpi, EachRanksRowsAreTheUnsplitAttentionsAndItsGradients) {
  auto world = test_world("cp");
  const int cp = world->size(), r = world->rank();
  const Case c = GetParam();
  Sizes s;
  const SequenceChunks chunks(s.T, cp, c.balance);
  auto ops = make_cpu_ops(1);
  std::vector<float> qkv = random_vector(size_t(s.B) * s.T * s.W(), 31, -2.f, 2.f);
  std::vector<float> dout = random_vector(size_t(s.B) * s.T * s.C(), 32);
  const Unsplit want = unsplit(*ops, s, qkv, dout);

  const std::vector<int32_t> mine = chunks.positions(r);
  const int Tl = chunks.local_len();
  std::vector<float> q = rows_at(qkv, s, s.W(), mine), d = rows_at(dout, s, s.C(), mine);
  ContextParallelAttention attn(*ops, ContextParallelGroup{world.get(), c.mode, c.balance}, chunks,
                                ComputeDType::fp32, s.B, s.NH, s.KV, s.hs);
  std::vector<float> out(size_t(s.B) * Tl * s.C()), dq(q.size());
  std::vector<float> saved(size_t(ContextParallelAttention::saved_elems(*ops, cp, s.B, s.NH, Tl)));
  const TensorView sv = cpu_f32(saved.data(), {int64_t(saved.size())});
  std::vector<float> scratch(
      size_t(ContextParallelAttention::scratch_elems(*ops, cp, s.B, s.NH, Tl)) + 1);
  const TensorView scr = cpu_f32(scratch.data(), {int64_t(scratch.size()) - 1});
  const Activation qa{cpu_f32(q.data(), {s.B, Tl, s.W()}), kHeadsSeq, "qkv"};
  world->reset_bytes();
  const Activation oa = attn.forward({cpu_f32(out.data(), {s.B, Tl, s.C()}), "attn"}, sv, qa,
                                     s.NH, s.KV);
  attn.backward({cpu_f32(dq.data(), {s.B, Tl, s.W()}), "d(qkv)"}, scr,
                {cpu_f32(d.data(), {s.B, Tl, s.C()}), kHeadsSeq, "d(attn)"}, qa, oa, sv, s.NH,
                s.KV);
  EXPECT_TRUE(all_close(out, rows_at(want.out, s, s.C(), mine), 1e-6f, 1e-5f)) << "out";
  EXPECT_TRUE(all_close(dq, rows_at(want.dqkv, s, s.W(), mine), 1e-5f, 1e-4f)) << "dq, dk, dv";
  // One layer, forward then its backward: allgather gathers once (the
  // backward keeps its own forward's) and reduce-scatters dK|dV; the ring
  // passes K|V round twice and dK|dV cp times.
  const double n = double(s.B) * Tl * 2 * s.KV * s.hs;
  const double want_bytes = c.mode == CpComm::allgather
                                ? (cp - 1) * n * 4 + (cp - 1) * n * 4
                                : 2 * (cp - 1) * n * 4 + cp * n * 4;
  EXPECT_DOUBLE_EQ(world->bytes_sent(), cp > 1 ? want_bytes : 0.0);
}

// The bug others shipped: a backward using the keys of another forward. Two
// micro-batches forward through the same layer, then the first's backward:
// it must gather the first's keys again (allgather) or pass them round
// again (ring), and so equal the unsplit attention of the first.
TEST_P(ContextParallelMpi, ABackwardAfterAnotherForwardUsesItsOwnKeys) {
  auto world = test_world("cp");
  const int cp = world->size(), r = world->rank();
  const Case c = GetParam();
  Sizes s;
  const SequenceChunks chunks(s.T, cp, c.balance);
  auto ops = make_cpu_ops(1);
  std::vector<float> first = random_vector(size_t(s.B) * s.T * s.W(), 41, -2.f, 2.f);
  std::vector<float> second = random_vector(first.size(), 42, -2.f, 2.f);
  std::vector<float> dout = random_vector(size_t(s.B) * s.T * s.C(), 43);
  const Unsplit want = unsplit(*ops, s, first, dout);
  const std::vector<int32_t> mine = chunks.positions(r);
  const int Tl = chunks.local_len();
  std::vector<float> q1 = rows_at(first, s, s.W(), mine), q2 = rows_at(second, s, s.W(), mine);
  std::vector<float> d = rows_at(dout, s, s.C(), mine);
  ContextParallelAttention attn(*ops, ContextParallelGroup{world.get(), c.mode, c.balance}, chunks,
                                ComputeDType::fp32, s.B, s.NH, s.KV, s.hs);
  const size_t saved_n = size_t(ContextParallelAttention::saved_elems(*ops, cp, s.B, s.NH, Tl));
  std::vector<float> out1(size_t(s.B) * Tl * s.C()), out2(out1.size()), saved1(saved_n),
      saved2(saved_n), dq(q1.size());
  const Activation a1{cpu_f32(q1.data(), {s.B, Tl, s.W()}), kHeadsSeq, "qkv 1"};
  const Activation a2{cpu_f32(q2.data(), {s.B, Tl, s.W()}), kHeadsSeq, "qkv 2"};
  const Activation o1 =
      attn.forward({cpu_f32(out1.data(), {s.B, Tl, s.C()}), "attn 1"},
                   cpu_f32(saved1.data(), {int64_t(saved_n)}), a1, s.NH, s.KV);
  attn.forward({cpu_f32(out2.data(), {s.B, Tl, s.C()}), "attn 2"},
               cpu_f32(saved2.data(), {int64_t(saved_n)}), a2, s.NH, s.KV);
  std::vector<float> scratch(
      size_t(ContextParallelAttention::scratch_elems(*ops, cp, s.B, s.NH, Tl)) + 1);
  attn.backward({cpu_f32(dq.data(), {s.B, Tl, s.W()}), "d(qkv 1)"},
                cpu_f32(scratch.data(), {int64_t(scratch.size()) - 1}),
                {cpu_f32(d.data(), {s.B, Tl, s.C()}), kHeadsSeq, "d(attn 1)"}, a1, o1,
                cpu_f32(saved1.data(), {int64_t(saved_n)}), s.NH, s.KV);
  EXPECT_TRUE(all_close(dq, rows_at(want.dqkv, s, s.W(), mine), 1e-5f, 1e-4f));
}

INSTANTIATE_TEST_SUITE_P(Modes, ContextParallelMpi,
                         ::testing::Values(Case{CpComm::allgather, true},
                                           Case{CpComm::allgather, false},
                                           Case{CpComm::ring, true}, Case{CpComm::ring, false}),
                         [](const auto& info) {
                           return std::string(to_string(info.param.mode)) +
                                  (info.param.balance ? "_balanced" : "_unbalanced");
                         });

}  // namespace
}  // namespace gt::test
