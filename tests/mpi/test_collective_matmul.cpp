// The collective-matmul rings against the unsharded matmul, at every world
// size the MPI tests run at and with overlap on and off: a row-sharded X
// all-gathered into X @ W^T, a K-split A @ B reduce-scattered by rows, which
// chunk is computed when (and only once its data is there), the byte count
// against the ring formulas, two calls in a row (a message left over from the
// first would corrupt the second, whose data differs), isolation from other
// point-to-point traffic, and the p == 1 short cut that communicates nothing.
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/core/error.hpp"
#include "mpi_test_util.hpp"
#include "parallel/collective_matmul.hpp"

namespace gt::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kAtol = 1e-6f, kRtol = 1e-5f;

using Calls = std::vector<std::pair<int, int>>;  // (first_chunk, n_chunks) in call order

std::string case_name(bool overlap, int64_t rows, int rep) {
  return std::string("overlap=") + (overlap ? "true" : "false") +
         " rows_per_rank=" + std::to_string(rows) + " rep=" + std::to_string(rep);
}

// y (rows, n) = x (rows, k) @ w^T, w (n, k): the column-parallel forward.
void matmul_nt(const float* x, const float* w, float* y, int64_t rows, int64_t k, int64_t n) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.f;
      for (int64_t t = 0; t < k; ++t) acc += x[i * k + t] * w[j * k + t];
      y[i * n + j] = acc;
    }
}

// Everything one all_gather_then_compute call is checked on. Every rank
// builds the same X (p*r, k) and W (n, k) from the seed and holds X's rows of
// its own chunk.
struct GatherCase {
  int p, rank;
  int64_t r, k = 5, n = 7;
  std::vector<float> x, w, full, y;
  Calls calls;
  std::vector<int> times_computed;
  double bytes = 0.0;

  GatherCase(Communicator& comm, bool overlap, int64_t rows, uint64_t seed)
      : p(comm.size()), rank(comm.rank()), r(rows) {
    x = random_vector(static_cast<size_t>(p * r * k), seed);
    w = random_vector(static_cast<size_t>(n * k), seed + 1);
    full.assign(x.size(), kNaN);  // other ranks' rows must arrive, not be there already
    std::copy(x.begin() + rank * r * k, x.begin() + (rank + 1) * r * k,
              full.begin() + rank * r * k);
    y.assign(static_cast<size_t>(p * r * n), kNaN);
    times_computed.assign(static_cast<size_t>(p), 0);
    const double before = comm.bytes_sent();
    all_gather_then_compute(
        comm, full.data(), r * k,
        [&](int first, int count) {
          calls.emplace_back(first, count);
          for (int c = first; c < first + count; ++c) {
            ++times_computed.at(static_cast<size_t>(c));
            // Only chunks already present may be computed on.
            EXPECT_TRUE(exactly(
                std::vector<float>(full.begin() + c * r * k, full.begin() + (c + 1) * r * k),
                std::vector<float>(x.begin() + c * r * k, x.begin() + (c + 1) * r * k)))
                << "chunk " << c << " computed before it arrived";
          }
          matmul_nt(full.data() + first * r * k, w.data(), y.data() + first * r * n, count * r, k,
                    n);
        },
        overlap);
    bytes = comm.bytes_sent() - before;
  }

  std::vector<float> expected_y() const {
    std::vector<float> want(static_cast<size_t>(p * r * n));
    matmul_nt(x.data(), w.data(), want.data(), p * r, k, n);
    return want;
  }
};

// One compute_then_reduce_scatter call on a K-split matmul: A (p*r, p*kr) and
// B (p*kr, n) are the same on every rank; rank g owns A's columns and B's rows
// [g*kr, (g+1)*kr), so the sum over ranks of A_g @ B_g is A @ B, and rank g's
// result must be rows [g*r, (g+1)*r) of it.
struct ScatterCase {
  int p, rank;
  int64_t r, kr = 2, n = 7, K;
  std::vector<float> a, b, workspace, result;
  Calls calls;
  std::vector<int> times_computed;
  double bytes = 0.0;

