// choose_comm (trainer/runtime/comm_choice.hpp): every row of its table, and
// the errors, each naming the key, the config and what to change.
#include <gtest/gtest.h>

#include <string>

#include "test_util.hpp"
#include "trainer/runtime/comm_choice.hpp"

namespace gt {
namespace {

using C = ParallelComm;
using B = CommBackend;

struct Row {
  C asked;
  Device device;
  bool nccl_built;
  int world, local_ranks, gpus;
  C comm;     // expected
  B backend;  // expected
};

CommRequest request(C asked, Device device, bool nccl_built, int world, int local_ranks, int gpus) {
  CommRequest r;
  r.asked = asked;
  r.device_asked = device == Device::cuda ? DeviceKind::cuda : DeviceKind::cpu;
  r.device = device;
  r.world_size = world;
  r.local_ranks = local_ranks;
  r.visible_gpus = gpus;
  r.nccl_built = nccl_built;
  r.source = "c.yaml";
  r.host = "node7";
  return r;
}

TEST(CommChoice, EveryRowOfTheTable) {
  const Device cpu = Device::cpu, cuda = Device::cuda;
  const Row rows[] = {
      // The CPU: MPI on host buffers, whatever the build or the GPUs.
      {C::auto_, cpu, true, 4, 4, 0, C::mpi, B::mpi},
      {C::auto_, cpu, false, 4, 4, 8, C::mpi, B::mpi},
      {C::mpi, cpu, true, 2, 2, 2, C::mpi, B::mpi},
      {C::auto_, cpu, true, 1, 1, 0, C::mpi, B::mpi},
      // CUDA, mpi asked: staged through host memory; ranks may share a GPU.
      {C::mpi, cuda, true, 4, 4, 1, C::mpi, B::mpi_staged},
      {C::mpi, cuda, false, 2, 2, 2, C::mpi, B::mpi_staged},
      // CUDA, auto: NCCL when built and every rank on the host has a GPU.
      {C::auto_, cuda, true, 8, 8, 8, C::nccl, B::nccl},
      {C::auto_, cuda, true, 16, 8, 8, C::nccl, B::nccl},      // two hosts of 8
      {C::auto_, cuda, true, 4, 4, 1, C::mpi, B::mpi_staged},  // a shared GPU
      {C::auto_, cuda, false, 2, 2, 2, C::mpi, B::mpi_staged},
      // CUDA, nccl asked and possible.
      {C::nccl, cuda, true, 2, 2, 2, C::nccl, B::nccl},
      // One rank moves no buffers: the staged in-process mesh, comm as chosen.
      {C::auto_, cuda, true, 1, 1, 1, C::nccl, B::mpi_staged},
      {C::nccl, cuda, true, 1, 1, 1, C::nccl, B::mpi_staged},
  };
  for (const Row& r : rows) {
    const CommChoice got =
        choose_comm(request(r.asked, r.device, r.nccl_built, r.world, r.local_ranks, r.gpus));
    SCOPED_TRACE(std::string("asked ") + to_string(r.asked) + " on " + device_name(r.device) +
                 (r.nccl_built ? ", NCCL built" : ", no NCCL") + ", world " +
                 std::to_string(r.world) + ", " + std::to_string(r.local_ranks) + " local ranks, " +
                 std::to_string(r.gpus) + " GPUs");
    EXPECT_EQ(got.comm, r.comm);
    EXPECT_EQ(got.backend, r.backend) << comm_backend_name(got.backend);
  }
}

TEST(CommChoice, WhatCannotRunIsAnErrorSayingWhatToChange) {
  const std::string on_cpu =
      test::error_message([] { choose_comm(request(C::nccl, Device::cpu, true, 2, 2, 2)); });
  EXPECT_NE(on_cpu.find("parallel.comm=nccl (c.yaml): expected a run on CUDA, got "
                        "runtime.device=cpu running on the CPU"),
            std::string::npos)
      << on_cpu;
  EXPECT_NE(on_cpu.find("use parallel.comm=mpi (or auto)"), std::string::npos) << on_cpu;

  const std::string unbuilt =
      test::error_message([] { choose_comm(request(C::nccl, Device::cuda, false, 2, 2, 2)); });
  EXPECT_NE(unbuilt.find("parallel.comm=nccl (c.yaml): expected a build with NCCL"),
            std::string::npos)
      << unbuilt;

  const std::string shared =
      test::error_message([] { choose_comm(request(C::nccl, Device::cuda, true, 4, 4, 2)); });
  EXPECT_NE(shared.find("runtime.device=cuda (c.yaml, host node7): expected at most one rank per "
                        "GPU, got 4 ranks on this host for 2 visible GPUs"),
            std::string::npos)
      << shared;
  EXPECT_NE(shared.find("--npernode 2"), std::string::npos) << shared;
  EXPECT_NE(shared.find("share GPUs with parallel.comm=mpi"), std::string::npos) << shared;
  const std::string one =
      test::error_message([] { choose_comm(request(C::nccl, Device::cuda, true, 2, 2, 1)); });
  EXPECT_NE(one.find("for 1 visible GPU;"), std::string::npos) << one;
}

}  // namespace
}  // namespace gt
