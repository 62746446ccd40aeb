// Per-kernel page traffic (see traffic.hpp).
#include "traffic.hpp"

#include <sys/mman.h>

namespace gt::emu {

namespace {
constexpr uint8_t kRead = 1, kWritten = 2;
}  // namespace

void TrafficCounter::begin_kernel(const std::string& name, MemoryTable& memory) {
  if (!enabled_) return;
  kernel_ = name;
  pages_.clear();
  active_ = true;
  memory.protect_data(PROT_NONE);
}

void TrafficCounter::end_kernel(MemoryTable& memory) {
  if (!active_) return;
  active_ = false;
  memory.protect_data(PROT_READ | PROT_WRITE);  // kernels run in the device phase
  KernelTraffic t;
  t.kernel = kernel_;
  t.page_bytes = page_size();
  for (const auto& [page, how] : pages_) {
    t.pages_read += (how & kRead) ? 1 : 0;
    t.pages_written += (how & kWritten) ? 1 : 0;
  }
  done_.push_back(std::move(t));
}

bool TrafficCounter::on_fault(const void* addr, bool write, const MemoryTable& memory) {
  if (!active_ || !memory.in_device_data(addr)) return false;
  const uintptr_t page = reinterpret_cast<uintptr_t>(addr) & ~(uintptr_t{page_size()} - 1);
  uint8_t& how = pages_[page];
  // A store to a page already open for reading (or a first store) opens it
  // fully; a load opens it for reading only, so a later store still shows.
  how |= write ? kWritten : kRead;
  mprotect(reinterpret_cast<void*>(page), page_size(),
           (how & kWritten) ? PROT_READ | PROT_WRITE : PROT_READ);
  return true;
}

std::vector<KernelTraffic> TrafficCounter::take() {
  std::vector<KernelTraffic> out;
  out.swap(done_);
  return out;
}

}  // namespace gt::emu
