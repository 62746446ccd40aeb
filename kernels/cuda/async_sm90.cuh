// Hopper's asynchronous tile movement (sm_90): mbarrier objects in shared
// memory and the tensor memory accelerator's bulk tensor copies, which load
// a box of a tensor (described by a CUtensorMap, kernels/cuda/tensor_map.hpp)
// into shared memory and complete on an mbarrier by byte count.
// Inline PTX under nvcc; the emulated device implements each with the PTX
// ISA's rules checked (emulator/include/gt_emu/async.hpp), so a kernel built
// on them runs in CI against its CPU twin.
//
// The protocol a pipeline stage follows (one "full" barrier per stage,
// count 1; one "empty" barrier per stage, count = consumer arrivals):
//   init:     one thread mbarrier_init()s every barrier, then
//             fence_barrier_init() (the async proxy must see the init before
//             a copy completes on it), then the block __syncthreads().
//   producer: mbarrier_wait(empty[s], phase ^ 1); mbarrier_arrive_expect_tx(
//             full[s], box bytes); tma_load(stage s, ..., full[s]).
//   consumer: mbarrier_wait(full[s], phase); read stage s; mbarrier_arrive(
//             empty[s]).
// `phase` flips each time the stage index wraps. Every copy must have been
// waited for before the block exits.
//
// Device code: include from .cu files only (after device_common.cuh).
#pragma once

#include <cuda.h>

#include <cstdint>

#if !defined(__CUDACC__)
#include "gt_emu/async.hpp"
#endif

// On the emulated device every call also carries its call site, so that a
// report names the kernel's line, not this header's.
#if defined(__CUDACC__)
#define GT_ASYNC_SITE
#define GT_ASYNC_SITE_FIRST
#else
#define GT_ASYNC_SITE , const char *file = __builtin_FILE(), int line = __builtin_LINE()
#define GT_ASYNC_SITE_FIRST const char *file = __builtin_FILE(), int line = __builtin_LINE()
#endif

namespace gt::cuda::dev {

#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// The shared-window address of p (in dynamic shared memory on the emulated
// device): what descriptors hold and the swizzles are computed from.
__device__ __forceinline__ uint32_t shared_window(const void* p GT_ASYNC_SITE) {
#if defined(__CUDACC__)
  return shared_address(p);
#else
  return ::gt::emu::detail::shared_window_address(p, {file, line});
#endif
}

// p advanced to the next multiple of Align bytes of the shared window.
// Dynamic shared memory is only 128-byte aligned (static shared memory
// comes first), and the 128-byte swizzle repeats over 1024 bytes: a kernel
// with swizzled tiles aligns its base with this and reserves Align - 128
// bytes more.
template <uint32_t Align>
__device__ __forceinline__ unsigned char* align_shared(unsigned char* p GT_ASYNC_SITE) {
  static_assert((Align & (Align - 1)) == 0 && Align >= 128, "a power of two from 128");
#if defined(__CUDACC__)
  const uint32_t a = shared_window(p);
#else
  const uint32_t a = shared_window(p, file, line);
#endif
  return p + ((Align - (a & (Align - 1))) & (Align - 1));
}

// An mbarrier expecting `count` arrivals per phase (one thread initializes).
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count GT_ASYNC_SITE) {
#if defined(__CUDACC__)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count)
               : "memory");
#else
  ::gt::emu::mbarrier_init(bar, count, file, line);
#endif
}

// Makes this thread's mbarrier inits visible to the async proxy (the copy
// engine); the block's threads still need a __syncthreads() after it.
__device__ __forceinline__ void fence_barrier_init(GT_ASYNC_SITE_FIRST) {
#if defined(__CUDACC__)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  ::gt::emu::fence_proxy_async(file, line);
#endif
}

// Orders this thread's ordinary shared-memory accesses before the async
// proxy's (a copy engine or tensor-core read of what it wrote).
__device__ __forceinline__ void fence_proxy_async_shared(GT_ASYNC_SITE_FIRST) {
#if defined(__CUDACC__)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  ::gt::emu::fence_proxy_async(file, line);
#endif
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar GT_ASYNC_SITE) {
#if defined(__CUDACC__)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
#else
  ::gt::emu::mbarrier_arrive(bar, file, line);
#endif
}

// Raises the current phase's tx-count by `bytes`, then arrives.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes GT_ASYNC_SITE) {
#if defined(__CUDACC__)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   shared_address(bar)),
               "r"(bytes)
               : "memory");
#else
  ::gt::emu::mbarrier_arrive_expect_tx(bar, bytes, file, line);
#endif
}

// Raises the current phase's tx-count by `bytes` without arriving.
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, unsigned bytes GT_ASYNC_SITE) {
#if defined(__CUDACC__)
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(
                   shared_address(bar)),
               "r"(bytes)
               : "memory");
#else
  ::gt::emu::mbarrier_expect_tx(bar, bytes, file, line);
#endif
}

// Blocks until the phase of parity `parity` (0 or 1) has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity GT_ASYNC_SITE) {
#if defined(__CUDACC__)
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
#else
  ::gt::emu::mbarrier_wait(bar, parity, file, line);
#endif
}

// The box of `map` at element coordinates (c0 innermost, c1) into shared
// memory at `dst` (128-byte aligned), completing `bar`'s tx by its bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1,
                                            uint64_t* bar GT_ASYNC_SITE) {
#if defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(shared_address(bar))
      : "memory");
#else
  ::gt::emu::tma_load<2>(dst, map, {c0, c1}, bar, file, line);
#endif
}

__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1,
                                            int c2, uint64_t* bar GT_ASYNC_SITE) {
#if defined(__CUDACC__)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(shared_address(bar))
      : "memory");
#else
  ::gt::emu::tma_load<3>(dst, map, {c0, c1, c2}, bar, file, line);
#endif
}

}  // namespace gt::cuda::dev
