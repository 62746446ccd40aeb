// Start-up checks of how the job was launched and where it runs, beyond the
// config itself: the MPI world against the launcher's word, local ranks
// against GPUs, and the training data against one global batch. Each throws
// gt::Error in the "<what> (<where>): expected X, got Y" form.
#pragma once

#include <string>

#include "kernels/core/tensor.hpp"
#include "trainer/config/config.hpp"
#include "trainer/train/run_environment.hpp"

namespace gt {

class DataLoader;

// The launcher (mpirun, srun) said the job has env.world_size ranks; MPI says
// mpi_world_size. They differ when the MPI library did not join the launcher's
// job (srun without --mpi=pmix, an MPI built for another launcher): every
// process would then train alone, all writing the same directory.
void check_launch(const RunEnvironment& env, int mpi_world_size);

// Visible CUDA devices on this host (0 without a CUDA build or driver).
int visible_cuda_devices();
// True when this build has the CUDA backend compiled in.
bool cuda_built();
// True when that backend runs on the emulated device (a TRAINER_CUDA_EMULATOR
// build, docs/EMULATOR.md): a test device that runtime.device=cuda selects
// and runtime.device=auto never does.
bool cuda_device_emulated();

// The training data must hold at least one global batch of distinct windows
// (else rows of one batch would repeat).
void check_data_covers_batch(const DataLoader& data, const Config& cfg);

}  // namespace gt
