// Runs every pipeline rank's action list (pipeline_schedule.hpp) against the
// others, as the executor would, on a clock: compute takes its cost, a send
// never blocks (its message is ready `latency` later), a receive waits for
// its message. Activations and gradients travel on separate channels per
// (sender, receiver), each first in first out, as two communicators would
// carry them: a receive must meet exactly the message it names at the head
// of its channel (NCCL matches in issue order; a mismatch would deliver the
// wrong tensor). And since NCCL has no tags, the two kinds together must
// also come in one order per direction between two ranks: every sender's
// sends to a rank in the order of that rank's receives from it.
//
// It proves a schedule free of deadlock (every rank reaches the end of its
// list), checks each (micro-batch, stage) is forwarded once and backwarded
// once after it, and measures the makespan, each rank's idle share (the
// bubble) and how many micro-batches' activations a rank holds at most.
#pragma once

#include <string>
#include <vector>

#include "trainer/parallelize/pipeline_schedule.hpp"

namespace gt {

struct PipeCosts {
  double forward = 1.0;   // one micro-batch through one rank's whole share of the model
  double backward = 2.0;  // its backward
  double latency = 0.0;   // a message's time from send to receivable
};

struct PipeSimulation {
  std::string problem;  // "" = ran to the end; else the deadlock or the broken rule
  double makespan = 0;
  std::vector<double> busy;        // per rank: compute time
  std::vector<int> max_in_flight;  // per rank: micro-batch chunks forwarded, not yet backwarded
  // Idle share of the step on the most idle rank.
  double bubble_fraction() const;
};

// Between every two ranks, in each direction, whether the sends (either
// kind) come in the order of the receives: "" when they do, else the first
// mismatch. simulate_pipeline checks it too.
std::string check_pipeline_pair_order(const std::vector<std::vector<PipeAction>>& lists);

// `virtual_stages`: v of the schedule (a chunk's compute costs 1/v of the costs).
PipeSimulation simulate_pipeline(const std::vector<std::vector<PipeAction>>& lists,
                                 int virtual_stages, const PipeCosts& costs = {});

}  // namespace gt
