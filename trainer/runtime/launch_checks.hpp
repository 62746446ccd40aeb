// Start-up checks of how the job was launched and where it runs, beyond the
// config itself: the MPI world against the launcher's word, local ranks
// against GPUs, and the training data against one global batch. Each throws
// gt::Error in the "<what> (<where>): expected X, got Y" form.
#pragma once

#include <string>

#include "kernels/core/tensor.hpp"
#include "trainer/config/config.hpp"
#include "trainer/runtime/run_environment.hpp"

namespace gt {

class DataLoader;

// The launcher (mpirun, srun) said the job has env.world_size ranks; MPI says
// mpi_world_size. They differ when the MPI library did not join the launcher's
// job (srun without --mpi=pmix, an MPI built for another launcher): every
// process would then train alone, all writing the same directory.
void check_launch(const RunEnvironment& env, int mpi_world_size);

// The training data must hold at least one global batch of distinct windows
// (else rows of one batch would repeat).
void check_data_covers_batch(const DataLoader& data, const Config& cfg);

}  // namespace gt
