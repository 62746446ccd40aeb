// Output checks, the run lock and the pid files; see run_directory.hpp.
#include "trainer/train/run_directory.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "kernels/core/error.hpp"
#include "parallel/collective_error.hpp"
#include "parallel/communicator.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/checkpoint/manifest.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/io/human_bytes.hpp"
#include "trainer/io/process.hpp"
#include "trainer/model/parameter_layout.hpp"

namespace gt {

namespace {

namespace fs = std::filesystem;

constexpr const char* kLockFile = ".lock";

// The deepest existing directory entry on the way to `path` (path itself
// when it exists).
fs::path nearest_existing(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec).lexically_normal();
  while (!p.empty() && !fs::exists(p, ec)) {
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  return p;
}

// `key` names the config key in messages ("log.dir", "checkpoint.dir").
void check_writable_dir(const std::string& path, const std::string& key) {
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    fail(key, " (", path, "): expected a directory, got a file that is not one");
  const fs::path at = nearest_existing(path);
  if (!fs::is_directory(at, ec))
    fail(key, " (", path, "): expected a directory that can be created, got '", at.string(),
         "' in the way, which is not a directory");
  if (::access(at.c_str(), W_OK | X_OK) != 0)
    fail(key, " (", path, "): expected a writable directory, got '", at.string(),
         "' not writable (", std::strerror(errno), ")");
  struct statvfs vfs {};
  if (::statvfs(at.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY))
    fail(key, " (", path, "): expected a writable filesystem, got '", at.string(),
         "' on a read-only filesystem");
}

void check_free_space(const std::string& ckpt_dir, double needed) {
  const fs::path at = nearest_existing(ckpt_dir);
  struct statvfs vfs {};
  if (::statvfs(at.c_str(), &vfs) != 0) return;  // cannot tell: the save will say
  const double avail = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
  if (avail < needed)
    fail("no room for a checkpoint (", ckpt_dir, "): expected at least ", human_bytes(needed),
         " free for one checkpoint of this model, got ", human_bytes(avail), " free on '",
         at.string(), "'s filesystem; free space or set checkpoint.dir elsewhere");
}

// "section.key" -> value text, from to_yaml's canonical form.
std::map<std::string, std::string> yaml_keys(const std::string& yaml) {
  std::map<std::string, std::string> out;
  std::istringstream in(yaml);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != ' ') {
      section = line.substr(0, line.find(':'));
      continue;
    }
    const size_t b = line.find_first_not_of(' ');
    const size_t colon = line.find(':', b);
    if (colon == std::string::npos) continue;
    std::string value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    out[section + "." + line.substr(b, colon - b)] = value;
  }
  return out;
}

// May change between a run and its resume: the length of the run, the
// layout and its micro-batch, evaluation, logging, runtime, checkpointing.
bool may_differ(const std::string& dotted) {
  static const std::set<std::string> keys = {"train.steps",        "train.micro_batch",
                                             "train.eval_every",   "train.eval_batches",
                                             "train.max_skipped",  "data.val"};
  static const std::set<std::string> sections = {"runtime", "parallel", "log", "checkpoint"};
  return keys.count(dotted) || sections.count(dotted.substr(0, dotted.find('.')));
}

std::string lock_text() {
  const long pid = static_cast<long>(::getpid());
  const long start = process_start_time(pid);
  return "pid=" + std::to_string(pid) + "\nhost=" + this_host() +
         "\nstart=" + (start >= 0 ? std::to_string(start) : std::string()) + "\n";
}

// Creates `path` with `text` only if it does not exist: the content goes to a
// private temporary first and is linked into place (link fails on EEXIST), so
// a reader never sees a half-written lock. Returns false when it exists.
bool create_exclusive(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  write_file_atomic(tmp, text);
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  ::unlink(tmp.c_str());
  if (rc == 0) {
    fsync_dir(parent_dir(path));
    return true;
  }
  if (err == EEXIST) return false;
  fail("cannot create lock ", path, ": ", std::strerror(err));
}

[[noreturn]] void fail_locked(const std::string& path, const LockInfo& lock) {
  if (lock.host != this_host())
    fail("log.dir in use (", path, "): expected no other job using it, got a lock of pid ",
         lock.pid, " on host ", lock.host,
         " (another host: whether it still runs cannot be checked from here); if that job is "
         "gone, delete ", path);
  fail("log.dir in use (", path, "): expected no other live job, got pid ", lock.pid,
       " on host ", lock.host, " still running; wait for it, stop it, or choose another log.dir");
}

}  // namespace

double checkpoint_bytes(const ModelConfig& m) {
  const double params = static_cast<double>(ParameterLayout(m).global_numel());
  return 3 * 4 * params;  // parameters, AdamW m and v, fp32
}

std::vector<std::string> run_config_differences(const std::string& saved_yaml,
                                                const std::string& current_yaml) {
  const auto saved = yaml_keys(saved_yaml), now = yaml_keys(current_yaml);
  std::vector<std::string> out;
  for (const auto& [key, value] : now) {
    if (may_differ(key)) continue;
    const auto it = saved.find(key);
    if (it == saved.end()) continue;  // a key newer than the checkpoint: cannot compare
    if (it->second != value)
      out.push_back(key + ": checkpoint " + it->second + ", config " + value);
  }
  return out;
}

