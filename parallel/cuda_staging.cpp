#include "parallel/cuda_staging.hpp"

#include "kernels/cuda/cuda_check.hpp"

namespace gt {

void* CudaHostStaging::allocate_host(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}

void CudaHostStaging::free_host(void* p) noexcept {
  if (p) CUDA_LOG_ERROR(cudaFreeHost(p));
}

void CudaHostStaging::to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaHostStaging::to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace gt
