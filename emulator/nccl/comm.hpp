// Internals of the emulated NCCL (see nccl.cpp for the design): the state a
// communicator shares with its in-flight operations, the operations
// themselves (one CommOp per NCCL call, run on the device's stream scheduler
// as part of a GroupWork) and the element types and reductions they use.
//
// Everything here is touched only under the emulator's lock: from the NCCL
// entry points, or from AsyncWork::start()/poll(), which the scheduler calls
// while a CUDA entry point holds that lock.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "streams.hpp"

namespace gt::emu::nccl {

class CommOp;

// A message a rank sent to itself, for the receive it is matched with.
struct SelfSlot {
  bool filled = false;
  std::vector<unsigned char> data;
};

// What a communicator shares with its operations. Held by shared_ptr because
// operations can outlive the ncclComm handle: ncclCommAbort frees the handle
// at once (as NCCL does), while its operations still sit in stream queues
// until their next poll says they are complete.
struct CommState {
  int serial = 0;  // "communicator #serial" in messages
  int rank = 0, size = 1, device = 0;
  // Two MPI communicators over the same ranks (both MPI_COMM_NULL when the
  // communicator has one rank and was made without MPI):
  //   data:    the operations' nonblocking collectives and messages, posted
  //            in NCCL issue order (see next_post);
  //   control: host-side collectives (ncclCommSplit), posted in program
  //            order. Separate because the two orders differ across ranks:
  //            an operation is posted when a rank's scheduler gets to it,
  //            which may be before or after that rank's next split.
  MPI_Comm data = MPI_COMM_NULL;
  MPI_Comm control = MPI_COMM_NULL;

  bool aborted = false;  // ncclCommAbort
  bool closed = false;   // ncclCommDestroy (the handle is gone)
  // The first error an operation hit (ncclCommGetAsyncError); once set, the
  // communicator is broken: its operations complete without communicating.
  ncclResult_t async_error = ncclSuccess;
  std::string last_error;

  // NCCL runs a communicator's operations in issue order, whatever streams
  // they are on; MPI needs every rank to post a communicator's collectives
  // in one order. So each operation gets a sequence number when it is
  // enqueued and posts its MPI requests only when next_post reaches it.
  uint64_t next_seq = 0;
  uint64_t next_post = 0;
  int outstanding = 0;          // enqueued operations not yet finished
  std::set<CommOp*> in_flight;  // operations with MPI requests posted
  bool leaked = false;          // a request could be neither completed nor cancelled

  // Messages to self (a rank is its own peer): matched in posting order.
  std::deque<std::vector<unsigned char>> self_sent;
  std::deque<std::shared_ptr<SelfSlot>> self_waiting;

  // "communicator #3 (rank 0 of 2, device 0)"
  std::string label() const;
  bool broken() const { return aborted || closed || async_error != ncclSuccess; }
  bool local() const { return size == 1; }
  // Records the first asynchronous error (and reports it).
  void set_async_error(ncclResult_t e, const std::string& msg);
  void match_self();
};

// An operation's host buffers: what MPI sends from and receives into.
struct Staging {
  std::vector<unsigned char> in, out;
};

// One NCCL operation. start() runs when its group starts (when its streams
// have all reached it): it snapshots the inputs from device memory into host
// staging (MPI never sees a device pointer: device memory is PROT_NONE
// outside the scheduler's device phase). The MPI requests are posted in issue
// order (see CommState::next_post); poll() tests them and, on completion,
// writes the results into device memory.
class CommOp {
 public:
  CommOp(std::shared_ptr<CommState> st, std::string what);
  virtual ~CommOp();
  CommOp(const CommOp&) = delete;
  CommOp& operator=(const CommOp&) = delete;

  CommState& state() const { return *st_; }
  const std::string& what() const { return what_; }
  // Handed to the scheduler with this sequence number.
  void enqueue(uint64_t seq);
  void start();
  bool poll();
  // ncclCommAbort: cancels what can be cancelled and leaks what MPI still
  // references (a request that cannot complete keeps its buffers forever).
  void abandon();

 protected:
  // Snapshots the inputs (device memory is open).
  virtual void capture() {}
  // Posts the operation's requests, or completes it locally.
  virtual void post() = 0;
  // Called when none of the posted requests is pending: writes the results
  // (device memory is open) and returns true, or returns false to be asked
  // again (a message to self not sent yet).
  virtual bool complete() = 0;

  // Checks an MPI call's result; on failure the communicator becomes broken.
  bool mpi_ok(int rc, const char* call);
  void add_request(MPI_Request r, bool cancellable);
  const MPI_Status& status(size_t i) const { return statuses_[i]; }

