// Device selection: runtime.device and runtime.dtype against what the machine
// has, the rank -> GPU mapping, and the backend this machine builds.
#include <gtest/gtest.h>

#include "kernels/backends.hpp"
#include "parallel/comm_backends.hpp"
#include "test_util.hpp"
#include "trainer/runtime/compute_backend.hpp"
#include "trainer/runtime/launch_checks.hpp"

namespace gt {
namespace {

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ComputeBackend, AutoPicksCudaOnlyWhenBuiltAndAGpuIsVisible) {
  using K = DeviceKind;
  EXPECT_EQ(resolve_device(K::auto_, 0, true, "c.yaml"), Device::cpu);
  EXPECT_EQ(resolve_device(K::auto_, 2, true, "c.yaml"), Device::cuda);
  EXPECT_EQ(resolve_device(K::auto_, 2, false, "c.yaml"), Device::cpu);
  EXPECT_EQ(resolve_device(K::cpu, 8, true, "c.yaml"), Device::cpu);
  EXPECT_EQ(resolve_device(K::cuda, 1, true, "c.yaml"), Device::cuda);
}

TEST(ComputeBackend, CudaWithoutAGpuOrABuildIsAClearError) {
  using K = DeviceKind;
  std::string m = message_of([&] { resolve_device(K::cuda, 0, true, "c.yaml"); });
  EXPECT_NE(m.find("runtime.device=cuda (c.yaml): expected a visible CUDA device, got none"),
            std::string::npos)
      << m;
  m = message_of([&] { resolve_device(K::cuda, 4, false, "c.yaml"); });
  EXPECT_NE(m.find("expected a build with the CUDA backend, got a CPU-only build"),
            std::string::npos)
      << m;
}

TEST(ComputeBackend, RanksTakeGpusRoundRobinByLocalRank) {
  EXPECT_EQ(cuda_device_for_rank(0, 8), 0);
  EXPECT_EQ(cuda_device_for_rank(7, 8), 7);
  EXPECT_EQ(cuda_device_for_rank(5, 4), 1);
  EXPECT_EQ(cuda_device_for_rank(3, 1), 0);  // several ranks on one GPU (parallel.comm=mpi)
}

TEST(ComputeBackend, ThisMachineBuildsWhatAutoResolvesTo) {
  Config cfg;
  cfg.source = "test";
  cfg.runtime.device = DeviceKind::auto_;
  cfg.runtime.threads = 1;
  RunEnvironment env;
  const ComputeBackend b = make_compute_backend(cfg, env);
  ASSERT_NE(b.ops, nullptr);
  const Device want = cuda_built() && visible_cuda_devices() > 0 && !cuda_device_emulated()
                          ? Device::cuda
                          : Device::cpu;
  EXPECT_EQ(b.device, want);
  // parallel.comm as the table decides it (trainer/runtime/comm_choice.hpp).
  CommRequest r;
  r.device = want;
  r.visible_gpus = visible_cuda_devices();
  r.nccl_built = nccl_built();
  const CommChoice c = choose_comm(r);
  EXPECT_EQ(b.comm.comm, c.comm);
  EXPECT_EQ(b.comm.backend, c.backend);
  EXPECT_EQ(b.ops->device(), want);
  if (want == Device::cpu) {
    EXPECT_EQ(b.describe, "cpu (1 thread)");
    EXPECT_EQ(b.ops->make_op_timer(), nullptr);  // the profiler's steady clock
  } else {
    EXPECT_NE(b.ops->make_op_timer(), nullptr);
  }
}

}  // namespace
}  // namespace gt
