// MpiCommunicator on the whole world: every collective checked in closed form
// from (rank, index) at odd sizes, byte accounting against the ring formulas,
// asynchronous overlap, handle lifetime, the deadline, and error messages.
#include <chrono>
#include <thread>

#include "mpi_test_util.hpp"
#include "parallel/mpi_check.hpp"

namespace gt::test {
namespace {

TEST(MpiCommunicator, RankAndSizeMatchWorld) {
  auto w = test_world();
  int r = -1, p = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  EXPECT_EQ(w->rank(), r);
  EXPECT_EQ(w->size(), p);
  EXPECT_EQ(w->name(), "test-world");
  EXPECT_EQ(w->bytes_sent(), 0.0);
}

TEST(MpiCommunicator, AllReduceSumInPlace) {
  auto w = test_world();
  const int p = w->size();
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = filled(w->rank(), n);
    w->all_reduce_sum(x.data(), n).wait();
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      want[static_cast<size_t>(i)] = static_cast<float>(p * (p - 1) / 2) + 0.5f * p * i;
    EXPECT_TRUE(exactly(x, want));
  }
}

TEST(MpiCommunicator, ReduceScatterSum) {
  auto w = test_world();
  const int p = w->size(), r = w->rank();
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto in = filled(r, n * p);  // rank g: in[j] = g + j/2 over the whole (n*p)
    std::vector<float> out(static_cast<size_t>(n), -1.f);
    w->reduce_scatter_sum(in.data(), out.data(), n).wait();
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      want[static_cast<size_t>(i)] =
          static_cast<float>(p * (p - 1) / 2) + 0.5f * p * static_cast<float>(r * n + i);
    EXPECT_TRUE(exactly(out, want));
  }
}

TEST(MpiCommunicator, AllGather) {
  auto w = test_world();
  const int p = w->size();
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto in = filled(w->rank(), n);
    std::vector<float> out(static_cast<size_t>(n * p), -1.f);
    w->all_gather(in.data(), out.data(), n).wait();
    std::vector<float> want;
    for (int s = 0; s < p; ++s) {
      auto block = filled(s, n);
      want.insert(want.end(), block.begin(), block.end());
    }
    EXPECT_TRUE(exactly(out, want));
  }
}

TEST(MpiCommunicator, AllGatherInPlace) {
  // The input already in its own block of the output (what FSDP and the
  // collective matmul do) is gathered as MPI_IN_PLACE.
  auto w = test_world();
  const int p = w->size();
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> out(static_cast<size_t>(n * p), -1.f), want;
    auto mine = filled(w->rank(), n);
    std::copy(mine.begin(), mine.end(), out.begin() + w->rank() * n);
    w->all_gather(out.data() + w->rank() * n, out.data(), n).wait();
    for (int s = 0; s < p; ++s) {
      auto block = filled(s, n);
      want.insert(want.end(), block.begin(), block.end());
    }
    EXPECT_TRUE(exactly(out, want));
  }
}

TEST(MpiCommunicator, Bf16SumsThroughTheUserOperation) {
  auto w = test_world();
  check_bf16_sums_on_host(*w);
}

// Uneven per-peer counts with zeros (a rank that sends or receives nothing),
// in each element width, and the bytes counted: what leaves this rank.
template <typename T>
void check_all_to_all_v(Communicator& w) {
  const int p = w.size(), r = w.rank();
  for (int shift = 0; shift < 3; ++shift) {
    SCOPED_TRACE("shift " + std::to_string(shift) + ", " + std::to_string(sizeof(T)) + " bytes");
    // rank a sends (a + 2b + shift) % 4 elements to rank b: value 100a + 10b + i.
    auto count = [&](int a, int b) { return int64_t((a + 2 * b + shift) % 4); };
    std::vector<int64_t> sc(static_cast<size_t>(p)), rc(static_cast<size_t>(p));
    std::vector<T> send, want;
    double away = 0;
    for (int q = 0; q < p; ++q) {
      sc[static_cast<size_t>(q)] = count(r, q);
      rc[static_cast<size_t>(q)] = count(q, r);
      for (int64_t i = 0; i < count(r, q); ++i) send.push_back(static_cast<T>(100 * r + 10 * q + i));
      for (int64_t i = 0; i < count(q, r); ++i) want.push_back(static_cast<T>(100 * q + 10 * r + i));
      if (q != r) away += static_cast<double>(count(r, q) * int64_t(sizeof(T)));
    }
    std::vector<T> got(want.size() + 1, T(7));  // never a null buffer; the last stays 7
    w.reset_bytes();
    w.all_to_all_v(send.data(), sc.data(), got.data(), rc.data(), int(sizeof(T))).wait();
    EXPECT_EQ(got.back(), T(7)) << "wrote past the received elements";
    got.pop_back();
    EXPECT_EQ(got, want);
    EXPECT_DOUBLE_EQ(w.bytes_sent(), away);
  }
}

