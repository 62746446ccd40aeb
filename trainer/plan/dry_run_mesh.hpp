// A device mesh whose communicators move nothing: one rank's view of a
// layout, for `trainer costs` to run that rank's step on DryRunOps
// (dry_run_ops.hpp) without the other ranks. Every collective and
// point-to-point call is checked and counted as a real communicator counts
// it (Communicator's wrappers: the ring bytes this rank would send, which
// metrics.jsonl logs as comm_bytes), and then completes at once without
// touching its buffers (the dry run's buffers are PROT_NONE address space).
// Host-value reductions (all_reduce_f64/i64) return this rank's own value:
// like every value of a dry run, they mean nothing.
#pragma once

#include "parallel/mesh.hpp"

namespace gt {

// Mesh rank `rank` of `dims`, every axis (and world) a dry-run communicator
// of the size and rank the layout gives.
DeviceMesh make_dry_run_mesh(const ParallelDims& dims, int rank);

}  // namespace gt
