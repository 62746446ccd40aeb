// Global-memory traffic of each kernel, counted by page (the public side is
// gt_emu/control.hpp's set_traffic_counting / take_traffic).
//
// How: while counting, every device allocation's data pages are closed
// (PROT_NONE) when a kernel starts. A kernel's first load from a page faults;
// the fault handler records the page as read and opens it for reading. Its
// first store faults again (or first, for a page only written) and records
// the page as written, opening it fully. When the kernel ends the pages are
// reopened for the next one. So each kernel is charged the distinct pages it
// loads from and stores to: the least DRAM traffic it can cause, in page
// units (4 KiB on x86-64; a tensor of n bytes costs ceil(n / 4096) pages or
// one more), which is what a roofline floor wants. Not counted: cuBLASLt
// GEMMs and copies (host code, not kernels), shared memory, and a value a
// kernel rereads (one touch per page). An atomic read-modify-write faults as
// a store and counts as written only.
//
// Invariant: counting only happens inside BlockRunner::run_grid, under the
// emulator's lock, on the thread that runs the kernel; the fault handler
// asks on_fault() first, and a fault it does not claim goes on to the
// explainer.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_memory.hpp"
#include "gt_emu/control.hpp"

namespace gt::emu {

class TrafficCounter {
 public:
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }

  // Around one kernel (no-ops unless enabled).
  void begin_kernel(const std::string& name, MemoryTable& memory);
  void end_kernel(MemoryTable& memory);

  // The fault handler's question: is this a counted first touch? If so the
  // page is recorded and opened, and the instruction can be retried.
  bool on_fault(const void* addr, bool write, const MemoryTable& memory);

  // The kernels counted since the last call, in execution order.
  std::vector<KernelTraffic> take();

 private:
  bool enabled_ = false;
  bool active_ = false;  // inside a counted kernel
  std::string kernel_;
  std::unordered_map<uintptr_t, uint8_t> pages_;  // page -> kRead | kWritten
  std::vector<KernelTraffic> done_;
};

}  // namespace gt::emu
