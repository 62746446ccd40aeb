#include "trainer/runtime/comm_choice.hpp"

#include "kernels/core/error.hpp"

namespace gt {

CommChoice choose_comm(const CommRequest& r) {
  CommChoice c;
  if (r.device == Device::cpu) {
    if (r.asked == ParallelComm::nccl)
      fail("parallel.comm=nccl (", r.source,
           "): expected a run on CUDA, got runtime.device=", to_string(r.device_asked),
           " running on the CPU; NCCL moves device buffers: use "
           "parallel.comm=mpi (or auto)");
    return c;  // MPI on host buffers
  }
  if (r.asked == ParallelComm::nccl && !r.nccl_built)
    fail("parallel.comm=nccl (", r.source,
         "): expected a build with NCCL, got one without "
         "(NCCL was not found when it was configured); use parallel.comm=mpi (or auto)");
  const bool gpu_each = r.local_ranks <= r.visible_gpus;
  switch (r.asked) {
    case ParallelComm::mpi:
      c.comm = ParallelComm::mpi;
      break;
    case ParallelComm::nccl:
      c.comm = ParallelComm::nccl;
      break;
    case ParallelComm::auto_:
      c.comm = r.nccl_built && gpu_each ? ParallelComm::nccl : ParallelComm::mpi;
      break;
  }
  if (c.comm == ParallelComm::nccl && !gpu_each)
    fail("runtime.device=", to_string(r.device_asked), " (", r.source, ", host ", r.host,
         "): expected at most one rank per GPU, got ", r.local_ranks, " ranks on this host for ",
         r.visible_gpus, " visible GPU", r.visible_gpus == 1 ? "" : "s",
         "; start fewer ranks per host (mpirun --npernode ",
         r.visible_gpus > 0 ? r.visible_gpus : 1,
         "), make more GPUs visible (CUDA_VISIBLE_DEVICES), or share GPUs with parallel.comm=mpi");
  c.backend = c.comm == ParallelComm::nccl && r.world_size > 1 ? CommBackend::nccl
                                                               : CommBackend::mpi_staged;
  return c;
}

}  // namespace gt
