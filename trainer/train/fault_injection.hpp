// Fault injection for the reliability tests: a rank that dies, hangs, sees a
// NaN or dies half-way through a checkpoint, at a chosen step. Off unless the
// environment variable TRAINER_FAULT is set; parsed once at start-up, where a
// bad spec is an error like any bad input (so a typo never silently tests
// nothing).
//
//   TRAINER_FAULT=FAULT[,FAULT...]
//   FAULT = kill:rank=R:step=S          rank R SIGKILLs itself at the start of step S
//         | hang:rank=R:step=S          rank R stops forever at the start of step S
//                                       (sleeps: its peers' collectives time out)
//         | nan:rank=R:step=S[:count=N] rank R's gradients are non-finite in steps
//                                       S..S+N-1 (its loss scale is +inf, so backward
//                                       yields inf and NaN, as an overflow would)
//         | kill_in_save:rank=R:step=S:phase=shard|manifest
//                                       rank R SIGKILLs itself while checkpoint step_S
//                                       is being saved: after writing its shard, or
//                                       (rank 0 only) after writing the manifest but
//                                       before the commit rename
//
// Steps are 0-based, as in metrics.jsonl ("step": 12 is the 13th step); a
// checkpoint's step is its directory's number (the steps completed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gt {

enum class FaultKind { kill, hang, nan, kill_in_save };

struct Fault {
  FaultKind kind = FaultKind::kill;
  int rank = 0;
  int64_t step = 0;
  int64_t count = 1;   // nan: consecutive steps
  std::string phase;   // kill_in_save: "shard" or "manifest"
};

class FaultInjector {
 public:
  FaultInjector() = default;  // no faults

  // Throws gt::Error "TRAINER_FAULT (environment): expected ..., got '...'".
  static FaultInjector parse(const std::string& spec);
  // TRAINER_FAULT, or no faults when it is unset or empty.
  static FaultInjector from_env();

  bool empty() const { return faults_.empty(); }
  const std::vector<Fault>& faults() const { return faults_; }

  // At the start of every step: kill or hang this process when a fault says so.
  void at_step_start(int rank, int64_t step) const;
  // True when this rank's gradients at `step` must come out non-finite.
  bool poison_gradients(int rank, int64_t step) const;
  // From inside save_checkpoint: kills this process at the named phase
  // ("shard", "manifest") of checkpoint `step` when a fault says so.
  void in_save(int rank, int64_t step, const char* phase) const;

 private:
  std::vector<Fault> faults_;
};

}  // namespace gt
