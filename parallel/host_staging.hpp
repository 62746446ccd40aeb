// HostStaging: how a StagedCommunicator moves bytes between the buffers it is
// handed (device memory, in a CUDA run) and the host memory an MPI collective
// runs on. The communicator decides WHEN to copy; this decides HOW, so the
// CUDA copies (parallel/cuda_staging.hpp, CUDA builds only) and a plain
// memcpy for CPU tests plug into the same StagedCommunicator.
//
// Invariants an implementation keeps:
// - to_host / to_device are complete when they return (the staging buffer
//   may be handed to MPI, or reused, right after), and are ordered after all
//   work already issued on the device buffer (the compute stream's kernels).
// - allocate_host never returns null for bytes > 0 (it throws instead);
//   free_host never throws (it runs from destructors).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gt {

class HostStaging {
 public:
  virtual ~HostStaging() = default;
  HostStaging() = default;
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Host memory the copies below are fast from (page-locked for CUDA).
  virtual void* allocate_host(size_t bytes) = 0;
  virtual void free_host(void* p) noexcept = 0;
  // `device_src` / `device_dst` are what the caller handed the communicator.
  virtual void to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual void to_device(void* device_dst, const void* host_src, size_t bytes) = 0;
};

// The "device" is ordinary host memory: copies are memcpy and allocations
// new[]. Counts every byte each way, so tests can check what was staged.
// Also lets the staged path run in a CPU-only build.
class MemcpyHostStaging final : public HostStaging {
 public:
  void* allocate_host(size_t bytes) override;
  void free_host(void* p) noexcept override;
  void to_host(void* host_dst, const void* device_src, size_t bytes) override;
  void to_device(void* device_dst, const void* host_src, size_t bytes) override;

  int64_t bytes_to_host() const { return bytes_to_host_; }
  int64_t bytes_to_device() const { return bytes_to_device_; }
  int64_t allocations() const { return allocations_; }  // allocate_host calls so far
  int64_t live_allocations() const { return live_; }    // not yet freed
  void reset_counts() { bytes_to_host_ = bytes_to_device_ = 0; }

 private:
  int64_t bytes_to_host_ = 0;
  int64_t bytes_to_device_ = 0;
  int64_t allocations_ = 0;
  int64_t live_ = 0;
};

}  // namespace gt
