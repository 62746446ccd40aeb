// How a run's ranks communicate (parallel.comm), decided in one place: a
// pure function of what the config asked and what the job has, so every
// combination is tested with a table (tests/cpu/test_comm_choice.cpp) and
// nothing else in the trainer re-derives it.
//
//   device   asked  NCCL built  ranks on host vs GPUs  ->  comm  mesh backend
//   cpu      auto   any         any                        mpi   mpi (host buffers)
//   cpu      mpi    any         any                        mpi   mpi
//   cpu      nccl   any         any                        error: NCCL moves device buffers
//   cuda     mpi    any         any                        mpi   mpi_staged (ranks may share a GPU)
//   cuda     auto   yes         ranks <= GPUs              nccl  nccl
//   cuda     auto   yes         ranks >  GPUs              mpi   mpi_staged (NCCL refuses two
//                                                                 ranks on one GPU)
//   cuda     auto   no          any                        mpi   mpi_staged
//   cuda     nccl   no          any                        error: a build without NCCL
//   cuda     nccl   yes         ranks >  GPUs              error: at most one rank per GPU
//   cuda     nccl   yes         ranks <= GPUs              nccl  nccl
// A world of one rank on CUDA moves no buffers: its mesh is the staged
// in-process one whatever comm says (NCCL would bring up five communicators
// and its bootstrap for no traffic).
#pragma once

#include <string>

#include "kernels/core/tensor.hpp"
#include "parallel/mesh_factory.hpp"
#include "trainer/config/config.hpp"

namespace gt {

struct CommRequest {
  ParallelComm asked = ParallelComm::auto_;     // parallel.comm
  DeviceKind device_asked = DeviceKind::auto_;  // runtime.device, for messages
  Device device = Device::cpu;                  // what runtime.device resolved to on this rank
  int world_size = 1;
  int local_ranks = 1;   // this job's ranks on this host
  int visible_gpus = 0;  // on this host
  bool nccl_built = false;
  std::string source;  // the config, for messages
  std::string host;    // this host's name, for messages
};

struct CommChoice {
  ParallelComm comm = ParallelComm::mpi;   // nccl or mpi, never auto: what the run reports
  CommBackend backend = CommBackend::mpi;  // what builds the mesh
};

// Throws gt::Error naming parallel.comm (or runtime.device) and the config
// when the request cannot run.
CommChoice choose_comm(const CommRequest& r);

}  // namespace gt
