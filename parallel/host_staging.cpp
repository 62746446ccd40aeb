#include "parallel/host_staging.hpp"

#include <cstring>

namespace gt {

void* MemcpyHostStaging::allocate_host(size_t bytes) {
  // float-aligned storage (new[] of max_align_t), like cudaMallocHost's.
  void* p = ::operator new[](bytes);
  ++allocations_;
  ++live_;
  return p;
}

void MemcpyHostStaging::free_host(void* p) noexcept {
  if (!p) return;
  ::operator delete[](p);
  --live_;
}

void MemcpyHostStaging::to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes) std::memcpy(host_dst, device_src, bytes);
  bytes_to_host_ += static_cast<int64_t>(bytes);
}

void MemcpyHostStaging::to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes) std::memcpy(device_dst, host_src, bytes);
  bytes_to_device_ += static_cast<int64_t>(bytes);
}

}  // namespace gt
