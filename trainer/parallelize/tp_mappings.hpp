// The tensor-parallel region of one rank and the mappings that move rows in
// and out of it (Megatron-LM's tensor_parallel/mappings with sequence
// parallelism). With R = B*T rows of a micro-batch and p tp ranks:
//   * the sequence-parallel region (residual stream, LayerNorms) holds R/p
//     rows per rank: rank r has flattened rows [r*R/p, (r+1)*R/p);
//   * the tensor-parallel region (inside the linear layers, attention) holds
//     all R rows and 1/p of the features.
// Each mapping is fused with the computation on its row chunks through the
// collective matmul rings (parallel/collective_matmul.hpp), so one chunk
// travels while another is computed (`overlap`), and each names its backward
// dual: a layer's backward uses the dual of what its forward used.
//
// Nothing here communicates at p = 1: every mapping is then the computation
// on all rows, in place. Each mapping checks and changes the tp placement of
// what it moves (activation_placement.hpp) at any p: the gather takes
// shard(sequence) to replicated, the reduce-scatter partial sums to
// shard(sequence).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"
#include "trainer/parallelize/activation_placement.hpp"

namespace gt {

// The tp group of this rank: a null communicator (or one of size 1) means no
// tensor parallelism.
struct TensorParallelGroup {
  Communicator* comm = nullptr;
  bool overlap = true;  // parallel.tp_overlap: the ring-pipelined collective matmuls
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
};

// Rows [first, first + n) of a contiguous (rows, cols) view, on its device,
// in its dtype.
TensorView rows_of(const TensorView& t, int64_t first, int64_t n);

class TpMappings {
 public:
  // compute(row0, rows): work on rows [row0, row0 + rows) of the full tensor.
  using RowsCompute = std::function<void(int64_t row0, int64_t rows)>;
  // partial(row0, rows, out): this rank's fp32 partial sums for rows [row0,
  // row0 + rows) into `out` ((rows, cols) fp32, assigned).
  using RowsPartial = std::function<void(int64_t row0, int64_t rows, TensorView out)>;

  TpMappings(Ops& ops, TensorParallelGroup group) : ops_(ops), group_(group) {}
  // Where every check is recorded (null: nowhere); not owned.
  void set_placement_log(PlacementLog* log) { log_ = log; }
  PlacementLog* placement_log() const { return log_; }
  const TensorParallelGroup& group() const { return group_; }
  int size() const { return group_.size(); }
  int rank() const { return group_.rank(); }

  // This rank's rows of a gathered (R, cols) view: its sequence shard.
  TensorView own_rows(const TensorView& full) const;

  // gather_from_sequence_region: `full` (R, cols), any dtype, holds this
  // rank's R/p rows at its own chunk on entry and every rank's on return;
  // compute runs on each chunk of rows once it is present (the whole tensor
  // at p = 1). bf16 rows travel as bits, two to a 4-byte word, so R/p * cols
  // must be even. Placement: {tp: shard(sequence)} on entry, replicated on
  // return (cp unchanged); `layer` names the caller in messages.
  // Backward dual: reduce_scatter_to_sequence_region.
  void gather_from_sequence(Activation& full, const RowsCompute& compute, const std::string& layer);

  // reduce_scatter_to_sequence_region: `result` (R/p, cols) fp32 = the sum
  // over the tp ranks of their partial sums of this rank's rows; partial is
  // asked for every chunk of all R rows. `workspace` holds
  // reduce_scatter_workspace_elems(p, R/p * cols, overlap) floats
  // (parallel/collective_matmul.hpp; TpLayerContext::scratch sizes it), apart
  // from result. At p = 1 the partial is written straight into result.
  // Placement: the partials are {tp: partial}; the result is returned as
  // {tp: shard(sequence), cp: `cp`}, recorded for `layer`. Backward dual:
  // gather_from_sequence_region.
  Activation reduce_scatter_to_sequence(const TensorView& result, const RowsPartial& partial,
                                        float* workspace, const AxisPlacement& cp,
                                        std::string name, const std::string& layer);

  // reduce_from_tensor_region for statistics: the elementwise max / sum of
  // `x` (fp32) over the tp ranks, in place. Used by the vocab-parallel
  // cross-entropy's forward on its row statistics; nothing differentiates
  // through them (its backward is local given the global statistics), so
  // they have no backward dual.
  void all_reduce_max(const TensorView& x);
  void all_reduce_sum(const TensorView& x);

 private:
  Ops& ops_;
  TensorParallelGroup group_;
  PlacementLog* log_ = nullptr;
};

}  // namespace gt
