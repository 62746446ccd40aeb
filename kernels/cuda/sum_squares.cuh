// Sum of squares of n fp32 elements, accumulated in double (the global
// gradient norm for clip_grad_norm_). CPU twin: Ops::sum_squares.
//
// Invariants:
//   * out[0] (device, double) is ASSIGNED the sum over i of (double)x[i]^2.
//   * Deterministic, two passes, no atomics: pass 1 has a block count fixed
//     by n alone, each block reducing a fixed grid-stride subset in double
//     to scratch[block]; pass 2, one block, reduces scratch in a fixed tree.
//     Same n and data -> bit-identical result, on any device.
// 16-byte loads when x is 16-byte aligned, else scalar.
//
// Host-only header (launcher declarations); the kernels live in sum_squares.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gt::cuda {

// Doubles of device scratch sum_squares needs for n elements.
int64_t sum_squares_scratch_doubles(int64_t n);

// out (1 double, device) = sum x[i]^2; scratch: >= sum_squares_scratch_doubles(n), clobbered.
void sum_squares(double* out, const float* x, int64_t n, double* scratch, cudaStream_t stream);

}  // namespace gt::cuda
