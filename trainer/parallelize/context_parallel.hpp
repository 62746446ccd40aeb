// Context parallelism (parallel.cp): each sequence of a micro-batch is cut
// over the cp ranks, which hold its chunks; everything but attention is
// per-position and runs on a rank's own rows unchanged. Attention needs
// every earlier key and value, so the cp ranks share them:
//
//   allgather  K|V of every layer all-gathered (forward), each local query
//              chunk attended to every key chunk at or before it, partial
//              results merged by their log-sum-exp; backward gathers K|V
//              again (unless the gather of this very qkv is still held: the
//              last block, or a block recomputed just before) and
//              reduce-scatters the fp32 dK|dV (Llama 3's and Megatron's
//              all_gather mode).
//   ring       K|V blocks passed round the ring point to point, rank r
//              receiving from r-1 and sending to r+1, each hop overlapped
//              with attention on the block at hand; backward passes K|V
//              round again with their fp32 dK|dV partial sums travelling one
//              hop behind, each hop's transfer overlapped with the next
//              block's attention, and the last hop bringing every rank its
//              own (Megatron's p2p, PyTorch's ring).
//
// Load balancing (parallel.cp_load_balance): the causal mask gives later
// positions more keys, so each row is cut into 2 cp chunks and rank r holds
// chunks r and 2 cp - 1 - r: every rank then attends to the same number of
// key positions. Without it rank r holds chunk r of cp.
//
// Every block's backward uses the queries' GLOBAL lse (merged over all key
// blocks) and delta = rowsum(dout o out) of their global output, never the
// block's own (the bug other trainers shipped, tests/cpu/
// test_ops_attention_blocks.cpp). K|V travel in the activations' dtype;
// merged outputs, lse and dK|dV stay fp32 until written once.
//
// With tensor parallelism the cp group joins the ranks of equal tp_i, so
// each attends with its own n_head / tp query heads and n_kv_head / tp key/
// value heads over its cp rank's rows.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.hpp"
#include "parallel/communicator.hpp"
#include "trainer/config/config.hpp"
#include "trainer/parallelize/activation_placement.hpp"

namespace gt {

// The cp group of this rank: a null communicator (or one of size 1) means no
// context parallelism.
struct ContextParallelGroup {
  Communicator* comm = nullptr;
  CpComm mode = CpComm::allgather;
  bool load_balance = true;
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
};

// Which positions of a sequence of seq_len tokens each cp rank holds: the
// row cut into chunks of chunk_len() tokens, rank r holding chunks(r) in
// that order (its local rows: chunk 0's, then chunk 1's).
class SequenceChunks {
 public:
  // Throws naming the numbers unless seq_len divides into the chunks.
  SequenceChunks(int seq_len, int cp, bool load_balance);
  int seq_len() const { return seq_len_; }
  int cp() const { return cp_; }
  int local_len() const { return seq_len_ / cp_; }  // T / cp rows of each sequence per rank
  int chunk_len() const { return chunk_len_; }
  int chunks_per_rank() const { return load_balance_ ? 2 : 1; }
  // Global chunk indices of `rank`, in local order: {r, 2cp-1-r} or {r}.
  std::vector<int> chunks(int rank) const;
  // The global position of local index i (0 <= i < local_len()) on `rank`.
  int position(int rank, int i) const;
  // Every local index's position on `rank` (local_len()).
  std::vector<int32_t> positions(int rank) const;

 private:
  int seq_len_, cp_, chunk_len_;
  bool load_balance_;
};

// Causal self-attention of one rank's rows of B sequences under context
// parallelism; at cp = 1 the plain Ops attention. The model calls it as it
// called Ops::attention_forward/backward; one object serves every block of
// a model (the scratch is reused, one layer call at a time).
//
//   forward   qkv (B, Tl, (NH + 2 KV) hs) this rank's rows (Tl = T / cp),
//             out (B, Tl, NH hs), both in the activations' dtype; saved:
//             saved_elems floats (cp > 1: the global lse (B, NH, Tl)).
//   backward  dqkv (qkv's shape) ASSIGNED; dout, qkv, out, saved the forward's.
// NH and KV are this tp rank's heads. Placements: qkv, out, dout and dqkv
// are {tp: shard(heads), cp: shard(sequence)}; inside, the gathered K|V are
// cp replicated and the dK|dV of every rank's rows cp partial until their
// reduce-scatter (allgather mode). Checked at each step.
class ContextParallelAttention {
 public:
  // Elements of every scratch buffer at cp > 1 (zero at cp = 1), for B <=
  // max_rows sequences of NH query and KV key/value heads of size hs:
  struct Scratch {
    DType act = DType::f32;  // the activations' dtype (kv's)
    int64_t kv = 0;     // act: allgather (cp, B, Tl, 2 KV hs), ring 2 x (B, Tl, 2 KV hs)
    int64_t out = 0;    // fp32 (B, Tl, NH hs): the merged output, then dq in backward
    int64_t dkv = 0;    // fp32: allgather (cp + 1, B, Tl, 2 KV hs), ring 3 x (B, Tl, 2 KV hs)
    int64_t delta = 0;  // fp32 (B, NH, Tl)
    int64_t block = 0;  // fp32: Ops::attention_block_scratch_elems(B, NH, Tc, Tc)
    int64_t bytes() const;
  };
  // For `chunks` (its cp ranks) in `mode`; block_scratch: the backend's
  // attention_block_scratch_elems(max_rows, NH, chunk_len, chunk_len). What
  // the constructor allocates and the planner counts.
  static Scratch scratch(const SequenceChunks& chunks, CpComm mode, ComputeDType dtype,
                         int max_rows, int n_head, int n_kv_head, int head_size,
                         int64_t block_scratch);
  // Floats each block keeps for backward: the backend's attention_saved_elems
  // at cp = 1, the lse (B, NH, Tl) beyond.
  static int64_t saved_elems(const Ops& ops, int cp, int max_rows, int n_head, int local_len);
  // Backward scratch floats the model provides per call: the backend's
  // attention_scratch_elems at cp = 1; none beyond (this layer holds its own).
  static int64_t scratch_elems(const Ops& ops, int cp, int max_rows, int n_head, int local_len);

