// Which compute backends this build has, and the factory of the GPU one. It
// is the one place above the CUDA backend that asks whether CUDA was built
// (the answer is compiled into gt_backends), so the trainer chooses a device
// with plain function calls: no CUDA header or #if above kernels/ and
// parallel/.
#pragma once

#include <memory>
#include <string>

#include "kernels/ops.hpp"

namespace gt {

bool cuda_built();            // this build has the CUDA backend (real or emulated)
bool cuda_device_emulated();  // ... on the emulated device (docs/EMULATOR.md)
int visible_cuda_devices();   // 0 without a CUDA backend, a driver or a GPU

struct CudaBackendOptions {
  int device = 0;                       // CUDA device index
  bool attention_tensor_cores = false;  // runtime.attention: tensor-core flash attention in bf16
  bool attention_wgmma = false;         // runtime.attention: wgmma: the sm_90 forward
};
struct CudaBackend {
  std::unique_ptr<Ops> ops;
  void* stream = nullptr;   // the compute stream its ops run on (a cudaStream_t)
  std::string device_name;  // "NVIDIA H200", or "?" when the driver does not say
  int compute_capability = 0;  // major x 10 + minor (90: sm_90), 0 when the driver does not say
};
// A CudaOps on `options.device`. Throws gt::Error in a build without CUDA.
CudaBackend make_cuda_backend(const CudaBackendOptions& options);

}  // namespace gt