TEST(MpiCommunicator, AllToAllVWithUnevenAndEmptyBlocks) {
  auto w = test_world();
  check_all_to_all_v<float>(*w);
  check_all_to_all_v<uint16_t>(*w);  // bf16 bits
  check_all_to_all_v<int64_t>(*w);
  // Counts that cannot be sent are refused before MPI, by name.
  std::vector<int64_t> bad(static_cast<size_t>(w->size()), 0), ok(bad);
  bad.back() = -1;
  float x = 0;
  EXPECT_NE(error_message([&] { w->all_to_all_v(&x, bad.data(), &x, ok.data(), 4); })
                .find("all_to_all_v with a negative count"),
            std::string::npos);
  EXPECT_NE(error_message([&] { w->all_to_all_v(&x, ok.data(), &x, ok.data(), 3); })
                .find("expected 2 (bf16), 4 (fp32, int32) or 8 (64-bit)"),
            std::string::npos);
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  auto w = test_world();
  for (int root = 0; root < w->size(); ++root) {
    for (int64_t n : test_counts()) {
      SCOPED_TRACE("root=" + std::to_string(root) + " n=" + std::to_string(n));
      auto x = filled(w->rank(), n);
      w->broadcast(x.data(), n, root).wait();
      EXPECT_TRUE(exactly(x, filled(root, n)));
    }
  }
}

TEST(MpiCommunicator, SendRecvRing) {
  // Rank r sends to r+1 and receives from r-1 (at 1 rank: to itself, which MPI
  // allows because both are non-blocking).
  auto w = test_world();
  const int p = w->size(), r = w->rank();
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto out = filled(r, n);
    std::vector<float> in(static_cast<size_t>(n), -1.f);
    CommHandle rh = w->recv(in.data(), n, (r + p - 1) % p, /*tag=*/5);
    CommHandle sh = w->send(out.data(), n, (r + 1) % p, /*tag=*/5);
    sh.wait();
    rh.wait();
    EXPECT_TRUE(exactly(in, filled((r + p - 1) % p, n)));
  }
}

TEST(MpiCommunicator, ScalarReductionsAndBarrier) {
  auto w = test_world();
  const int p = w->size(), r = w->rank();
  EXPECT_EQ(w->all_reduce_f64(r + 0.25, ReduceOp::sum), p * (p - 1) / 2.0 + 0.25 * p);
  EXPECT_EQ(w->all_reduce_f64(r + 0.25, ReduceOp::max), p - 1 + 0.25);
  EXPECT_EQ(w->all_reduce_f64(r + 0.25, ReduceOp::min), 0.25);
  // Values past 32 bits, so a narrowing anywhere would show.
  const int64_t big = int64_t{10000000000};
  EXPECT_EQ(w->all_reduce_i64(big * (r + 1), ReduceOp::sum), big * p * (p + 1) / 2);
  EXPECT_EQ(w->all_reduce_i64(r == p - 1 ? 1 : 0, ReduceOp::max), 1);  // "any rank saw it"
  EXPECT_EQ(w->all_reduce_i64(-big * r, ReduceOp::min), -big * (p - 1));
  w->barrier();
}

