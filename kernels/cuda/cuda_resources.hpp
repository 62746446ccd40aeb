// RAII owners for every CUDA-side handle the trainer holds: device memory,
// pinned host memory, streams, events and the cuBLASLt handle. Each is
// move-only (copy deleted), frees in its destructor, and a destructor never
// throws: a failing free is logged to stderr (CUDA_LOG_ERROR) and dropped.
// Teardown order: cudaFree/cudaFreeHost synchronise the device, so buffers
// may go in any order; members are destroyed in reverse declaration order,
// so declare streams first and the events and cuBLASLt handle used on them
// after, so those go before their stream.
//
// Host-only header: include it from g++-compiled code freely.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

namespace gt::cuda {

// Number of visible CUDA devices; 0 (never a throw) when there is no driver,
// no device, or the runtime cannot initialise. Not cached: callers that ask
// often should keep the answer.
int cuda_device_count() noexcept;
// cuda_device_count() > 0.
bool cuda_available() noexcept;

namespace detail {
struct DeviceFree {
  void operator()(void* p) const noexcept;
};
struct PinnedFree {
  void operator()(void* p) const noexcept;
};
struct StreamDestroy {
  void operator()(cudaStream_t s) const noexcept;
};
struct EventDestroy {
  void operator()(cudaEvent_t e) const noexcept;
};
struct CublasLtDestroy {
  void operator()(cublasLtHandle_t h) const noexcept;
};
}  // namespace detail

// cudaMalloc'd bytes. A zero-byte buffer holds nullptr and allocates nothing.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(DeviceBuffer&&) noexcept = default;
  DeviceBuffer& operator=(DeviceBuffer&&) noexcept = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_.get(); }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_.get()); }
  size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<void, detail::DeviceFree> ptr_;
  size_t bytes_ = 0;
};

// cudaMallocHost'd (page-locked) bytes, for async host<->device copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  PinnedBuffer(PinnedBuffer&&) noexcept = default;
  PinnedBuffer& operator=(PinnedBuffer&&) noexcept = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return ptr_.get(); }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_.get()); }
  size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<void, detail::PinnedFree> ptr_;
  size_t bytes_ = 0;
};

// A stream; non-blocking by default so it never synchronises implicitly with
// the legacy default stream (all ordering is explicit, through events).
class CudaStream {
 public:
  explicit CudaStream(unsigned flags = cudaStreamNonBlocking);
  CudaStream(CudaStream&&) noexcept = default;
  CudaStream& operator=(CudaStream&&) noexcept = default;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return s_.get(); }
  void synchronize() const;
  // This stream waits (on the device) for `e` before running later work.
  void wait(cudaEvent_t e) const;

 private:
  std::unique_ptr<CUstream_st, detail::StreamDestroy> s_;
};

// An event; timing disabled by default (cheaper for pure ordering).
class CudaEvent {
 public:
  explicit CudaEvent(unsigned flags = cudaEventDisableTiming);
  CudaEvent(CudaEvent&&) noexcept = default;
  CudaEvent& operator=(CudaEvent&&) noexcept = default;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return e_.get(); }
  void record(cudaStream_t s) const;
  void synchronize() const;
  // Milliseconds from `start` to this event; both need timing enabled (flags 0).
  float elapsed_ms_since(const CudaEvent& start) const;

 private:
  std::unique_ptr<CUevent_st, detail::EventDestroy> e_;
};

class CublasLtHandle {
 public:
  CublasLtHandle();
  CublasLtHandle(CublasLtHandle&&) noexcept = default;
  CublasLtHandle& operator=(CublasLtHandle&&) noexcept = default;
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;

  cublasLtHandle_t get() const { return h_.get(); }

 private:
  std::unique_ptr<cublasLtContext, detail::CublasLtDestroy> h_;
};

}  // namespace gt::cuda

namespace gt {
// Re-exported so tests and the trainer can write gt::cuda_available().
using cuda::cuda_available;
using cuda::cuda_device_count;
}  // namespace gt
