// Communicator: the one interface every parallel strategy talks to (no global
// communicator anywhere: the DeviceMesh hands out one per axis). Backends:
// MpiCommunicator (host buffers over MPI), InProcessCommunicator (one rank,
// for unit tests and 1-rank runs), NcclCommunicator (device buffers) and
// StagedCommunicator (device buffers through host memory and an inner one).
//
// Invariants
// - Every collective is asynchronous: it starts and returns a CommHandle; the
//   buffers belong to the operation until the handle has completed (wait()
//   returned or test() returned true). Destroying a handle that has not
//   completed waits for it and logs a warning, so buffers are never freed
//   under a running operation.
// - Collectives on one communicator are started in the same order on every
//   rank (MPI's rule, NCCL's too). Handles may be waited in any order.
// - A Communicator is used from one thread at a time.
// - Byte accounting (bytes_sent) is what THIS rank sends under the standard
//   ring algorithm, the volumes NCCL's bus bandwidth (busbw) is computed from:
//     all-reduce          2(p-1)/p * bytes
//     reduce-scatter      (p-1)/p  * total bytes (p * n elements)
//     all-gather          (p-1)/p  * total bytes (p * n elements)
//     broadcast           bytes on the root, 0 elsewhere (0 when p == 1)
//     send                bytes;  recv 0;  barrier 0
//   with p = size(). They are NOT what the backend physically moved: Open MPI
//   picks its own algorithm (recursive doubling, Rabenseifner, binomial
//   trees...) per message size. Use them to compare runs and compute busbw,
//   not to audit the network. The all-reduce volume is fractional in general,
//   so the total is a double.
//
// Backward duals (Megatron's mappings.py): each op's doc names the op that its
// gradient needs, so a forward collective can be paired with its transpose.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "parallel/comm_observer.hpp"

namespace gt {

enum class ReduceOp { sum, max, min };
const char* reduce_op_name(ReduceOp op);

// A started operation, implemented by each backend. CommHandle owns one.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // True once the operation has completed; never blocks.
  virtual bool test() = 0;
  // Completes the operation for the caller. A host backend blocks until it
  // is done; deadline_s > 0: throws gt::Error naming the op, its element
  // count and the communicator once that many seconds pass; the op then
  // stays pending (wait again, or abort the job). 0 = no deadline.
  // A device backend (NCCL) instead orders the device's compute stream after
  // the operation and returns at once: everything queued on that stream
  // afterwards sees its result, and the host does at its next
  // synchronisation with that stream. Its deadline, counted from this call,
  // is enforced by Communicator::drain().
  virtual void wait(double deadline_s) = 0;
  // The deadline wait() without an argument uses (the communicator's).
  virtual double default_deadline() const = 0;
  // True after a wait() has thrown on the deadline and nothing has completed since.
  virtual bool timed_out() const = 0;
  // "all_reduce_sum of 1001 floats on 'dp'": for messages.
  virtual std::string describe() const = 0;
  // Called by ~CommHandle; the backend logs through its own logger.
  virtual void log_warning(const std::string& msg) const = 0;
};

