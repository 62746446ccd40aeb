// The one progress line of every long job: the trainer's checkpoint saves
// and loads and its export here, the Python tools' (prepare_data, sweep,
// gpu_check) in scripts/progress.py; both are pinned to the same cases in
// tests/progress_format.json.
//
//   <job>: <done>/<total> <unit> (<pct>%) | <field> | ... | <rate> <unit>/s | elapsed H:MM:SS | ETA H:MM:SS
//
// Amounts in MB are bytes shown in millions with one decimal; any other unit
// is a count shown whole. The rate is over the whole elapsed time; the ETA
// is what is left at that rate, "?" before anything is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gt {

// H:MM:SS of a non-negative duration, rounded to the second.
std::string clock_text(double seconds);

// The line for `done` of `total` `unit`s after `elapsed_s` seconds.
std::string progress_line(const std::string& job, double done, double total,
                          const std::string& unit, double elapsed_s,
                          const std::vector<std::string>& fields = {});

// Reports one job's progress: nothing for a job that ends within `quiet_s`
// (2 s), then on a terminal a live line on stderr rewritten every half
// second, in a log (stderr not a terminal) an info line every 10 s, and a
// last line at finish() once any went out. Not thread-safe: one job, one
// reporting thread.
class ProgressMeter {
 public:
  ProgressMeter(std::string job, double total, std::string unit, double quiet_s = 2.0);
  ~ProgressMeter();
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  void update(double done, const std::vector<std::string>& fields = {});
  // The last line, at the last update's `done`, when any line went out.
  void finish(const std::vector<std::string>& fields = {});

 private:
  using Clock = std::chrono::steady_clock;
  double seconds_since(Clock::time_point t) const;
  void emit(double done, const std::vector<std::string>& fields);

  std::string job_, unit_;
  double total_;
  double done_ = 0;  // the last update's
  double quiet_s_, every_s_;
  bool tty_;
  bool shown_ = false;
  bool live_open_ = false;  // a live line without its newline yet
  Clock::time_point start_, last_;
};

// Called with the bytes done of a total as a long read or write goes
// (safetensors writes, checkpoint loads, exports); empty: not called.
using ByteProgress = std::function<void(uint64_t done, uint64_t total)>;

// A ProgressMeter in MB for a job whose total its ByteProgress first hears
// (a checkpoint's or an export's bytes): the meter starts at the first call
// and finish() ends it. A line that does not report (every rank but one)
// hands out a callback that does nothing.
class ByteProgressLine {
 public:
  ByteProgressLine(std::string job, std::vector<std::string> fields = {}, bool reports = true);
  // Valid while this object lives.
  ByteProgress callback();
  void finish();

 private:
  std::string job_;
  std::vector<std::string> fields_;
  bool reports_;
  std::unique_ptr<ProgressMeter> meter_;
};

}  // namespace gt
