// CollectiveContext: what the job is doing while its collectives run (the
// training step, the phase of it), so that a collective that misses its
// deadline can say "step 12 (train): all_reduce_sum of 4096 floats on 'dp'
// ... did not complete" instead of only naming the op.
//
// Ownership: the trainer owns it (a shared_ptr it writes to between steps)
// and hands a read-only share to the job's communicators with
// MpiCommunicator::set_context; communicators split from one share it. It is
// not global: a test or a second job in the same process has its own.
//
// abort_on_deadline: when true, a wait that passes its deadline does not
// throw; it prints "[rank r on host] fatal: <where>: <op> did not complete
// ..." and ends the whole job (MPI_Abort). A training job wants that: by then
// a peer is hung or dead, and unwinding would only wait on the other
// collectives still in flight. Unit tests leave it off and catch the error.
#pragma once

#include <cstdint>
#include <string>

namespace gt {

struct CollectiveContext {
  int64_t step = -1;              // optimizer step in progress (0-based); -1: none
  std::string phase = "start-up";  // "start-up", "train", "eval", "checkpoint", ...
  bool abort_on_deadline = false;

  // "step 12 (train)", or just the phase outside a step ("start-up").
  std::string where() const {
    if (step < 0) return phase;
    return "step " + std::to_string(step) + " (" + phase + ")";
  }
};

}  // namespace gt
