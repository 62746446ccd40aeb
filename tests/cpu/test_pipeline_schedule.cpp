// Pipeline schedules as data (trainer/parallelize/pipeline_schedule.hpp)
// run through the simulator (pipeline_simulator.hpp): every schedule for
// pp in {2, 4} and micro-batches in {1, pp, 2 pp + 1} finishes without a
// deadlock, forwards and backwards every (micro-batch, stage) once, and
// idles exactly the bubble it claims; 1f1b holds at most pp micro-batches
// of activations; the simulator catches a deadlock and an out-of-order
// message; impossible specs are errors naming the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "test_util.hpp"
#include "trainer/parallelize/pipeline_simulator.hpp"

namespace gt {
namespace {

std::string error_of(const PipeScheduleSpec& s) {
  return test::error_message([&] { build_pipeline_schedule(s); });
}

TEST(PipelineSchedule, EveryScheduleRunsAndIdlesTheBubbleItClaims) {
  for (PipeSchedule kind :
       {PipeSchedule::gpipe, PipeSchedule::one_f_one_b, PipeSchedule::interleaved_1f1b})
    for (int p : {2, 4})
      for (int m : {1, p, 2 * p, 2 * p + 1}) {
        PipeScheduleSpec spec;
        spec.kind = kind;
        spec.stages = p;
        spec.micro_batches = m;
        spec.virtual_stages = kind == PipeSchedule::interleaved_1f1b ? 2 : 1;
        const std::string at =
            std::string(to_string(kind)) + " pp=" + std::to_string(p) + " m=" + std::to_string(m);
        if (kind == PipeSchedule::interleaved_1f1b && m % p != 0) {
          EXPECT_NE(error_of(spec).find("not a multiple of it"), std::string::npos) << at;
          continue;
        }
        const auto lists = build_pipeline_schedule(spec);
        ASSERT_EQ(lists.size(), static_cast<size_t>(p)) << at;
        const PipeSimulation sim = simulate_pipeline(lists, spec.virtual_stages);
        ASSERT_EQ(sim.problem, "") << at;
        // Every rank computes m micro-batches' forward (1) and backward (2).
        for (double b : sim.busy) EXPECT_DOUBLE_EQ(b, 3.0 * m) << at;
        EXPECT_NEAR(sim.bubble_fraction(), pipeline_bubble_fraction(spec), 1e-12) << at;
        if (kind == PipeSchedule::gpipe) {
          EXPECT_EQ(sim.max_in_flight[0], m) << at;
        }
        if (kind == PipeSchedule::one_f_one_b) {
          EXPECT_EQ(sim.max_in_flight[0], std::min(p, m)) << at;  // 1f1b's memory bound
        }
      }
}

TEST(PipelineSchedule, InterleavingShrinksTheBubbleByTheVirtualStages) {
  PipeScheduleSpec spec;
  spec.kind = PipeSchedule::interleaved_1f1b;
  spec.stages = 4;
  spec.micro_batches = 8;
  for (int v : {1, 2, 3, 4}) {
    spec.virtual_stages = v;
    const PipeSimulation sim = simulate_pipeline(build_pipeline_schedule(spec), v);
    ASSERT_EQ(sim.problem, "") << "v=" << v;
    EXPECT_NEAR(sim.bubble_fraction(), (3.0 / v) / (8 + 3.0 / v), 1e-12) << "v=" << v;
  }
}

TEST(PipelineSchedule, LatencyOnlyLengthensTheStep) {
  PipeScheduleSpec spec;
  spec.stages = 4;
  spec.micro_batches = 8;
  const auto lists = build_pipeline_schedule(spec);
  const PipeSimulation free = simulate_pipeline(lists, 1),
                       slow = simulate_pipeline(lists, 1, {1, 2, 0.5});
  ASSERT_EQ(slow.problem, "");
  EXPECT_GT(slow.makespan, free.makespan);
  EXPECT_GT(slow.bubble_fraction(), free.bubble_fraction());
}

TEST(PipelineSimulator, CatchesADeadlockAndAnOutOfOrderMessage) {
  PipeScheduleSpec spec;
  spec.stages = 2;
  spec.micro_batches = 2;
  auto lists = build_pipeline_schedule(spec);
  // Rank 0 waits for micro-batch 0's gradient before sending its activations.
  auto bad = lists;
  auto& r0 = bad[0];
  const auto recv = std::find_if(r0.begin(), r0.end(),
                                 [](const PipeAction& a) { return a.op == PipeOp::recv_grad; });
  ASSERT_NE(recv, r0.end());
  const PipeAction moved = *recv;
  r0.erase(recv);
  r0.insert(r0.begin(), moved);
  EXPECT_NE(simulate_pipeline(bad, 1).problem.find("deadlock: rank 0 at recv_grad 0@s0 from 1"),
            std::string::npos)
      << simulate_pipeline(bad, 1).problem;
  // Rank 1 receives micro-batch 1's activations before micro-batch 0's.
  auto swapped = lists;
  auto& r1 = swapped[1];
  for (auto& a : r1)
    if (a.op == PipeOp::recv_act || a.op == PipeOp::forward) a.micro = 1 - a.micro;
  EXPECT_NE(simulate_pipeline(swapped, 1).problem.find("sent out of order"), std::string::npos);
  // Each kind in order, but an activation and a gradient between the same
  // two ranks in opposite orders: fine with tags, wrong for NCCL's
  // untagged matching. Rank 0 of 2 chunks each (interleaved, m = 2) sends
  // rank 1 an activation (stage 0 -> 1) and a gradient (stage 2 -> 1);
  // rank 1 receiving them the other way round is caught.
  PipeScheduleSpec inter;
  inter.kind = PipeSchedule::interleaved_1f1b;
  inter.stages = 2;
  inter.micro_batches = 2;
  inter.virtual_stages = 2;
  auto crossed = build_pipeline_schedule(inter);
  ASSERT_EQ(simulate_pipeline(crossed, 2).problem, "");
  auto& r1x = crossed[1];
  auto first_recv = [&](PipeOp op) {
    return std::find_if(r1x.begin(), r1x.end(),
                        [&](const PipeAction& a) { return a.op == op && a.peer == 0; });
  };
  // Rank 1's first receive of each kind from rank 0, exchanged: each
  // channel's order is unchanged only if each kind has one message there
  // before the other; the pair order is broken either way.
  const auto act = first_recv(PipeOp::recv_act), grad = first_recv(PipeOp::recv_grad);
  ASSERT_NE(act, r1x.end());
  ASSERT_NE(grad, r1x.end());
  const std::string got = check_pipeline_pair_order(crossed);
  EXPECT_EQ(got, "") << got;
  std::iter_swap(act, grad);
  EXPECT_NE(check_pipeline_pair_order(crossed).find("untagged point-to-point"), std::string::npos)
      << check_pipeline_pair_order(crossed);
}

TEST(PipelineSchedule, ImpossibleSpecsNameTheNumbers) {
  PipeScheduleSpec s;
  s.stages = 0;
  EXPECT_NE(error_of(s).find("parallel.pp=0"), std::string::npos);
  s.stages = 2;
  s.virtual_stages = 2;  // on 1f1b
  EXPECT_NE(error_of(s).find("applies to interleaved_1f1b only"), std::string::npos);
  s.kind = PipeSchedule::interleaved_1f1b;
  s.micro_batches = 3;
  EXPECT_NE(error_of(s).find("got 3 micro-batches per step"), std::string::npos);
}

}  // namespace
}  // namespace gt
