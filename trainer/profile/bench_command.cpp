// `trainer bench`: builds the backend the config names (runtime.threads as
// the trainer would use them), brings MPI up when a launcher started several
// ranks, runs the full microbenchmarks and reports from rank 0.
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <fstream>
#include <iostream>

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "parallel/collective_error.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/mpi_session.hpp"
#include "trainer/config/config.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/profile/bench.hpp"
#include "trainer/runtime/compute_backend.hpp"
#include "trainer/runtime/run_environment.hpp"

namespace gt {

namespace {

// `world` null: one process. Otherwise the host MPI world, whose collectives
// cannot take the device buffers the bench allocates on a GPU: the bench then
// runs on the device communicator the trainer would use (NCCL, or MPI staged
// through host memory), per parallel.comm.
int run(const MpiCommunicator* world, const Config& cfg, const RunEnvironment& env,
        const std::string& out_path) {
  ComputeBackend backend = make_compute_backend(cfg, env);
  // Declared after the backend: goes first (it orders its work on the backend's stream).
  std::unique_ptr<Communicator> comm;
  if (!world) {
    comm = std::make_unique<InProcessCommunicator>("world");
  } else {
    comm = make_run_world(*world, backend);
  }
  BenchOptions opt;
  opt.gemm_dtype = cfg.runtime.dtype == ComputeDType::bf16 ? DType::bf16 : DType::f32;
  const nlohmann::json result = run_bench(*backend.ops, comm.get(), opt);
  if (comm->rank() == 0) {
    std::cout << format_bench(result) << std::flush;
    if (!out_path.empty()) {
      make_parent_dir(out_path, "bench --out");
      write_file_atomic(out_path, result.dump(2) + "\n");
      spdlog::info("bench results written to {}", out_path);
    }
  }
  return 0;
}

}  // namespace

int bench_command(const std::string& config_path, const std::string& out_path) {
  const RunEnvironment env = detect_run_environment();
  Config cfg;
  cfg.source = config_path.empty() ? "defaults" : config_path;
  if (!config_path.empty()) cfg = load_config(config_path, {});
  const RuntimeConfig& rt = cfg.runtime;
  if (env.world_size <= 1) return run(nullptr, cfg, env, out_path);
  MpiSession mpi(nullptr, nullptr);
  auto world = MpiCommunicator::dup(MPI_COMM_WORLD, "world", rt.collective_timeout_s);
  if (world->rank() != 0) spdlog::set_level(spdlog::level::warn);
  try {
    return run(world.get(), cfg, env, out_path);
  } catch (const std::exception& e) {
    abort_job(1, e.what());
  }
}

}  // namespace gt
