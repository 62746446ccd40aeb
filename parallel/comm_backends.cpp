#include "parallel/comm_backends.hpp"

#include "kernels/core/error.hpp"
#include "parallel/staged_communicator.hpp"

#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
#include "parallel/cuda_staging.hpp"
#endif
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
#include "parallel/nccl_communicator.hpp"
#include "parallel/nccl_mesh.hpp"
#endif

namespace gt {

namespace {
[[noreturn]] void not_built(const CommTarget& t) {
  fail("parallel.comm=", t.comm_asked, ": no ", comm_backend_name(t.backend), " communicator for ",
       t.describe, " in this build");
}
}  // namespace

bool nccl_built() {
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

MeshCommOptions mesh_comm_options(const CommTarget& t) {
  MeshCommOptions o;
  o.backend = t.backend;
  switch (t.backend) {
    case CommBackend::mpi:
      return o;  // MPI on host buffers
    case CommBackend::mpi_staged:
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
      o.staging = std::make_shared<CudaHostStaging>(static_cast<cudaStream_t>(t.stream));
      return o;
#else
      break;
#endif
    case CommBackend::nccl:
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
      o.nccl = nccl_mesh_builder(t.cuda_device, static_cast<cudaStream_t>(t.stream));
      return o;
#else
      break;
#endif
  }
  not_built(t);
}

std::unique_ptr<Communicator> make_world_communicator(const MpiCommunicator& world,
                                                      const CommTarget& t) {
  switch (t.backend) {
    case CommBackend::mpi:
      return MpiCommunicator::dup(world.comm(), "world", world.deadline());
    case CommBackend::mpi_staged:
      return std::make_unique<StagedCommunicator>(
          MpiCommunicator::dup(world.comm(), "world", world.deadline()),
          mesh_comm_options(t).staging);
    case CommBackend::nccl:
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
      return NcclCommunicator::create(world, t.cuda_device, static_cast<cudaStream_t>(t.stream),
                                      "world", world.deadline());
#else
      break;
#endif
  }
  not_built(t);
}

}  // namespace gt