  std::shared_ptr<CommState> st_;
  std::string what_;
  std::unique_ptr<Staging> stg_;

 private:
  void try_post();
  bool finish();

  std::vector<MPI_Request> reqs_;
  std::vector<MPI_Status> statuses_;
  std::vector<char> cancellable_;
  uint64_t seq_ = 0;
  bool enqueued_ = false, started_ = false, posted_ = false, finished_ = false;
};

// The operations one ncclGroupEnd (or one ungrouped call) launched on one
// device. Their streams are joined, as NCCL documents for a group that spans
// streams: the group starts once every one of its streams has reached it,
// and every one of them waits until all its operations are complete.
struct GroupJoin {
  std::vector<std::unique_ptr<CommOp>> ops;
  int streams = 0;  // streams the group is on
  int arrived = 0;  // of those, how many have reached it
  bool started = false;
};

// The scheduler's unit: a group's share of one stream. Starting all the
// group's operations together is what lets a ring of receive-then-send
// progress.
class GroupWork final : public AsyncWork {
 public:
  explicit GroupWork(std::shared_ptr<GroupJoin> join) : join_(std::move(join)) {}
  void start() override;
  bool poll() override;
  std::string describe() const override;

 private:
  std::shared_ptr<GroupJoin> join_;
};

// ---- element types and reductions ---------------------------------------------------

// Bytes per element, or 0 for a value outside ncclDataType_t.
size_t type_size(ncclDataType_t t);
const char* type_name(ncclDataType_t t);
const char* op_name(ncclRedOp_t op);
// Whether the emulator reduces this type (every type moves as raw bytes).
bool reducible(ncclDataType_t t);
// out[i] = op over r = 0..p-1 of blocks[r * stride + i], i < n, reduced in
// rank order (so every rank that reduces the same blocks gets the same bits).
void reduce(ncclDataType_t t, ncclRedOp_t op, int p, const void* blocks, size_t stride, size_t n,
            void* out);

// ---- the operations -----------------------------------------------------------------

std::unique_ptr<CommOp> make_all_reduce(std::shared_ptr<CommState> st, const void* send, void* recv,
                                        size_t n, ncclDataType_t t, ncclRedOp_t op);
std::unique_ptr<CommOp> make_reduce_scatter(std::shared_ptr<CommState> st, const void* send,
                                            void* recv, size_t n, ncclDataType_t t, ncclRedOp_t op);
std::unique_ptr<CommOp> make_all_gather(std::shared_ptr<CommState> st, const void* send, void* recv,
                                        size_t n, ncclDataType_t t);
std::unique_ptr<CommOp> make_broadcast(std::shared_ptr<CommState> st, const void* send, void* recv,
                                       size_t n, ncclDataType_t t, int root);
std::unique_ptr<CommOp> make_send(std::shared_ptr<CommState> st, const void* send, size_t n,
                                  ncclDataType_t t, int peer);
std::unique_ptr<CommOp> make_recv(std::shared_ptr<CommState> st, void* recv, size_t n,
                                  ncclDataType_t t, int peer);

// MPI's text for an error code.
std::string mpi_error_text(int rc);
// MPI is usable (initialised and not finalised).
bool mpi_up();

// ---- the entry points' shared helpers (nccl.cpp) and bootstrap (bootstrap.cpp) ----
// Reports a failed call (one "gt-emu: error:" line unless `print` is false
// because the runtime printed it already), keeps it for ncclGetLastError and
// returns its code.
ncclResult_t fail_call(ncclResult_t code, const std::string& api, const CommState* st,
                       const std::string& msg, bool print = true);
std::shared_ptr<CommState> new_state(int rank, int size, int device, MPI_Comm control,
                                     MPI_Comm data);
// A handle for `st`, registered as live.
ncclComm_t new_comm(std::shared_ptr<CommState> st);
// The handle is live (and, unless allowed, not finalized).
ncclResult_t check_comm(const char* api, const ncclComm* comm, bool allow_finalized = false);
// ncclCommInitRank and ncclCommSplit (bootstrap.cpp).
ncclResult_t init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank);
ncclResult_t split(ncclComm_t comm, int color, int key, ncclComm_t* out);

}  // namespace gt::emu::nccl

// The handle type nccl.h only declares. The state lives apart (shared with
// the operations) because operations outlive an aborted handle.
struct ncclComm {
  std::shared_ptr<gt::emu::nccl::CommState> st;
  bool finalized = false;
};
