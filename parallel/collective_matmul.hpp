// Collective matmul: the two ring primitives of Megatron's tensor parallelism
// with sequence parallelism, each fused with the matmul on its chunks so that
// one chunk travels while another is multiplied. This file owns only the
// communication schedule; what is computed on a chunk comes in as a callback,
// so the same rings serve the forward and backward of both linear layers.
//
// A "chunk" is the block of rows (sequence positions) one rank holds in the
// sequence-parallel region: rank g's chunk is [g*chunk_elems, (g+1)*chunk_elems)
// of the full buffer. That is contiguous when the sequence is the outer
// dimension, which is why Megatron lays activations out as (T, B, C).
//
// all_gather_then_compute, p = 4, as seen by rank r (chunk indices mod p).
// Step s computes the chunk that arrived at step s-1 while it forwards that
// same chunk to r+1 and receives the next one from r-1:
//
//   step | compute   | in flight: send -> r+1 | recv <- r-1 (into full)
//   -----+-----------+------------------------+------------------------
//     0  | chunk r   | chunk r                | chunk r-1
//     1  | chunk r-1 | chunk r-1              | chunk r-2
//     2  | chunk r-2 | chunk r-2              | chunk r-3
//     3  | chunk r-3 | (nothing: every chunk is here)
//
//   Forward of a column-parallel linear after a sequence-parallel region
//   (Megatron's gather_from_sequence_parallel_region + the local matmul), and
//   backward (input gradient) of a row-parallel linear.
//   Backward dual: compute_then_reduce_scatter.
//
// compute_then_reduce_scatter, p = 4, rank r, c_s = r - s - 1 (mod p). The
// running sum S(c) for chunk c starts on rank c+1 and travels the ring c+2,
// c+3, ..., picking up each rank's partial P(c), and ends complete on rank c.
// The partial of the NEXT chunk is computed while the current sum is on the
// wire; the incoming sum lands in `result`, used as the receive buffer:
//
//   step | in flight: send -> r+1 | recv <- r-1 | computed meanwhile | after both complete
//   -----+------------------------+-------------+--------------------+----------------------
//    pre |                        |             | P(r-1)             | S(r-1) = P(r-1)
//     0  | S(r-1)                 | S(r-2)      | P(r-2)             | S(r-2) += P(r-2)
//     1  | S(r-2)                 | S(r-3)      | P(r-3)             | S(r-3) += P(r-3)
//     2  | S(r-3)                 | S(r)        | P(r)               | result = S(r) + P(r)
//
//   Forward of a row-parallel linear into a sequence-parallel region (the local
//   matmul + Megatron's reduce_scatter_to_sequence_parallel_region), and
//   backward (input gradient) of a column-parallel linear.
//   Backward dual: all_gather_then_compute.
//
// Invariants
// - p == 1 communicates nothing: one compute / partial call, straight into place.
// - Either ring sends exactly (p-1) * chunk_elems floats per call, the ring
//   volume (p-1)/p * total of the all-gather / reduce-scatter it replaces, so
//   comm.bytes_sent() counts the same with and without overlap.
// - Every handle is waited before return (also when a callback throws: the
//   handles' destructors wait), so no message of one call can be matched by
//   the next. The ring's point-to-point messages carry the fixed tags below;
//   do not use those tags for other send/recv on the same communicator.
// - Every rank must call the same primitive with the same chunk_elems and
//   overlap flag, in the same order (as for any collective).
// - On the MPI host backend, Open MPI moves a large message only inside MPI
//   calls (no progress thread), so the host overlap is partial; the schedule is
//   what a stream-ordered backend (NCCL) overlaps fully.
#pragma once

#include <cstdint>
#include <functional>

#include "parallel/communicator.hpp"

namespace gt {

// Point-to-point tags of the two rings (0x434D is "CM"), below the MPI-guaranteed
// tag bound of 32767. Distinct per primitive, so ranks that disagree on which
// primitive they are in hit the communicator's deadline instead of silently
// exchanging each other's data.
constexpr int kAllGatherMatmulTag = 0x434D;      // 17229
constexpr int kReduceScatterMatmulTag = 0x434E;  // 17230

// compute(first_chunk, n_chunks): process rows of chunks [first_chunk, first_chunk + n_chunks).
using ChunkCompute = std::function<void(int first_chunk, int n_chunks)>;
// partial(first_chunk, n_chunks, out): write THIS rank's partial sums for chunks
// [first_chunk, first_chunk + n_chunks) into out (n_chunks * chunk_elems floats,
// contiguous, assigned not accumulated).
using ChunkPartial = std::function<void(int first_chunk, int n_chunks, float* out)>;
// accumulate(acc, x, n): acc[i] += x[i] for n floats, on whatever memory the
// buffers live in (the backend's Ops::accumulate for device buffers), so the
// ring never touches the data from the host itself.
using ChunkAccumulate = std::function<void(float* acc, const float* x, int64_t n)>;
// The host loop, for buffers in host memory (tests, CPU-only callers).
void host_accumulate(float* acc, const float* x, int64_t n);

// All-gather of row chunks fused with compute on each chunk.
// full: p * chunk_elems floats (p = comm.size()); on entry this rank's chunk is
// at [rank*chunk_elems, (rank+1)*chunk_elems); on return every rank's chunk is
// in place. compute covers every chunk in [0, p) exactly once, and only once
// that chunk is present. overlap = true: the ring above (own chunk first, then
// rank-1, rank-2, ...); overlap = false: comm.all_gather, then compute(0, p).
// Throws gt::Error (before any communication) on chunk_elems < 0, a null
// `full` with chunk_elems > 0, or an empty compute.
// Backward dual: compute_then_reduce_scatter.
void all_gather_then_compute(Communicator& comm, float* full, int64_t chunk_elems,
                             const ChunkCompute& compute, bool overlap);

// Per-chunk partial sums fused with a reduce-scatter. On return result
// (chunk_elems floats) = sum over all ranks of their partial for chunk
// comm.rank(). overlap = true: the ring above (own chunk last); overlap =
// false: partial(0, p, workspace), then comm.reduce_scatter_sum into result.
// workspace: at least reduce_scatter_workspace_elems(p, chunk_elems, overlap)
// floats, not overlapping result (the ring also receives into result, so
// `partial` must not read result). Throws gt::Error (before any communication)
// on chunk_elems < 0, null buffers where floats are needed, or an empty partial
// or accumulate (the ring sums the incoming partial into its own with it).
// Backward dual: all_gather_then_compute.
void compute_then_reduce_scatter(Communicator& comm, float* result, int64_t chunk_elems,
                                 const ChunkPartial& partial, bool overlap, float* workspace,
                                 const ChunkAccumulate& accumulate);

// Floats of workspace compute_then_reduce_scatter needs: 0 at p == 1 (the
// partial goes straight into result), 2 chunks with overlap (the partial on
// the wire and the one being computed; the incoming sum lands in result), p
// chunks without (every partial, for the one reduce-scatter).
int64_t reduce_scatter_workspace_elems(int p, int64_t chunk_elems, bool overlap);

}  // namespace gt
