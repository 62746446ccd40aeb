// Buffer: memory owned by one backend (host memory for the CPU backend,
// device memory for CUDA), handed out by Ops::allocate. The model, the
// parameter store and the optimizer state live in Buffers, so the same code
// runs on either backend: nothing outside the backend's own ops (and its
// upload/download) may dereference a Buffer's data on the host.
//
// RAII and move-only: the backend's release function runs in the destructor.
// A Buffer must not outlive the Ops that allocated it (its release may use
// the backend's context).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>

#include "kernels/core/tensor.hpp"

namespace gt {

class Buffer {
 public:
  using Release = std::function<void(void*)>;
  Buffer() = default;
  // Takes ownership of `bytes` at `data` on `device`; `release` frees it.
  Buffer(void* data, size_t bytes, Device device, Release release);
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_.get(); }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // The first element, typed (for views and collectives, not for host access).
  float* f32() const { return static_cast<float*>(ptr_.get()); }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_.get()); }
  int64_t floats() const { return static_cast<int64_t>(bytes_ / sizeof(float)); }

  // A contiguous fp32 / int32 view of `shape` starting `offset` elements in.
  TensorView f32_view(std::initializer_list<int64_t> shape, int64_t offset = 0) const;
  TensorView i32_view(std::initializer_list<int64_t> shape, int64_t offset = 0) const;

 private:
  std::unique_ptr<void, Release> ptr_{nullptr, Release{}};
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
};

}  // namespace gt
