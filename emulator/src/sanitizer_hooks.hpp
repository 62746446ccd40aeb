// What the emulator tells the sanitizers about its own work (it is built
// without ThreadSanitizer's instrumentation, but TSan still intercepts its
// memcpy/memset/memcmp calls):
//   GT_EMU_ACQUIRE / GT_EMU_RELEASE (p)   happens-before edges through the
//       sync address p (barriers, warp groups, mbarriers);
//   GtEmuHidden                           an RAII scope in which the calling
//       fiber's memory accesses are the emulator's, not the program's (the
//       NaN poison, a copy landing, the async proxy's snapshots): hidden
//       from TSan, so that they neither race nor order anything;
//   GT_EMU_IN_FLIGHT / GT_EMU_LANDED (p, n)  AddressSanitizer poisons a
//       bulk copy's destination from issue to landing.
#pragma once

#if defined(GT_EMU_TSAN) && GT_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#define GT_EMU_ACQUIRE(p) __tsan_acquire(p)
#define GT_EMU_RELEASE(p) __tsan_release(p)
// TSan's dynamic annotations (its runtime exports them; no header declares them).
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#define GT_EMU_IGNORE_WRITES_BEGIN() AnnotateIgnoreWritesBegin(__FILE__, __LINE__)
#define GT_EMU_IGNORE_WRITES_END() AnnotateIgnoreWritesEnd(__FILE__, __LINE__)
struct GtEmuHidden {
  GtEmuHidden() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~GtEmuHidden() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
  GtEmuHidden(const GtEmuHidden&) = delete;
  GtEmuHidden& operator=(const GtEmuHidden&) = delete;
};
#else
#define GT_EMU_ACQUIRE(p) ((void)(p))
#define GT_EMU_RELEASE(p) ((void)(p))
#define GT_EMU_IGNORE_WRITES_BEGIN() ((void)0)
#define GT_EMU_IGNORE_WRITES_END() ((void)0)
struct GtEmuHidden {};
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GT_EMU_IN_FLIGHT(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define GT_EMU_LANDED(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define GT_EMU_IN_FLIGHT(p, n) ((void)(p), (void)(n))
#define GT_EMU_LANDED(p, n) ((void)(p), (void)(n))
#endif
