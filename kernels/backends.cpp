#include "kernels/backends.hpp"

#include "kernels/core/error.hpp"

#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/cuda_resources.hpp"
#endif

namespace gt {

bool cuda_built() {
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_device_emulated() {
#if defined(TRAINER_CUDA_EMULATOR) && TRAINER_CUDA_EMULATOR
  return true;
#else
  return false;
#endif
}

int visible_cuda_devices() {
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
  return cuda::cuda_device_count();
#else
  return 0;
#endif
}

CudaBackend make_cuda_backend(const CudaBackendOptions& options) {
#if defined(TRAINER_HAVE_CUDA) && TRAINER_HAVE_CUDA
  CudaContextOptions o;
  o.device = options.device;
  o.attention_tensor_cores = options.attention_tensor_cores;
  o.attention_wgmma = options.attention_wgmma;
  auto ops = std::make_unique<CudaOps>(o);
  CudaBackend b;
  b.stream = ops->stream();
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, o.device) == cudaSuccess) {
    b.device_name = prop.name;
    b.compute_capability = prop.major * 10 + prop.minor;
  } else {
    b.device_name = "?";
  }
  b.ops = std::move(ops);
  return b;
#else
  (void)options;
  fail(
      "runtime.device=cuda: this build has no CUDA backend (nvcc was not found when it was "
      "configured)");
#endif
}

}  // namespace gt
