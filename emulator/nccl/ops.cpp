// The emulated NCCL's operations (see comm.hpp); their element types and
// reductions are in reduce.cpp.
//
// Every operation is ONE round of nonblocking MPI, posted when the operation
// gets its turn and then left to MPI: once posted, it completes on the wire
// whatever this rank's host does next (any MPI call progresses it), so a
// peer never waits for this rank's scheduler to come back for a second
// round. Only the copy of the results into device memory waits for poll().
//   AllReduce:     MPI_Iallgather of every rank's input, then each rank
//                  reduces all p contributions locally, element by element in
//                  rank order 0..p-1: deterministic, and the same bits on
//                  every rank (a ring or tree would make the result depend
//                  on p and on the rank). Costs p times the buffer in host
//                  memory, which an emulator can afford.
//   ReduceScatter: MPI_Ialltoall (rank r receives every rank's slice r), then
//                  the same rank-order reduction of that slice.
//   AllGather:     MPI_Iallgather. Broadcast: MPI_Ibcast.
//   Send/Recv:     MPI_Isend/MPI_Irecv with one tag: MPI matches messages of
//                  one (source, tag, communicator) in posting order, which
//                  is NCCL's per-peer issue order. A rank's messages to
//                  itself go through a FIFO in the communicator instead.
// With one rank, every collective is a copy (as NCCL's are).
#include <cstring>

#include "comm.hpp"
#include "diagnostics.hpp"

