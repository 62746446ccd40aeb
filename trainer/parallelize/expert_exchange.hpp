// ExpertExchange: expert parallelism's token dispatcher (Megatron's alltoall
// token dispatcher). An ep group of P data ranks splits a mixture's E experts
// into P consecutive ranges of E/P; every rank routes its own rows, then
// sends each expert's rows to the rank holding that expert and gets the
// experts' outputs back.
//
// Per block, given the rank's slots sorted by expert (the dispatch plan's
// offsets (E+1): expert e's rows at [off[e], off[e+1]), the rows for ep rank
// p's experts therefore contiguous):
//   plan:     the offsets read back (the host syncs of a block, as in
//             Megatron: the sizes of the messages), the per-(rank, local
//             expert) row counts exchanged all-to-all and read back, and the
//             received rows' order fixed: they arrive
//             source-major (rank 0's rows for local experts 0..E/P-1, then
//             rank 1's...), the grouped GEMM wants them expert-major.
//   dispatch: rows (n, C) sorted by expert -> all-to-all-v -> (M, C)
//             source-major -> permuted to expert-major `local` (M, C), with
//             local_offsets (E/P + 1) for the grouped GEMM.
//   combine:  the reverse: `local` (M, C) expert-major -> source-major ->
//             all-to-all-v with the counts swapped -> rows (n, C) sorted by
//             expert, on the rank the tokens came from.
// combine is dispatch's backward dual and vice versa: the forward dispatches
// x and combines y, the backward dispatches dy and combines dx.
//
// Invariants: every rank of the ep group calls plan/dispatch/combine for the
// same blocks in the same order (they are collectives over the ep group); a
// rank may send or receive no rows. Buffers hold the worst case, M = P n
// rows in a dropless layer (every row of the group choosing this rank's
// experts), P E/P capacity under a capacity factor, so no step allocates; a worst case past the 2 GiB an MPI
// collective moves is refused at construction.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"

namespace gt {

// The ep group a model's mixtures exchange tokens over (size 1: none).
struct ExpertParallelGroup {
  Communicator* comm = nullptr;
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
};

class ExpertExchange {
 public:
  // experts: E (divisible by the group's size); max_received: the rows this
  // rank's experts can receive in one block (P n dropless, n = R k the rows
  // a rank sends; less under a capacity: MixtureOfExperts::expert_rows);
  // slots: blocks whose plans are kept.
  ExpertExchange(Ops& ops, const ExpertParallelGroup& ep, int experts, int64_t max_received,
                 int64_t width, DType act, int slots);
  // What the constructor allocates, in bytes.
  static int64_t planned_bytes(int ep, int experts, int64_t max_received, int64_t width,
                               DType act, int slots);
  int64_t max_local_rows() const { return max_received_; }
  int local_experts() const { return El_; }
  int first_local_expert() const { return El_ * ep_.rank(); }

  // Block `slot`'s exchange plan from its dispatch offsets (E+1) int32.
  // Returns M, the rows this rank's experts receive.
  int64_t plan(int slot, const TensorView& offsets);
  // The rows block `slot` sends (its kept slots: offsets[E]), as plan read them.
  int64_t sent(int slot) const { return plans_.at(static_cast<size_t>(slot)).sent; }
  // local_offsets (E/P + 1) int32 of block `slot`'s expert-major rows.
  TensorView local_offsets(int slot) const;
  // rows (>= sent, C) sorted by expert -> local (>= M, C) expert-major.
  void dispatch(int slot, const TensorView& rows, const TensorView& local);
  // local (>= M, C) expert-major -> rows (>= sent, C) sorted by expert.
  void combine(int slot, const TensorView& local, const TensorView& rows);

  int64_t bytes() const { return bytes_; }

 private:
  struct Plan {
    std::vector<int64_t> send_rows, recv_rows;  // per ep rank
    int64_t sent = 0, received = 0;
    Buffer order;          // (P n, 1) int32: received row i goes to expert-major row order[i]
    Buffer local_offsets;  // (E/P + 1) int32
  };
  Buffer alloc(int64_t elems, DType dtype);
  Plan& plan_of(int slot);
  // rows x elements per row as the all-to-all's counts.
  std::vector<int64_t> elements(const std::vector<int64_t>& rows) const;

  Ops& ops_;
  ExpertParallelGroup ep_;
  int E_, P_, El_;
  int64_t max_received_, C_;
  DType act_;
  std::vector<Plan> plans_;
  Buffer received_;      // (P n, C) act: rows in the order they arrive (source-major)
  Buffer count_buffer_;  // (2E) int32: the counts sent, then received
  std::vector<int32_t> host_offsets_, host_order_;
  std::vector<int32_t> host_counts_;  // (2E): the counts sent, then received
  int64_t bytes_ = 0;
};

}  // namespace gt