LockInfo read_lock(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot read lock ", path, ": ", std::strerror(errno));
  LockInfo lock;
  std::string line;
  while (std::getline(f, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "pid") {
      try {
        lock.pid = std::stol(v);
      } catch (...) {
        lock.pid = 0;
      }
    } else if (k == "host") {
      lock.host = v;
    } else if (k == "start") {
      lock.start = v;
    }
  }
  if (lock.pid <= 0 || lock.host.empty())
    fail("lock file (", path, "): expected pid=<pid> and host=<host> lines, got neither; if no "
         "job uses this log.dir, delete it");
  return lock;
}

bool lock_is_stale(const LockInfo& lock) {
  if (lock.host != this_host()) return false;
  if (!process_alive(lock.pid)) return true;
  // The pid is taken; by the same process only if it started at the same time.
  if (lock.start.empty()) return false;
  const long start = process_start_time(lock.pid);
  return start >= 0 && std::to_string(start) != lock.start;
}

void check_outputs(const Config& cfg) {
  const std::string ckpt_dir = cfg.checkpoint_dir();
  check_writable_dir(cfg.log.dir, "log.dir");
  if (!cfg.checkpoint.dir.empty()) check_writable_dir(ckpt_dir, "checkpoint.dir");

  const std::string lock_path = cfg.log.dir + "/" + kLockFile;
  std::error_code ec;
  if (fs::exists(lock_path, ec)) {
    const LockInfo lock = read_lock(lock_path);
    if (!lock_is_stale(lock)) fail_locked(lock_path, lock);
  }

  if (cfg.train.steps > 0) check_free_space(ckpt_dir, checkpoint_bytes(cfg.model));

  // Checkpoints already here must belong to this run.
  const std::string latest = find_latest_checkpoint(ckpt_dir, nullptr);
  if (!latest.empty()) {
    const ckpt::Manifest m = ckpt::read_manifest(latest);
    const std::vector<std::string> diffs =
        run_config_differences(m.meta.config_yaml, to_yaml(cfg));
    if (!diffs.empty()) {
      std::string list;
      for (const auto& d : diffs) list += (list.empty() ? "" : "; ") + d;
      fail("checkpoints of a different config (", latest,
           "): expected the run-defining keys of this config, got ", list,
           ". Use another log.dir (or checkpoint.dir); to start from that checkpoint anyway, "
           "give checkpoint.resume=<its directory> with a new log.dir");
    }
  }
}

RunDirectory::~RunDirectory() {
  if (!pid_path_.empty()) ::unlink(pid_path_.c_str());
  if (!lock_path_.empty()) {
    try {
      const LockInfo lock = read_lock(lock_path_);
      if (lock.pid == static_cast<long>(::getpid()) && lock.host == this_host())
        ::unlink(lock_path_.c_str());
    } catch (const std::exception& e) {
      spdlog::warn("leaving lock {}: {}", lock_path_, e.what());
    }
  }
}

std::unique_ptr<RunDirectory> open_run_directory(const Config& cfg, Communicator& job) {
  std::unique_ptr<RunDirectory> dir(new RunDirectory());
  std::exception_ptr error;
  // 1. Rank 0: log.dir and the lock.
  try {
    if (job.rank() == 0) {
      std::error_code ec;
      fs::create_directories(cfg.log.dir, ec);
      if (ec)
        fail("log.dir (", cfg.log.dir, "): expected a directory we can create, got ",
             ec.message());
      const std::string path = cfg.log.dir + "/" + kLockFile;
      const std::string text = lock_text();
      bool taken = create_exclusive(path, text);
      if (!taken) {
        const LockInfo lock = read_lock(path);
        if (!lock_is_stale(lock)) fail_locked(path, lock);
        spdlog::warn("taking over the stale lock {} of pid {} on {} (that process is gone: "
                     "a killed or crashed run)", path, lock.pid, lock.host);
        ::unlink(path.c_str());
        taken = create_exclusive(path, text);
        if (!taken) fail_locked(path, read_lock(path));
      }
      dir->lock_path_ = path;
    }
  } catch (const std::exception&) {
    error = std::current_exception();
  }
  agree_on_setup(job, error);
  // 2. Every rank: its pid file.
  try {
    const std::string pids = cfg.log.dir + "/pids";
    std::error_code ec;
    fs::create_directories(pids, ec);
    if (ec) fail("pid files (", pids, "): expected a directory we can create, got ", ec.message());
    const std::string path = pids + "/rank_" + std::to_string(job.rank()) + ".pid";
    write_file_atomic(path, std::to_string(::getpid()) + "\n" + this_host() + "\n");
    dir->pid_path_ = path;
  } catch (const std::exception&) {
    error = std::current_exception();
  }
  agree_on_setup(job, error);
  return dir;
}

}  // namespace gt
