#include "parallel/mpi_communicator.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "kernels/core/bf16.hpp"
#include "kernels/core/error.hpp"
#include "parallel/mpi_check.hpp"
#include "parallel/mpi_session.hpp"

namespace gt {

namespace {

MPI_Op to_mpi(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  fail("unknown ReduceOp ", static_cast<int>(op));
}

// MPI_User_function for bf16 bits: inout[i] = bf16(in[i] + inout[i]), the
// add in fp32 (exact for two bf16 values' widening), rounded once.
void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16_from_float(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

// One MPI_Request in flight. Knows how to describe itself so a deadline error
// says which op, how large, on which communicator.
class MpiPendingOp final : public PendingOp {
 public:
  MpiPendingOp(MPI_Request req, std::string what, double default_deadline,
               std::shared_ptr<spdlog::logger> log, std::shared_ptr<void> scratch,
               std::shared_ptr<const CollectiveContext> context)
      : req_(req),
        what_(std::move(what)),
        default_deadline_(default_deadline),
        log_(std::move(log)),
        scratch_(std::move(scratch)),
        context_(std::move(context)) {}

  ~MpiPendingOp() override {
    // CommHandle completes (or deliberately abandons) us before this runs. An
    // MPI_Request of a non-blocking collective may not be freed (MPI 3.0,
    // 5.12), so an abandoned request is left to MPI_Abort / MPI_Finalize.
  }

  bool test() override {
    int flag = 0;
    try {
      MPI_CHECK(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE));
    } catch (const Error& e) {
      fail(what_, ": ", e.what());
    }
    if (flag) timed_out_ = false;
    return flag != 0;
  }

  void wait(double deadline_s) override {
    if (deadline_s <= 0.0) {
      try {
        MPI_CHECK(MPI_Wait(&req_, MPI_STATUS_IGNORE));
      } catch (const Error& e) {
        fail(what_, ": ", e.what());
      }
      timed_out_ = false;
      return;
    }
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto limit = start + std::chrono::duration_cast<clock::duration>(
                                   std::chrono::duration<double>(deadline_s));
    // Short sleeps that grow to 1 ms: a collective that finishes in
    // microseconds is not slowed much, a long wait does not spin a core.
    auto nap = std::chrono::microseconds(10);
    while (!test()) {
      const auto now = clock::now();
      if (now >= limit) {
        timed_out_ = true;
        const double waited = std::chrono::duration<double>(now - start).count();
        const std::string where = context_ ? context_->where() + ": " : "";
        if (context_ && context_->abort_on_deadline)
          abort_job(1, detail::concat(where, what_, " did not complete within its deadline of ",
                                      deadline_s, " s (runtime.collective_timeout_s); a peer "
                                      "rank has probably hung or died before starting it. "
                                      "Aborting the job"));
        fail(where, what_, " did not complete within its deadline of ", deadline_s,
             " s (waited ", waited, " s); a peer rank has probably not started the same "
             "collective (hung or failed). The operation is still pending: wait again or abort "
             "the job");
      }
      std::this_thread::sleep_for(std::min<clock::duration>(nap, limit - now));
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }

  double default_deadline() const override { return default_deadline_; }
  bool timed_out() const override { return timed_out_; }
  std::string describe() const override { return what_; }
  void log_warning(const std::string& msg) const override { log_->warn("{}", msg); }

 private:
  MPI_Request req_;
  std::string what_;
  double default_deadline_;
  bool timed_out_ = false;
  std::shared_ptr<spdlog::logger> log_;
  // Buffers the op itself owns (the blocking scalar reductions): an abandoned
  // op is leaked by CommHandle, so MPI can still write here after a deadline.
  std::shared_ptr<void> scratch_;
  std::shared_ptr<const CollectiveContext> context_;
};

}  // namespace

MpiCommunicator::Bf16SumOp::Bf16SumOp() {
  MPI_CHECK(MPI_Op_create(&sum_bf16, /*commute=*/1, &op_));
}

MpiCommunicator::Bf16SumOp::~Bf16SumOp() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (op_ != MPI_OP_NULL && !finalised) MPI_Op_free(&op_);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double deadline_s,
                                 std::shared_ptr<spdlog::logger> log)
    : name_(std::move(name)), log_(log ? std::move(log) : spdlog::default_logger()) {
  if (comm == MPI_COMM_NULL) fail("MpiCommunicator '", name_, "': given MPI_COMM_NULL");
  if (comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF)
    fail("MpiCommunicator '", name_, "': cannot own a predefined communicator (it would be "
         "freed); use MpiCommunicator::dup(MPI_COMM_WORLD, ...)");
  comm_ = comm;  // owned from here; a throwing constructor runs no destructor, so the
                 // catch below frees it by hand.
  try {
    set_errors_return(comm_);
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    set_deadline(deadline_s);
    // World ranks of our members, for messages about a peer ("recv from 1
    // (world rank 3)"): a tp rank means little to someone reading a log.
    MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
    MPI_CHECK(MPI_Comm_group(comm_, &group));
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    std::vector<int> mine(static_cast<size_t>(size_));
    for (int i = 0; i < size_; ++i) mine[static_cast<size_t>(i)] = i;
    world_ranks_.resize(static_cast<size_t>(size_));
    const int rc = MPI_Group_translate_ranks(group, size_, mine.data(), world_group,
                                             world_ranks_.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    MPI_CHECK(rc);
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
}

MpiCommunicator::~MpiCommunicator() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (comm_ == MPI_COMM_NULL || finalised) return;
  const int rc = MPI_Comm_free(&comm_);
  if (rc != MPI_SUCCESS)
    log_->error("MPI_Comm_free of communicator '{}' failed: {}", name_,
                detail::mpi_error_string(rc));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::dup(MPI_Comm comm, std::string name,
                                                      double deadline_s,
                                                      std::shared_ptr<spdlog::logger> log) {
  MPI_Comm copy = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(comm, &copy));
  return std::make_unique<MpiCommunicator>(copy, std::move(name), deadline_s, std::move(log));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key,
                                                        std::string name) const {
  if (color < 0) fail("MpiCommunicator '", name_, "'.split: color must be >= 0, got ", color);
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  auto out = std::make_unique<MpiCommunicator>(sub, std::move(name), deadline_s_, log_);
  out->set_context(context_);
  return out;
}

void MpiCommunicator::set_context(std::shared_ptr<const CollectiveContext> context) {
  context_ = std::move(context);
}

void MpiCommunicator::set_deadline(double seconds) {
  if (!(seconds >= 0.0))
    fail("MpiCommunicator '", name_, "': deadline must be >= 0 seconds (0 = none), got ",
         seconds);
  deadline_s_ = seconds;
}

CommHandle MpiCommunicator::make_handle(MPI_Request req, const char* op, int64_t n,
                                        const char* unit, std::shared_ptr<void> scratch) const {
  std::string what = detail::concat(op, " of ", n, " ", unit, " on communicator '", name_,
                                    "' (rank ", rank_, " of ", size_, ", ", detail::mpi_where(),
                                    ")");
  return CommHandle(std::make_unique<MpiPendingOp>(req, std::move(what), deadline_s_, log_,
                                                    std::move(scratch), context_));
}

CommHandle MpiCommunicator::do_all_reduce(float* buf, int64_t n, ReduceOp op) {
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(n), MPI_FLOAT, to_mpi(op), comm_,
                           &req));
  return make_handle(req, op == ReduceOp::sum ? "all_reduce_sum" : "all_reduce_max", n, "floats");
}

