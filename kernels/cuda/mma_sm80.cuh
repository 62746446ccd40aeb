// Warp-level tensor-core primitives of sm_80+ (Ampere, Hopper): the bf16
// mma.sync.m16n8k16 with fp32 accumulators, and ldmatrix, which loads the
// operand fragments of a warp from shared memory in one instruction.
// Inline PTX under nvcc; the emulated device implements both instructions
// with the ISA's fragment layouts (emulator/include/gt_emu/ptx.hpp, where the
// layouts are spelled out), so code that relies on them is checked there.
//
// Fragments (g = lane / 4, t = lane % 4), as registers of two bf16 (the lower
// column in the low half):
//   A (16 x 16 row-major):  a[0] (g, 2t..2t+1)  a[1] (g+8, 2t..)  a[2] (g, 2t+8..)  a[3] (g+8,
//   2t+8..) B (16 x 8, k x n):      b[0] (k 2t..2t+1, n g)  b[1] (k 2t+8.., n g) C (16 x 8 fp32):
//   c[0..1] (g, 2t..2t+1)  c[2..3] (g+8, 2t..2t+1)
// Two adjacent C tiles (cols 0-7 and 8-15 of a 16 x 16 result), rounded to
// bf16 and packed, are exactly an A fragment: {pack(c0[0..1]), pack(c0[2..3]),
// pack(c1[0..1]), pack(c1[2..3])}. FlashAttention-2 keeps P in registers this way.
//
// Device code: include from .cu files only (after device_common.cuh).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#if !defined(__CUDACC__)
#include "gt_emu/ptx.hpp"
#endif

namespace gt::cuda::dev {

// d += a b (m16n8k16, bf16 inputs, fp32 accumulators).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
#if defined(__CUDACC__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  ::gt::emu::mma_m16n8k16_bf16(d, a, b, d);
#endif
}

// Four 8 x 8 bf16 matrices from shared memory: lane l passes the address of
// row l % 8 of matrix l / 8 (16-byte aligned); register i receives matrix i
// (row l / 4, elements 2(l % 4) and 2(l % 4) + 1), or with Trans its transpose.
template <bool Trans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
#if defined(__CUDACC__)
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#else
  ::gt::emu::ldmatrix(r, 4, Trans, smem_row);
#endif
}

// Two fp32 values rounded to bf16 and packed (lo in the low half).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace gt::cuda::dev
