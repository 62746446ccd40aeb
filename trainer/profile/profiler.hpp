// Profiler: the recorder behind `profile.*`. It is told when a step begins
// and ends, decides from the schedule whether the step is profiled, and while
// it is, collects every op (through the OpObserver hook of the backend's Ops)
// and every collective (through the CommObserver hook of the mesh's
// communicators):
//   * aggregate statistics per op (class + shape) and per collective (axis +
//     kind): the input of the roofline report (roofline.hpp);
//   * Chrome trace events, when tracing is on (see trace_json()).
// Outside profiled steps it records nothing, except the one figure metrics
// want every step: the time this rank was blocked waiting for communication
// (comm_exposed_ms), two clock reads per wait.
//
// One Profiler per rank, owned by the training run and passed by reference to
// what records into it; nothing global. Not thread-safe: ops and collectives
// are issued from the training thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/op_observer.hpp"
#include "kernels/op_timer.hpp"
#include "parallel/comm_observer.hpp"
#include "trainer/profile/op_costs.hpp"

namespace gt {

// Which steps are profiled: the last `steps` of every `every` steps (every=10,
// steps=2: steps 8, 9, 18, 19, ...), so the first step's one-time costs
// (first touch of every buffer) are only profiled when every == steps.
struct ProfileSchedule {
  int every = 0;  // 0 = never
  int steps = 1;  // 1 <= steps <= every
  bool profiled(int64_t step) const {
    return every > 0 && step >= 0 && step % every >= every - steps;
  }
  std::string describe() const;  // "steps 8-9 of every 10"
};

// One op (class + name) over all profiled steps.
struct OpStat {
  OpClass cls = OpClass::elementwise;
  std::string name;  // "matmul_forward M=1024 N=384 K=128", or "adamw_update"
  int64_t count = 0;
  double seconds = 0, flops = 0, bytes = 0;
};

// One kind of collective on one axis over all profiled steps.
struct CommStat {
  std::string axis;  // the communicator's name: dp, fsdp, tp, data, world
  CommKind kind = CommKind::all_reduce;
  int group_size = 1;
  int64_t count = 0;
  double bytes = 0;       // ring bytes this rank sent (Communicator::bytes_sent)
  double exposed_s = 0;   // blocked in wait()
  double inflight_s = 0;  // start to completion seen (upper bound on its duration)
};

struct ProfileStats {
  int64_t steps = 0;          // profiled steps
  double step_seconds = 0;    // their total wall time (begin_step to end_step)
  std::vector<OpStat> ops;    // in first-seen order
  std::vector<CommStat> comms;
  double total_flops(bool model_classes_only) const;
};

class Communicator;
class Ops;

class Profiler final : public CommObserver, public OpObserver {
 public:
  // timer: null = SteadyOpTimer (CPU). trace: keep Chrome trace events.
  Profiler(ProfileSchedule schedule, bool trace, int rank,
           std::unique_ptr<OpTimer> timer = nullptr);
  ~Profiler() override;  // detaches from every observed communicator and Ops
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  const ProfileSchedule& schedule() const { return schedule_; }
  bool tracing() const { return trace_; }
  int rank() const { return rank_; }

  // Reports every operation `comm` starts from now on to this profiler. The
  // communicator must outlive the profiler (the destructor detaches).
  void observe(Communicator& comm);
  // Reports every op `ops` runs from now on to this profiler (recorded in
  // profiled steps only: one branch otherwise). `ops` must outlive the
  // profiler (the destructor detaches).
  void observe(Ops& ops);
  // Time origin of the trace; every rank sets it right after a barrier, so
  // the per-rank files share one time axis (to the barrier's skew).
  void set_epoch(Clock::time_point t) { epoch_ = t; }

  void begin_step(int64_t step);
  struct StepResult {
    bool profiled = false;
    double seconds = 0;         // begin_step to end_step
    double comm_exposed_s = 0;  // blocked in communication during the step
  };
  StepResult end_step();

  bool recording() const { return recording_; }

  // OpObserver: outside profiled steps on_begin returns 0 at once. In one,
  // the op is described (op_descriptions.hpp: shape, FLOPs, bytes) before
  // its timed range opens, so the description is not timed.
  uint64_t on_begin(const OpCall& call) override;
  void on_end(uint64_t token, const OpCall& call) override;

  // CommObserver.
  uint64_t on_start(const CommOp& op, Clock::time_point t) override;
  void on_wait(uint64_t token, const CommOp& op, Clock::time_point begin,
               Clock::time_point end) override;
  void on_complete(uint64_t token, const CommOp& op, Clock::time_point t) override;

  const ProfileStats& stats() const { return stats_; }

  // A block of a pipeline schedule ("F3@s1": micro-batch 3's forward on
  // stage 1, host time) on its own "pipeline schedule" track, in traced
  // profiled steps only: Perfetto then shows each stage's schedule.
  void record_block(const std::string& name, Clock::time_point begin, Clock::time_point end);

  // Chrome trace event format (Perfetto, chrome://tracing): pid = rank; tid 1
  // "compute" (a "step N" span enclosing one span per op, args: shape, FLOPs,
  // bytes), tid 2.. "comm <axis>" (one span per exposed wait, args: bytes,
  // elements) plus an async "in flight" span per collective from its start to
  // its completion. Per-rank files merge by concatenating traceEvents.
  nlohmann::json trace_json() const;
  void write_trace(const std::string& path) const;

 private:
  struct PendingOpRecord {
    size_t index;
    OpClass cls;
    const char* op;
    std::string shape;
    OpCost cost;
  };
  struct InFlight {
    Clock::time_point start;
    CommOp op;
  };
  struct TraceEvent {
    std::string name;
    const char* cat;
    char ph;  // 'X' complete, 'b'/'e' async begin/end
    int tid;
    double ts_us, dur_us;
    uint64_t id;
    double flops, bytes;  // < 0: not applicable
    std::string detail;   // shape or element count
  };

  double us(Clock::time_point t) const;
  int tid_of(const Communicator* comm);
  CommStat& comm_stat(const CommOp& op);

  ProfileSchedule schedule_;
  bool trace_;
  int rank_;
  std::unique_ptr<OpTimer> timer_;
  std::vector<Communicator*> observed_;
  std::vector<Ops*> observed_ops_;
  Clock::time_point epoch_;

  bool recording_ = false;
  int64_t step_ = -1;
  Clock::time_point step_start_;
  double step_exposed_s_ = 0;
  std::vector<PendingOpRecord> pending_ops_;
  uint64_t next_token_ = 1;
  std::unordered_map<uint64_t, InFlight> inflight_;

  ProfileStats stats_;
  std::map<std::string, size_t> op_index_, comm_index_;
  std::map<std::string, int> comm_tids_;  // axis name -> tid
  std::vector<TraceEvent> events_;
  bool has_pipeline_blocks_ = false;
};

}  // namespace gt
