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
#include <vector>

#include "kernels/core/adamw_runs.hpp"
#include "kernels/cuda/upload_staging.hpp"

namespace gt::cuda {

// Doubles of device scratch sum_squares needs for n elements.
int64_t sum_squares_scratch_doubles(int64_t n);

// out (1 double, device) = sum x[i]^2; scratch: >= sum_squares_scratch_doubles(n), clobbered.
void sum_squares(double* out, const float* x, int64_t n, double* scratch, cudaStream_t stream);

// The gradient norm's sum without a host round trip (CPU twin:
// Ops::sum_squares_runs): out (1 float, device) = the sum over `runs` of
// x[r.state + i]^2, accumulated in double, rounded once. The runs are cut
// into chunks; pass 1 has min(chunks, 1024) blocks, each summing a fixed
// subset of chunks in double, pass 2 sums the blocks in a fixed tree:
// deterministic for given runs. The run table is uploaded through `uploads`
// into `scratch` (sum_squares_runs_scratch_bytes), which also holds pass 1's sums.
size_t sum_squares_runs_scratch_bytes(const std::vector<AdamWRun>& runs);
void sum_squares_runs(float* out, const float* x, const std::vector<AdamWRun>& runs, void* scratch,
                      UploadStaging& uploads, cudaStream_t stream);

// clip_grad_norm_'s factor from stats (device, 2 floats: the global sum of
// squares and a value finite iff every loss is) into scale (device, 1 float);
// NaN when either is not finite (CPU twin: Ops::clip_scale).
void clip_scale(float* scale, const float* stats, float max_norm, cudaStream_t stream);

}  // namespace gt::cuda
