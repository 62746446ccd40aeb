// The warp-level PTX instructions the tensor-core kernels issue through inline
// asm on a GPU (kernels/cuda/mma_sm80.cuh), on the emulated device:
//
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   D = A B + C
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16
//
// Unlike wmma, whose fragment layout CUDA leaves unspecified (gt_emu/wmma.hpp
// permutes it), the PTX ISA fixes which lane holds which element of these
// fragments, and kernels rely on it (FlashAttention-2 reuses an accumulator
// fragment as the next product's A operand). So the layouts here are the
// ISA's, exactly; with groupID g = lane / 4 and t = lane % 4:
//   A (16 x 16, row-major), 4 registers of 2 bf16 (low half = lower column):
//     a[0]: row g,     cols 2t, 2t+1      a[1]: row g + 8, cols 2t, 2t+1
//     a[2]: row g,     cols 2t+8, 2t+9    a[3]: row g + 8, cols 2t+8, 2t+9
//   B (16 x 8, "col": k down, n across), 2 registers:
//     b[0]: rows (k) 2t, 2t+1 of col g    b[1]: rows 2t+8, 2t+9 of col g
//   C, D (16 x 8 fp32), 4 floats:
//     c[0], c[1]: row g, cols 2t, 2t+1    c[2], c[3]: row g + 8, cols 2t, 2t+1
//   ldmatrix: matrix i's 8 row addresses come from lanes 8i .. 8i+7 (x1 reads
//     lanes 0-7, x2 lanes 0-15); register i of lane l receives row l/4,
//     elements 2(l%4), 2(l%4)+1 of matrix i, or with .trans the elements at
//     rows 2(l%4), 2(l%4)+1 of column l/4 (the matrix transposed).
//
// Both are warp collectives, as on a GPU (.sync.aligned): all 32 lanes must
// arrive at the same call site. The product sums exact bf16 products in fp32
// in k order. ldmatrix checks the PTX rules: every row address 16-byte
// aligned and inside the block's shared memory. Each addressing lane reads
// its own row here, in the kernel's (sanitized) code, before the exchange:
// ThreadSanitizer and AddressSanitizer see the shared-memory read at the
// ldmatrix call, as they see any other load.
#pragma once

#include <cstdint>
#include <cstring>

#include "gt_emu/device.hpp"

namespace gt::emu::detail {

struct PtxMmaLane {
  const uint32_t* a;  // 4 registers
  const uint32_t* b;  // 2 registers
  const float* c;     // 4
  float* d;           // 4 (may alias c)
};
void warp_mma_m16n8k16_bf16(const PtxMmaLane& lane, Site site);

struct LdMatrixLane {
  uint16_t row[8];  // the 8 b16 this lane addressed (lanes < 8 * count)
  uint32_t* out;    // `count` registers
  int count;        // 1, 2 or 4 matrices
  bool trans;
};
void warp_ldmatrix(const LdMatrixLane& lane, Site site);
// The PTX rules on one lane's row address (faults when broken).
void check_ldmatrix_row(const void* row, Site site);
int lane_id();  // this CUDA thread's lane (wmma.cpp)

}  // namespace gt::emu::detail

namespace gt::emu {

// d = a b + c for the warp (d may be c).
inline void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::warp_mma_m16n8k16_bf16({a, b, c, d}, {file, line});
}

inline void ldmatrix(uint32_t* out, int count, bool trans, const void* row,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::LdMatrixLane lane{{}, out, count, trans};
  if (detail::lane_id() < 8 * count) {
    detail::check_ldmatrix_row(row, {file, line});
    std::memcpy(lane.row, row, sizeof lane.row);
  }
  detail::warp_ldmatrix(lane, {file, line});
}

}  // namespace gt::emu
