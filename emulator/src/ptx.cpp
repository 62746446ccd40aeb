// The runtime half of gt_emu/ptx.hpp: mma.sync.m16n8k16 (bf16 in, fp32
// accumulate) and ldmatrix.sync.m8n8 as warp collectives, with the fragment
// layouts the PTX ISA specifies (listed in the header).
#include <cstdio>
#include <cstring>
#include <string>

#include "block_scheduler.hpp"

namespace gt::emu {

namespace detail {

void warp_mma_m16n8k16_bf16(const PtxMmaLane& lane, Site site) {
  block_runner().warp_exchange(WarpOp::ptx_mma, &lane, site);
}
void warp_ldmatrix(const LdMatrixLane& lane, Site site) {
  block_runner().warp_exchange(WarpOp::ldmatrix, &lane, site);
}
void check_ldmatrix_row(const void* row, Site site) {
  block_runner().check_ldmatrix_row(row, site);
}

}  // namespace detail

namespace {

float bf16_bits_to_float(uint32_t bits16) {
  const uint32_t f = bits16 << 16;
  float x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

}  // namespace

// D (16 x 8) = A (16 x 16) B (16 x 8) + C, gathered from and scattered to
// the lanes by the ISA's layouts; each D element sums its 16 products in k
// order in fp32 (bf16 x bf16 is exact in fp32).
void BlockRunner::compute_ptx_mma(int w) {
  float A[16][16], B[16][8], C[16][8];
  auto lane_of = [&](int l) -> const detail::PtxMmaLane& {
    return *static_cast<const detail::PtxMmaLane*>(
        threads_[static_cast<size_t>(w * 32 + l)].payload);
  };
  for (int l = 0; l < 32; ++l) {
    const detail::PtxMmaLane& x = lane_of(l);
    const int g = l / 4, t = l % 4;
    for (int r = 0; r < 4; ++r) {
      const int row = g + (r & 1) * 8, col = 2 * t + (r >> 1) * 8;
      A[row][col] = bf16_bits_to_float(x.a[r] & 0xFFFFu);
      A[row][col + 1] = bf16_bits_to_float(x.a[r] >> 16);
    }
    for (int r = 0; r < 2; ++r) {
      const int k = 2 * t + r * 8;
      B[k][g] = bf16_bits_to_float(x.b[r] & 0xFFFFu);
      B[k + 1][g] = bf16_bits_to_float(x.b[r] >> 16);
    }
    for (int i = 0; i < 4; ++i) C[g + (i >> 1) * 8][2 * t + (i & 1)] = x.c[i];
  }
  for (int l = 0; l < 32; ++l) {
    const detail::PtxMmaLane& x = lane_of(l);
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i >> 1) * 8, col = 2 * t + (i & 1);
      float acc = C[row][col];
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      x.d[i] = acc;
    }
  }
}

void BlockRunner::check_ldmatrix_row(const void* row, Site site) {
  char buf[320];
  const int lane = current().linear % 32;
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    std::snprintf(buf, sizeof buf,
                  "ldmatrix: lane %d's row address %p is not 16-byte aligned, which PTX requires, "
                  "at %s:%d",
                  lane, row, site.file, site.line);
    fault(cudaErrorMisalignedAddress, buf);
  }
  if (!in_shared_memory(row, 16)) {
    std::snprintf(buf, sizeof buf,
                  "ldmatrix: lane %d's row address %p is not in the block's shared memory "
                  "(ldmatrix reads .shared only), at %s:%d",
                  lane, row, site.file, site.line);
    fault(cudaErrorIllegalAddress, buf);
  }
}

// Every lane's registers from up to four 8 x 8 b16 matrices whose rows the
// lanes read.
void BlockRunner::compute_ldmatrix(int w) {
  auto lane_of = [&](int l) -> const detail::LdMatrixLane& {
    return *static_cast<const detail::LdMatrixLane*>(
        threads_[static_cast<size_t>(w * 32 + l)].payload);
  };
  const detail::LdMatrixLane& first = lane_of(0);
  const int count = first.count;
  if (count != 1 && count != 2 && count != 4)
    fault(cudaErrorLaunchFailure,
          "ldmatrix: .x" + std::to_string(count) + " does not exist (x1, x2, x4)");
  uint16_t m[4][8][8];
  for (int l = 0; l < 32; ++l) {
    const detail::LdMatrixLane& x = lane_of(l);
    if (x.count != count || x.trans != first.trans)
      fault(cudaErrorLaunchFailure, "ldmatrix: the lanes of warp " + std::to_string(w) +
                                        " disagree on the matrix count or .trans");
    if (l < 8 * count) std::memcpy(m[l / 8][l % 8], x.row, 16);
  }
  for (int l = 0; l < 32; ++l) {
    const detail::LdMatrixLane& x = lane_of(l);
    const int r = l / 4, c = 2 * (l % 4);
    for (int i = 0; i < count; ++i) {
      const uint32_t lo = first.trans ? m[i][c][r] : m[i][r][c];
      const uint32_t hi = first.trans ? m[i][c + 1][r] : m[i][r][c + 1];
      x.out[i] = lo | hi << 16;
    }
  }
}

}  // namespace gt::emu
