// Multi-tensor kernels (AdamW, the gradient norm) over runs of flat buffers
// (kernels/core/adamw_runs.hpp): the runs are cut into chunks of a fixed
// number of elements, the host uploads a small table of the non-empty runs,
// each knowing how many chunks come before it, and blocks take chunks in
// turn, finding a chunk's run by binary search in the table.
//
// Contains device code: include it from .cu files only.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/core/adamw_runs.hpp"
#include "kernels/cuda/device_common.cuh"

namespace gt::cuda::dev {

// One run as the kernels read it. first_chunk: chunks of the runs before it.
struct ChunkRun {
  int64_t param, state, n, first_chunk;
  float decay;  // AdamW: 1 - lr * weight_decay, or 1 where not decayed (unused by the norm)
  int pad_;
};

// Host: the table of the non-empty `runs` cut into chunks of `chunk` elements,
// decay(run) giving each run's factor; returns the chunk count.
template <typename Decay>
int64_t make_chunk_table(const std::vector<AdamWRun>& runs, int64_t chunk, Decay&& decay,
                         std::vector<ChunkRun>& table) {
  table.clear();
  table.reserve(runs.size());
  int64_t n_chunks = 0;
  for (const auto& r : runs) {
    if (r.n == 0) continue;
    table.push_back({r.param, r.state, r.n, n_chunks, decay(r), 0});
    n_chunks += (r.n + chunk - 1) / chunk;
  }
  return n_chunks;
}

// Chunk c of the table: its run, the offset into that run and its length.
struct Chunk {
  ChunkRun run;
  int64_t off, len;
};
__device__ __forceinline__ Chunk chunk_at(const ChunkRun* runs, int n_runs, int64_t c,
                                          int64_t chunk) {
  // The run holding chunk c: the last one whose first_chunk <= c (the table
  // is in first_chunk order and starts at 0).
  int lo = 0, hi = n_runs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (runs[mid].first_chunk <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  Chunk out{runs[lo], 0, 0};
  out.off = (c - out.run.first_chunk) * chunk;
  out.len = out.run.n - out.off < chunk ? out.run.n - out.off : chunk;
  return out;
}

}  // namespace gt::cuda::dev
