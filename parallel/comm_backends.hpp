// Which device-buffer communicators this build has, and how to build each:
// the one place above them that asks whether CUDA and NCCL were built
// (compiled into gt_comm_backends), so the trainer builds its mesh with plain
// calls and no CUDA header or #if.
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.hpp"
#include "parallel/mesh_factory.hpp"
#include "parallel/mpi_communicator.hpp"

namespace gt {

bool nccl_built();  // this build has the NCCL communicator (real or emulated)

// Where a rank's communicators move its buffers from.
struct CommTarget {
  CommBackend backend = CommBackend::mpi;
  int cuda_device = -1;    // CUDA: this rank's GPU
  void* stream = nullptr;  // CUDA: the compute stream (a cudaStream_t) collectives order after
  std::string comm_asked;  // parallel.comm as written, for messages
  std::string describe;    // the compute backend ("cuda:0 (...)"), for messages
};

// The MeshCommOptions of t.backend: the pinned-memory staging of mpi_staged,
// the NCCL mesh builder of nccl. Throws gt::Error naming parallel.comm and
// the compute backend when this build lacks what t.backend needs.
MeshCommOptions mesh_comm_options(const CommTarget& t);
// One communicator of t.backend over `world`'s ranks, named "world" (trainer
// bench). Collective over world; throws like mesh_comm_options.
std::unique_ptr<Communicator> make_world_communicator(const MpiCommunicator& world,
                                                      const CommTarget& t);

}  // namespace gt
