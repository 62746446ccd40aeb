// UploadStaging (see upload_staging.hpp).
#include "kernels/cuda/upload_staging.hpp"

#include <cstring>

#include "kernels/cuda/cuda_check.hpp"

namespace gt::cuda {

UploadStaging::~UploadStaging() {
  for (Slot& s : slots_)
    if (s.in_flight) CUDA_LOG_ERROR(cudaEventSynchronize(s.copied.get()));
}

bool UploadStaging::copy(void* dst, const void* host, size_t bytes, cudaStream_t stream) {
  if (bytes > kMaxStagedBytes) return false;
  if (bytes == 0) return true;
  Slot& slot = slots_[static_cast<size_t>(next_)];
  next_ = (next_ + 1) % kSlots;
  // The copy that last read this slot must be done before we overwrite it.
  if (slot.in_flight) slot.copied.synchronize();
  if (slot.buffer.bytes() < bytes) slot.buffer = PinnedBuffer(bytes);
  std::memcpy(slot.buffer.data(), host, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, slot.buffer.data(), bytes, cudaMemcpyHostToDevice, stream));
  slot.copied.record(stream);
  slot.in_flight = true;
  return true;
}

void UploadStaging::copy_or_wait(void* dst, const void* host, size_t bytes, cudaStream_t stream) {
  if (copy(dst, host, bytes, stream)) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace gt::cuda
