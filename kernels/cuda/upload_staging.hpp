// Host-to-device uploads that never make the host wait for the GPU.
//
// A copy from pageable host memory is synchronous for the host: it returns
// only once the copy has run, i.e. after everything queued before it on the
// stream. Done for every micro-batch's tokens and targets, that drains the
// GPU's queue twice per micro-batch and leaves it idle while the host
// enqueues the next one. UploadStaging copies the bytes into page-locked
// (pinned) staging first, on the host, and lets cudaMemcpyAsync take them
// from there, so the copy joins the stream's queue and the host goes on.
//
// Invariants:
//   * a ring of kSlots pinned slots, each with an event recorded after the
//     copy that reads it; a slot is written again only after its event has
//     completed (a wait on that one copy, kSlots uploads ago: with two
//     uploads per micro-batch the host runs up to two micro-batches ahead);
//   * the caller's host memory is read before copy() returns, so it may be
//     reused at once (the Ops::upload contract);
//   * uploads larger than kMaxStagedBytes (setup: parameters, checkpoints)
//     are not staged: copy() returns false and the caller copies synchronously,
//     so pinned memory stays small (a slot grows to the largest staged upload);
//   * the copies are ordered on the stream like kernels: whoever reads the
//     destination from another stream waits on this one (as every collective
//     does).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>

#include "kernels/cuda/cuda_resources.hpp"

namespace gt::cuda {

class UploadStaging {
 public:
  static constexpr int kSlots = 4;
  static constexpr size_t kMaxStagedBytes = size_t{16} << 20;

  UploadStaging() = default;
  // Waits for the copies still reading the slots before freeing them.
  ~UploadStaging();
  UploadStaging(const UploadStaging&) = delete;
  UploadStaging& operator=(const UploadStaging&) = delete;

  // Enqueues dst (device) = `bytes` of `host` on `stream` through the next
  // slot and returns true; false (nothing done) when bytes > kMaxStagedBytes.
  bool copy(void* dst, const void* host, size_t bytes, cudaStream_t stream);
  // copy() when it stages; else a copy straight from `host` that is waited
  // for. Either way `host` may be reused on return.
  void copy_or_wait(void* dst, const void* host, size_t bytes, cudaStream_t stream);

 private:
  struct Slot {
    PinnedBuffer buffer;
    CudaEvent copied;  // recorded after the copy that read `buffer`
    bool in_flight = false;
  };
  std::array<Slot, kSlots> slots_;
  int next_ = 0;
};

}  // namespace gt::cuda
