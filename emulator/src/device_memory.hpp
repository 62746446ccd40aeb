// Device and pinned-host memory of the emulated device.
//
// A device allocation is its own mapping: a PROT_NONE guard page, the data
// pages, another guard page. The pointer handed out is 256-byte aligned (as
// cudaMalloc's) and placed so that the allocation ends within 255 bytes of
// the trailing guard page: running past the end faults, and under
// AddressSanitizer the slack on both sides is poisoned, so even a one-element
// overrun is reported.
//
// While host code runs, every device allocation is PROT_NONE (the host
// phase); the stream scheduler opens them (the device phase) only while it
// executes queued work. Host code that dereferences a device pointer faults,
// as it would with a real GPU, and the SIGSEGV handler says which allocation
// was touched and by whom. Pinned host memory (cudaMallocHost) stays
// accessible to both.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace gt::emu {

// The host's page size (mprotect's granularity).
size_t page_size();

struct Allocation {
  unsigned char* base = nullptr;  // what the caller got
  size_t bytes = 0;               // what the caller asked for
  unsigned char* mapping = nullptr;
  size_t mapping_bytes = 0;
  int device = 0;
  bool pinned = false;            // cudaMallocHost (host memory, never protected)
  unsigned long long serial = 0;  // allocation number, for reports
};

class MemoryTable {
 public:
  // nullptr for 0 bytes (as cudaMalloc); nullptr and false when out of memory.
  bool allocate(void** out, size_t bytes, int device, bool pinned);
  // False when `p` is not the base of a live allocation of that kind.
  bool release(void* p, bool pinned);

  // The live allocation whose [base, base + bytes) contains p, or nullptr.
  const Allocation* find(const void* p) const;
  // The device allocation containing all of [p, p + bytes), or nullptr.
  const Allocation* find_device_range(const void* p, size_t bytes) const;
  bool is_pinned(const void* p) const;

  // Opens (device phase) or closes (host phase) every device allocation.
  void set_device_phase(bool on);
  // mprotect(prot) on every device allocation's data pages, whatever the
  // phase (the traffic counter closes them around a kernel).
  void protect_data(int prot);
  // True when p lies in the data pages (not a guard page) of a device
  // allocation.
  bool in_device_data(const void* p) const;
  bool in_device_phase() const { return device_phase_; }

  size_t device_bytes(int device) const;
  // "byte 12 of device allocation #3 (4096 bytes on device 0)", or "" when
  // `p` is in no allocation or guard page (used by the SIGSEGV handler).
  std::string describe(const void* p, bool* in_guard) const;

 private:
  std::map<const unsigned char*, Allocation> by_base_;
  unsigned long long serial_ = 0;
  bool device_phase_ = false;
};

}  // namespace gt::emu
