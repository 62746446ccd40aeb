// The CUDA path of parallel.comm=mpi, proven on the CPU: every layout trains
// on OffHostOps (backend memory the host cannot touch, tests/offhost_ops.hpp)
// over a mesh whose MPI communicators stage their buffers through host copies
// (StagedCommunicator), bit for bit like the same layout on CpuOps over plain
// MPI. A collective, a tensor-parallel ring or a checkpoint piece that reached
// backend memory from the host without going through the backend would crash
// here; on a GPU it would read device pointers as host memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_ops.hpp"
#include "model_steps.hpp"
#include "mpi_test_util.hpp"
#include "offhost_ops.hpp"
#include "parallel/host_staging.hpp"
#include "parallel/mesh_factory.hpp"

namespace gt {
namespace {

// HostStaging whose "device" side is OffHostOps memory: copies open it, as a
// cudaMemcpy reaches device memory.
class OffHostStaging final : public HostStaging {
 public:
  explicit OffHostStaging(test::OffHostOps& ops) : ops_(ops) {}
  void* allocate_host(size_t bytes) override { return std::malloc(bytes ? bytes : 1); }
  void free_host(void* p) noexcept override { std::free(p); }
  void to_host(void* host_dst, const void* device_src, size_t bytes) override {
    test::OffHostOps::Open o(ops_);
    std::memcpy(host_dst, device_src, bytes);
    copied_ += static_cast<int64_t>(bytes);
  }
  void to_device(void* device_dst, const void* host_src, size_t bytes) override {
    test::OffHostOps::Open o(ops_);
    std::memcpy(device_dst, host_src, bytes);
    copied_ += static_cast<int64_t>(bytes);
  }
  int64_t copied() const { return copied_; }

 private:
  test::OffHostOps& ops_;
  int64_t copied_ = 0;
};

ModelConfig model() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 32;
  m.vocab_size = 64;
  m.block_size = 8;
  return m;
}

// Three steps with accumulation 2 on one layout: losses, norms, saved pieces.
test::StepTrace train_layout(Ops& ops, const DeviceMesh& mesh, int stage, bool overlap,
                             ComputeDType dtype, CpComm cp_mode) {
  test::StepOptions o;
  o.model = model();
  o.mesh = &mesh;
  o.fsdp_stage = fsdp_stage_of(stage);
  o.bucket_mb = 0.001;  // small buckets: several in flight
  o.tp_overlap = overlap;
  o.dtype = dtype;
  o.init_seed = 3;
  o.cp_mode = cp_mode;
  return test::train_steps(ops, o);
}

struct Case {
  int dp, fsdp, tp, stage;
  int cp = 1;
  CpComm cp_mode = CpComm::allgather;
};

// Context parallelism's keys and values travel through staged device
// buffers too (all-gather and reduce-scatter, or the ring's sends).
std::vector<Case> cases_for(int world) {
  if (world == 1) return {{1, 1, 1, 3}};
  if (world == 2)
    return {{2, 1, 1, 3}, {1, 2, 1, 1}, {1, 2, 1, 3}, {1, 1, 2, 3},
            {1, 1, 1, 3, 2, CpComm::allgather}, {1, 1, 1, 3, 2, CpComm::ring}};
  if (world == 4)
    return {{1, 2, 2, 3}, {2, 2, 1, 2}, {1, 1, 4, 3}, {1, 1, 2, 3, 2, CpComm::ring},
            {1, 2, 1, 3, 2, CpComm::allgather}};
  return {};
}

TEST(OffHostLayoutsMpi, StagedDeviceMemoryTrainsEveryLayoutLikeHostMpi) {
  auto world = test::test_world("offhost-world");
  auto cpu = make_cpu_ops(1);
  for (const Case& c : cases_for(world->size()))
    for (bool overlap : {true, false})
      for (ComputeDType dtype : {ComputeDType::fp32, ComputeDType::bf16}) {
        if (c.tp == 1 && !overlap) continue;  // overlap only changes tp
        const ParallelDims dims =
            ParallelDims::validated(c.dp, c.fsdp, c.tp, world->size(), 1, c.cp);
        SCOPED_TRACE(dims.str() + " " + to_string(c.cp_mode) + " stage " + std::to_string(c.stage) +
                     (overlap ? " overlap" : " no overlap") +
                     (dtype == ComputeDType::bf16 ? " bf16" : " fp32"));
        test::StepTrace want;
        {
          const DeviceMesh host_mesh = make_device_mesh(dims, world.get(), MeshCommOptions{});
          want = train_layout(*cpu, host_mesh, c.stage, overlap, dtype, c.cp_mode);
        }
        test::OffHostOps offhost;
        auto staging = std::make_shared<OffHostStaging>(offhost);
        MeshCommOptions opts;
        opts.backend = CommBackend::mpi_staged;
        opts.staging = staging;
        test::StepTrace got;
        {
          const DeviceMesh staged = make_device_mesh(dims, world.get(), opts);
          got = train_layout(offhost, staged, c.stage, overlap, dtype, c.cp_mode);
        }
        EXPECT_EQ(got.losses, want.losses);
        EXPECT_EQ(got.norms, want.norms);
        EXPECT_EQ(got.pieces, want.pieces);
        if (world->size() > 1) {
          EXPECT_GT(staging->copied(), 0);
        }
      }
}

}  // namespace
}  // namespace gt