  ScatterCase(Communicator& comm, bool overlap, int64_t rows, uint64_t seed)
      : p(comm.size()), rank(comm.rank()), r(rows), K(comm.size() * kr) {
    a = random_vector(static_cast<size_t>(p * r * K), seed);
    b = random_vector(static_cast<size_t>(K * n), seed + 1);
    // NaN everywhere: an unwritten or accumulated-into float shows up.
    workspace.assign(static_cast<size_t>(reduce_scatter_workspace_elems(p, r * n, overlap)), kNaN);
    result.assign(static_cast<size_t>(r * n), kNaN);
    times_computed.assign(static_cast<size_t>(p), 0);
    const double before = comm.bytes_sent();
    compute_then_reduce_scatter(
        comm, result.data(), r * n,
        [&](int first, int count, float* out) {
          calls.emplace_back(first, count);
          for (int c = first; c < first + count; ++c) ++times_computed.at(static_cast<size_t>(c));
          for (int64_t i = 0; i < count * r; ++i)
            for (int64_t j = 0; j < n; ++j) {
              float acc = 0.f;
              for (int64_t t = rank * kr; t < (rank + 1) * kr; ++t)
                acc += a[(first * r + i) * K + t] * b[t * n + j];
              out[i * n + j] = acc;  // assigned, not accumulated
            }
        },
        overlap, workspace.data(), host_accumulate);
    bytes = comm.bytes_sent() - before;
  }

  std::vector<float> expected_result() const {
    std::vector<float> want(static_cast<size_t>(r * n));
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t t = 0; t < K; ++t)
          acc += static_cast<double>(a[(rank * r + i) * K + t]) * b[t * n + j];
        want[static_cast<size_t>(i * n + j)] = static_cast<float>(acc);
      }
    return want;
  }
};

// Rows per rank: odd, one, and the empty chunk.
const std::vector<int64_t> kRowCounts = {3, 1, 0};

TEST(CollectiveMatmul, AllGatherThenComputeMatchesUnshardedMatmul) {
  auto w = test_world("cm-gather");
  for (bool overlap : {false, true})
    for (int64_t rows : kRowCounts)
      for (int rep = 0; rep < 2; ++rep) {  // twice in a row, different data
        SCOPED_TRACE(case_name(overlap, rows, rep));
        GatherCase c(*w, overlap, rows, 100 + 10 * rep + rows);
        EXPECT_TRUE(exactly(c.full, c.x)) << "the gathered X";
        EXPECT_TRUE(all_close(c.y, c.expected_y(), kAtol, kRtol)) << "X @ W^T";
      }
}

TEST(CollectiveMatmul, ComputeThenReduceScatterMatchesKSplitMatmul) {
  auto w = test_world("cm-scatter");
  for (bool overlap : {false, true})
    for (int64_t rows : kRowCounts)
      for (int rep = 0; rep < 2; ++rep) {
        SCOPED_TRACE(case_name(overlap, rows, rep));
        ScatterCase c(*w, overlap, rows, 200 + 10 * rep + rows);
        EXPECT_TRUE(all_close(c.result, c.expected_result(), kAtol, kRtol))
            << "rows of rank " << c.rank << "'s chunk of A @ B";
      }
}

TEST(CollectiveMatmul, AllGatherComputesEveryChunkOnceOwnFirst) {
  auto w = test_world("cm-gather-order");
  const int p = w->size(), r = w->rank();
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(case_name(overlap, 3, 0));
    GatherCase c(*w, overlap, 3, 300);
    EXPECT_EQ(c.times_computed, std::vector<int>(static_cast<size_t>(p), 1));
    Calls want;
    if (p == 1) {
      want = {{0, 1}};
    } else if (!overlap) {
      want = {{0, p}};
    } else {
      for (int s = 0; s < p; ++s) want.emplace_back(((r - s) % p + p) % p, 1);  // r, r-1, ...
    }
    EXPECT_EQ(c.calls, want);
  }
}

TEST(CollectiveMatmul, ReduceScatterComputesEveryPartialOnceOwnLast) {
  auto w = test_world("cm-scatter-order");
  const int p = w->size(), r = w->rank();
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(case_name(overlap, 3, 0));
    ScatterCase c(*w, overlap, 3, 400);
    EXPECT_EQ(c.times_computed, std::vector<int>(static_cast<size_t>(p), 1));
    Calls want;
    if (p == 1) {
      want = {{0, 1}};
    } else if (!overlap) {
      want = {{0, p}};
    } else {
      // r-1, r-2, ..., r: each sum leaves for r+1 as soon as it is made.
      for (int s = 0; s < p; ++s) want.emplace_back(((r - s - 1) % p + p) % p, 1);
    }
    EXPECT_EQ(c.calls, want);
  }
}

