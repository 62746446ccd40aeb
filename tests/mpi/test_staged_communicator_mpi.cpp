// StagedCommunicator over MpiCommunicator, with MemcpyHostStaging standing in
// for the device (the "device" buffers are ordinary host memory): every
// collective gives the same result and the same byte accounting as the plain
// MPI communicator, the staging copies are exactly the bytes each op must
// move, several ops may be in flight and complete in any order with their own
// buffers, and deadlines, descriptions and the observer pass through.
#include <algorithm>
#include <chrono>
#include <thread>

#include "mpi_test_util.hpp"
#include "parallel/staged_communicator.hpp"

namespace gt::test {
namespace {

struct Pair {
  std::unique_ptr<MpiCommunicator> plain;
  std::shared_ptr<MemcpyHostStaging> staging;
  std::unique_ptr<StagedCommunicator> staged;
};

// The plain communicator and a staged one over a second copy of the world.
Pair make_pair(const char* name) {
  Pair p;
  p.plain = test_world(name);
  p.staging = std::make_shared<MemcpyHostStaging>();
  p.staged = std::make_unique<StagedCommunicator>(test_world(name), p.staging);
  return p;
}

// What the staging moved since the last call, in bytes each way.
struct Copied {
  int64_t to_host, to_device;
};
Copied take_counts(MemcpyHostStaging& s) {
  const Copied c{s.bytes_to_host(), s.bytes_to_device()};
  s.reset_counts();
  return c;
}

TEST(StagedCommunicator, NameRankSizeAreTheInner) {
  auto t = make_pair("staged-id");
  EXPECT_EQ(t.staged->name(), "staged-id");
  EXPECT_EQ(t.staged->rank(), t.plain->rank());
  EXPECT_EQ(t.staged->size(), t.plain->size());
  EXPECT_EQ(&t.staged->inner().name(), &t.staged->name());
}

TEST(StagedCommunicator, EveryCollectiveMatchesPlainMpi) {
  auto t = make_pair("staged-all");
  MpiCommunicator& plain = *t.plain;
  StagedCommunicator& staged = *t.staged;
  const int p = plain.size(), r = plain.rank();
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const int64_t b = 4 * n;
    take_counts(*t.staging);

    {  // all_reduce sum and max, in place
      auto a = filled(r, n), s = filled(r, n);
      plain.all_reduce_sum(a.data(), n).wait();
      staged.all_reduce_sum(s.data(), n).wait();
      EXPECT_TRUE(exactly(s, a)) << "all_reduce_sum";
      const Copied c = take_counts(*t.staging);
      EXPECT_EQ(c.to_host, b);
      EXPECT_EQ(c.to_device, b);
      // max: rank-dependent sign so the maximum is not always the last rank.
      for (int64_t i = 0; i < n; ++i) a[i] = s[i] = ((r + i) % 2 ? 1.f : -1.f) * fill_value(r, i);
      plain.all_reduce_max(a.data(), n).wait();
      staged.all_reduce_max(s.data(), n).wait();
      EXPECT_TRUE(exactly(s, a)) << "all_reduce_max";
      take_counts(*t.staging);
    }
    {  // reduce_scatter: the whole input goes to the host, one block comes back
      auto in = filled(r, n * p);
      std::vector<float> a(static_cast<size_t>(n), -1.f), s(static_cast<size_t>(n), -2.f);
      plain.reduce_scatter_sum(in.data(), a.data(), n).wait();
      staged.reduce_scatter_sum(in.data(), s.data(), n).wait();
      EXPECT_TRUE(exactly(s, a)) << "reduce_scatter_sum";
      EXPECT_TRUE(exactly(in, filled(r, n * p))) << "the input is left alone";
      const Copied c = take_counts(*t.staging);
      EXPECT_EQ(c.to_host, b * p);
      EXPECT_EQ(c.to_device, b);
    }
    {  // all_gather, out of place: one block up, the whole output back
      auto mine = filled(r, n);
      std::vector<float> a(static_cast<size_t>(n * p), -1.f), s(static_cast<size_t>(n * p), -2.f);
      plain.all_gather(mine.data(), a.data(), n).wait();
      staged.all_gather(mine.data(), s.data(), n).wait();
      EXPECT_TRUE(exactly(s, a)) << "all_gather";
      const Copied c = take_counts(*t.staging);
      EXPECT_EQ(c.to_host, b);
      EXPECT_EQ(c.to_device, b * p);
    }
    {  // all_gather in place: in == out + rank * n
      std::vector<float> a(static_cast<size_t>(n * p), -1.f), s(static_cast<size_t>(n * p), -2.f);
      auto mine = filled(r, n);
      std::copy(mine.begin(), mine.end(), a.begin() + r * n);
      std::copy(mine.begin(), mine.end(), s.begin() + r * n);
      plain.all_gather(a.data() + r * n, a.data(), n).wait();
      staged.all_gather(s.data() + r * n, s.data(), n).wait();
      EXPECT_TRUE(exactly(s, a)) << "all_gather in place";
      const Copied c = take_counts(*t.staging);
      EXPECT_EQ(c.to_host, b);
      EXPECT_EQ(c.to_device, b * p);
    }
    {  // broadcast: the root copies up only, every other rank down only
      const int root = p - 1;
      auto a = filled(r, n), s = filled(r, n);
      plain.broadcast(a.data(), n, root).wait();
      staged.broadcast(s.data(), n, root).wait();
      EXPECT_TRUE(exactly(s, a)) << "broadcast";
      EXPECT_TRUE(exactly(s, filled(root, n)));
      const Copied c = take_counts(*t.staging);
      EXPECT_EQ(c.to_host, r == root ? b : 0);
      EXPECT_EQ(c.to_device, r == root ? 0 : b);
    }
    {  // send/recv around the ring (to self at one rank)
      const int to = (r + 1) % p, from = (r + p - 1) % p;
      auto out = filled(r, n);
      std::vector<float> a(static_cast<size_t>(n), -1.f), s(static_cast<size_t>(n), -2.f);
      CommHandle pr = plain.recv(a.data(), n, from, 3);
      CommHandle ps = plain.send(out.data(), n, to, 3);
      CommHandle sr = staged.recv(s.data(), n, from, 3);
      CommHandle ss = staged.send(out.data(), n, to, 3);
      ps.wait();
      pr.wait();
      ss.wait();
      sr.wait();
      EXPECT_TRUE(exactly(s, a)) << "send/recv";
      EXPECT_TRUE(exactly(s, filled(from, n)));
      const Copied c = take_counts(*t.staging);
      EXPECT_EQ(c.to_host, b) << "the send's buffer only";
      EXPECT_EQ(c.to_device, b) << "the recv's buffer only";
    }
    // Scalars and the barrier are host values: nothing staged.
    EXPECT_EQ(staged.all_reduce_i64(r + 1, ReduceOp::sum), plain.all_reduce_i64(r + 1, ReduceOp::sum));
    EXPECT_EQ(staged.all_reduce_f64(0.5 * r, ReduceOp::max), plain.all_reduce_f64(0.5 * r, ReduceOp::max));
    staged.barrier();
    plain.barrier();
    const Copied c = take_counts(*t.staging);
    EXPECT_EQ(c.to_host, 0);
    EXPECT_EQ(c.to_device, 0);

    EXPECT_DOUBLE_EQ(staged.bytes_sent(), plain.bytes_sent());
  }
  if (p > 1) {
    EXPECT_GT(staged.bytes_sent(), 0.0);  // the comparison above was not 0 == 0
  }
}

// Four ops in flight at once on the staged communicator, each with its own
// staging buffer, completed in reverse order (and the last one by polling).
// bf16 sums through the staging: the same results as on the host, and
// exactly the bf16 bytes each way (2 per element: the input to the host,
// this rank's result back).
TEST(StagedCommunicator, Bf16SumsStageHalfTheBytes) {
  auto t = make_pair("staged-bf16");
  check_bf16_sums_on_host(*t.staged);
  const int p = t.staged->size();
  const int64_t n = 33;
  take_counts(*t.staging);
  auto x = bf16_filled(t.staged->rank(), n);
  t.staged->all_reduce_sum_bf16(x.data(), n).wait();
  Copied c = take_counts(*t.staging);
  EXPECT_EQ(c.to_host, 2 * n);
  EXPECT_EQ(c.to_device, 2 * n);
  auto in = bf16_filled(t.staged->rank(), n * p);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  t.staged->reduce_scatter_sum_bf16(in.data(), out.data(), n).wait();
  c = take_counts(*t.staging);
  EXPECT_EQ(c.to_host, 2 * n * p);
  EXPECT_EQ(c.to_device, 2 * n);
}

TEST(StagedCommunicator, SeveralOpsInFlightCompleteInAnyOrder) {
  auto t = make_pair("staged-flight");
  StagedCommunicator& c = *t.staged;
  const int p = c.size(), r = c.rank();
  auto x = filled(r, 33);
  auto mine = filled(r, 7);
  std::vector<float> gathered(static_cast<size_t>(7 * p), -1.f);
  auto rs_in = filled(r, 5 * p);
  std::vector<float> rs_out(5, -1.f);
  auto bc = filled(r, 11);
  const int64_t live_before = t.staging->live_allocations();

  CommHandle h_ar = c.all_reduce_sum(x.data(), 33);
  CommHandle h_ag = c.all_gather(mine.data(), gathered.data(), 7);
  CommHandle h_rs = c.reduce_scatter_sum(rs_in.data(), rs_out.data(), 5);
  CommHandle h_bc = c.broadcast(bc.data(), 11, 0);
  // One buffer per pending op (an op already complete at start would have
  // given its buffer back, so at least the pending ones are live).
  EXPECT_EQ(t.staging->live_allocations() - live_before, 4);
  EXPECT_EQ(c.idle_staging_buffers(), 0u);

  h_bc.wait();
  h_rs.wait();
  h_ag.wait();
  while (!h_ar.test()) std::this_thread::yield();
  EXPECT_TRUE(h_ar.done());

  // The closed forms of test_communicator_mpi.cpp.
  const float rank_sum = static_cast<float>(p * (p - 1) / 2);
  for (int64_t i = 0; i < 33; ++i) EXPECT_EQ(x[i], rank_sum + 0.5f * p * i) << i;
  for (int s = 0; s < p; ++s)
    for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(gathered[s * 7 + i], fill_value(s, i));
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(rs_out[i], rank_sum + 0.5f * p * (r * 5 + i));
  EXPECT_TRUE(exactly(bc, filled(0, 11)));

  // Every buffer is back, and a smaller op reuses one instead of allocating.
  EXPECT_EQ(c.idle_staging_buffers(), 4u);
  const int64_t allocs = t.staging->allocations();
  auto y = filled(r, 3);
  c.all_reduce_sum(y.data(), 3).wait();
  EXPECT_EQ(t.staging->allocations(), allocs);
  EXPECT_EQ(c.idle_staging_buffers(), 4u);
  // A larger one than any idle buffer replaces the largest: still 4 at most.
  auto big = filled(r, 4096);
  c.all_reduce_sum(big.data(), 4096).wait();
  EXPECT_EQ(t.staging->allocations(), allocs + 1);
  EXPECT_EQ(c.idle_staging_buffers(), 4u);
  EXPECT_EQ(t.staging->live_allocations() - live_before, 4);
}

// A handle dropped without wait() still completes and copies its result back.
TEST(StagedCommunicator, DroppedHandleStillDeliversTheResult) {
  auto t = make_pair("staged-drop");
  const int p = t.staged->size(), r = t.staged->rank();
  auto x = filled(r, 9);
  { CommHandle h = t.staged->all_reduce_sum(x.data(), 9); }  // waits in ~CommHandle (logs)
  for (int64_t i = 0; i < 9; ++i)
    EXPECT_EQ(x[i], static_cast<float>(p * (p - 1) / 2) + 0.5f * p * i);
  EXPECT_EQ(t.staging->bytes_to_device(), 4 * 9);
}

// The deadline is the inner communicator's: wait() without an argument uses
// it, the message names the inner op and communicator, nothing is copied back
// before the op really completes, and a retry completes and copies.
TEST(StagedCommunicator, DeadlineAndDescriptionAreTheInnerOps) {
  auto staging = std::make_shared<MemcpyHostStaging>();
  auto inner = test_world("staged-deadline");
  inner->set_deadline(0.2);
  StagedCommunicator c(std::move(inner), staging);
  // A receive nobody sends yet (same on every rank: from self).
  float in = -1.f, out = 42.f;
  CommHandle rh = c.recv(&in, 1, c.rank(), 11);
  const std::string msg = error_message([&] { rh.wait(); });
  EXPECT_NE(msg.find("deadline of 0.2 s"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'staged-deadline'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("recv"), std::string::npos) << msg;
  EXPECT_FALSE(rh.done());
  EXPECT_EQ(in, -1.f);
  EXPECT_EQ(staging->bytes_to_device(), 0);
  c.send(&out, 1, c.rank(), 11).wait();
  rh.wait();
  EXPECT_EQ(in, 42.f);
  EXPECT_EQ(staging->bytes_to_device(), 4);
}

// An observer sees the same operations, volumes and completions on the staged
// communicator as on the plain one.
class Recorder final : public CommObserver {
 public:
  struct Event {
    CommKind kind;
    int64_t elems;
    double ring_bytes;
    bool operator==(const Event& o) const {
      return kind == o.kind && elems == o.elems && ring_bytes == o.ring_bytes;
    }
  };
  uint64_t on_start(const CommOp& op, Clock::time_point) override {
    started.push_back({op.kind, op.elems, op.ring_bytes});
    return started.size();
  }
  void on_wait(uint64_t, const CommOp&, Clock::time_point, Clock::time_point) override { ++waits; }
  void on_complete(uint64_t, const CommOp&, Clock::time_point) override { ++completed; }
  std::vector<Event> started;
  int waits = 0, completed = 0;
};

TEST(StagedCommunicator, ObserverSeesWhatItSeesOnThePlainCommunicator) {
  auto t = make_pair("staged-observed");
  Recorder plain_rec, staged_rec;
  t.plain->set_observer(&plain_rec);
  t.staged->set_observer(&staged_rec);
  auto run = [](Communicator& c) {
    const int p = c.size(), r = c.rank();
    auto x = filled(r, 13);
    std::vector<float> g(static_cast<size_t>(13 * p));
    CommHandle a = c.all_reduce_sum(x.data(), 13);
    CommHandle b = c.all_gather(x.data(), g.data(), 5);
    b.wait();
    a.wait();
    c.broadcast(x.data(), 13, 0).wait();
    c.all_reduce_i64(r, ReduceOp::sum);
  };
  run(*t.plain);
  run(*t.staged);
  t.plain->set_observer(nullptr);
  t.staged->set_observer(nullptr);
  ASSERT_EQ(staged_rec.started.size(), 4u);
  EXPECT_EQ(staged_rec.started, plain_rec.started);
  EXPECT_EQ(staged_rec.completed, plain_rec.completed);
  EXPECT_EQ(staged_rec.waits, plain_rec.waits);
}

TEST(StagedCommunicator, NeedsAnInnerAndAStaging) {
  EXPECT_NE(error_message([] { StagedCommunicator c(nullptr, std::make_shared<MemcpyHostStaging>()); })
                .find("inner communicator is required"),
            std::string::npos);
  EXPECT_NE(error_message([] { StagedCommunicator c(test_world("x"), nullptr); })
                .find("HostStaging is required"),
            std::string::npos);
}

}  // namespace
}  // namespace gt::test
