#include "trainer/runtime/run_environment.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace gt {

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (end && *end == '\0') ? static_cast<int>(x) : fallback;
}
}  // namespace

RunEnvironment detect_run_environment() {
  RunEnvironment e;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    e.launcher = "openmpi";
    e.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    e.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  } else if (std::getenv("PMI_SIZE")) {
    e.launcher = "pmi";
    e.world_size = env_int("PMI_SIZE", 1);
    e.rank = env_int("PMI_RANK", 0);
    e.local_rank = env_int("MPI_LOCALRANKID", 0);
    e.local_size = env_int("MPI_LOCALNRANKS", 1);
  } else if (std::getenv("SLURM_NTASKS") && std::getenv("SLURM_PROCID")) {
    e.launcher = "slurm";
    e.world_size = env_int("SLURM_NTASKS", 1);
    e.rank = env_int("SLURM_PROCID", 0);
    e.local_rank = env_int("SLURM_LOCALID", 0);
    e.local_size = env_int("SLURM_NTASKS_PER_NODE", 1);
  }
  return e;
}

int cpu_thread_share(int configured, const RunEnvironment& env) {
  if (configured > 0) return configured;
  const int omp = env_int("OMP_NUM_THREADS", 0);
  if (omp > 0) return omp;
  cpu_set_t mask;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) cores = CPU_COUNT(&mask);
  return std::max(1, cores / std::max(1, env.local_size));
}

}  // namespace gt