  // chunks: the sequence cut for group.size() ranks (unused at cp = 1).
  ContextParallelAttention(Ops& ops, ContextParallelGroup group, const SequenceChunks& chunks,
                           ComputeDType dtype, int max_rows, int n_head, int n_kv_head,
                           int head_size);

  const ContextParallelGroup& group() const { return group_; }
  const SequenceChunks& chunks() const { return chunks_; }
  int64_t bytes() const;  // the scratch above

  // Records every placement checked or given (null: nowhere; not owned).
  void set_placement_log(PlacementLog* log) { log_ = log; }

  Activation forward(const Target& out, TensorView saved, const Activation& qkv, int n_head,
                     int n_kv_head);
  Activation backward(const Target& dqkv, TensorView scratch, const Activation& dout,
                      const Activation& qkv, const Activation& out, TensorView saved, int n_head,
                      int n_kv_head);

  // The cp mappings of allgather mode, each with its backward dual, public
  // for what they check (tests plant misuses):
  //   gather_kv   K|V of qkv {cp: shard(sequence)} packed and all-gathered
  //               over cp into this layer's buffer: (cp, B, Tl, 2 KV hs),
  //               returned cp replicated. Backward dual: the reduce-scatter
  //               of dK|dV (backward).
  //   attend      attention of qkv's queries over every rank's keys: `kv`
  //               must be the gather's, cp replicated. Writes the merged
  //               fp32 output and the lse (saved) of forward.
  Activation gather_kv(const Activation& qkv, int n_head, int n_kv_head);
  void attend(TensorView saved, const Activation& qkv, const Activation& kv, int n_head,
              int n_kv_head);

 private:
  struct Shape;  // one call's extents and views (context_parallel.cpp)
  Shape shape_of(const TensorView& qkv, const TensorView& saved, int n_head, int n_kv_head) const;
  // This rank's query chunks against the chunks of rank `owner`, whose
  // packed K|V block `kv` (B, Tl, 2 KV hs) is given: every pair whose keys
  // are not all after the queries, merged into the fp32 output (started[j]:
  // query chunk j has a partial result already). Backward: the same pairs,
  // dq accumulated here and the owner's dK|dV into `dkv` (fp32, kv's shape).
  void attend(const Shape& s, TensorView kv, int owner, std::vector<bool>& started);
  void attend_backward(const Shape& s, TensorView kv, TensorView dkv, int owner);
  void forward_ring(const Shape& s);
  // dK|dV of every rank's rows ({cp: partial}), then reduce-scattered: this
  // rank's rows' {cp: shard(sequence)}, returned.
  Activation backward_allgather(const Shape& s, const std::string& name);
  Activation backward_ring(const Shape& s, const std::string& name);
  // K|V of qkv packed into `dst` (B, Tl, 2 KV hs), the activations' dtype.
  void pack_kv(const Shape& s, TensorView dst);
  // Bytes of `n` activation elements as the 4-byte words a collective moves.
  int64_t words(int64_t n) const;

  Ops& ops_;
  ContextParallelGroup group_;
  SequenceChunks chunks_;
  DType act_;
  PlacementLog* log_ = nullptr;
  Buffer kv_, out_, dkv_, delta_, block_;
  // The qkv whose K|V the allgather buffer holds, valid only until the next
  // call of any kind (so a backward after its own forward skips the gather;
  // nothing else may reuse it: the same buffer holds another micro-batch's
  // qkv later).
  const void* gathered_for_ = nullptr;
};

}  // namespace gt