TEST(CollectiveMatmul, BytesSentEqualRingVolumeWithAndWithoutOverlap) {
  auto w = test_world("cm-bytes");
  const int p = w->size();
  for (int64_t rows : kRowCounts) {
    for (int rep = 0; rep < 2; ++rep) {
      SCOPED_TRACE("rows_per_rank=" + std::to_string(rows) + " rep=" + std::to_string(rep));
      GatherCase g_ring(*w, true, rows, 500), g_ref(*w, false, rows, 500);
      const double ag_block = 4.0 * rows * g_ring.k;
      EXPECT_EQ(g_ring.bytes, ring_volume::all_gather(p, ag_block));
      EXPECT_EQ(g_ring.bytes, g_ref.bytes);
      // The formula itself: (p-1)/p of the total, (p-1) chunks per rank.
      EXPECT_DOUBLE_EQ(g_ring.bytes, (p - 1.0) / p * (p * ag_block));

      ScatterCase s_ring(*w, true, rows, 600), s_ref(*w, false, rows, 600);
      const double rs_block = 4.0 * rows * s_ring.n;
      EXPECT_EQ(s_ring.bytes, ring_volume::reduce_scatter(p, rs_block));
      EXPECT_EQ(s_ring.bytes, s_ref.bytes);
      EXPECT_DOUBLE_EQ(s_ring.bytes, (p - 1.0) / p * (p * rs_block));
    }
  }
  if (p > 1) {
    EXPECT_GT(w->bytes_sent(), 0.0) << "the byte checks above were not all vacuous";
  }
}

// Receives posted before the rings start, on the default tag and with each
// ring's message size, must not catch a ring message: their sends come only
// after both rings have finished. (Were a ring on tag 0, its first message
// would land in one of these and both the ring's result and ours would be
// wrong.)
TEST(CollectiveMatmul, RingsDoNotMatchOtherPointToPointTraffic) {
  auto w = test_world("cm-tags");
  // A ring that wrongly shares tag 0 ends in a receive that never matches;
  // fail after seconds, not the default minute (the messages here are tiny).
  w->set_deadline(15.0);
  const int p = w->size(), r = w->rank();
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  const int64_t rows = 3;
  const int64_t ag_elems = rows * 5, rs_elems = rows * 7;  // GatherCase k, ScatterCase n
  auto ag_mine = filled(r, ag_elems), rs_mine = filled(r + 10, rs_elems);
  std::vector<float> ag_theirs(static_cast<size_t>(ag_elems), kNaN);
  std::vector<float> rs_theirs(static_cast<size_t>(rs_elems), kNaN);
  CommHandle rh1 = w->recv(ag_theirs.data(), ag_elems, prev, /*tag=*/0);
  CommHandle rh2 = w->recv(rs_theirs.data(), rs_elems, prev, /*tag=*/0);

  GatherCase g(*w, /*overlap=*/true, rows, 700);
  ScatterCase s(*w, /*overlap=*/true, rows, 800);

  CommHandle sh1 = w->send(ag_mine.data(), ag_elems, next, /*tag=*/0);
  CommHandle sh2 = w->send(rs_mine.data(), rs_elems, next, /*tag=*/0);
  sh1.wait();
  sh2.wait();
  rh1.wait();
  rh2.wait();

  EXPECT_TRUE(exactly(ag_theirs, filled(prev, ag_elems)));
  EXPECT_TRUE(exactly(rs_theirs, filled(prev + 10, rs_elems)));
  EXPECT_TRUE(exactly(g.full, g.x));
  EXPECT_TRUE(all_close(g.y, g.expected_y(), kAtol, kRtol));
  EXPECT_TRUE(all_close(s.result, s.expected_result(), kAtol, kRtol));
}

// A size-1 communicator on which every operation is an error: the p == 1
// paths must not touch it at all, for either overlap setting.
class NoCommunication final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

 protected:
  CommHandle do_all_reduce(float*, int64_t, ReduceOp) override { no("all_reduce"); }
  CommHandle do_reduce_scatter_sum(const float*, float*, int64_t) override {
    no("reduce_scatter_sum");
  }
  CommHandle do_all_reduce_sum_bf16(uint16_t*, int64_t) override { no("all_reduce_sum_bf16"); }
  CommHandle do_reduce_scatter_sum_bf16(const uint16_t*, uint16_t*, int64_t) override {
    no("reduce_scatter_sum_bf16");
  }
  CommHandle do_all_gather(const float*, float*, int64_t) override { no("all_gather"); }
  CommHandle do_broadcast(float*, int64_t, int) override { no("broadcast"); }
  CommHandle do_send(const float*, int64_t, int, int) override { no("send"); }
  CommHandle do_recv(float*, int64_t, int, int) override { no("recv"); }
  double do_all_reduce_f64(double, ReduceOp) override { no("all_reduce_f64"); }
  int64_t do_all_reduce_i64(int64_t, ReduceOp) override { no("all_reduce_i64"); }
  void do_barrier() override { no("barrier"); }

 private:
  [[noreturn]] static void no(const char* op) { fail("unexpected ", op, " at p == 1"); }
  std::string name_ = "no-communication";
};