TEST(MpiCommunicator, BytesSentFollowsTheRingFormulas) {
  auto w = test_world();
  const int p = w->size(), r = w->rank();
  const int64_t n = 33;  // odd on purpose
  const double b = 4.0 * n;
  std::vector<float> x(static_cast<size_t>(n * p), 1.f), y(static_cast<size_t>(n * p));
  double want = 0.0;

  w->all_reduce_sum(x.data(), n).wait();
  want += 2.0 * (p - 1) / p * b;
  EXPECT_DOUBLE_EQ(w->bytes_sent(), want) << "all-reduce: 2(p-1)/p * bytes";

  w->reduce_scatter_sum(x.data(), y.data(), n).wait();
  want += static_cast<double>(p - 1) / p * (b * p);
  EXPECT_DOUBLE_EQ(w->bytes_sent(), want) << "reduce-scatter: (p-1)/p * total bytes";

  w->all_gather(x.data(), y.data(), n).wait();
  want += static_cast<double>(p - 1) / p * (b * p);
  EXPECT_DOUBLE_EQ(w->bytes_sent(), want) << "all-gather: (p-1)/p * total bytes";

  w->broadcast(x.data(), n, 0).wait();
  want += (r == 0 && p > 1) ? b : 0.0;
  EXPECT_DOUBLE_EQ(w->bytes_sent(), want) << "broadcast: bytes on the root, 0 elsewhere";

  CommHandle rh = w->recv(y.data(), n, (r + p - 1) % p);
  CommHandle sh = w->send(x.data(), n, (r + 1) % p);
  sh.wait();
  rh.wait();
  want += b;
  EXPECT_DOUBLE_EQ(w->bytes_sent(), want) << "send: bytes; recv: 0";

  w->all_reduce_f64(1.0, ReduceOp::sum);
  want += 2.0 * (p - 1) / p * 8.0;
  w->barrier();
  EXPECT_DOUBLE_EQ(w->bytes_sent(), want) << "scalar all-reduce: 8 bytes; barrier: 0";

  w->reset_bytes();
  EXPECT_EQ(w->bytes_sent(), 0.0);
}

