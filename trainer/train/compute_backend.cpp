#include "trainer/train/compute_backend.hpp"

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "trainer/train/launch_checks.hpp"

#include "parallel/mesh_factory.hpp"
#include "parallel/staged_communicator.hpp"

#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_ops.hpp"
#include "parallel/cuda_staging.hpp"
#include "trainer/profile/cuda_op_timer.hpp"
#endif
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
#include "parallel/nccl_communicator.hpp"
#include "parallel/nccl_mesh.hpp"
#endif

namespace gt {

Device resolve_device(DeviceKind requested, int visible_gpus, bool cuda_built,
                      const std::string& source) {
  Device d = Device::cpu;
  switch (requested) {
    case DeviceKind::cpu: d = Device::cpu; break;
    case DeviceKind::auto_: d = cuda_built && visible_gpus > 0 ? Device::cuda : Device::cpu; break;
    case DeviceKind::cuda:
      if (!cuda_built)
        fail("runtime.device=cuda (", source, "): expected a build with the CUDA backend, got a "
             "CPU-only build (nvcc was not found when it was configured); use runtime.device=cpu");
      if (visible_gpus == 0)
        fail("runtime.device=cuda (", source, "): expected a visible CUDA device, got none (no "
             "GPU, no driver, or CUDA_VISIBLE_DEVICES hides them); use runtime.device=cpu or "
             "auto");
      d = Device::cuda;
      break;
  }
  return d;
}

int cuda_device_for_rank(int local_rank, int visible_gpus) {
  GT_CHECK(visible_gpus > 0, "no visible GPU");
  return local_rank % visible_gpus;
}

std::unique_ptr<OpTimer> ComputeBackend::make_op_timer() const {
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
  if (device == Device::cuda)
    return std::make_unique<CudaOpTimer>(static_cast<cudaStream_t>(cuda_stream));
#endif
  return nullptr;
}

ComputeBackend make_compute_backend(const Config& cfg, const RunEnvironment& env) {
  ComputeBackend b;
  const int gpus = visible_cuda_devices();
  // `auto` means a GPU when there is one; the emulated device is not one.
  const bool auto_skips = cfg.runtime.device == DeviceKind::auto_ && cuda_device_emulated();
  b.device = resolve_device(cfg.runtime.device, auto_skips ? 0 : gpus, cuda_built(), cfg.source);
  b.comm = resolve_run_comm(cfg, b.device, env.local_size, gpus);
  check_local_devices(cfg, b.device, env.local_size, gpus, b.comm);
  if (b.device == Device::cpu) {
    const int threads = cpu_thread_share(cfg.runtime.threads, env);
    b.ops = make_cpu_ops(threads);
    b.describe = detail::concat("cpu (", threads, " thread", threads == 1 ? "" : "s", ")");
    return b;
  }
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
  CudaContextOptions o;
  o.device = cuda_device_for_rank(env.local_rank, gpus);
  o.attention_tensor_cores = uses_tensor_core_attention(cfg);
  auto ops = std::make_unique<CudaOps>(o);
  b.cuda_device = o.device;
  b.cuda_stream = ops->stream();
  cudaDeviceProp prop{};
  const bool named = cudaGetDeviceProperties(&prop, o.device) == cudaSuccess;
  b.describe = detail::concat("cuda:", o.device, " (", named ? prop.name : "?", ", ",
                              to_string(cfg.runtime.dtype), ", ",
                              o.attention_tensor_cores ? "tensor-core" : "SIMT", " attention)");
  b.ops = std::move(ops);
  return b;
#else
  fail("runtime.device=cuda: this build has no CUDA backend");
#endif
}

bool nccl_built() {
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

ParallelComm resolve_run_comm(const Config& cfg, Device device, int local_ranks, int gpus) {
  const ParallelComm c = resolve_comm(cfg, device == Device::cuda, nccl_built());
  // NCCL refuses two ranks on one device: auto shares GPUs over MPI instead.
  if (c == ParallelComm::nccl && cfg.parallel.comm == ParallelComm::auto_ && local_ranks > gpus)
    return ParallelComm::mpi;
  return c;
}

namespace {
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
cudaStream_t stream_of(const ComputeBackend& b) { return static_cast<cudaStream_t>(b.cuda_stream); }
#endif

MeshCommOptions mesh_options(const ComputeBackend& backend, ParallelComm comm) {
  MeshCommOptions o;
  if (backend.device == Device::cpu) return o;  // MPI on host buffers
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
  if (comm == ParallelComm::mpi) {
    o.backend = CommBackend::mpi_staged;
    o.staging = std::make_shared<CudaHostStaging>(stream_of(backend));
    return o;
  }
#endif
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
  o.backend = CommBackend::nccl;
  o.nccl = nccl_mesh_builder(backend.cuda_device, stream_of(backend));
  return o;
#else
  fail("parallel.comm=", to_string(comm), ": no communicator for ", backend.describe,
       " in this build");
#endif
}
}  // namespace

DeviceMesh make_run_mesh(const ParallelDims& dims, const MpiCommunicator* world,
                         const ComputeBackend& backend, ParallelComm comm) {
  // One rank moves no buffers (every axis has size 1): staged in-process
  // communicators cost nothing, where NCCL would bring up five communicators
  // (and its network bootstrap) for no traffic.
  if (dims.world_size() == 1 && backend.device != Device::cpu) comm = ParallelComm::mpi;
  return make_device_mesh(dims, world, mesh_options(backend, comm));
}

std::unique_ptr<Communicator> make_run_world(const MpiCommunicator& world,
                                             const ComputeBackend& backend, ParallelComm comm) {
  auto dup = MpiCommunicator::dup(world.comm(), "world", world.deadline());
  if (backend.device == Device::cpu) return dup;
  const MeshCommOptions o = mesh_options(backend, comm);
  if (o.backend == CommBackend::mpi_staged)
    return std::make_unique<StagedCommunicator>(std::move(dup), o.staging);
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
  return NcclCommunicator::create(world, backend.cuda_device, stream_of(backend), "world",
                                  world.deadline());
#else
  fail("no device communicator in this build");
#endif
}

}  // namespace gt
