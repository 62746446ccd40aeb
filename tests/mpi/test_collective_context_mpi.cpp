// Collective deadlines that say where the job was (CollectiveContext: step and
// phase, shared with the communicators split from the one it was set on) and
// which peer a point-to-point op waited for; and the once-per-step stop
// agreement: a signal on one rank stops every rank after the same step.
// The abort_on_deadline path (MPI_Abort) ends the job, so it is exercised by
// tests/reliability/reliability.py --scenario hang, not here.
#include <csignal>
#include <memory>
#include <string>

#include "mpi_test_util.hpp"
#include "parallel/collective_context.hpp"
#include "trainer/train/stop_signal.hpp"

namespace gt {
namespace {

using test::error_message;
using test::test_world;

TEST(CollectiveContext, DeadlineMessageNamesStepPhaseAndPeer) {
  auto w = test_world("ctx");
  auto ctx = std::make_shared<CollectiveContext>();
  ctx->step = 12;
  ctx->phase = "train";
  ScopedCollectiveContext scope(w.get(), ctx);
  auto sub = w->split(0, w->rank(), "ctx-sub");  // inherits the context
  EXPECT_EQ(sub->context(), w->context());

  // A receive from the next rank that nobody sends yet.
  const int peer = (w->rank() + 1) % w->size();
  float in = 0.f, out = 5.f;
  CommHandle rh = sub->recv(&in, 1, peer, /*tag=*/21);
  const std::string msg = error_message([&] { rh.wait_for(0.2); });
  EXPECT_NE(msg.find("step 12 (train): recv from " + std::to_string(peer) + " (world rank " +
                     std::to_string(peer) + ", tag 21)"),
            std::string::npos)
      << msg;
  ctx->phase = "checkpoint";  // read when the deadline passes, not when the op started
  const std::string again = error_message([&] { rh.wait_for(0.2); });
  EXPECT_NE(again.find("step 12 (checkpoint): "), std::string::npos) << again;

  w->barrier();  // nobody sends before every rank has seen both deadlines pass
  const int from = (w->rank() + w->size() - 1) % w->size();
  CommHandle sh = sub->send(&out, 1, from, 21);
  rh.wait();
  sh.wait();
  EXPECT_EQ(in, 5.f);
  w->barrier();
}

TEST(CollectiveContext, ClearedWhenTheScopeEnds) {
  auto w = test_world("ctx-scope");
  {
    ScopedCollectiveContext scope(w.get(), std::make_shared<CollectiveContext>());
    EXPECT_NE(w->context(), nullptr);
  }
  EXPECT_EQ(w->context(), nullptr);
}

TEST(StopAgreement, ASignalOnTheLastRankStopsEveryRank) {
  auto w = test_world("stop");
  StopSignal stop;
  StopSignal::reset();
  EXPECT_FALSE(agree_to_stop(*w));
  if (w->rank() == w->size() - 1) std::raise(SIGTERM);
  EXPECT_TRUE(agree_to_stop(*w));  // on every rank, at the same call
  StopSignal::reset();
  EXPECT_FALSE(agree_to_stop(*w));
}

}  // namespace
}  // namespace gt
