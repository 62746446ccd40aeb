#include "trainer/runtime/launch_checks.hpp"

#include "kernels/core/error.hpp"
#include "trainer/data/data_loader.hpp"
#include "trainer/io/process.hpp"

namespace gt {

namespace {
const char* size_variable(const std::string& launcher) {
  if (launcher == "openmpi") return "OMPI_COMM_WORLD_SIZE";
  if (launcher == "pmi") return "PMI_SIZE";
  if (launcher == "slurm") return "SLURM_NTASKS";
  return "?";
}
}  // namespace

void check_launch(const RunEnvironment& env, int mpi_world_size) {
  if (env.world_size == mpi_world_size) return;
  fail("MPI world size (", env.launcher, " launch): expected ", env.world_size, " ranks, as ",
       size_variable(env.launcher), "=", env.world_size, " says, got ", mpi_world_size,
       " from MPI: this process's MPI did not join the launcher's job (under "
       "Slurm use srun --mpi=pmix, or mpirun inside the allocation)");
}

void check_data_covers_batch(const DataLoader& data, const Config& cfg) {
  const int64_t rows = cfg.train.global_batch;
  if (data.num_windows() >= rows) return;
  fail("data.train (", cfg.source, "): expected at least train.global_batch=", rows,
       " windows of seq_len+1=", cfg.train.seq_len + 1, " tokens, got ", data.num_windows(), " in ",
       data.num_shards(), " shard(s) of ", data.num_tokens(),
       " tokens: one batch would repeat rows; add data or lower train.global_batch");
}

}  // namespace gt
