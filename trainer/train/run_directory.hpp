// The run directory (log.dir) and the checkpoint directory as outputs: what
// is checked before anything is written, and what a running job holds.
//
// check_outputs (read-only, rank 0, during start-up validation):
//   - log.dir and checkpoint.dir are, or can be created as, writable
//     directories on a writable filesystem;
//   - the checkpoint filesystem has room for one checkpoint;
//   - log.dir is not held by a live job (its .lock names pid and host);
//   - the newest committed checkpoint already in checkpoint.dir was written
//     with the same run-defining config (model, data, optimizer, batch, seed):
//     a different run would otherwise resume from it or prune it.
// Nothing is created or modified, so a rejected start leaves both
// directories exactly as they were.
//
// open_run_directory (collective, after the ranks agreed the inputs are
// good): rank 0 creates log.dir and takes <log.dir>/.lock (created
// atomically, content "pid=<pid>\nhost=<host>\nstart=<process start time>");
// a stale lock (its process is gone from this host) is reported and taken
// over. Then every rank writes <log.dir>/pids/rank_<r>.pid ("<pid>\n<host>\n")
// so tests and operators can signal one rank by pid. The returned object
// removes the pid files and the lock when the run ends (a killed job leaves
// them behind, stale, for the next start to take over).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/config/config.hpp"
#include "trainer/io/process.hpp"  // this_host(), which lock files record

namespace gt {

class Communicator;

// Bytes of one checkpoint of this model (parameters and both AdamW moments,
// fp32), from the config alone (nothing allocated).
double checkpoint_bytes(const ModelConfig& m);

// Run-defining keys whose values differ between two resolved configs (as
// written by to_yaml): "train.lr: checkpoint 0.001, config 0.003". Keys that
// may change between a run and its resume (train.steps, the layout, logging,
// runtime, checkpoint cadence, ...) are not compared.
std::vector<std::string> run_config_differences(const std::string& saved_yaml,
                                                const std::string& current_yaml);

// The read-only checks above. Throws gt::Error in the
// "<what> (<where>): expected X, got Y" form. A stale lock passes (it is
// taken over, and said, by open_run_directory).
void check_outputs(const Config& cfg);

// What a lock file says.
struct LockInfo {
  long pid = 0;
  std::string host;
  std::string start;  // process start time (clock ticks since boot), "" if unknown
};
// Parses "<log.dir>/.lock"; throws naming the file when it is not a lock.
LockInfo read_lock(const std::string& path);
// True when the lock's process is gone (same host, no such pid, or the pid
// now belongs to a process started at another time). A lock of another host
// is never stale: we cannot look.
bool lock_is_stale(const LockInfo& lock);

class RunDirectory {
 public:
  ~RunDirectory();  // removes this rank's pid file, and rank 0's lock
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& lock_path() const { return lock_path_; }
  const std::string& pid_path() const { return pid_path_; }

 private:
  friend std::unique_ptr<RunDirectory> open_run_directory(const Config&, Communicator&);
  RunDirectory() = default;
  std::string lock_path_;  // rank 0 only
  std::string pid_path_;
};

// Collective over `job`; errors on any rank are agreed (CollectiveError).
std::unique_ptr<RunDirectory> open_run_directory(const Config& cfg, Communicator& job);

}  // namespace gt
