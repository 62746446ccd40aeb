#include "parallel/mesh_factory.hpp"

#include "kernels/core/error.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/staged_communicator.hpp"

namespace gt {

const char* comm_backend_name(CommBackend b) {
  switch (b) {
    case CommBackend::mpi: return "mpi";
    case CommBackend::mpi_staged: return "mpi_staged";
    case CommBackend::nccl: return "nccl";
  }
  return "?";
}

namespace {

// The one-rank mesh's communicators, for a job without MPI.
MeshComms in_process_comms() {
  MeshComms comms;
  comms.world = std::make_unique<InProcessCommunicator>("world");
  for (MeshAxis a : mesh_split_axes(ParallelDims{}))
    comms.axes[static_cast<size_t>(a)] = std::make_unique<InProcessCommunicator>(mesh_axis_name(a));
  return comms;
}

}  // namespace

MeshComms staged_mesh_comms(MeshComms comms, const std::shared_ptr<HostStaging>& staging) {
  comms.world = std::make_unique<StagedCommunicator>(std::move(comms.world), staging);
  for (auto& axis : comms.axes)
    if (axis) axis = std::make_unique<StagedCommunicator>(std::move(axis), staging);
  return comms;
}

DeviceMesh make_device_mesh(const ParallelDims& dims, const MpiCommunicator* world,
                            const MeshCommOptions& options) {
  if (!world && dims.world_size() != 1)
    fail("mesh: the layout ", dims.str(), " needs ", dims.world_size(),
         " ranks but the job runs without MPI (one rank)");
  const int rank = world ? world->rank() : 0;
  switch (options.backend) {
    case CommBackend::mpi:
      return world ? DeviceMesh(dims, *world) : DeviceMesh::in_process();
    case CommBackend::mpi_staged:
      if (!options.staging)
        fail("mesh: the mpi_staged backend needs a HostStaging (MeshCommOptions::staging)");
      return DeviceMesh(dims, rank,
                        staged_mesh_comms(world ? split_mpi_mesh(dims, *world) : in_process_comms(),
                                          options.staging));
    case CommBackend::nccl:
      if (!options.nccl)
        fail("mesh: the nccl backend needs a builder (MeshCommOptions::nccl = "
             "nccl_mesh_builder(device, stream), from parallel/nccl_mesh.hpp in builds with NCCL)");
      return DeviceMesh(dims, rank, options.nccl(dims, world));
  }
  fail("mesh: unknown communication backend ", static_cast<int>(options.backend));
}

}  // namespace gt
