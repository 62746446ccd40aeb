// CommObserver: what a profiler sees of a Communicator's traffic. The
// Communicator base class calls it from its non-virtual wrappers, so every
// backend is observed the same way and no backend code knows about it.
//
// What is measurable on the host, and therefore what the callbacks report:
//   on_start     the operation was launched (just before the backend call);
//   on_wait      this thread was blocked in CommHandle::wait() (or in a
//                blocking call: all_reduce_f64/i64, barrier) from `begin` to
//                `end`: the EXPOSED communication time, the part not hidden
//                behind computation;
//   on_complete  the operation was first seen complete (by wait() or test()).
// [start, complete] is an upper bound on how long the operation was in
// flight; the overlapped part is that minus the exposed part, but when a
// non-blocking MPI collective actually progresses (in the background or only
// inside MPI calls) is not visible to the host, so only the exposed time is
// an exact figure. A GPU backend (NCCL on a stream) blocks no host thread: its
// exposed time has to come from stream events instead (left to that backend).
//
// Invariants: callbacks run on the thread that uses the communicator; on_start
// returns a token (0 = not interested) that the matching on_wait/on_complete
// receive; on_complete is called at most once per token. The observer is not
// owned: it must be detached (set_observer(nullptr)) before it is destroyed.
#pragma once

#include <chrono>
#include <cstdint>

namespace gt {

class Communicator;

enum class CommKind {
  all_reduce,      // all_reduce_sum, all_reduce_max
  reduce_scatter,
  all_gather,
  broadcast,
  send,
  recv,
  scalar_reduce,   // all_reduce_f64 / all_reduce_i64 (blocking)
  barrier,         // blocking
  all_to_all,      // all_to_all_v (expert parallelism's token exchange)
};
const char* comm_kind_name(CommKind k);  // "all_reduce", "reduce_scatter", ...

// One observed operation.
struct CommOp {
  const Communicator* comm = nullptr;  // comm->name() is the mesh axis ("dp", "tp", ...)
  CommKind kind = CommKind::all_reduce;
  int64_t elems = 0;       // payload elements as passed to the call
  double ring_bytes = 0;   // what the call added to bytes_sent() (ring volume)
};

class CommObserver {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~CommObserver() = default;
  virtual uint64_t on_start(const CommOp& op, Clock::time_point t) = 0;
  virtual void on_wait(uint64_t token, const CommOp& op, Clock::time_point begin,
                       Clock::time_point end) = 0;
  virtual void on_complete(uint64_t token, const CommOp& op, Clock::time_point t) = 0;
};

}  // namespace gt
