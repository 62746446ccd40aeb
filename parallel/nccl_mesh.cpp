#include "parallel/nccl_mesh.hpp"

#include "kernels/core/error.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/nccl_communicator.hpp"

namespace gt {

MeshComms nccl_mesh_comms(const ParallelDims& dims, const MpiCommunicator* world, int device,
                          cudaStream_t compute) {
  const int size = world ? world->size() : 1;
  if (size != dims.world_size())
    fail("mesh: the layout ", dims.str(), " needs ", dims.world_size(), " ranks but the job has ",
         size);
  const int rank = world ? world->rank() : 0;
  const MeshCoord coord = mesh_coord_of(dims, rank);
  std::unique_ptr<NcclCommunicator> nccl_world =
      world ? NcclCommunicator::create(*world, device, compute, "world", world->deadline())
            : NcclCommunicator::create_single(device, compute, "world", 0.0);
  // Same order on every rank: each split is collective over the NCCL world.
  MeshComms comms;
  for (MeshAxis a : mesh_split_axes(dims))
    comms.axes[static_cast<size_t>(a)] = nccl_world->split(
        mesh_axis_color(dims, coord, a), mesh_axis_index(dims, coord, a), mesh_axis_name(a));
  comms.world = std::move(nccl_world);
  return comms;
}

MeshCommsBuilder nccl_mesh_builder(int device, cudaStream_t compute) {
  return [device, compute](const ParallelDims& dims, const MpiCommunicator* world) {
    return nccl_mesh_comms(dims, world, device, compute);
  };
}

}  // namespace gt
