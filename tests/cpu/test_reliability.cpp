// The pieces behind docs/RELIABILITY.md, one process: TRAINER_FAULT parsing,
// the stop-signal flag, the run lock and pid files, the output checks (not
// writable, full, locked, checkpoints of another config), the launch and
// device checks, and process liveness (zombies count as gone). The mpirun
// scenarios that use them are tests/reliability/reliability.py.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kernels/backends.hpp"
#include "kernels/core/error.hpp"
#include "parallel/collective_error.hpp"
#include "parallel/comm_backends.hpp"
#include "parallel/in_process_communicator.hpp"
#include "test_util.hpp"
#include "trainer/config/config.hpp"
#include "trainer/data/data_loader.hpp"
#include "trainer/io/process.hpp"
#include "trainer/model/parameter_layout.hpp"
#include "trainer/runtime/compute_backend.hpp"
#include "trainer/runtime/launch_checks.hpp"
#include "trainer/train/fault_injection.hpp"
#include "trainer/train/run_directory.hpp"
#include "trainer/train/stop_signal.hpp"

namespace gt {
namespace {

namespace fs = std::filesystem;
using test::error_message;

#define EXPECT_HAS(msg, part) \
  EXPECT_NE(std::string(msg).find(part), std::string::npos) << "'" << (msg) << "' lacks '" << (part) << "'"

// ---------------------------------------------------------------- TRAINER_FAULT

TEST(FaultInjection, ParsesEveryKind) {
  const FaultInjector f = FaultInjector::parse(
      "kill:rank=1:step=12,hang:step=3:rank=0,nan:rank=2:step=5:count=3,"
      "kill_in_save:rank=0:step=15:phase=manifest");
  ASSERT_EQ(f.faults().size(), 4u);
  EXPECT_EQ(f.faults()[0].kind, FaultKind::kill);
  EXPECT_EQ(f.faults()[0].rank, 1);
  EXPECT_EQ(f.faults()[0].step, 12);
  EXPECT_EQ(f.faults()[1].kind, FaultKind::hang);
  EXPECT_EQ(f.faults()[2].count, 3);
  EXPECT_EQ(f.faults()[3].phase, "manifest");
  // nan covers steps 5, 6, 7 on rank 2 only.
  EXPECT_FALSE(f.poison_gradients(2, 4));
  EXPECT_TRUE(f.poison_gradients(2, 5));
  EXPECT_TRUE(f.poison_gradients(2, 7));
  EXPECT_FALSE(f.poison_gradients(2, 8));
  EXPECT_FALSE(f.poison_gradients(1, 5));
  // Faults that do not match do nothing (this process is still here).
  f.at_step_start(0, 12);
  f.at_step_start(1, 11);
  f.in_save(0, 15, "shard");
  f.in_save(1, 15, "manifest");
}

TEST(FaultInjection, EmptyOrUnsetIsNoFault) {
  EXPECT_TRUE(FaultInjector::parse("").empty());
  ::unsetenv("TRAINER_FAULT");
  EXPECT_TRUE(FaultInjector::from_env().empty());
  ::setenv("TRAINER_FAULT", "kill:rank=0:step=1", 1);
  EXPECT_EQ(FaultInjector::from_env().faults().size(), 1u);
  ::unsetenv("TRAINER_FAULT");
}

TEST(FaultInjection, BadSpecsAreErrorsNamingThem) {
  const struct {
    const char* spec;
    const char* why;
  } cases[] = {
      {"explode:rank=0:step=1", "unknown fault 'explode'"},
      {"kill:step=1", "missing rank="},
      {"kill:rank=0", "missing step="},
      {"kill:rank=x:step=1", "rank must be a non-negative integer, got 'x'"},
      {"kill:rank=-1:step=1", "rank must be a non-negative integer, got '-1'"},
      {"kill:rank=0:step=1:rank=2", "key 'rank' is given twice"},
      {"kill:rank=0:step=1:count=2", "unknown key 'count' for kill"},
      {"nan:rank=0:step=1:count=0", "count must be >= 1"},
      {"kill_in_save:rank=0:step=5", "missing phase=shard|manifest"},
      {"kill_in_save:rank=0:step=5:phase=rename", "phase must be shard or manifest"},
      {"kill_in_save:rank=1:step=5:phase=manifest", "needs rank=0"},
      {"kill:rank=0:step=1,", "empty fault in the list"},
      {"kill:rank=0:step", "'step' is not key=value"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_message([&] { FaultInjector::parse(c.spec); });
    EXPECT_HAS(msg, "TRAINER_FAULT (environment): expected ");
    EXPECT_HAS(msg, c.why);
  }
}

// The fault kills for real: in a child process, which must die by SIGKILL.
TEST(FaultInjection, KillIsSigkill) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FaultInjector::parse("kill:rank=3:step=2").at_step_start(3, 2);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

// ---------------------------------------------------------------- stop signal

TEST(StopSignal, FlagIsSetByTermAndIntAndHandlersAreRestored) {
  struct sigaction before {};
  sigaction(SIGTERM, nullptr, &before);
  {
    StopSignal stop;
    StopSignal::reset();
    EXPECT_EQ(StopSignal::received(), 0);
    ::raise(SIGTERM);  // handled: this process goes on
    EXPECT_EQ(StopSignal::received(), SIGTERM);
    EXPECT_STREQ(StopSignal::name(), "SIGTERM");
    ::raise(SIGTERM);  // a repeat (mpirun and a wrapper both send one) changes nothing
    ::raise(SIGINT);
    EXPECT_EQ(StopSignal::received(), SIGINT);
    InProcessCommunicator solo("world");
    EXPECT_TRUE(agree_to_stop(solo));
    StopSignal::reset();
    EXPECT_FALSE(agree_to_stop(solo));
  }
  struct sigaction after {};
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

// ---------------------------------------------------------------- processes

TEST(Process, ZombieCountsAsGone) {
  EXPECT_TRUE(process_alive(::getpid()));
  EXPECT_GT(process_start_time(::getpid()), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  // Until reaped it is a zombie: kill(pid, 0) still succeeds on it.
  for (int i = 0; i < 200 && process_alive(child); ++i) ::usleep(10000);
  EXPECT_FALSE(process_alive(child));
  EXPECT_EQ(::kill(child, 0), 0) << "the child should still be an unreaped zombie";
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(process_alive(child));
}

// ---------------------------------------------------------------- run directory

// A small config writing to dir/run; `extra` overrides (replacing the defaults here).
Config config_in(const test::TempDir& dir, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = extra;
  for (const std::string& d : {"log.dir=" + dir.file("run"), std::string("train.steps=3")}) {
    bool given = false;
    for (const auto& e : extra) given = given || e.substr(0, e.find('=')) == d.substr(0, d.find('='));
    if (!given) o.push_back(d);
  }
  return parse_config("data: {train: x.bin}\nmodel: {n_layer: 1, n_head: 2, n_embd: 16}\n",
                      "cfg.yaml", o);
}

TEST(RunDirectory, CheckpointBytesMatchTheLayout) {
  test::TempDir dir;
  const Config c = config_in(dir);
  const ParameterLayout layout(c.model);
  int64_t n = 0;
  for (const auto& s : layout.specs()) n += s.numel;
  EXPECT_EQ(checkpoint_bytes(c.model), 12.0 * static_cast<double>(n));
}

TEST(RunDirectory, RunConfigDifferencesListRunDefiningKeysOnly) {
  test::TempDir dir;
  const Config a = config_in(dir);
  // May differ: length, layout, micro-batch, logging, runtime, checkpointing.
  const Config same = config_in(dir, {"train.steps=9", "parallel.dp=2", "train.micro_batch=4",
                                      "log.every=3", "runtime.threads=2", "checkpoint.keep=5",
                                      "checkpoint.resume=auto", "train.eval_every=7"});
  EXPECT_TRUE(run_config_differences(to_yaml(a), to_yaml(same)).empty());
  const Config other = config_in(dir, {"train.lr=0.5", "model.n_embd=32", "data.shuffle=true"});
  const auto d = run_config_differences(to_yaml(a), to_yaml(other));
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], "data.shuffle: checkpoint false, config true");
  EXPECT_EQ(d[1], "model.n_embd: checkpoint 16, config 32");
  EXPECT_EQ(d[2], "train.lr: checkpoint 0.001, config 0.5");
  // A key the checkpoint's config does not have cannot be compared.
  EXPECT_TRUE(run_config_differences("train:\n  seed: 1\n", "train:\n  seed: 1\n  new_key: 3\n")
                  .empty());
}

TEST(RunDirectory, OutputsThatCannotBeWrittenAreRejected) {
  test::TempDir dir;
  std::ofstream(dir.file("file")) << "x";
  EXPECT_HAS(error_message([&] { check_outputs(config_in(dir, {"log.dir=" + dir.file("file/run")})); }),
             "log.dir (" + dir.file("file/run") + "): expected a directory that can be created");
  EXPECT_HAS(error_message([&] { check_outputs(config_in(dir, {"log.dir=" + dir.file("file")})); }),
             "expected a directory, got a file");
  EXPECT_HAS(error_message([&] {
               check_outputs(config_in(dir, {"checkpoint.dir=" + dir.file("file/ck")}));
             }),
             "checkpoint.dir (");
  if (::geteuid() != 0) {  // root ignores permission bits
    fs::create_directories(dir.file("ro"));
    fs::permissions(dir.file("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_HAS(error_message([&] { check_outputs(config_in(dir, {"log.dir=" + dir.file("ro/run")})); }),
               "not writable");
    fs::permissions(dir.file("ro"), fs::perms::owner_all);
  }
  check_outputs(config_in(dir));  // a fresh directory is fine, and not created by the check
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(RunDirectory, NoRoomForACheckpointIsAnError) {
  test::TempDir dir;
  // 1024 layers of 4096 channels: ~2.5 TB per checkpoint.
  const Config big = config_in(dir, {"model.n_embd=4096", "model.n_layer=4096"});
  EXPECT_GT(checkpoint_bytes(big.model), 2e12);
  const std::string msg = error_message([&] { check_outputs(big); });
  EXPECT_HAS(msg, "no room for a checkpoint (" + dir.file("run/checkpoints") + "): expected at least ");
  EXPECT_HAS(msg, " free for one checkpoint of this model, got ");
}

TEST(RunDirectory, LockLifecycle) {
  test::TempDir dir;
  const Config c = config_in(dir);
  InProcessCommunicator solo("world");
  {
    auto run = open_run_directory(c, solo);
    const LockInfo lock = read_lock(run->lock_path());
    EXPECT_EQ(lock.pid, static_cast<long>(::getpid()));
    EXPECT_EQ(lock.host, this_host());
    EXPECT_FALSE(lock_is_stale(lock));
    std::ifstream pid(dir.file("run/pids/rank_0.pid"));
    long p = 0;
    pid >> p;
    EXPECT_EQ(p, static_cast<long>(::getpid()));
    // A second job on the same directory: refused by the check and by the lock itself.
    EXPECT_HAS(error_message([&] { check_outputs(c); }),
               "log.dir in use (" + dir.file("run/.lock") + "): expected no other live job, got pid " +
                   std::to_string(::getpid()) + " on host " + this_host());
    EXPECT_HAS(error_message([&] { open_run_directory(c, solo); }), "log.dir in use");
  }
  EXPECT_FALSE(fs::exists(dir.file("run/.lock")));
  EXPECT_FALSE(fs::exists(dir.file("run/pids/rank_0.pid")));
}

TEST(RunDirectory, StaleLocksAreTakenOverOthersAreNot) {
  test::TempDir dir;
  const Config c = config_in(dir);
  fs::create_directories(dir.file("run"));
  // A dead pid on this host: stale.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  std::ofstream(dir.file("run/.lock")) << "pid=" << child << "\nhost=" << this_host() << "\nstart=1\n";
  EXPECT_TRUE(lock_is_stale(read_lock(dir.file("run/.lock"))));
  check_outputs(c);
  InProcessCommunicator solo("world");
  {
    auto run = open_run_directory(c, solo);
    EXPECT_EQ(read_lock(run->lock_path()).pid, static_cast<long>(::getpid()));
  }
  // A live pid whose start time differs (the pid was reused): stale.
  std::ofstream(dir.file("run/.lock")) << "pid=" << ::getpid() << "\nhost=" << this_host()
                                       << "\nstart=1\n";
  EXPECT_TRUE(lock_is_stale(read_lock(dir.file("run/.lock"))));
  // Another host: never stale (its processes cannot be seen from here).
  std::ofstream(dir.file("run/.lock")) << "pid=1\nhost=elsewhere\nstart=\n";
  EXPECT_FALSE(lock_is_stale(read_lock(dir.file("run/.lock"))));
  EXPECT_HAS(error_message([&] { check_outputs(c); }), "pid 1 on host elsewhere (another host");
  // Garbage is not silently taken over.
  std::ofstream(dir.file("run/.lock")) << "hello\n";
  EXPECT_HAS(error_message([&] { check_outputs(c); }),
             "lock file (" + dir.file("run/.lock") + "): expected pid=<pid> and host=<host>");
}

// ---------------------------------------------------------------- launch, devices, data

TEST(LaunchChecks, LauncherAndMpiMustAgree) {
  RunEnvironment env;
  env.launcher = "slurm";
  env.world_size = 4;
  check_launch(env, 4);
  EXPECT_HAS(error_message([&] { check_launch(env, 1); }),
             "MPI world size (slurm launch): expected 4 ranks, as SLURM_NTASKS=4 says, got 1");
}

TEST(LaunchChecks, CudaWithoutABuildOrAGpuNamesWhatIsMissing) {
  test::TempDir dir;
  // The device as the trainer resolves it (a CPU-only build, gpus visible).
  auto device = [](const Config& c, bool built, int gpus) {
    return resolve_device(c.runtime.device, gpus, built, c.source);
  };
  EXPECT_EQ(device(config_in(dir), false, 0), Device::cpu);  // CPU runs need no GPU
  const Config cuda = config_in(dir, {"runtime.device=cuda"});
  EXPECT_HAS(error_message([&] { device(cuda, false, 0); }),
             "runtime.device=cuda (cfg.yaml): expected a build with the CUDA backend, got a "
             "CPU-only build");
  EXPECT_HAS(error_message([&] { device(cuda, true, 0); }),
             "expected a visible CUDA device, got none");
  // auto without a GPU is a CPU run
  EXPECT_EQ(device(config_in(dir, {"runtime.device=auto"}), true, 0), Device::cpu);
  // More ranks than GPUs: tests/cpu/test_comm_choice.cpp (choose_comm decides).
}

// With this build's real devices (a GPU or the emulated one): the backend
// refuses more ranks on this host than GPUs when NCCL is asked for.
TEST(LaunchChecks, MoreLocalRanksThanVisibleGpus) {
  if (!cuda_built()) GTEST_SKIP() << "built without CUDA";
  const int gpus = visible_cuda_devices();
  if (gpus == 0) GTEST_SKIP() << "no CUDA device visible";
  if (!nccl_built()) GTEST_SKIP() << "built without NCCL";
  test::TempDir dir;
  const Config cuda = config_in(dir, {"runtime.device=cuda", "parallel.comm=nccl"});
  RunEnvironment env;
  env.world_size = env.local_size = gpus + 1;
  EXPECT_HAS(error_message([&] { make_compute_backend(cuda, env); }),
             std::to_string(gpus + 1) + " ranks on this host for " + std::to_string(gpus) +
                 " visible GPU");
}

TEST(LaunchChecks, DataMustHoldOneGlobalBatch) {
  test::TempDir dir;
  test::write_shard(dir.file("s.bin"), std::vector<uint16_t>(16 * 6 + 1, 7));  // 6 windows of 16
  const Config six = config_in(dir, {"train.seq_len=16", "train.micro_batch=2", "train.global_batch=6"});
  const Config eight = config_in(dir, {"train.seq_len=16", "train.micro_batch=2", "train.global_batch=8"});
  DataLoader data({dir.file("s.bin")}, "data.train", 256, 16, false, 0);
  check_data_covers_batch(data, six);
  EXPECT_HAS(error_message([&] { check_data_covers_batch(data, eight); }),
             "data.train (cfg.yaml): expected at least train.global_batch=8 windows of "
             "seq_len+1=17 tokens, got 6");
}

}  // namespace
}  // namespace gt
