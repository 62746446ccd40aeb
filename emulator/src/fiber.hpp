// Fibers: the execution contexts of emulated CUDA threads. A fiber owns a
// stack (mmap'd, with a PROT_NONE guard page below it so an overflow faults
// instead of corrupting a neighbour) and a saved stack pointer; switching is a
// handful of instructions (emulator/src/fiber.cpp: x86-64 assembly, ucontext
// elsewhere), about 40x cheaper than glibc's swapcontext, which makes a
// sigprocmask syscall per switch. x86-64 only (an #error elsewhere).
//
// Sanitizers: under AddressSanitizer every switch is announced with
// __sanitizer_start/finish_switch_fiber so ASan knows which stack is live;
// under ThreadSanitizer every fiber is a TSan fiber and switches pass
// __tsan_switch_to_fiber_no_sync, so a switch creates no happens-before edge:
// only the barriers and the launch/exit points annotate ordering, and TSan
// sees a missing __syncthreads as the race it is.
//
// Invariant: fibers are started and resumed only from the scheduler context
// (run()), and a fiber only ever switches back to it (yield()).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gt::emu {

class Fiber {
 public:
  using Entry = void (*)(Fiber*);

  explicit Fiber(size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Prepares a fresh start of `entry(this)` on an empty stack (discarding any
  // frames a previous, abandoned run left behind).
  void reset(Entry entry, void* user);
  // From the scheduler: runs the fiber until it yields.
  void run();
  // From inside the fiber: back to the scheduler. `final` when the fiber will
  // never be resumed (it finished, or unwound after a fault).
  void yield(bool final);

  void* user() const { return user_; }
  // Whether `p` lies in the guard page below this fiber's stack.
  bool in_guard_page(const void* p) const;
  size_t stack_bytes() const { return stack_bytes_; }

  // A run was abandoned mid-stack (a parked thread of a block that faulted):
  // the next reset() clears what it left in the sanitizer's shadow.
  void mark_abandoned();

  // The fiber's first function (fiber.cpp) calls these two.
  void entered();
  void call_entry();

 private:
  unsigned char* mapping_ = nullptr;  // guard page, then the stack
  size_t mapping_bytes_ = 0;
  size_t stack_bytes_ = 0;
  void* sp_ = nullptr;                // saved stack pointer while not running
  void* scheduler_sp_ = nullptr;      // the scheduler's, while this fiber runs
  void* user_ = nullptr;
  Entry entry_ = nullptr;
  bool dirty_ = false;                // a run was abandoned mid-stack
  void* tsan_fiber_ = nullptr;
  void* tsan_scheduler_ = nullptr;
  void* asan_fake_stack_ = nullptr;
  void* asan_scheduler_fake_stack_ = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
  bool finished_run_ = true;
};

}  // namespace gt::emu