TEST(MpiCommunicator, TwoCollectivesInFlightWaitedInReverseOrder) {
  auto w = test_world();
  const int p = w->size(), r = w->rank();
  const int64_t n = 1001;
  auto a = filled(r, n);
  auto g_in = filled(r, 7);
  std::vector<float> g_out(static_cast<size_t>(7 * p));
  auto b = filled(r, 33);

  CommHandle h1 = w->all_reduce_sum(a.data(), n);
  CommHandle h2 = w->all_gather(g_in.data(), g_out.data(), 7);
  CommHandle h3 = w->broadcast(b.data(), 33, p - 1);
  h3.wait();
  h2.wait();
  EXPECT_TRUE(h2.done());
  h1.wait();
  EXPECT_TRUE(h1.done() && h1.test());

  std::vector<float> want_a(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    want_a[static_cast<size_t>(i)] = static_cast<float>(p * (p - 1) / 2) + 0.5f * p * i;
  EXPECT_TRUE(exactly(a, want_a));
  for (int s = 0; s < p; ++s)
    EXPECT_TRUE(exactly(std::vector<float>(g_out.begin() + 7 * s, g_out.begin() + 7 * (s + 1)),
                        filled(s, 7)));
  EXPECT_TRUE(exactly(b, filled(p - 1, 33)));
}

TEST(MpiCommunicator, PollingWithTestCompletes) {
  auto w = test_world();
  const int p = w->size();
  auto x = filled(w->rank(), 7);
  CommHandle h = w->all_reduce_sum(x.data(), 7);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!h.test() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  ASSERT_TRUE(h.done());
  EXPECT_EQ(x[6], static_cast<float>(p * (p - 1) / 2) + 0.5f * p * 6);
}

TEST(MpiCommunicator, HandleDestroyedUnwaitedStillCompletes) {
  auto w = test_world();
  const int p = w->size();
  auto x = filled(w->rank(), 33);
  { CommHandle h = w->all_reduce_sum(x.data(), 33); }  // waits (and logs) in ~CommHandle
  EXPECT_EQ(x[32], static_cast<float>(p * (p - 1) / 2) + 0.5f * p * 32);
  // Move assignment over a pending handle completes the old one first.
  auto y = filled(w->rank(), 7);
  CommHandle h = w->all_reduce_sum(y.data(), 7);
  h = CommHandle{};
  EXPECT_EQ(y[1], static_cast<float>(p * (p - 1) / 2) + 0.5f * p);
}

// Rank 0 waits on a collective that the other ranks have not started: it must
// throw within the deadline, with a message naming the op, the count and the
// communicator. Only then does rank 0 tell the others (on a second
// communicator) to join; everyone completes and the test ends cleanly. At one
// rank the same is done with a receive from self whose send comes late.
TEST(MpiCommunicator, DeadlineFiresWhenAPeerNeverJoins) {
  auto w = test_world("deadline");
  auto side = test_world("deadline-side");
  const int p = w->size(), r = w->rank();
  const double deadline = 0.3;
  const int64_t n = 37;
  auto x = filled(r, n);

  if (p == 1) {
    std::vector<float> in(static_cast<size_t>(n), -1.f);
    CommHandle rh = w->recv(in.data(), n, 0, /*tag=*/9);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string msg = error_message([&] { rh.wait_for(deadline); });
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(msg.find("recv from 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("37 floats"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'deadline'"), std::string::npos) << msg;
    EXPECT_GE(took, deadline);
    EXPECT_LT(took, deadline + 2.0);
    EXPECT_FALSE(rh.done());
    CommHandle sh = w->send(x.data(), n, 0, /*tag=*/9);
    sh.wait();
    rh.wait();  // the retry after the deadline completes
    EXPECT_TRUE(exactly(in, x));
    return;
  }

  if (r == 0) {
    CommHandle h = w->all_reduce_sum(x.data(), n);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string msg = error_message([&] { h.wait_for(deadline); });
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(msg.find("all_reduce_sum"), std::string::npos) << msg;
    EXPECT_NE(msg.find("37 floats"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'deadline'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("deadline of 0.3 s"), std::string::npos) << msg;
    EXPECT_GE(took, deadline);
    EXPECT_LT(took, deadline + 2.0);
    EXPECT_FALSE(h.done());
    // Now release the late ranks, then finish the same collective.
    std::vector<CommHandle> go;
    float token = 1.f;
    for (int peer = 1; peer < p; ++peer) go.push_back(side->send(&token, 1, peer));
    for (auto& g : go) g.wait();
    h.wait();
  } else {
    float token = 0.f;
    side->recv(&token, 1, 0).wait();  // blocks until rank 0 has thrown
    EXPECT_EQ(token, 1.f);
    w->all_reduce_sum(x.data(), n).wait();
  }
  std::vector<float> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    want[static_cast<size_t>(i)] = static_cast<float>(p * (p - 1) / 2) + 0.5f * p * i;
  EXPECT_TRUE(exactly(x, want));
  w->barrier();
}

TEST(MpiCommunicator, DefaultDeadlineAppliesToWait) {
  auto w = test_world("default-deadline");
  w->set_deadline(0.2);
  EXPECT_EQ(w->deadline(), 0.2);
  // A receive nobody sends yet (same on every rank: from self, tag 11).
  float in = 0.f, out = 42.f;
  CommHandle rh = w->recv(&in, 1, w->rank(), 11);
  const std::string msg = error_message([&] { rh.wait(); });
  EXPECT_NE(msg.find("deadline of 0.2 s"), std::string::npos) << msg;
  w->send(&out, 1, w->rank(), 11).wait();
  rh.wait();
  EXPECT_EQ(in, 42.f);
  EXPECT_NE(error_message([&] { w->set_deadline(-1.0); }).find("deadline must be >= 0"),
            std::string::npos);
}

TEST(MpiCommunicator, ArgumentErrorsAreCaughtBeforeMpi) {
  // Local checks: no rank issues a collective, so no rank is left waiting.
  auto w = test_world("args");
  std::vector<float> x(8);
  EXPECT_NE(error_message([&] { w->all_reduce_sum(x.data(), -1); }).find("negative element count"),
            std::string::npos);
  EXPECT_NE(error_message([&] { w->all_gather(nullptr, x.data(), 3); }).find("null buffer"),
            std::string::npos);
  EXPECT_NE(error_message([&] { w->broadcast(x.data(), 8, w->size()); }).find("outside [0, "),
            std::string::npos);
  EXPECT_NE(error_message([&] { w->send(x.data(), 8, -1); }).find("peer/root -1"),
            std::string::npos);
  EXPECT_NE(error_message([&] { w->all_reduce_sum(x.data(), int64_t{1} << 31); })
                .find("exceeds the per-call limit"),
            std::string::npos);
  EXPECT_EQ(w->bytes_sent(), 0.0);
}

TEST(MpiCommunicator, MpiErrorsComeBackAsGtErrors) {
  auto w = test_world("errors");
  std::vector<float> big = filled(w->rank(), 10), small(5);
  if (w->size() > 1) {
    // A truncated receive (10 floats into a 5-float buffer) fails inside MPI.
    // Only between two ranks: Open MPI 4.1 truncates a send-to-self silently.
    const int next = (w->rank() + 1) % w->size(), prev = (w->rank() + w->size() - 1) % w->size();
    CommHandle rh = w->recv(small.data(), 5, prev, 3);
    CommHandle sh = w->send(big.data(), 10, next, 3);
    const std::string msg = error_message([&] { rh.wait(); });
    EXPECT_NE(msg.find("MPI_ERR_TRUNCATE"), std::string::npos) << msg;
    EXPECT_NE(msg.find("recv from"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'errors'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(w->rank()) + " on "), std::string::npos) << msg;
    sh.wait();
  }

  // MPI_CHECK itself: the expression, MPI's string, rank, host and file:line.
  const std::string m2 = error_message(
      [&] { MPI_CHECK(MPI_Send(big.data(), -1, MPI_FLOAT, 0, 0, w->comm())); });
  EXPECT_NE(m2.find("MPI_Send(big.data(), -1"), std::string::npos) << m2;
  EXPECT_NE(m2.find("MPI_ERR_COUNT"), std::string::npos) << m2;
  EXPECT_NE(m2.find("test_communicator_mpi.cpp:"), std::string::npos) << m2;
  EXPECT_NE(m2.find("rank " + std::to_string(w->rank()) + " on "), std::string::npos) << m2;
}

TEST(MpiCommunicator, OwnsOnlyWhatItCanFree) {
  EXPECT_NE(error_message([] { MpiCommunicator c(MPI_COMM_WORLD, "w"); }).find("predefined"),
            std::string::npos);
  EXPECT_NE(error_message([] { MpiCommunicator c(MPI_COMM_NULL, "n"); }).find("MPI_COMM_NULL"),
            std::string::npos);
}

TEST(MpiCommunicator, SplitOrdersByKeyAndKeepsTheDeadline) {
  // Reverse order by key: rank r of the world becomes rank p-1-r of the split.
  auto w = test_world();
  w->set_deadline(12.5);
  auto rev = w->split(0, w->size() - 1 - w->rank(), "reversed");
  EXPECT_EQ(rev->rank(), w->size() - 1 - w->rank());
  EXPECT_EQ(rev->size(), w->size());
  EXPECT_EQ(rev->deadline(), 12.5);
  EXPECT_EQ(rev->name(), "reversed");
  // Gathering world ranks in split order gives them reversed.
  float me = static_cast<float>(w->rank());
  std::vector<float> all(static_cast<size_t>(w->size()));
  rev->all_gather(&me, all.data(), 1).wait();
  for (int s = 0; s < w->size(); ++s) EXPECT_EQ(all[static_cast<size_t>(s)], w->size() - 1 - s);
}

}  // namespace
}  // namespace gt::test
