// Device and pinned memory (see device_memory.hpp).
#include "device_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "diagnostics.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GT_EMU_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#else
#define GT_EMU_POISON(p, n) ((void)(p), (void)(n))
#endif

namespace gt::emu {

namespace {

constexpr size_t kAlign = 256;  // cudaMalloc's guarantee

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

bool MemoryTable::allocate(void** out, size_t bytes, int device, bool pinned) {
  *out = nullptr;
  if (bytes == 0) return true;
  Allocation a;
  a.bytes = bytes;
  a.device = device;
  a.pinned = pinned;
  a.serial = ++serial_;
  if (pinned) {
    void* p = std::aligned_alloc(kAlign, round_up(bytes, kAlign));
    if (!p) return false;
    a.base = static_cast<unsigned char*>(p);
  } else {
    const size_t page = page_size();
    const size_t data = round_up(round_up(bytes, kAlign), page);
    a.mapping_bytes = data + 2 * page;
    void* m = mmap(nullptr, a.mapping_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) return false;
    a.mapping = static_cast<unsigned char*>(m);
    unsigned char* data_begin = a.mapping + page;
    a.base = data_begin + data - round_up(bytes, kAlign);
    if (mprotect(data_begin, data, device_phase_ ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
      munmap(m, a.mapping_bytes);
      return false;
    }
    GT_EMU_POISON(data_begin, static_cast<size_t>(a.base - data_begin));
    GT_EMU_POISON(a.base + bytes, static_cast<size_t>(data_begin + data - (a.base + bytes)));
  }
  by_base_.emplace(a.base, a);
  *out = a.base;
  return true;
}

bool MemoryTable::release(void* p, bool pinned) {
  auto it = by_base_.find(static_cast<unsigned char*>(p));
  if (it == by_base_.end() || it->second.pinned != pinned) return false;
  const Allocation a = it->second;
  by_base_.erase(it);
  if (pinned) {
    std::free(a.base);
  } else {
#if defined(__SANITIZE_ADDRESS__)
    ASAN_UNPOISON_MEMORY_REGION(a.mapping, a.mapping_bytes);
#endif
    munmap(a.mapping, a.mapping_bytes);
  }
  return true;
}

const Allocation* MemoryTable::find(const void* p) const {
  const auto* b = static_cast<const unsigned char*>(p);
  auto it = by_base_.upper_bound(b);
  if (it == by_base_.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  return b >= a.base && b < a.base + a.bytes ? &a : nullptr;
}

const Allocation* MemoryTable::find_device_range(const void* p, size_t bytes) const {
  const Allocation* a = find(p);
  if (!a || a->pinned) return nullptr;
  const auto* b = static_cast<const unsigned char*>(p);
  return static_cast<size_t>(a->base + a->bytes - b) >= bytes ? a : nullptr;
}

bool MemoryTable::is_pinned(const void* p) const {
  const Allocation* a = find(p);
  return a && a->pinned;
}

void MemoryTable::set_device_phase(bool on) {
  if (on == device_phase_) return;
  device_phase_ = on;
  protect_data(on ? PROT_READ | PROT_WRITE : PROT_NONE);
}

void MemoryTable::protect_data(int prot) {
  const size_t page = page_size();
  for (auto& [base, a] : by_base_)
    if (!a.pinned) mprotect(a.mapping + page, a.mapping_bytes - 2 * page, prot);
}

bool MemoryTable::in_device_data(const void* p) const {
  const auto* b = static_cast<const unsigned char*>(p);
  const size_t page = page_size();
  auto it = by_base_.upper_bound(b);  // the first allocation whose base is past b
  // The data pages start before `base`, so look at this one and the one before.
  for (int k = 0; k < 2; ++k) {
    if (it != by_base_.end()) {
      const Allocation& a = it->second;
      if (!a.pinned && b >= a.mapping + page && b < a.mapping + a.mapping_bytes - page) return true;
    }
    if (it == by_base_.begin()) break;
    --it;
  }
  return false;
}

size_t MemoryTable::device_bytes(int device) const {
  size_t n = 0;
  for (const auto& [base, a] : by_base_)
    if (!a.pinned && a.device == device) n += a.bytes;
  return n;
}

std::string MemoryTable::describe(const void* p, bool* in_guard) const {
  const auto* b = static_cast<const unsigned char*>(p);
  *in_guard = false;
  for (const auto& [base, a] : by_base_) {
    if (a.pinned) continue;
    if (b < a.mapping || b >= a.mapping + a.mapping_bytes) continue;
    const long long off = static_cast<long long>(b - a.base);
    std::string where;
    if (off >= 0 && static_cast<size_t>(off) < a.bytes) {
      where = "byte " + std::to_string(off) + " of";
    } else {
      *in_guard = true;
      where = off < 0 ? std::to_string(-off) + " bytes before the start of"
                      : std::to_string(off - static_cast<long long>(a.bytes)) +
                            " bytes past the end of";
    }
    return where + " device allocation #" + std::to_string(a.serial) + " (" +
           std::to_string(a.bytes) + " bytes on device " + std::to_string(a.device) + ")";
  }
  return "";
}

}  // namespace gt::emu
