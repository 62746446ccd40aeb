// The deferred stream scheduler (see streams.hpp).
#include "streams.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "config.hpp"
#include "diagnostics.hpp"

namespace gt::emu {

StreamScheduler::StreamScheduler() : rng_(config().stream_seed) {}
StreamScheduler::~StreamScheduler() = default;

CUstream_st* StreamScheduler::create_stream(int device, unsigned flags) {
  auto s = std::make_unique<CUstream_st>();
  s->device = device;
  s->flags = flags;
  s->id = next_stream_id_++;
  streams_.push_back(std::move(s));
  return streams_.back().get();
}

CUstream_st* StreamScheduler::legacy_stream(int device) {
  auto it = legacy_.find(device);
  if (it != legacy_.end()) return it->second;
  CUstream_st* s = create_stream(device, 0);
  s->legacy = true;
  legacy_[device] = s;
  return s;
}

CUstream_st* StreamScheduler::resolve(cudaStream_t s, int current_device) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
    return legacy_stream(current_device);
  for (auto& p : streams_)
    if (p.get() == s) return p->destroyed ? nullptr : p.get();
  return nullptr;
}

bool StreamScheduler::destroy_stream(cudaStream_t s) {
  for (auto& p : streams_) {
    if (p.get() == s && !p->legacy && !p->destroyed) {
      p->destroyed = true;
      collect_destroyed();
      return true;
    }
  }
  return false;
}

void StreamScheduler::collect_destroyed() {
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const std::unique_ptr<CUstream_st>& s) {
                                  return s->destroyed && s->queue.empty();
                                }),
                 streams_.end());
}

std::shared_ptr<CUevent_st> StreamScheduler::create_event(int device, unsigned flags) {
  auto e = std::make_shared<CUevent_st>();
  e->device = device;
  e->flags = flags;
  events_[e.get()] = e;
  return e;
}

std::shared_ptr<CUevent_st> StreamScheduler::find_event(cudaEvent_t e) const {
  auto it = events_.find(e);
  return it == events_.end() ? nullptr : it->second;
}

bool StreamScheduler::destroy_event(cudaEvent_t e) {
  // Queued records and waits keep their own reference.
  return events_.erase(e) == 1;
}

// The legacy default stream waits for all earlier work of blocking streams on
// its device, and blocking streams wait for earlier legacy work: expressed as
// internal event waits so the scheduler needs no special case.
void StreamScheduler::add_implicit_dependencies(CUstream_st* s) {
  if (s->flags & cudaStreamNonBlocking) return;
  auto order_after = [&](CUstream_st* before) {
    if (before == s || before->queue.empty()) return;
    auto e = std::make_shared<CUevent_st>();
    e->device = before->device;
    e->recorded = 1;
    auto rec = std::make_unique<Op>();
    rec->kind = Op::Kind::record;
    rec->seq = next_seq_++;
    rec->what = "implicit record (legacy stream ordering)";
    rec->event = e;
    rec->generation = 1;
    before->queue.push_back(std::move(rec));
    auto wait = std::make_unique<Op>();
    wait->kind = Op::Kind::wait;
    wait->seq = next_seq_++;
    wait->what = "implicit wait (legacy stream ordering)";
    wait->event = e;
    wait->generation = 1;
    s->queue.push_back(std::move(wait));
  };
  if (s->legacy) {
    for (auto& p : streams_)
      if (!p->legacy && p->device == s->device && !(p->flags & cudaStreamNonBlocking))
        order_after(p.get());
  } else {
    order_after(legacy_stream(s->device));
  }
}

void StreamScheduler::enqueue_task(CUstream_st* s, std::string what, std::function<void()> task) {
  add_implicit_dependencies(s);
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::task;
  op->seq = next_seq_++;
  op->what = std::move(what);
  op->task = std::move(task);
  s->queue.push_back(std::move(op));
}

void StreamScheduler::enqueue_record(CUstream_st* s, const std::shared_ptr<CUevent_st>& e) {
  add_implicit_dependencies(s);
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::record;
  op->seq = next_seq_++;
  op->what = "cudaEventRecord";
  op->event = e;
  op->generation = ++e->recorded;
  s->queue.push_back(std::move(op));
}

void StreamScheduler::enqueue_wait(CUstream_st* s, const std::shared_ptr<CUevent_st>& e) {
  if (e->recorded == 0) return;  // never recorded: nothing to wait for (as CUDA)
  add_implicit_dependencies(s);
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::wait;
  op->seq = next_seq_++;
  op->what = "cudaStreamWaitEvent";
  op->event = e;
  op->generation = e->recorded;  // the record current at the time of the call
  s->queue.push_back(std::move(op));
}

