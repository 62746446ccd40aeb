// Out-of-line parts of the RAII owners: allocation (throws via CUDA_CHECK)
// and release (logs via CUDA_LOG_ERROR, never throws).
#include "kernels/cuda/cuda_resources.hpp"

#include "kernels/cuda/cuda_check.hpp"

namespace gt::cuda {

int cuda_device_count() noexcept {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    // No driver / no device / init failure: not an error for the caller.
    // Clear it so it does not resurface from a later cudaGetLastError().
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool cuda_available() noexcept { return cuda_device_count() > 0; }

namespace detail {
void DeviceFree::operator()(void* p) const noexcept { CUDA_LOG_ERROR(cudaFree(p)); }
void PinnedFree::operator()(void* p) const noexcept { CUDA_LOG_ERROR(cudaFreeHost(p)); }
void StreamDestroy::operator()(cudaStream_t s) const noexcept {
  CUDA_LOG_ERROR(cudaStreamDestroy(s));
}
void EventDestroy::operator()(cudaEvent_t e) const noexcept { CUDA_LOG_ERROR(cudaEventDestroy(e)); }
void CublasLtDestroy::operator()(cublasLtHandle_t h) const noexcept {
  CUBLAS_LOG_ERROR(cublasLtDestroy(h));
}
}  // namespace detail

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));
  ptr_.reset(p);
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, bytes));
  ptr_.reset(p);
}

CudaStream::CudaStream(unsigned flags) {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, flags));
  s_.reset(s);
}

void CudaStream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(get())); }

void CudaStream::wait(cudaEvent_t e) const { CUDA_CHECK(cudaStreamWaitEvent(get(), e, 0)); }

CudaEvent::CudaEvent(unsigned flags) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  e_.reset(e);
}

void CudaEvent::record(cudaStream_t s) const { CUDA_CHECK(cudaEventRecord(get(), s)); }

void CudaEvent::synchronize() const { CUDA_CHECK(cudaEventSynchronize(get())); }

float CudaEvent::elapsed_ms_since(const CudaEvent& start) const {
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), get()));
  return ms;
}

CublasLtHandle::CublasLtHandle() {
  cublasLtHandle_t h = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&h));
  h_.reset(h);
}

}  // namespace gt::cuda
