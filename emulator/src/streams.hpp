// Streams, events and the deferred scheduler of the emulated device.
//
// Nothing runs when it is enqueued. Every stream keeps a queue; work runs
// only when the host synchronises (a sync call, a blocking copy, an event or
// stream query, cudaFree, ...), and then in an order that respects exactly
// the declared dependencies: each stream's own order, cudaStreamWaitEvent,
// and the legacy default stream's implicit ordering with blocking streams.
// Among the streams that may run next, GT_EMU_STREAM_ORDER picks: `issue`
// (the oldest work first, roughly what a GPU does), `reverse` (the newest
// first) or `random`. The scheduler also stops as soon as what the host
// waits for is done, so work nothing waited for stays queued: a consumer
// that forgot its cudaStreamWaitEvent reads data its producer has not
// written yet, and the result is wrong in at least one legal order.
//
// Work of other processes (emulated NCCL) joins as AsyncWork: started when it
// reaches the head of its stream, then polled until complete; a blocking
// synchronisation waits for it (and reports a hang after
// GT_EMU_HANG_TIMEOUT_S), a query returns "not ready".
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

// The runtime's opaque handle types, defined here (the headers only declare them).
struct CUevent_st {
  unsigned flags = 0;
  int device = 0;
  uint64_t recorded = 0;   // generation of the latest cudaEventRecord
  uint64_t completed = 0;  // generation that has executed
  std::chrono::steady_clock::time_point time{};
  bool timed = false;      // `time` holds the completed record's time
};

namespace gt::emu {

class AsyncWork {
 public:
  virtual ~AsyncWork() = default;
  virtual void start() = 0;
  // True once complete (and its results are in device memory).
  virtual bool poll() = 0;
  virtual std::string describe() const = 0;
};

struct Op {
  enum class Kind { task, record, wait, async };
  Kind kind = Kind::task;
  uint64_t seq = 0;
  std::string what;
  std::function<void()> task;
  std::shared_ptr<CUevent_st> event;
  uint64_t generation = 0;
  std::unique_ptr<AsyncWork> work;
  bool started = false;
};

}  // namespace gt::emu

struct CUstream_st {
  int device = 0;
  unsigned flags = 0;  // cudaStreamNonBlocking or 0 (synchronises with the legacy stream)
  bool legacy = false;
  bool destroyed = false;  // by cudaStreamDestroy; freed once its queue drains
  uint64_t id = 0;
  std::deque<std::unique_ptr<gt::emu::Op>> queue;
};

namespace gt::emu {

class StreamScheduler {
 public:
  StreamScheduler();
  ~StreamScheduler();

  CUstream_st* create_stream(int device, unsigned flags);
  // 0, cudaStreamLegacy and cudaStreamPerThread name the device's legacy
  // stream; anything else must be a live stream (else nullptr).
  CUstream_st* resolve(cudaStream_t s, int current_device);
  // Destroyed streams keep running what they hold, then go.
  bool destroy_stream(cudaStream_t s);

  std::shared_ptr<CUevent_st> create_event(int device, unsigned flags);
  std::shared_ptr<CUevent_st> find_event(cudaEvent_t e) const;
  bool destroy_event(cudaEvent_t e);

  void enqueue_task(CUstream_st* s, std::string what, std::function<void()> task);
  void enqueue_record(CUstream_st* s, const std::shared_ptr<CUevent_st>& e);
  void enqueue_wait(CUstream_st* s, const std::shared_ptr<CUevent_st>& e);
  void enqueue_async(CUstream_st* s, std::unique_ptr<AsyncWork> work);

  enum class Mode { block, poll };
  // Runs queued work until done() holds. Returns false in poll mode when only
  // other ranks' progress could help, or after a device fault.
  bool run_until(const std::function<bool()>& done, Mode mode);
  bool stream_idle(const CUstream_st* s) const { return s->queue.empty(); }
  bool all_idle() const;

  // Throws away every queued op (after a device fault, or cudaDeviceReset).
  void drop_all();
  // Opens/closes device memory around execution (set by the emulator).
  std::function<void(bool)> set_device_phase;

 private:
  CUstream_st* legacy_stream(int device);
  void add_implicit_dependencies(CUstream_st* s);
  bool executable(const Op& op) const;
  CUstream_st* pick(const std::vector<CUstream_st*>& candidates);
  void execute_head(CUstream_st* s);
  void collect_destroyed();

  std::vector<std::unique_ptr<CUstream_st>> streams_;
  std::map<int, CUstream_st*> legacy_;
  std::map<const CUevent_st*, std::shared_ptr<CUevent_st>> events_;
  uint64_t next_seq_ = 1, next_stream_id_ = 1;
  std::mt19937_64 rng_;
};

}  // namespace gt::emu
