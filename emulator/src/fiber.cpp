// Fiber stacks and the context switch (see fiber.hpp).
#include "fiber.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "device_memory.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define GT_EMU_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
// The emulator runtime is built without -fsanitize=thread even in a TSan
// build (its bookkeeping is shared between fibers by design); CMake passes
// GT_EMU_TSAN so that it still drives TSan's fiber API.
#if defined(GT_EMU_TSAN) && GT_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#if !defined(__x86_64__)
#error "the emulator's fiber switch (gt_emu_switch) is written for x86-64"
#endif

namespace gt::emu {

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "gt-emu: fatal: %s\n", what);
  std::abort();
}

}  // namespace

// gt_emu_switch(save, load): saves the callee-saved registers, MXCSR and the
// x87 control word on the current stack, stores the stack pointer in *save,
// then restores the same from the stack at `load` and returns into it.
// A fresh stack is laid out so that the first switch "returns" into
// gt_emu_fiber_start with r12 = the fiber and r13 = the function to call.
extern "C" void gt_emu_switch(void** save, void* load);
extern "C" void gt_emu_fiber_start();
asm(R"(
  .text
  .globl gt_emu_switch
  .type gt_emu_switch,@function
gt_emu_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size gt_emu_switch,.-gt_emu_switch

  .globl gt_emu_fiber_start
  .type gt_emu_fiber_start,@function
gt_emu_fiber_start:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size gt_emu_fiber_start,.-gt_emu_fiber_start
)");

namespace {

// The first function on every fiber stack; never returns.
void fiber_main(Fiber* f);

}  // namespace

Fiber::Fiber(size_t stack_bytes) {
  const size_t page = page_size();
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  mapping_bytes_ = stack_bytes_ + page;
  void* m = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  if (m == MAP_FAILED) die("cannot map a fiber stack");
  mapping_ = static_cast<unsigned char*>(m);
  if (mprotect(mapping_, page, PROT_NONE) != 0) die("cannot protect a fiber's guard page");
#if defined(GT_EMU_TSAN) && GT_EMU_TSAN
  tsan_fiber_ = __tsan_create_fiber(0);
#endif
}

Fiber::~Fiber() {
#if defined(GT_EMU_TSAN) && GT_EMU_TSAN
  if (tsan_fiber_) __tsan_destroy_fiber(tsan_fiber_);
#endif
  if (mapping_) munmap(mapping_, mapping_bytes_);
}

bool Fiber::in_guard_page(const void* p) const {
  const auto* b = static_cast<const unsigned char*>(p);
  return b >= mapping_ && b < mapping_ + page_size();
}

void Fiber::reset(Entry entry, void* user) {
  user_ = user;
  unsigned char* stack = mapping_ + page_size();
#if defined(GT_EMU_ASAN)
  // An abandoned run may have left poisoned frames behind.
  if (dirty_) __asan_unpoison_memory_region(stack, stack_bytes_);
#endif
  dirty_ = false;
  finished_run_ = false;
  // Frame read by gt_emu_switch: [mxcsr|fpucw] r15 r14 r13 r12 rbx rbp ret.
  auto* top = reinterpret_cast<uint64_t*>(stack + stack_bytes_);  // 16-byte aligned
  uint64_t* sp = top - 8;  // after the 8 pops and ret, rsp == top: aligned for the call
  uint32_t mxcsr = 0;
  uint16_t fpucw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  sp[0] = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fpucw) << 32);
  sp[1] = 0;                                           // r15
  sp[2] = 0;                                           // r14
  sp[3] = reinterpret_cast<uint64_t>(&fiber_main);     // r13: the function
  sp[4] = reinterpret_cast<uint64_t>(this);            // r12: its argument
  sp[5] = 0;                                           // rbx
  sp[6] = 0;                                           // rbp
  sp[7] = reinterpret_cast<uint64_t>(&gt_emu_fiber_start);
  sp_ = sp;
  entry_ = entry;
}

void Fiber::run() {
  if (finished_run_) die("resuming a finished fiber");
#if defined(GT_EMU_ASAN)
  __sanitizer_start_switch_fiber(&asan_scheduler_fake_stack_, mapping_ + page_size(),
                                 stack_bytes_);
#endif
#if defined(GT_EMU_TSAN) && GT_EMU_TSAN
  tsan_scheduler_ = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(tsan_fiber_, __tsan_switch_to_fiber_no_sync);
#endif
  gt_emu_switch(&scheduler_sp_, sp_);
#if defined(GT_EMU_ASAN)
  __sanitizer_finish_switch_fiber(asan_scheduler_fake_stack_, nullptr, nullptr);
#endif
}

void Fiber::yield(bool final) {
  if (final) finished_run_ = true;
#if defined(GT_EMU_ASAN)
  __sanitizer_start_switch_fiber(final ? nullptr : &asan_fake_stack_, scheduler_stack_bottom_,
                                 scheduler_stack_size_);
#endif
#if defined(GT_EMU_TSAN) && GT_EMU_TSAN
  __tsan_switch_to_fiber(tsan_scheduler_, __tsan_switch_to_fiber_no_sync);
#endif
  gt_emu_switch(&sp_, scheduler_sp_);
  // Resumed by run().
#if defined(GT_EMU_ASAN)
  __sanitizer_finish_switch_fiber(asan_fake_stack_, &scheduler_stack_bottom_,
                                  &scheduler_stack_size_);
#endif
}

void Fiber::entered() {
#if defined(GT_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &scheduler_stack_bottom_, &scheduler_stack_size_);
#endif
}

void Fiber::mark_abandoned() { dirty_ = true; }

namespace {

void fiber_main(Fiber* f) {
  f->entered();
  f->call_entry();
  f->yield(true);
  die("a finished fiber was resumed");
}

}  // namespace

void Fiber::call_entry() { entry_(this); }

}  // namespace gt::emu