// Move-only handle on one started collective. A default-constructed handle is
// already complete (what a backend returns when there was nothing to do).
class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::unique_ptr<PendingOp> op) : op_(std::move(op)) {}
  CommHandle(CommHandle&&) noexcept = default;
  CommHandle& operator=(CommHandle&& other) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  // Waits for an operation that was never waited (logs that it had to). After
  // a deadline error it does not wait again (that could hang the unwinding that
  // leads to abort_job): it logs that the operation is abandoned.
  ~CommHandle();

  // Waits with the communicator's default deadline.
  void wait();
  // Waits with this deadline in seconds (0 = none); throws gt::Error past it.
  void wait_for(double deadline_s);
  // Non-blocking: true once complete.
  bool test();
  bool done() const { return op_ == nullptr; }

 private:
  friend class Communicator;  // wraps the pending op (observer, decorators)
  void finish_or_abandon() noexcept;
  std::unique_ptr<PendingOp> op_;  // null once complete
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "dp", "tp", "world", ...

  // In place: buf (n) becomes the element-wise sum over all ranks.
  // Backward dual: all-reduce (the gradient of a sum that every rank holds is
  // itself summed), the pair Megatron writes as copy-to-region (fwd identity,
  // bwd all-reduce) / reduce-from-region (fwd all-reduce, bwd identity).
  CommHandle all_reduce_sum(float* buf, int64_t n);
  // In place: buf (n) becomes the element-wise maximum over all ranks (the
  // row maxima of a vocab-parallel softmax). Not differentiated: no dual.
  CommHandle all_reduce_max(float* buf, int64_t n);

  // in (n * size, rank r's block at [r*n, (r+1)*n)) summed over ranks; this
  // rank keeps block rank() in out (n).
  // Backward dual: all-gather.
  CommHandle reduce_scatter_sum(const float* in, float* out, int64_t n);

  // The two sums in bf16 (parallel.reduce_dtype=bf16: gradients on the data
  // axes at half the bytes). Elements are bf16 bits (kernels/core/bf16.hpp).
  // Each addition is done in fp32 and rounded to bf16 (nearest even), as
  // NCCL does at every ring step: a sum over p ranks carries up to p - 1
  // roundings, in an order the backend chooses, and every rank receives the
  // same bits. Counted at 2 bytes per element. Backward duals as above.
  CommHandle all_reduce_sum_bf16(uint16_t* buf, int64_t n);
  CommHandle reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n);

  // in (n) from every rank, concatenated in rank order into out (n * size).
  // in may be out's own block (out + rank() * n): gathered in place.
  // Backward dual: reduce-scatter (sum), as in Megatron's gather-from-sequence-
  // parallel-region.
  CommHandle all_gather(const float* in, float* out, int64_t n);

  // buf (n) on `root` is copied to every rank.
  // Backward dual: reduce (sum) to the root.
  CommHandle broadcast(float* buf, int64_t n, int root);

  // Point to point, ordered per (peer, tag).
  // Backward dual of send: recv from the same peer (and vice versa), as in
  // pipeline stages: activations go forward, their gradients come back.
  CommHandle send(const float* buf, int64_t n, int peer, int tag = 0);
  CommHandle recv(float* buf, int64_t n, int peer, int tag = 0);

  // All-to-all with per-peer counts (MPI_Alltoallv; NCCL grouped send/recv):
  // this rank sends send_counts[q] elements to rank q, taken from `in` in
  // rank order (q's block starts at the sum of send_counts[0..q)), and
  // receives recv_counts[q] from rank q into `out`, in rank order. Elements
  // are elem_bytes wide (2: bf16, 4: fp32 or int32, 8: 64-bit); each counts
  // array has size() entries, recv_counts[q] must equal what rank q sends
  // here (exchange the counts first), and zero counts are legal (a rank that
  // sends or receives nothing). in and out must not overlap.
  // Backward dual: all_to_all_v with the two counts swapped (each gradient
  // row goes back to the rank its token came from), as in Megatron's
  // alltoall token dispatcher. Counted: the bytes sent to other ranks.
  CommHandle all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                          const int64_t* recv_counts, int elem_bytes);

  // Blocking, with the communicator's deadline: for agreeing on a loss, a
  // flag ("did any rank see a NaN?"), a step count. No backward dual (not on
  // the autograd path). Counted as an all-reduce of 8 bytes.
  double all_reduce_f64(double value, ReduceOp op);
  int64_t all_reduce_i64(int64_t value, ReduceOp op);
  void barrier();

  // Blocks the host until every operation waited on the device (PendingOp::
  // wait, a device backend) has completed. Past an operation's deadline it
  // aborts the communicator and throws gt::Error naming the operation, as a
  // host wait would. Call it before the host reads what such operations or
  // the work ordered after them produced (the trainer does once per step,
  // before reading the loss): otherwise a hung peer hangs the read with no
  // deadline. Host backends have nothing to drain.
  void drain() { do_drain(); }

  // Ring-algorithm bytes this rank has sent since construction / reset_bytes().
  double bytes_sent() const { return bytes_sent_; }
  void reset_bytes() { bytes_sent_ = 0.0; }

  // Every operation started from now on is reported to `observer` (a
  // profiler; see comm_observer.hpp); null detaches. Not owned. Without an
  // observer the wrappers cost one branch more than before.
  void set_observer(CommObserver* observer) { observer_ = observer; }
  CommObserver* observer() const { return observer_; }

 protected:
  virtual CommHandle do_all_reduce(float* buf, int64_t n, ReduceOp op) = 0;
  virtual CommHandle do_reduce_scatter_sum(const float* in, float* out, int64_t n) = 0;
  virtual CommHandle do_all_reduce_sum_bf16(uint16_t* buf, int64_t n) = 0;
  virtual CommHandle do_reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) = 0;
  virtual CommHandle do_all_gather(const float* in, float* out, int64_t n) = 0;
  virtual CommHandle do_broadcast(float* buf, int64_t n, int root) = 0;
  virtual CommHandle do_send(const float* buf, int64_t n, int peer, int tag) = 0;
  virtual CommHandle do_recv(float* buf, int64_t n, int peer, int tag) = 0;
  virtual double do_all_reduce_f64(double value, ReduceOp op) = 0;
  virtual int64_t do_all_reduce_i64(int64_t value, ReduceOp op) = 0;
  virtual void do_barrier() = 0;
  virtual void do_drain() {}
  // Counts already checked (size() entries each, non-negative, byte sizes
  // within the per-call limit). The default refuses by name: a backend
  // without it cannot run expert parallelism.
  virtual CommHandle do_all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                                     const int64_t* recv_counts, int elem_bytes);

  // For a backend that decorates another communicator (StagedCommunicator):
  // the pending op out of a handle the inner communicator returned, so the
  // decorator's own op can forward test/wait/deadline/describe to it. Null
  // when the handle was already complete.
  static std::unique_ptr<PendingOp> take_pending(CommHandle& h) { return std::move(h.op_); }

 private:
  void check_count(const char* op, const void* ptr, int64_t n) const;
  void check_peer(const char* op, int peer) const;
  CommHandle observed(CommHandle h, CommKind kind, int64_t n, double ring_bytes,
                      CommObserver::Clock::time_point started);
  template <typename F>
  auto observed_blocking(CommKind kind, double ring_bytes, F&& call);
  double bytes_sent_ = 0.0;
  CommObserver* observer_ = nullptr;
};

// The ring volumes above, per rank, for p ranks and `bytes` of payload (the
// per-rank block for reduce-scatter / all-gather: total = p * bytes).
namespace ring_volume {
double all_reduce(int p, double bytes);
double reduce_scatter(int p, double block_bytes);
double all_gather(int p, double block_bytes);
double broadcast(int p, double bytes, bool is_root);
}  // namespace ring_volume

}  // namespace gt
