// ComputeBackend: which device a rank computes on and the Ops that run there,
// chosen from runtime.device / runtime.dtype and the launcher's local rank.
//
//   runtime.device=auto   CUDA when this build has it and a GPU is visible, else CPU
//   runtime.device=cuda   CUDA, or a clear error (CPU-only build, no visible GPU)
//   runtime.device=cpu    CPU
// Each rank takes GPU local_rank % visible_gpus (OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM_LOCALID): one GPU per rank with NCCL, several ranks per GPU only with
// parallel.comm=mpi (trainer/runtime/comm_choice.hpp decides and checks).
#pragma once

#include <memory>
#include <string>

#include "kernels/ops.hpp"
#include "parallel/mesh.hpp"
#include "parallel/mpi_communicator.hpp"
#include "trainer/config/config.hpp"
#include "trainer/runtime/comm_choice.hpp"
#include "trainer/runtime/run_environment.hpp"

namespace gt {

// The device `requested` resolves to, given what the machine has. Throws
// gt::Error (naming runtime.device and `source`) when cuda is asked of a
// CPU-only build or of a host with no visible GPU. Either dtype runs on
// either device (the CPU backend computes the bf16 model's function too).
Device resolve_device(DeviceKind requested, int visible_gpus, bool cuda_built,
                      const std::string& source);
// The GPU a rank with this local rank uses.
int cuda_device_for_rank(int local_rank, int visible_gpus);

struct ComputeBackend {
  Device device = Device::cpu;
  CommChoice comm;              // parallel.comm as choose_comm resolved it for this job
  int cuda_device = -1;         // CUDA: this rank's GPU index
  void* cuda_stream = nullptr;  // CUDA: the compute stream (a cudaStream_t) the ops run on
  std::unique_ptr<Ops> ops;     // not yet wrapped by the profiler
  std::string describe;         // "cpu (2 threads)", "cuda:0 (NVIDIA H200, bf16)"
};

// This rank's backend: resolve_device and choose_comm against what the
// machine has (each throws gt::Error naming the key), then the Ops; on CUDA a
// CudaOps on cuda_device_for_rank(...).
ComputeBackend make_compute_backend(const Config& cfg, const RunEnvironment& env);

// The run's device mesh, of backend.comm.backend: MPI communicators on the
// CPU; on CUDA, NCCL ones or MPI ones staging device buffers through pinned
// host memory on the backend's compute stream (which must outlive the mesh).
// Collective over `world` (null = one rank without MPI).
DeviceMesh make_run_mesh(const ParallelDims& dims, const MpiCommunicator* world,
                         const ComputeBackend& backend);
// The same for a world communicator alone (`trainer bench`).
std::unique_ptr<Communicator> make_run_world(const MpiCommunicator& world,
                                             const ComputeBackend& backend);

}  // namespace gt
