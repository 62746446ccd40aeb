// Hopper's warpgroup matrix multiply (sm_90a): wgmma.mma_async, bf16 in,
// fp32 accumulators, M = 64 rows per warpgroup (4 consecutive warps starting
// at a warp index divisible by 4), K = 16 per instruction, N = 64 or 128.
// B (and A, or A from registers) is read from shared memory through a 64-bit
// matrix descriptor. Inline PTX under nvcc (assembled for sm_90a by
// tests/scripts/test_ptxas_report.py); the emulated device implements each
// instruction with the layouts and rules of emulator/include/gt_emu/wgmma.hpp.
//
// Shared-memory layouts (in 16-byte units; the swizzle XORs address bits
// 4-6 with 7-9 (128B), 4-5 with 7-8 (64B), 4 with 7 (32B), from a window
// address whose pattern starts at a multiple of 1024 / 512 / 256 bytes):
//   K-major, swizzled with rows of W units (W = 8, 4, 2 for 128B, 64B, 32B):
//     row r, 16-byte k-chunk c -> start + (r % 8) W + (r / 8) SBO + c
//     (a tile TMA loaded with the same swizzle and rows of exactly W units;
//     the next k16 step adds 32 bytes to the start address).
//   K-major, no swizzle: 8 x 16-byte core matrices,
//     row r, chunk c -> start + (r % 8) + (r / 8) SBO + c LBO.
//   MN-major, swizzled: unit u = mn / 8 along MN, k = 0..15,
//     -> start + (u % W) + (u / W) LBO + (k % 8) W + (k / 8) SBO.
//   MN-major, no swizzle: -> start + u SBO + (k % 8) + (k / 8) LBO.
// Accumulators (thread t = 32 w + l of the warpgroup), d[i]:
//   row 16 w + l / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2.
// A from registers: mma.sync m16n8k16's A fragment for rows 16 w .. 16 w + 15.
//
// Sequence: wgmma_fence() (all 128 threads; again after the accumulators or
// the A registers were touched, i.e. after every wgmma_wait_group), the
// mma_async calls, wgmma_commit_group(), then wgmma_wait_group<n>() before
// the accumulators are read or the operands' shared memory is rewritten.
// Shared memory written by ordinary stores needs fence_proxy_async_shared()
// by the writers before the barrier that precedes the wgmma reading it.
//
// Device code: include from .cu files only (after device_common.cuh).
#pragma once

#include <cstdint>

#include "kernels/cuda/async_sm90.cuh"

#if !defined(__CUDACC__)
#include "gt_emu/wgmma.hpp"
#endif

#if defined(__CUDACC__)
// The accumulators as asm operands ("+f": read and written), N = 64, 128.
#define GT_WGMMA_D64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
  "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
  "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
  "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define GT_WGMMA_D128 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
  "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
  "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
  "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
  "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
  "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
  "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
  "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
  "+f"(d[63])
#endif

namespace gt::cuda::dev {

// The descriptor's layout type (bits 62-63).
enum class WgmmaSwizzle : uint64_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };

// The descriptor of the tile at `smem` (16-byte aligned shared memory):
// leading and stride byte offsets as in the layouts above.
__device__ __forceinline__ uint64_t wgmma_descriptor(const void* smem, WgmmaSwizzle swizzle,
                                                     uint32_t lbo_bytes,
                                                     uint32_t sbo_bytes GT_ASYNC_SITE) {
#if defined(__CUDACC__)
  const uint32_t addr = shared_window(smem);
#else
  const uint32_t addr = shared_window(smem, file, line);
#endif
  return uint64_t{(addr & 0x3FFFFu) >> 4} | uint64_t{(lbo_bytes & 0x3FFFFu) >> 4} << 16 |
         uint64_t{(sbo_bytes & 0x3FFFFu) >> 4} << 32 | static_cast<uint64_t>(swizzle) << 62;
}

__device__ __forceinline__ void wgmma_fence(GT_ASYNC_SITE_FIRST) {
#if defined(__CUDACC__)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  ::gt::emu::detail::wgmma_fence({file, line});
#endif
}

__device__ __forceinline__ void wgmma_commit_group(GT_ASYNC_SITE_FIRST) {
#if defined(__CUDACC__)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  ::gt::emu::detail::wgmma_commit({file, line});
#endif
}

// Returns once at most `Pending` committed groups of this warpgroup are
// still running.
template <int Pending>
__device__ __forceinline__ void wgmma_wait_group(GT_ASYNC_SITE_FIRST) {
  static_assert(Pending >= 0 && Pending <= 7, "wgmma.wait_group takes 0..7");
#if defined(__CUDACC__)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#else
  ::gt::emu::detail::wgmma_wait(Pending, {file, line});
#endif
}

// Keeps the compiler from moving accesses of these registers across the
// asynchronous MMA (CUTLASS's warpgroup_fence_operand); nothing to do on
// the emulated device, where the registers are memory.
template <int K>
__device__ __forceinline__ void wgmma_fence_operands(float (&r)[K]) {
#if defined(__CUDACC__)
#pragma unroll
  for (int i = 0; i < K; ++i) asm volatile("" : "+f"(r[i])::"memory");
#else
  (void)r;
#endif
}

// d (64 x N) = A (64 x 16) B (16 x N) [+ d]; A and B through descriptors,
// TransA / TransB: MN-major A / B.
template <int N, bool TransA, bool TransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         bool scale_d GT_ASYNC_SITE) {
  static_assert(N == 64 || N == 128, "wgmma_ss is instantiated for N = 64 and 128");
#if defined(__CUDACC__)
  if constexpr (N == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
        "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, "
        "1, 1, %35, %36;\n}\n"
        :
          GT_WGMMA_D64
        :
          "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(scale_d)),
          "n"(static_cast<int>(TransA)), "n"(static_cast<int>(TransB)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
        "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
        "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, "
        "%52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, "
        "%68;\n}\n"
        :
          GT_WGMMA_D128
        :
          "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(scale_d)),
          "n"(static_cast<int>(TransA)), "n"(static_cast<int>(TransB)));
  }
#else
  ::gt::emu::detail::wgmma_mma({N, desc_a, nullptr, desc_b, TransA, TransB, scale_d, d},
                               {file, line});
#endif
}

// d (64 x N) = A B [+ d] with A from registers (this warp's 16 rows).
template <int N, bool TransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                         uint64_t desc_b, bool scale_d GT_ASYNC_SITE) {
  static_assert(N == 64 || N == 128, "wgmma_rs is instantiated for N = 64 and 128");
#if defined(__CUDACC__)
  if constexpr (N == 64) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
        "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, "
        "%34, %35}, %36, p, 1, 1, %38;\n}\n"
        :
          GT_WGMMA_D64
        :
          "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b),
          "r"(static_cast<int>(scale_d)), "n"(static_cast<int>(TransB)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
        "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
        "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, "
        "%52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, "
        "%68, p, 1, 1, %70;\n}\n"
        :
          GT_WGMMA_D128
        :
          "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b),
          "r"(static_cast<int>(scale_d)), "n"(static_cast<int>(TransB)));
  }
#else
  ::gt::emu::detail::wgmma_mma({N, 0, a, desc_b, false, TransB, scale_d, d}, {file, line});
#endif
}

}  // namespace gt::cuda::dev