CommHandle MpiCommunicator::do_reduce_scatter_sum(const float* in, float* out, int64_t n) {
  MPI_Request req;
  MPI_CHECK(MPI_Ireduce_scatter_block(in, out, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_,
                                      &req));
  return make_handle(req, "reduce_scatter_sum", n, "floats per rank");
}

CommHandle MpiCommunicator::do_all_reduce_sum_bf16(uint16_t* buf, int64_t n) {
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(n), MPI_UINT16_T, bf16_sum_.get(),
                           comm_, &req));
  return make_handle(req, "all_reduce_sum_bf16", n, "bf16");
}

CommHandle MpiCommunicator::do_reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out,
                                                       int64_t n) {
  MPI_Request req;
  MPI_CHECK(MPI_Ireduce_scatter_block(in, out, static_cast<int>(n), MPI_UINT16_T, bf16_sum_.get(),
                                      comm_, &req));
  return make_handle(req, "reduce_scatter_sum_bf16", n, "bf16 per rank");
}

CommHandle MpiCommunicator::do_all_gather(const float* in, float* out, int64_t n) {
  MPI_Request req;
  // MPI forbids aliased buffers; a block already in place is MPI_IN_PLACE.
  const void* send = in == out + static_cast<int64_t>(rank_) * n ? MPI_IN_PLACE : in;
  MPI_CHECK(MPI_Iallgather(send, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n),
                           MPI_FLOAT, comm_, &req));
  return make_handle(req, "all_gather", n, "floats per rank");
}

