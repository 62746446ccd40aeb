// The device halves of the mesh backends, on real device buffers: the staged
// MPI mesh through CudaHostStaging (any number of ranks per GPU, the reason it
// exists) and the NCCL mesh (one GPU per rank). Each test skips on every rank
// alike unless this host has the GPUs it needs, so CI without GPUs reports
// them skipped; the CPU twins are test_staged_communicator_mpi.cpp and
// test_mesh_mpi.cpp.
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <numeric>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_resources.hpp"
#include "mpi_test_util.hpp"
#include "parallel/cuda_staging.hpp"
#include "parallel/mesh_factory.hpp"
#include "parallel/staged_communicator.hpp"
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
#include "parallel/nccl_mesh.hpp"
#endif

namespace gt::test {
namespace {

struct LocalRanks {
  int rank = 0, size = 1;
};
LocalRanks local_ranks() {
  LocalRanks l;
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &l.rank);
  MPI_Comm_size(local, &l.size);
  MPI_Comm_free(&local);
  return l;
}

// True on every rank when every host has at least `per_rank ? local ranks : 1` GPUs.
bool enough_gpus(MpiCommunicator& w, bool one_per_rank) {
  const int devices = cuda::cuda_device_count();
  const int need = one_per_rank ? local_ranks().size : 1;
  return w.all_reduce_i64(devices < need ? 1 : 0, ReduceOp::max) == 0;
}

std::vector<float> to_host(const cuda::DeviceBuffer& d, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (n) CUDA_CHECK(cudaMemcpy(out.data(), d.data(), out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}
cuda::DeviceBuffer to_device(const std::vector<float>& h) {
  cuda::DeviceBuffer d(h.size() * 4);
  if (!h.empty()) CUDA_CHECK(cudaMemcpy(d.data(), h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  return d;
}

// On every axis: an all-reduce and an in-place all-gather of device buffers,
// both in flight at once, against the closed forms of test_mesh_mpi.cpp.
void check_device_collectives(const DeviceMesh& m, int g) {
  for (MeshAxis a : mesh_split_axes(m.dims())) {
    SCOPED_TRACE(mesh_axis_name(a));
    Communicator& c = m.axis(a);
    const std::vector<int> members = mesh_axis_ranks(m.dims(), g, a);
    const int p = c.size(), me = c.rank();
    const int64_t n = 37;
    cuda::DeviceBuffer x = to_device(filled(g, n));
    std::vector<float> gathered_host(static_cast<size_t>(n * p), -1.f);
    const auto mine = filled(g, n);
    std::copy(mine.begin(), mine.end(), gathered_host.begin() + me * n);
    cuda::DeviceBuffer gathered = to_device(gathered_host);
    CommHandle h_ar = c.all_reduce_sum(x.as<float>(), n);
    CommHandle h_ag = c.all_gather(gathered.as<float>() + me * n, gathered.as<float>(), n);
    h_ag.wait();
    h_ar.wait();
    // A device backend's wait() orders the device, not the host: settle the
    // collectives (with their deadlines) before the host reads (a no-op for
    // the staged backend, whose waits block).
    c.drain();
    const float sum = static_cast<float>(std::accumulate(members.begin(), members.end(), 0));
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = sum + 0.5f * p * i;
    EXPECT_TRUE(exactly(to_host(x, n), want));
    std::vector<float> want_g;
    for (int s : members) {
      auto blk = filled(s, n);
      want_g.insert(want_g.end(), blk.begin(), blk.end());
    }
    EXPECT_TRUE(exactly(to_host(gathered, n * p), want_g));
  }
}

TEST(StagedCudaMesh, EveryAxisOnDeviceBuffersWithRanksSharingAGpu) {
  auto w = test_world("staged-cuda");
  if (!enough_gpus(*w, /*one_per_rank=*/false)) GTEST_SKIP() << "needs a GPU";
  CUDA_CHECK(cudaSetDevice(local_ranks().rank % cuda::cuda_device_count()));
  cuda::CudaStream compute;
  MeshCommOptions opts;
  opts.backend = CommBackend::mpi_staged;
  opts.staging = std::make_shared<CudaHostStaging>(compute.get());
  for (const ParallelDims& d : layouts_for(w->size())) {
    SCOPED_TRACE(d.str());
    check_device_collectives(make_device_mesh(d, w.get(), opts), w->rank());
  }
}

#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
TEST(NcclMesh, EveryAxisOnDeviceBuffers) {
  auto w = test_world("nccl-mesh");
  if (!enough_gpus(*w, /*one_per_rank=*/true)) GTEST_SKIP() << "needs one GPU per rank";
  const int device = local_ranks().rank;
  CUDA_CHECK(cudaSetDevice(device));
  cuda::CudaStream compute;
  MeshCommOptions opts;
  opts.backend = CommBackend::nccl;
  opts.nccl = nccl_mesh_builder(device, compute.get());
  for (const ParallelDims& d : layouts_for(w->size())) {
    SCOPED_TRACE(d.str());
    DeviceMesh m = make_device_mesh(d, w.get(), opts);
    EXPECT_EQ(m.world().size(), w->size());
    check_device_collectives(m, w->rank());
  }
}
#endif

}  // namespace
}  // namespace gt::test

#endif  // TRAINER_HAVE_CUDA