namespace gt::emu::nccl {

namespace {

constexpr int kTag = 0x6e63;  // "nc"; below the MPI_TAG_UB every MPI must allow (32767)

// Buffers of requests that could be neither completed nor cancelled when
// their communicator was aborted: MPI may still write them, so they are kept
// (reachable, so leak checkers stay quiet) for the life of the process.
std::vector<std::unique_ptr<Staging>>& leaked_buffers() {
  static auto* v = new std::vector<std::unique_ptr<Staging>>;
  return *v;
}

// Elements move as raw bits of their width: MPI needs no notion of bf16.
MPI_Datatype mpi_type(size_t elem_bytes) {
  switch (elem_bytes) {
    case 1: return MPI_UINT8_T;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
  }
}

void copy_in(std::vector<unsigned char>& dst, const void* src, size_t bytes) {
  dst.resize(bytes);
  if (bytes) std::memcpy(dst.data(), src, bytes);
}

void copy_out(void* dst, const std::vector<unsigned char>& src, size_t bytes) {
  if (bytes) std::memcpy(dst, src.data(), bytes);
}

std::string count_of(size_t n, ncclDataType_t t) {
  return std::to_string(n) + " x " + type_name(t);
}

}  // namespace

// ---- CommState ------------------------------------------------------------------------

std::string CommState::label() const {
  return "communicator #" + std::to_string(serial) + " (rank " + std::to_string(rank) + " of " +
         std::to_string(size) + ", device " + std::to_string(device) + ")";
}

void CommState::set_async_error(ncclResult_t e, const std::string& msg) {
  report("error", msg);
  if (async_error != ncclSuccess) return;  // the first error is the one that explains
  async_error = e;
  last_error = msg;
}

void CommState::match_self() {
  while (!self_sent.empty() && !self_waiting.empty()) {
    std::shared_ptr<SelfSlot> slot = self_waiting.front();
    self_waiting.pop_front();
    slot->data = std::move(self_sent.front());
    self_sent.pop_front();
    slot->filled = true;
  }
}

// ---- CommOp ---------------------------------------------------------------------------

CommOp::CommOp(std::shared_ptr<CommState> st, std::string what)
    : st_(std::move(st)), stg_(std::make_unique<Staging>()) {
  what_ = std::move(what) + " on " + st_->label();
}

CommOp::~CommOp() {
  if (!enqueued_ || finished_) return;
  // Only a device fault or cudaDeviceReset throws queued work away. The
  // peers' halves of this operation can no longer be matched: the
  // communicator is broken from here on.
  abandon();
  --st_->outstanding;
  if (!st_->broken())
    st_->set_async_error(ncclUnhandledCudaError,
                         what_ +
                             " was thrown away before it completed (a device fault or "
                             "cudaDeviceReset dropped its stream's work); the other ranks' "
                             "half of it can never be matched, so the communicator is broken");
}

void CommOp::enqueue(uint64_t seq) {
  seq_ = seq;
  enqueued_ = true;
  ++st_->outstanding;
}

void CommOp::start() {
  started_ = true;
  if (st_->broken()) return;  // poll() finishes it
  capture();
  try_post();
}

void CommOp::try_post() {
  if (posted_ || st_->broken() || st_->next_post != seq_) return;
  posted_ = true;
  ++st_->next_post;
  post();
  if (!reqs_.empty()) st_->in_flight.insert(this);
}

bool CommOp::poll() {
  if (finished_) return true;
  if (!started_) return false;
  if (st_->broken()) {
    // Aborted, destroyed, or an operation failed: complete without
    // communicating, so no stream waits for peers that will never come.
    abandon();
    return finish();
  }
  try_post();
  if (!posted_) return false;  // an earlier operation of the communicator has not posted yet
  for (size_t i = 0; i < reqs_.size(); ++i) {
    if (reqs_[i] == MPI_REQUEST_NULL) continue;
    int done = 0;
    if (!mpi_ok(MPI_Test(&reqs_[i], &done, &statuses_[i]), "MPI_Test")) {
      abandon();
      return finish();
    }
    if (!done) return false;
  }
  st_->in_flight.erase(this);
  if (st_->broken()) {  // post() failed
    abandon();
    return finish();
  }
  if (!complete()) return false;
  return finish();
}

bool CommOp::finish() {
  finished_ = true;
  st_->in_flight.erase(this);
  if (enqueued_) --st_->outstanding;
  return true;
}

void CommOp::abandon() {
  st_->in_flight.erase(this);
  bool pending = false;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    if (reqs_[i] == MPI_REQUEST_NULL) continue;
    if (!mpi_up()) {
      pending = true;
      continue;
    }
    // Only receives are cancelled: cancelling a send is deprecated (MPI-4)
    // and not possible once matched, and a nonblocking collective cannot be
    // cancelled at all. A cancelled unmatched receive completes at once.
    if (cancellable_[i]) MPI_Cancel(&reqs_[i]);
    int done = 0;
    if (MPI_Test(&reqs_[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) pending = true;
  }
  reqs_.clear();
  statuses_.clear();
  cancellable_.clear();
  if (pending && stg_) {
    leaked_buffers().push_back(std::move(stg_));
    st_->leaked = true;
  }
}

bool CommOp::mpi_ok(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return true;
  int cls = rc;
  MPI_Error_class(rc, &cls);
  const bool truncated = cls == MPI_ERR_TRUNCATE;
  st_->set_async_error(
      truncated ? ncclInvalidUsage : ncclSystemError,
      what_ + ": " + call + " failed: " + mpi_error_text(rc) +
          (truncated ? " (a peer sent more than this operation expects: the ranks passed "
                       "different counts)"
                     : ""));
  return false;
}

void CommOp::add_request(MPI_Request r, bool cancellable) {
  reqs_.push_back(r);
  statuses_.emplace_back();
  cancellable_.push_back(cancellable ? 1 : 0);
}

// ---- GroupWork ------------------------------------------------------------------------

void GroupWork::start() {
  if (++join_->arrived < join_->streams) return;  // the group's other streams are not there yet
  join_->started = true;
  for (auto& op : join_->ops) op->start();
}

bool GroupWork::poll() {
  if (!join_->started) return false;
  bool all = true;
  for (auto& op : join_->ops) all = op->poll() && all;  // poll every one: each may progress
  return all;
}

std::string GroupWork::describe() const {
  const auto& ops = join_->ops;
  std::string s = ops.size() == 1
                      ? ops.front()->what()
                      : "a group of " + std::to_string(ops.size()) + " NCCL operations: ";
  for (size_t i = 0; ops.size() > 1 && i < ops.size(); ++i) s += (i ? "; " : "") + ops[i]->what();
  // Called again by the scheduler's hang report: say what the group waits for.
  if (join_->arrived > 0 && !join_->started)
    s += " (waiting for " + std::to_string(join_->streams - join_->arrived) +
         " more of its streams to reach it)";
  return s;
}

// ---- the operations -------------------------------------------------------------------

namespace {

class AllReduceOp final : public CommOp {
 public:
  AllReduceOp(std::shared_ptr<CommState> st, const void* send, void* recv, size_t n,
              ncclDataType_t t, ncclRedOp_t op)
      : CommOp(std::move(st), "ncclAllReduce of " + count_of(n, t) + " (" + op_name(op) + ")"),
        send_(send),
        recv_(recv),
        n_(n),
        t_(t),
        op_(op) {}

 private:
  size_t bytes() const { return n_ * type_size(t_); }
  void capture() override { copy_in(stg_->in, send_, bytes()); }
  void post() override {
    if (st_->local()) return;
    stg_->out.resize(bytes() * static_cast<size_t>(st_->size));
    const MPI_Datatype dt = mpi_type(type_size(t_));
    const int n = static_cast<int>(n_);
    MPI_Request r = MPI_REQUEST_NULL;
    if (mpi_ok(MPI_Iallgather(stg_->in.data(), n, dt, stg_->out.data(), n, dt, st_->data, &r),
               "MPI_Iallgather"))
      add_request(r, false);
  }
  bool complete() override {
    if (st_->local())
      copy_out(recv_, stg_->in, bytes());
    else
      reduce(t_, op_, st_->size, stg_->out.data(), n_, n_, recv_);
    return true;
  }

  const void* send_;
  void* recv_;
  size_t n_;
  ncclDataType_t t_;
  ncclRedOp_t op_;
};

class ReduceScatterOp final : public CommOp {
 public:
  ReduceScatterOp(std::shared_ptr<CommState> st, const void* send, void* recv, size_t n,
                  ncclDataType_t t, ncclRedOp_t op)
      : CommOp(std::move(st),
               "ncclReduceScatter of " + count_of(n, t) + " per rank (" + op_name(op) + ")"),
        send_(send),
        recv_(recv),
        n_(n),
        t_(t),
        op_(op) {}

 private:
  size_t bytes() const { return n_ * type_size(t_); }
  void capture() override { copy_in(stg_->in, send_, bytes() * static_cast<size_t>(st_->size)); }
  void post() override {
    if (st_->local()) return;
    stg_->out.resize(bytes() * static_cast<size_t>(st_->size));
    const MPI_Datatype dt = mpi_type(type_size(t_));
    const int n = static_cast<int>(n_);
    MPI_Request r = MPI_REQUEST_NULL;
    if (mpi_ok(MPI_Ialltoall(stg_->in.data(), n, dt, stg_->out.data(), n, dt, st_->data, &r),
               "MPI_Ialltoall"))
      add_request(r, false);
  }
  bool complete() override {
    if (st_->local())
      copy_out(recv_, stg_->in, bytes());
    else
      reduce(t_, op_, st_->size, stg_->out.data(), n_, n_, recv_);
    return true;
  }

  const void* send_;
  void* recv_;
  size_t n_;
  ncclDataType_t t_;
  ncclRedOp_t op_;
};

class AllGatherOp final : public CommOp {
 public:
  AllGatherOp(std::shared_ptr<CommState> st, const void* send, void* recv, size_t n,
              ncclDataType_t t)
      : CommOp(std::move(st), "ncclAllGather of " + count_of(n, t) + " per rank"),
        send_(send),
        recv_(recv),
        n_(n),
        t_(t) {}

 private:
  size_t bytes() const { return n_ * type_size(t_); }
  // The input is snapshotted, so in place (send == recv + rank * n) needs
  // nothing special.
  void capture() override { copy_in(stg_->in, send_, bytes()); }
  void post() override {
    if (st_->local()) return;
    stg_->out.resize(bytes() * static_cast<size_t>(st_->size));
    const MPI_Datatype dt = mpi_type(type_size(t_));
    const int n = static_cast<int>(n_);
    MPI_Request r = MPI_REQUEST_NULL;
    if (mpi_ok(MPI_Iallgather(stg_->in.data(), n, dt, stg_->out.data(), n, dt, st_->data, &r),
               "MPI_Iallgather"))
      add_request(r, false);
  }
  bool complete() override {
    if (st_->local())
      copy_out(recv_, stg_->in, bytes());
    else
      copy_out(recv_, stg_->out, stg_->out.size());
    return true;
  }

  const void* send_;
  void* recv_;
  size_t n_;
  ncclDataType_t t_;
};

class BroadcastOp final : public CommOp {
 public:
  BroadcastOp(std::shared_ptr<CommState> st, const void* send, void* recv, size_t n,
              ncclDataType_t t, int root)
      : CommOp(std::move(st),
               "ncclBroadcast of " + count_of(n, t) + " from rank " + std::to_string(root)),
        send_(send),
        recv_(recv),
        n_(n),
        t_(t),
        root_(root) {}

 private:
  size_t bytes() const { return n_ * type_size(t_); }
  void capture() override {
    if (st_->rank == root_)
      copy_in(stg_->in, send_, bytes());
    else
      stg_->in.resize(bytes());  // sendbuff is not read on other ranks
  }
  void post() override {
    if (st_->local()) return;
    MPI_Request r = MPI_REQUEST_NULL;
    if (mpi_ok(MPI_Ibcast(stg_->in.data(), static_cast<int>(n_), mpi_type(type_size(t_)), root_,
                          st_->data, &r),
               "MPI_Ibcast"))
      add_request(r, false);
  }
  bool complete() override {
    copy_out(recv_, stg_->in, bytes());
    return true;
  }

  const void* send_;
  void* recv_;
  size_t n_;
  ncclDataType_t t_;
  int root_;
};

class SendOp final : public CommOp {
 public:
  SendOp(std::shared_ptr<CommState> st, const void* send, size_t n, ncclDataType_t t, int peer)
      : CommOp(std::move(st), "ncclSend of " + count_of(n, t) + " to rank " + std::to_string(peer)),
        send_(send),
        n_(n),
        t_(t),
        peer_(peer) {}

 private:
  void capture() override { copy_in(stg_->in, send_, n_ * type_size(t_)); }
  void post() override {
    if (peer_ == st_->rank) {
      st_->self_sent.push_back(std::move(stg_->in));
      st_->match_self();
      return;
    }
    MPI_Request r = MPI_REQUEST_NULL;
    if (mpi_ok(MPI_Isend(stg_->in.data(), static_cast<int>(n_), mpi_type(type_size(t_)), peer_,
                         kTag, st_->data, &r),
               "MPI_Isend"))
      add_request(r, false);
  }
  bool complete() override { return true; }

  const void* send_;
  size_t n_;
  ncclDataType_t t_;
  int peer_;
};

class RecvOp final : public CommOp {
 public:
  RecvOp(std::shared_ptr<CommState> st, void* recv, size_t n, ncclDataType_t t, int peer)
      : CommOp(std::move(st),
               "ncclRecv of " + count_of(n, t) + " from rank " + std::to_string(peer)),
        recv_(recv),
        n_(n),
        t_(t),
        peer_(peer) {}

 private:
  size_t bytes() const { return n_ * type_size(t_); }
  void post() override {
    if (peer_ == st_->rank) {
      self_ = std::make_shared<SelfSlot>();
      st_->self_waiting.push_back(self_);
      st_->match_self();
      return;
    }
    stg_->in.resize(bytes());
    MPI_Request r = MPI_REQUEST_NULL;
    if (mpi_ok(MPI_Irecv(stg_->in.data(), static_cast<int>(n_), mpi_type(type_size(t_)), peer_,
                         kTag, st_->data, &r),
               "MPI_Irecv"))
      add_request(r, true);
  }
  bool complete() override {
    size_t got = 0;
    const std::vector<unsigned char>* data = &stg_->in;
    if (self_) {
      if (!self_->filled) return false;  // this rank's ncclSend to itself has not run yet
      got = self_->data.size();
      data = &self_->data;
    } else {
      int count = 0;
      MPI_Get_count(&status(0), mpi_type(type_size(t_)), &count);
      got = count == MPI_UNDEFINED ? 0 : static_cast<size_t>(count) * type_size(t_);
    }
    if (got != bytes()) {
      // NCCL needs the counts to match; MPI accepts a shorter message.
      st_->set_async_error(ncclInvalidUsage,
                           what_ + ": the matching ncclSend carried " + std::to_string(got) +
                               " bytes but this receive expects " + std::to_string(bytes()) +
                               " (NCCL needs the same count and type on both sides)");
      return true;
    }
    copy_out(recv_, *data, bytes());
    return true;
  }

  void* recv_;
  size_t n_;
  ncclDataType_t t_;
  int peer_;
  std::shared_ptr<SelfSlot> self_;
};

}  // namespace

std::unique_ptr<CommOp> make_all_reduce(std::shared_ptr<CommState> st, const void* send, void* recv,
                                        size_t n, ncclDataType_t t, ncclRedOp_t op) {
  return std::make_unique<AllReduceOp>(std::move(st), send, recv, n, t, op);
}

std::unique_ptr<CommOp> make_reduce_scatter(std::shared_ptr<CommState> st, const void* send,
                                            void* recv, size_t n, ncclDataType_t t,
                                            ncclRedOp_t op) {
  return std::make_unique<ReduceScatterOp>(std::move(st), send, recv, n, t, op);
}

std::unique_ptr<CommOp> make_all_gather(std::shared_ptr<CommState> st, const void* send, void* recv,
                                        size_t n, ncclDataType_t t) {
  return std::make_unique<AllGatherOp>(std::move(st), send, recv, n, t);
}

std::unique_ptr<CommOp> make_broadcast(std::shared_ptr<CommState> st, const void* send, void* recv,
                                       size_t n, ncclDataType_t t, int root) {
  return std::make_unique<BroadcastOp>(std::move(st), send, recv, n, t, root);
}

std::unique_ptr<CommOp> make_send(std::shared_ptr<CommState> st, const void* send, size_t n,
                                  ncclDataType_t t, int peer) {
  return std::make_unique<SendOp>(std::move(st), send, n, t, peer);
}

std::unique_ptr<CommOp> make_recv(std::shared_ptr<CommState> st, void* recv, size_t n,
                                  ncclDataType_t t, int peer) {
  return std::make_unique<RecvOp>(std::move(st), recv, n, t, peer);
}

// ---- MPI helpers ----------------------------------------------------------------------

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(len));
}

bool mpi_up() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

}  // namespace gt::emu::nccl