TEST(CollectiveMatmul, SingleRankCommunicatesNothing) {
  NoCommunication solo;
  EXPECT_EQ(reduce_scatter_workspace_elems(1, 21, true), 0);
  EXPECT_EQ(reduce_scatter_workspace_elems(1, 21, false), 0);
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(case_name(overlap, 3, 0));
    GatherCase g(solo, overlap, 3, 900);  // throws (fails the test) on any communication
    EXPECT_EQ(g.calls, (Calls{{0, 1}}));
    EXPECT_TRUE(all_close(g.y, g.expected_y(), kAtol, kRtol));
    ScatterCase s(solo, overlap, 3, 910);
    EXPECT_EQ(s.calls, (Calls{{0, 1}}));
    EXPECT_TRUE(all_close(s.result, s.expected_result(), kAtol, kRtol));
    EXPECT_EQ(solo.bytes_sent(), 0.0);
  }
}

TEST(CollectiveMatmul, WorkspaceHoldsTwoChunksWithOverlapAndAllWithout) {
  EXPECT_EQ(reduce_scatter_workspace_elems(4, 21, true), 42);
  EXPECT_EQ(reduce_scatter_workspace_elems(4, 21, false), 84);
  EXPECT_EQ(reduce_scatter_workspace_elems(2, 21, true), 42);
  EXPECT_EQ(reduce_scatter_workspace_elems(3, 0, false), 0);
  EXPECT_NE(
      error_message([] { reduce_scatter_workspace_elems(0, 1, true); }).find("p must be >= 1"),
      std::string::npos);
  EXPECT_NE(error_message([] {
              reduce_scatter_workspace_elems(2, -1, true);
            }).find("negative chunk size"),
            std::string::npos);
}

// Local checks, thrown identically on every rank before any message, so the
// ranks stay in step (the collective test after them proves it).
TEST(CollectiveMatmul, BadArgumentsThrowBeforeAnyMessage) {
  auto w = test_world("cm-args");
  const int p = w->size();
  std::vector<float> buf(static_cast<size_t>(4 * p), 0.f);
  const ChunkCompute noop = [](int, int) {};
  const ChunkPartial zero = [](int, int, float*) {};
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(std::string("overlap=") + (overlap ? "true" : "false"));
    std::string m =
        error_message([&] { all_gather_then_compute(*w, buf.data(), -3, noop, overlap); });
    EXPECT_NE(m.find("negative chunk size of -3"), std::string::npos) << m;
    EXPECT_NE(m.find("'cm-args'"), std::string::npos) << m;
    m = error_message([&] { all_gather_then_compute(*w, nullptr, 4, noop, overlap); });
    EXPECT_NE(m.find("full is null"), std::string::npos) << m;
    m = error_message([&] { all_gather_then_compute(*w, buf.data(), 4, ChunkCompute{}, overlap); });
    EXPECT_NE(m.find("without a compute function"), std::string::npos) << m;

    m = error_message(
        [&] { compute_then_reduce_scatter(*w, buf.data(), -1, zero, overlap, buf.data(), host_accumulate); });
    EXPECT_NE(m.find("negative chunk size of -1"), std::string::npos) << m;
    m = error_message(
        [&] { compute_then_reduce_scatter(*w, nullptr, 4, zero, overlap, buf.data(), host_accumulate); });
    EXPECT_NE(m.find("result is null"), std::string::npos) << m;
    if (p > 1) {
      m = error_message(
          [&] { compute_then_reduce_scatter(*w, buf.data(), 4, zero, overlap, nullptr, host_accumulate); });
      EXPECT_NE(m.find("workspace is null"), std::string::npos) << m;
    }
    m = error_message([&] {
      compute_then_reduce_scatter(*w, buf.data(), 4, ChunkPartial{}, overlap, buf.data(),
                                  host_accumulate);
    });
    EXPECT_NE(m.find("without a partial function"), std::string::npos) << m;
    m = error_message([&] {
      compute_then_reduce_scatter(*w, buf.data(), 4, zero, overlap, buf.data(),
                                  ChunkAccumulate{});
    });
    EXPECT_NE(m.find("without an accumulate function"), std::string::npos) << m;
  }
  EXPECT_EQ(w->bytes_sent(), 0.0);
  // Still in step: a real call right after the errors works.
  GatherCase g(*w, true, 3, 1000);
  EXPECT_TRUE(all_close(g.y, g.expected_y(), kAtol, kRtol));
}

}  // namespace
}  // namespace gt::test
