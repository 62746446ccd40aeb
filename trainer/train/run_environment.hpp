// What the launcher told this process: world size, rank and local rank from
// the variables mpirun (Open MPI), srun (Slurm/PMI) or MPICH set.
#pragma once

#include <string>

namespace gt {

struct RunEnvironment {
  int world_size = 1;
  int rank = 0;
  int local_rank = 0;
  int local_size = 1;  // ranks of this job on this host
  std::string launcher = "none";  // "openmpi", "slurm", "pmi" or "none"
};

RunEnvironment detect_run_environment();

}  // namespace gt
