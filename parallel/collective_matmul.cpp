// The two collective-matmul rings: argument checks, the p == 1 short cut, the
// non-overlapped reference path (one collective, one compute) and the ring
// schedules drawn in collective_matmul.hpp.
#include "parallel/collective_matmul.hpp"

#include "kernels/core/error.hpp"

namespace gt {

namespace {

// Chunk index (rank - offset) mod p, for any offset in [0, p].
int ring_chunk(int rank, int offset, int p) { return ((rank - offset) % p + p) % p; }

// Local checks, identical on every rank for identical arguments, so a bad
// call throws everywhere before anyone has started a message.
void check_chunk_elems(const Communicator& comm, const char* op, int64_t chunk_elems) {
  if (chunk_elems < 0)
    fail("comm '", comm.name(), "': ", op, " with a negative chunk size of ", chunk_elems,
         " floats");
}

void check_buffer(const Communicator& comm, const char* op, const char* what, const void* ptr,
                  int64_t needed) {
  if (needed > 0 && ptr == nullptr)
    fail("comm '", comm.name(), "': ", op, ": ", what, " is null but ", needed,
         " floats are needed");
}

}  // namespace

int64_t reduce_scatter_workspace_elems(int p, int64_t chunk_elems, bool overlap) {
  if (p < 1) fail("reduce_scatter_workspace_elems: p must be >= 1, got ", p);
  if (chunk_elems < 0)
    fail("reduce_scatter_workspace_elems: negative chunk size of ", chunk_elems, " floats");
  if (p == 1) return 0;
  return (overlap ? 2 : p) * chunk_elems;
}

void all_gather_then_compute(Communicator& comm, float* full, int64_t chunk_elems,
                             const ChunkCompute& compute, bool overlap) {
  static constexpr const char* kOp = "all_gather_then_compute";
  const int p = comm.size(), r = comm.rank();
  check_chunk_elems(comm, kOp, chunk_elems);
  check_buffer(comm, kOp, "full", full, p * chunk_elems);
  if (!compute) fail("comm '", comm.name(), "': ", kOp, " without a compute function");

  if (p == 1) {
    compute(0, 1);
    return;
  }

  if (!overlap) {
    // Our chunk already sits in its block of `full`: an in-place gather.
    comm.all_gather(full + r * chunk_elems, full, chunk_elems).wait();
    compute(0, p);
    return;
  }

  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const int have = ring_chunk(r, s, p);  // arrived at step s-1 (own at s = 0)
    const int incoming = ring_chunk(r, s + 1, p);
    // Receive posted first, then the send: both non-blocking, so no rank
    // waits on its neighbour before its own messages are out (no deadlock).
    // The receive writes straight into the chunk's final place; compute only
    // reads `have`, a different chunk.
    CommHandle rh =
        comm.recv(full + incoming * chunk_elems, chunk_elems, prev, kAllGatherMatmulTag);
    CommHandle sh = comm.send(full + have * chunk_elems, chunk_elems, next, kAllGatherMatmulTag);
    compute(have, 1);
    // Both complete before the next step: the next send reads the chunk just
    // received, and nothing is left pending on return.
    rh.wait();
    sh.wait();
  }
  compute(ring_chunk(r, p - 1, p), 1);  // = r + 1: the last to arrive
}

void host_accumulate(float* acc, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

void compute_then_reduce_scatter(Communicator& comm, float* result, int64_t chunk_elems,
                                 const ChunkPartial& partial, bool overlap, float* workspace,
                                 const ChunkAccumulate& accumulate) {
  static constexpr const char* kOp = "compute_then_reduce_scatter";
  const int p = comm.size(), r = comm.rank();
  check_chunk_elems(comm, kOp, chunk_elems);
  check_buffer(comm, kOp, "result", result, chunk_elems);
  check_buffer(comm, kOp, "workspace", workspace,
               reduce_scatter_workspace_elems(p, chunk_elems, overlap));
  if (!partial) fail("comm '", comm.name(), "': ", kOp, " without a partial function");
  if (!accumulate) fail("comm '", comm.name(), "': ", kOp, " without an accumulate function");

  if (p == 1) {
    partial(0, 1, result);
    return;
  }

  if (!overlap) {
    partial(0, p, workspace);  // (p * chunk_elems): every chunk's partial
    comm.reduce_scatter_sum(workspace, result, chunk_elems).wait();
    return;
  }

  // Two chunk buffers: buf[cur] holds the running sum on the wire, the other
  // receives the next partial meanwhile. The incoming sum lands in `result`,
  // free until the last step.
  float* buf[2] = {workspace, workspace + chunk_elems};
  int cur = 0;
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  partial(ring_chunk(r, 1, p), 1, buf[cur]);  // c_0 = r - 1: its sum starts here
  for (int s = 0; s < p - 1; ++s) {
    CommHandle rh = comm.recv(result, chunk_elems, prev, kReduceScatterMatmulTag);
    CommHandle sh = comm.send(buf[cur], chunk_elems, next, kReduceScatterMatmulTag);
    float* mine = buf[1 - cur];
    partial(ring_chunk(r, s + 2, p), 1, mine);  // c_{s+1}; at the last step, r itself
    rh.wait();
    sh.wait();  // buf[cur] is free again for the step after next
    if (s + 1 == p - 1) {
      accumulate(result, mine, chunk_elems);
    } else {
      accumulate(mine, result, chunk_elems);
      cur = 1 - cur;
    }
  }
}

}  // namespace gt
