// OpTimer: how the profiler times one op, and the hook where a GPU backend
// puts its CUDA events and NVTX ranges.
//
// The CPU backend's ops are synchronous (BLAS and OpenMP loops have finished
// when the call returns), so SteadyOpTimer reads the steady clock around the
// call. A CUDA backend's ops only enqueue work: its timer records an event
// pair on the op's stream in begin()/end(), pushes and pops an NVTX range with
// the same name (so Nsight Systems shows the names the trace and the roofline
// table use), and resolves the event times in collect(), which the profiler
// calls once at the end of a profiled step: no synchronisation inside a step.
// Ops are timed (and NVTX ranges pushed) in profiled steps only; to see every
// step under Nsight, profile every step (profile.every=1, profile.steps=1).
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

namespace gt {

class OpTimer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Span {
    Clock::time_point start;  // on the host's steady clock (a GPU timer maps its events to it)
    double seconds = 0;
  };
  virtual ~OpTimer() = default;
  // Opens the timed range of one op named `name` (a string literal) and
  // returns its index: 0, 1, ... since the last collect().
  virtual size_t begin(const char* name) = 0;
  // Closes range `index`. Ranges do not nest (ops do not call ops).
  virtual void end(size_t index) = 0;
  // Every range since the last collect(), in begin() order; then starts over.
  virtual std::vector<Span> collect() = 0;
};

class SteadyOpTimer final : public OpTimer {
 public:
  size_t begin(const char*) override {
    spans_.push_back({Clock::now(), 0.0});
    return spans_.size() - 1;
  }
  void end(size_t index) override {
    Span& s = spans_[index];
    s.seconds = std::chrono::duration<double>(Clock::now() - s.start).count();
  }
  std::vector<Span> collect() override {
    std::vector<Span> out;
    out.swap(spans_);
    return out;
  }

 private:
  std::vector<Span> spans_;
};

}  // namespace gt