void StreamScheduler::enqueue_async(CUstream_st* s, std::unique_ptr<AsyncWork> work) {
  add_implicit_dependencies(s);
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::async;
  op->seq = next_seq_++;
  op->what = work->describe();
  op->work = std::move(work);
  s->queue.push_back(std::move(op));
}

bool StreamScheduler::all_idle() const {
  for (const auto& s : streams_)
    if (!s->queue.empty()) return false;
  return true;
}

void StreamScheduler::drop_all() {
  for (auto& s : streams_) s->queue.clear();
  collect_destroyed();
}

bool StreamScheduler::executable(const Op& op) const {
  switch (op.kind) {
    case Op::Kind::task:
    case Op::Kind::record: return true;
    case Op::Kind::wait: return op.event->completed >= op.generation;
    case Op::Kind::async: return !op.started;
  }
  return false;
}

CUstream_st* StreamScheduler::pick(const std::vector<CUstream_st*>& c) {
  switch (config().stream_order) {
    case StreamOrder::issue:
      return *std::min_element(c.begin(), c.end(), [](const CUstream_st* a, const CUstream_st* b) {
        return a->queue.front()->seq < b->queue.front()->seq;
      });
    case StreamOrder::reverse:
      return *std::max_element(c.begin(), c.end(), [](const CUstream_st* a, const CUstream_st* b) {
        return a->queue.front()->seq < b->queue.front()->seq;
      });
    case StreamOrder::random:
      return c[std::uniform_int_distribution<size_t>(0, c.size() - 1)(rng_)];
  }
  return c.front();
}

void StreamScheduler::execute_head(CUstream_st* s) {
  Op& op = *s->queue.front();
  switch (op.kind) {
    case Op::Kind::task: {
      // Pop first: the task may fault, and a faulted device drops everything.
      std::unique_ptr<Op> owned = std::move(s->queue.front());
      s->queue.pop_front();
      owned->task();
      return;
    }
    case Op::Kind::record:
      op.event->completed = std::max(op.event->completed, op.generation);
      if (!(op.event->flags & cudaEventDisableTiming)) {
        op.event->time = std::chrono::steady_clock::now();
        op.event->timed = true;
      }
      s->queue.pop_front();
      return;
    case Op::Kind::wait:
      s->queue.pop_front();
      return;
    case Op::Kind::async:
      op.started = true;
      op.work->start();
      return;
  }
}

bool StreamScheduler::run_until(const std::function<bool()>& done, Mode mode) {
  if (done()) return true;
  struct Phase {
    StreamScheduler* s;
    bool open = false;
    void on() {
      if (!open && s->set_device_phase) s->set_device_phase(true);
      open = true;
    }
    ~Phase() {
      if (open && s->set_device_phase) s->set_device_phase(false);
    }
  } phase{this};

  using clock = std::chrono::steady_clock;
  auto idle_since = clock::now();
  std::vector<CUstream_st*> candidates;
  while (!done()) {
    if (sticky_error() != cudaSuccess) {
      drop_all();
      return false;
    }
    bool progressed = false;
    // Work of other ranks: poll what has started.
    for (auto& s : streams_) {
      if (s->queue.empty()) continue;
      Op& head = *s->queue.front();
      if (head.kind == Op::Kind::async && head.started) {
        phase.on();
        if (head.work->poll()) {
          s->queue.pop_front();
          progressed = true;
        }
      }
    }
    if (progressed) {
      idle_since = clock::now();
      continue;
    }
    candidates.clear();
    for (auto& s : streams_)
      if (!s->queue.empty() && executable(*s->queue.front())) candidates.push_back(s.get());
    if (!candidates.empty()) {
      phase.on();
      execute_head(pick(candidates));
      idle_since = clock::now();
      continue;
    }
    // Nothing can run here: only another rank's progress can help.
    const AsyncWork* waiting = nullptr;
    for (auto& s : streams_)
      if (!s->queue.empty() && s->queue.front()->kind == Op::Kind::async)
        waiting = s->queue.front()->work.get();
    if (!waiting) {
      report("internal error", "the stream scheduler is stuck with nothing to run");
      return false;
    }
    if (mode == Mode::poll) return false;
    const double waited = std::chrono::duration<double>(clock::now() - idle_since).count();
    if (waited > config().hang_timeout_s) {
      report("fatal", "a blocking synchronisation has waited " + std::to_string(waited) +
                          " s for " + waiting->describe() +
                          " (another rank never joined it; GT_EMU_HANG_TIMEOUT_S)");
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  collect_destroyed();
  // A fault in the work that just ran: the device is lost, as on a GPU.
  if (sticky_error() != cudaSuccess) {
    drop_all();
    return false;
  }
  return true;
}

}  // namespace gt::emu
