// What the launcher told this process: world size, rank and local rank from
// the variables mpirun (Open MPI), srun (Slurm/PMI) or MPICH set.
#pragma once

#include <string>

namespace gt {

struct RunEnvironment {
  int world_size = 1;
  int rank = 0;
  int local_rank = 0;
  int local_size = 1;             // ranks of this job on this host
  std::string launcher = "none";  // "openmpi", "slurm", "pmi" or "none"
};

RunEnvironment detect_run_environment();

// CPU threads for this rank: `configured` when > 0, else OMP_NUM_THREADS when
// the launcher set it (Slurm's cpus-per-task), else this rank's share of the
// cores it may run on. Ranks on one host that each took every core would
// oversubscribe it many times over (OpenMP workers spin): a 4-rank job on 2
// cores ran 70x slower.
int cpu_thread_share(int configured, const RunEnvironment& env);

}  // namespace gt
