// make_device_mesh: the DeviceMesh of a run, with the communication backend
// the run asked for (config key parallel.comm, resolved by choose_comm in
// trainer/runtime/comm_choice.hpp):
//
//   CommBackend::mpi         host buffers: MpiCommunicator per axis (the CPU
//                            path; DeviceMesh(dims, world) as before).
//   CommBackend::mpi_staged  device buffers through pinned host memory: each
//                            MPI axis (and world) wrapped in a
//                            StagedCommunicator over options.staging. Works
//                            with several ranks on one GPU, which NCCL refuses.
//   CommBackend::nccl        device buffers: NcclCommunicator per axis,
//                            bootstrapped over the MPI world and split with
//                            the same colors and keys as the MPI mesh.
//
// This header stays free of CUDA and NCCL (CPU-only builds include it): the
// NCCL communicators come from an opaque builder, made in CUDA builds by
// nccl_mesh_builder() (parallel/nccl_mesh.hpp), and the staging object for a
// CUDA run is a CudaHostStaging (parallel/cuda_staging.hpp).
//
// How the trainer builds its mesh (world = null when run without MPI):
//
//   MeshCommOptions opts;
//   opts.backend = CommBackend::mpi;                            // CPU run
//   // CUDA run, parallel.comm=mpi:
//   opts.backend = CommBackend::mpi_staged;
//   opts.staging = std::make_shared<CudaHostStaging>(compute_stream);
//   // CUDA run, parallel.comm=nccl (TRAINER_HAVE_NCCL builds):
//   opts.backend = CommBackend::nccl;
//   opts.nccl = nccl_mesh_builder(device_index, compute_stream);
//   DeviceMesh mesh = make_device_mesh(dims, world_or_null, opts);
//
// Every rank calls it with the same dims and options (it is collective over
// world), and every axis of the result takes the buffers the backend says.
#pragma once

#include <functional>
#include <memory>

#include "parallel/host_staging.hpp"
#include "parallel/mesh.hpp"

namespace gt {

enum class CommBackend { mpi, mpi_staged, nccl };
const char* comm_backend_name(CommBackend b);  // "mpi", "mpi_staged", "nccl"

// Builds one rank's NCCL mesh communicators, collectively over `world`; null
// world = a one-rank job without MPI. See nccl_mesh_builder().
using MeshCommsBuilder =
    std::function<MeshComms(const ParallelDims& dims, const MpiCommunicator* world)>;

struct MeshCommOptions {
  CommBackend backend = CommBackend::mpi;
  // mpi_staged: how device buffers reach host memory (required; shared by
  // every axis, each of which keeps its own staging buffers).
  std::shared_ptr<HostStaging> staging;
  // nccl: the builder of the NCCL communicators (required).
  MeshCommsBuilder nccl;
};

// Collective over `world` (null: one rank without MPI, dims must be 1x1x1;
// mpi then gives DeviceMesh::in_process()). Fails naming the backend when
// the option it needs is missing.
DeviceMesh make_device_mesh(const ParallelDims& dims, const MpiCommunicator* world,
                            const MeshCommOptions& options);

// `comms` with every communicator wrapped in a StagedCommunicator over
// `staging` (its names, sizes and ranks unchanged).
MeshComms staged_mesh_comms(MeshComms comms, const std::shared_ptr<HostStaging>& staging);

}  // namespace gt
