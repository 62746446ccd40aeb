// `trainer bench`: builds the backend the config names (runtime.threads as
// the trainer would use them), brings MPI up when a launcher started several
// ranks, runs the full microbenchmarks and reports from rank 0.
#include <sched.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "parallel/collective_error.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/mpi_session.hpp"
#include "trainer/config/config.hpp"
#include "trainer/profile/bench.hpp"
#include "trainer/train/run_environment.hpp"

namespace gt {

namespace {

// The trainer's rule (trainer.cpp, cpu_threads): configured, else
// OMP_NUM_THREADS, else this rank's share of the cores it may run on.
int bench_threads(int configured, const RunEnvironment& env) {
  if (configured > 0) return configured;
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(omp);
    if (n > 0) return n;
  }
  cpu_set_t mask;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) cores = CPU_COUNT(&mask);
  return std::max(1, cores / std::max(1, env.local_size));
}

void write_json(const std::string& path, const nlohmann::json& j) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) fail("bench: cannot create '", dir.string(), "': ", ec.message());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << j.dump(2) << "\n";
    if (!f) fail("bench: cannot write '", tmp, "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail("bench: cannot rename '", tmp, "' to '", path, "'");
}

int run(Communicator& world, const RuntimeConfig& rt, const RunEnvironment& env,
        const std::string& out_path) {
  if (rt.device == DeviceKind::cuda)
    fail("bench: runtime.device=cuda: the CUDA backend is not implemented yet");
  auto ops = make_cpu_ops(bench_threads(rt.threads, env));
  const nlohmann::json result = run_bench(*ops, &world, BenchOptions{});
  if (world.rank() == 0) {
    std::cout << format_bench(result) << std::flush;
    if (!out_path.empty()) {
      write_json(out_path, result);
      spdlog::info("bench results written to {}", out_path);
    }
  }
  return 0;
}

}  // namespace

int bench_command(const std::string& config_path, const std::string& out_path) {
  const RunEnvironment env = detect_run_environment();
  RuntimeConfig rt;
  if (!config_path.empty()) rt = load_config(config_path, {}).runtime;
  if (env.world_size <= 1) {
    InProcessCommunicator solo("world");
    return run(solo, rt, env, out_path);
  }
  MpiSession mpi(nullptr, nullptr);
  auto world = MpiCommunicator::dup(MPI_COMM_WORLD, "world", rt.collective_timeout_s);
  if (world->rank() != 0) spdlog::set_level(spdlog::level::warn);
  try {
    return run(*world, rt, env, out_path);
  } catch (const std::exception& e) {
    abort_job(1, e.what());
  }
}

}  // namespace gt
