#include "trainer/runtime/compute_backend.hpp"

#include "kernels/backends.hpp"
#include "kernels/core/error.hpp"
#include "kernels/cpu/cpu_ops.hpp"
#include "parallel/comm_backends.hpp"
#include "trainer/io/process.hpp"

namespace gt {

Device resolve_device(DeviceKind requested, int visible_gpus, bool cuda_built,
                      const std::string& source) {
  Device d = Device::cpu;
  switch (requested) {
    case DeviceKind::cpu:
      d = Device::cpu;
      break;
    case DeviceKind::auto_:
      d = cuda_built && visible_gpus > 0 ? Device::cuda : Device::cpu;
      break;
    case DeviceKind::cuda:
      if (!cuda_built)
        fail("runtime.device=cuda (", source,
             "): expected a build with the CUDA backend, got a "
             "CPU-only build (nvcc was not found when it was configured); use runtime.device=cpu");
      if (visible_gpus == 0)
        fail("runtime.device=cuda (", source,
             "): expected a visible CUDA device, got none (no "
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
  CudaBackendOptions o;
  o.device = cuda_device_for_rank(env.local_rank, gpus);
  o.attention_tensor_cores = uses_tensor_core_attention(cfg);
  o.attention_wgmma = uses_wgmma_attention(cfg);
  CudaBackend cuda = make_cuda_backend(o);
  // fp8 tensor cores (cuBLASLt's fp8 matmuls) start at sm_89: Ada, Hopper.
  if (cfg.runtime.fp8 != Fp8Recipe::off && cuda.compute_capability > 0 &&
      cuda.compute_capability < 89)
    fail("runtime.fp8=", to_string(cfg.runtime.fp8), " (", cfg.source, "): cuda:", o.device,
         " (", cuda.device_name, ") is sm_", cuda.compute_capability,
         "; fp8 GEMMs need sm_89 or newer (Ada, Hopper). Use runtime.fp8=off on this GPU");
  b.cuda_device = o.device;
  b.cuda_stream = cuda.stream;
  b.describe =
      detail::concat("cuda:", o.device, " (", cuda.device_name, ", ", to_string(cfg.runtime.dtype),
                     ", ",
                     o.attention_wgmma            ? "wgmma-forward, tensor-core-backward"
                     : o.attention_tensor_cores ? "tensor-core"
                                                : "SIMT",
                     " attention",
                     cfg.runtime.fp8 != Fp8Recipe::off
                         ? detail::concat(", fp8 ", to_string(cfg.runtime.fp8), " linears")
                         : std::string(),
                     ")");
  b.ops = std::move(cuda.ops);
  return b;
}

namespace {
CommTarget comm_target(const ComputeBackend& b) {
  return CommTarget{b.comm.backend, b.cuda_device, b.cuda_stream, to_string(b.comm.comm),
                    b.describe};
}
}  // namespace

DeviceMesh make_run_mesh(const ParallelDims& dims, const MpiCommunicator* world,
                         const ComputeBackend& backend) {
  return make_device_mesh(dims, world, mesh_comm_options(comm_target(backend)));
}

std::unique_ptr<Communicator> make_run_world(const MpiCommunicator& world,
                                             const ComputeBackend& backend) {
  return make_world_communicator(world, comm_target(backend));
}

}  // namespace gt
