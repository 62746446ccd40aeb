// The CommObserver hook on MPI communicators (what the profiler's exposed
// communication time rests on): a rank that arrives late makes the others
// wait, and that wait is reported as exposed time; the observer does not
// change results or byte accounting; test() completion is reported once.
#include <chrono>
#include <thread>

#include "mpi_test_util.hpp"
#include "parallel/comm_observer.hpp"

namespace gt::test {
namespace {

struct Recorder : CommObserver {
  int starts = 0, waits = 0, completes = 0;
  double exposed_s = 0;
  uint64_t on_start(const CommOp&, Clock::time_point) override { return ++starts; }
  void on_wait(uint64_t, const CommOp&, Clock::time_point b, Clock::time_point e) override {
    ++waits;
    exposed_s += std::chrono::duration<double>(e - b).count();
  }
  void on_complete(uint64_t, const CommOp&, Clock::time_point) override { ++completes; }
};

TEST(MpiCommObserver, LateRankShowsAsExposedWaitElsewhere) {
  auto w = test_world();
  if (w->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Recorder rec;
  w->set_observer(&rec);
  const int64_t n = 33;
  auto x = filled(w->rank(), n);
  // The last rank starts 200 ms late: every other rank blocks in wait().
  const bool late = w->rank() == w->size() - 1;
  if (late) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CommHandle h = w->all_reduce_sum(x.data(), n);
  h.wait();
  w->set_observer(nullptr);
  EXPECT_EQ(rec.starts, 1);
  EXPECT_EQ(rec.waits, 1);
  EXPECT_EQ(rec.completes, 1);
  if (!late) {
    EXPECT_GT(rec.exposed_s, 0.1);
  }
  // Result and bytes as without an observer.
  std::vector<float> want(static_cast<size_t>(n));
  const int p = w->size();
  for (int64_t i = 0; i < n; ++i)
    want[static_cast<size_t>(i)] = static_cast<float>(p * (p - 1) / 2) + 0.5f * p * i;
  EXPECT_TRUE(exactly(x, want));
  EXPECT_DOUBLE_EQ(w->bytes_sent(), 2.0 * (p - 1) / p * 4.0 * n);
}

TEST(MpiCommObserver, CompletionSeenByTestIsReportedOnceWithoutAWait) {
  auto w = test_world();
  Recorder rec;
  w->set_observer(&rec);
  std::vector<float> x = filled(w->rank(), 7);
  CommHandle h = w->all_reduce_sum(x.data(), 7);
  while (!h.test()) std::this_thread::yield();
  h.wait();  // already complete: nothing more to report
  EXPECT_EQ(rec.waits, 0);
  EXPECT_EQ(rec.completes, 1);
  w->barrier();  // blocking: one wait
  EXPECT_EQ(rec.waits, 1);
  EXPECT_EQ(rec.completes, 2);
  w->set_observer(nullptr);
}

}  // namespace
}  // namespace gt::test