CommHandle MpiCommunicator::do_all_to_all_v(const void* in, const int64_t* send_counts,
                                             void* out, const int64_t* recv_counts,
                                             int elem_bytes) {
  // In bytes (MPI_BYTE), so one call serves every element type. A
  // non-blocking collective reads its count and displacement arrays until it
  // completes (MPI 4.0, 5.12): the pending op keeps them alive.
  auto arrays = std::make_shared<std::vector<int>>(static_cast<size_t>(4 * size_));
  int* sc = arrays->data();
  int* sd = sc + size_;
  int* rc = sd + size_;
  int* rd = rc + size_;
  int64_t s_off = 0, r_off = 0;
  for (int q = 0; q < size_; ++q) {  // totals checked against INT_MAX by the caller
    sc[q] = static_cast<int>(send_counts[q] * elem_bytes);
    sd[q] = static_cast<int>(s_off);
    rc[q] = static_cast<int>(recv_counts[q] * elem_bytes);
    rd[q] = static_cast<int>(r_off);
    s_off += sc[q];
    r_off += rc[q];
  }
  MPI_Request req;
  MPI_CHECK(MPI_Ialltoallv(in, sc, sd, MPI_BYTE, out, rc, rd, MPI_BYTE, comm_, &req));
  return make_handle(req, "all_to_all_v", s_off, "bytes sent", std::move(arrays));
}

CommHandle MpiCommunicator::do_broadcast(float* buf, int64_t n, int root) {
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(buf, static_cast<int>(n), MPI_FLOAT, root, comm_, &req));
  return make_handle(req, "broadcast", n, "floats");
}

CommHandle MpiCommunicator::do_send(const float* buf, int64_t n, int peer, int tag) {
  MPI_Request req;
  MPI_CHECK(MPI_Isend(buf, static_cast<int>(n), MPI_FLOAT, peer, tag, comm_, &req));
  return make_handle(req,
                     detail::concat("send to ", peer, " (world rank ",
                                    world_ranks_[static_cast<size_t>(peer)], ", tag ", tag, ")")
                         .c_str(),
                     n, "floats");
}

CommHandle MpiCommunicator::do_recv(float* buf, int64_t n, int peer, int tag) {
  MPI_Request req;
  MPI_CHECK(MPI_Irecv(buf, static_cast<int>(n), MPI_FLOAT, peer, tag, comm_, &req));
  return make_handle(req,
                     detail::concat("recv from ", peer, " (world rank ",
                                    world_ranks_[static_cast<size_t>(peer)], ", tag ", tag, ")")
                         .c_str(),
                     n, "floats");
}

// The blocking scalar reductions reduce into a buffer shared with the pending
// op (not a plain local): if the wait passes its deadline, the abandoned op
// keeps it alive for MPI to write into later.
double MpiCommunicator::do_all_reduce_f64(double value, ReduceOp op) {
  auto slot = std::make_shared<double>(value);
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, slot.get(), 1, MPI_DOUBLE, to_mpi(op), comm_, &req));
  CommHandle h = make_handle(req, detail::concat("all_reduce_f64(", reduce_op_name(op), ")").c_str(),
                             1, "double", slot);
  h.wait();
  return *slot;
}

int64_t MpiCommunicator::do_all_reduce_i64(int64_t value, ReduceOp op) {
  auto slot = std::make_shared<int64_t>(value);
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, slot.get(), 1, MPI_INT64_T, to_mpi(op), comm_, &req));
  CommHandle h = make_handle(req, detail::concat("all_reduce_i64(", reduce_op_name(op), ")").c_str(),
                             1, "int64", slot);
  h.wait();
  return *slot;
}

void MpiCommunicator::do_barrier() {
  MPI_Request req;
  MPI_CHECK(MPI_Ibarrier(comm_, &req));
  CommHandle h = make_handle(req, "barrier", 0, "elements");
  h.wait();
}

}  // namespace gt
