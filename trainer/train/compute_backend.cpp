#include "trainer/train/compute_backend.hpp"

#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "parallel/mesh_factory.hpp"
#include "parallel/staged_communicator.hpp"
#include "trainer/io/process.hpp"
#include "trainer/train/launch_checks.hpp"

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
  CommRequest req;
  req.asked = cfg.parallel.comm;
  req.device_asked = cfg.runtime.device;
  req.device = b.device;
  req.world_size = env.world_size;
  req.local_ranks = env.local_size;
  req.visible_gpus = gpus;
  req.nccl_built = nccl_built();
  req.source = cfg.source;
  req.host = this_host();
  b.comm = choose_comm(req);
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

namespace {
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
cudaStream_t stream_of(const ComputeBackend& b) { return static_cast<cudaStream_t>(b.cuda_stream); }
#endif

MeshCommOptions mesh_options(const ComputeBackend& backend) {
  MeshCommOptions o;
  o.backend = backend.comm.backend;
  switch (o.backend) {
    case CommBackend::mpi:
      return o;  // MPI on host buffers
    case CommBackend::mpi_staged:
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
      o.staging = std::make_shared<CudaHostStaging>(stream_of(backend));
      return o;
#else
      break;
#endif
    case CommBackend::nccl:
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
      o.nccl = nccl_mesh_builder(backend.cuda_device, stream_of(backend));
      return o;
#else
      break;
#endif
  }
  fail("parallel.comm=", to_string(backend.comm.comm), ": no ", comm_backend_name(o.backend),
       " communicator for ", backend.describe, " in this build");
}
}  // namespace

DeviceMesh make_run_mesh(const ParallelDims& dims, const MpiCommunicator* world,
                         const ComputeBackend& backend) {
  return make_device_mesh(dims, world, mesh_options(backend));
}

std::unique_ptr<Communicator> make_run_world(const MpiCommunicator& world,
                                             const ComputeBackend& backend) {
  auto dup = MpiCommunicator::dup(world.comm(), "world", world.deadline());
  const MeshCommOptions o = mesh_options(backend);
  switch (o.backend) {
    case CommBackend::mpi:
      return dup;
    case CommBackend::mpi_staged:
      return std::make_unique<StagedCommunicator>(std::move(dup), o.staging);
    case CommBackend::nccl:
#if defined(TRAINER_HAVE_NCCL) && TRAINER_HAVE_NCCL
      return NcclCommunicator::create(world, backend.cuda_device, stream_of(backend), "world",
                                      world.deadline());
#else
      break;
#endif
  }
  fail("no device communicator in this build");
}

}  // namespace gt
