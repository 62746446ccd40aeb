// Hopper's warpgroup matrix multiply (wgmma.mma_async, sm_90a) on the
// emulated device, reached through kernels/cuda/wgmma_sm90.cuh:
//
//   wgmma.fence.sync.aligned
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16  D, A, B-desc, scale-d, 1, 1, tA, tB
//   wgmma.commit_group.sync.aligned
//   wgmma.wait_group.sync.aligned n
//
// Each is a collective of a warpgroup: the 4 consecutive warps 4w .. 4w+3,
// all 128 threads at the same call site. A and B are read from shared
// memory through 64-bit matrix descriptors (start address, leading and
// stride byte offsets, swizzle mode; the layouts CUTLASS's make_gmma_desc
// documents as canonical, emulator/src/wgmma.cpp), or A from registers in
// the mma.sync m16n8k16 layout, warp w of the group holding rows 16w ..
// 16w+15. The accumulator: thread t = 32 w + l holds in d[i] the element
//   row 16 w + l / 4 + 8 ((i / 2) % 2),  column 8 (i / 4) + 2 (l % 4) + i % 2.
//
// The model (rules and reports in emulator/src/wgmma.cpp): an mma_async
// captures the accumulators it adds to and poisons them (NaN); the product
// is computed when wait_group retires its group, from shared memory and
// the A registers as they are then, so reading the accumulators before the
// wait reads NaN and changing an operand before it changes the result.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>  // the shadow header: NVIDIA's, then gt_emu/device.hpp

namespace gt::emu::detail {

// One thread's part of an mma_async.
struct WgmmaLane {
  int n;                    // N: 8 .. 256, a multiple of 8
  uint64_t desc_a;          // when a_regs is null
  const uint32_t* a_regs;   // 4 registers of bf16 pairs, or null
  uint64_t desc_b;
  bool trans_a, trans_b;    // MN-major A (descriptor only) / B
  bool scale_d;             // D = A B + D (true) or A B
  float* d;                 // n / 2 floats
};

void wgmma_fence(Site site);
void wgmma_mma(const WgmmaLane& lane, Site site);
void wgmma_commit(Site site);
void wgmma_wait(int pending, Site site);

}  // namespace gt::emu::detail
