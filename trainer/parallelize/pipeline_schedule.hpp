// Pipeline-parallel schedules as data: for each pipeline rank, the ordered
// list of what it does in one optimizer step (forward or backward of a
// micro-batch on one of its model chunks, and the sends and receives of
// activations and their gradients between neighbouring stages). One executor
// runs any list; simulate_pipeline() (pipeline_simulator.hpp) runs them all
// against each other to prove a schedule free of deadlock and measure its
// bubble.
//
// Stages: the model is cut into S = p * v consecutive stages (p pipeline
// ranks, v virtual stages per rank); stage s runs on rank s % p as its
// chunk s / p (Megatron-LM's interleaving; v = 1: rank r is stage r).
// Micro-batch j's forward on stage s needs stage s-1's activations (a recv
// unless s = 0); its backward needs stage s+1's input gradient (a recv
// unless s = S-1) and its own forward's activations.
//
// Schedules (parallel.pp_schedule):
//   gpipe              every forward, then every backward (m micro-batches
//                      of activations held at once);
//   1f1b               PipeDream-Flush: p - r - 1 warm-up forwards on rank
//                      r, then one forward and one backward in turn, then
//                      the remaining backwards (at most p micro-batches held);
//   interleaved_1f1b   1f1b over v chunks per rank (Megatron-LM): forwards
//                      in groups of p micro-batches per chunk; the bubble
//                      shrinks by v. Needs m a multiple of p.
// Bubble, with equal stages and free communication: (p-1)/(m+p-1) of the
// step for gpipe and 1f1b, (p-1)/v / (m + (p-1)/v) interleaved.
//
// Invariants of every list: each (micro-batch, stage) of the rank is
// forwarded once and backwarded once, forward first; a recv comes right
// before the compute that needs it, a send right after the compute that
// produced it; message order between two ranks is the same on both sides.
#pragma once

#include <string>
#include <vector>

#include "trainer/config/config.hpp"  // PipeSchedule

namespace gt {

enum class PipeOp {
  forward,    // run micro-batch `micro` through chunk `chunk`
  backward,   // its backward
  send_act,   // activations of (micro, stage) to the next stage's rank
  recv_act,   // activations for (micro, stage) from the previous stage's rank
  send_grad,  // input gradient of (micro, stage) to the previous stage's rank
  recv_grad,  // output gradient for (micro, stage) from the next stage's rank
};
const char* to_string(PipeOp op);

struct PipeAction {
  PipeOp op = PipeOp::forward;
  int micro = 0;  // micro-batch of the step
  int stage = 0;  // global stage s the action belongs to (compute: its own)
  int peer = -1;  // sends and receives: the other pipeline rank
  // "F3@s2", "recv_act 3@s2 from 1": for messages and tests.
  std::string str() const;
};

struct PipeScheduleSpec {
  PipeSchedule kind = PipeSchedule::one_f_one_b;
  int stages = 1;          // p, pipeline ranks
  int micro_batches = 1;   // m per optimizer step
  int virtual_stages = 1;  // v (interleaved_1f1b only; 1 otherwise)
};

// The chunk of rank `rank` that global stage `stage` is (stage / p), and the rank.
inline int stage_rank(int stage, int p) { return stage % p; }
inline int stage_chunk(int stage, int p) { return stage / p; }

// One list per pipeline rank. Throws gt::Error naming the numbers when the
// spec cannot be scheduled (p, m or v < 1; v > 1 outside interleaved_1f1b;
// interleaved with m not a multiple of p).
std::vector<std::vector<PipeAction>> build_pipeline_schedule(const PipeScheduleSpec& spec);

// The bubble the schedule claims (see above): idle fraction of a step.
double pipeline_bubble_fraction(const PipeScheduleSpec& spec);

}  // namespace gt
