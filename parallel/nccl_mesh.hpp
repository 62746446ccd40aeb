// The NCCL communicators of a DeviceMesh (CUDA builds with NCCL only; target
// gt_parallel_nccl). A "world" NcclCommunicator is bootstrapped over the MPI
// world (rank 0's ncclUniqueId broadcast over MPI), then each axis is an
// ncclCommSplit of it with the same color (mesh_axis_color) and key
// (mesh_axis_index) as the MPI mesh, so both backends group and order ranks
// identically. Every collective is handed device buffers and is ordered
// after `compute` (see nccl_communicator.hpp).
//
// Use through make_device_mesh (mesh_factory.hpp):
//   opts.backend = CommBackend::nccl;
//   opts.nccl = nccl_mesh_builder(device, compute);
// NCCL allows one rank per GPU: several ranks sharing a device must use
// CommBackend::mpi_staged instead.
#pragma once

#include <cuda_runtime_api.h>

#include "parallel/mesh.hpp"
#include "parallel/mesh_factory.hpp"

namespace gt {

// Collective over `world` (null: a one-rank job without MPI, dims 1x1x1).
// The communicators use world's deadline (0, none, without a world).
MeshComms nccl_mesh_comms(const ParallelDims& dims, const MpiCommunicator* world, int device,
                          cudaStream_t compute);

// The builder make_device_mesh calls; `compute` must outlive the mesh.
MeshCommsBuilder nccl_mesh_builder(int device, cudaStream_t compute);

}  // namespace gt
