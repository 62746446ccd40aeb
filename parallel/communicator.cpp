// The backend-independent half of Communicator: argument checks and ring-volume
// accounting (done here once, so every backend counts the same way), and the
// CommHandle lifetime rules.
#include "parallel/communicator.hpp"

#include <limits>

#include "kernels/core/error.hpp"

namespace gt {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

// ---- CommHandle -------------------------------------------------------------

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    finish_or_abandon();
    op_ = std::move(other.op_);
  }
  return *this;
}

CommHandle::~CommHandle() { finish_or_abandon(); }

void CommHandle::finish_or_abandon() noexcept {
  if (!op_) return;
  try {
    if (op_->timed_out()) {
      op_->log_warning("abandoning " + op_->describe() +
                       " after its deadline passed: it is still pending and its buffers are "
                       "still in use; the job should be aborted");
      // Deliberately leaked: MPI may still write into buffers the op owns,
      // and a request of a non-blocking collective may not be freed.
      (void)op_.release();
      return;
    } else if (!op_->test()) {
      op_->log_warning("handle for " + op_->describe() +
                       " destroyed before wait(); waiting for it now");
      op_->wait(op_->default_deadline());
    }
  } catch (const std::exception& e) {
    // A destructor never throws: say what happened and let the caller's own
    // error (if any) reach main().
    try {
      op_->log_warning(std::string("while destroying a comm handle: ") + e.what());
    } catch (...) {
    }
  }
  op_.reset();
}

void CommHandle::wait() {
  if (!op_) return;
  wait_for(op_->default_deadline());
}

void CommHandle::wait_for(double deadline_s) {
  if (!op_) return;
  op_->wait(deadline_s);  // throws on the deadline; op_ stays for a retry
  op_.reset();
}

bool CommHandle::test() {
  if (!op_) return true;
  if (!op_->test()) return false;
  op_.reset();
  return true;
}

// ---- ring volumes -----------------------------------------------------------

namespace ring_volume {
double all_reduce(int p, double bytes) { return 2.0 * (p - 1) / p * bytes; }
double reduce_scatter(int p, double block_bytes) {
  // (p-1)/p of the p * block total = (p-1) blocks, exact in integers.
  return static_cast<double>(p - 1) * block_bytes;
}
double all_gather(int p, double block_bytes) { return static_cast<double>(p - 1) * block_bytes; }
double broadcast(int p, double bytes, bool is_root) { return (is_root && p > 1) ? bytes : 0.0; }
}  // namespace ring_volume

// ---- Communicator -----------------------------------------------------------

void Communicator::check_count(const char* op, const void* ptr, int64_t n) const {
  if (n < 0) fail("comm '", name(), "': ", op, " with a negative element count ", n);
  if (n > std::numeric_limits<int>::max())
    fail("comm '", name(), "': ", op, " of ", n, " elements exceeds the per-call limit of ",
         std::numeric_limits<int>::max(), " (split the buffer)");
  if (n > 0 && ptr == nullptr) fail("comm '", name(), "': ", op, " of ", n, " elements on a null buffer");
}

void Communicator::check_peer(const char* op, int peer) const {
  if (peer < 0 || peer >= size())
    fail("comm '", name(), "': ", op, " peer/root ", peer, " is outside [0, ", size(), ")");
}

CommHandle Communicator::all_reduce_sum(float* buf, int64_t n) {
  check_count("all_reduce_sum", buf, n);
  CommHandle h = do_all_reduce(buf, n, ReduceOp::sum);
  bytes_sent_ += ring_volume::all_reduce(size(), 4.0 * n);
  return h;
}

CommHandle Communicator::all_reduce_max(float* buf, int64_t n) {
  check_count("all_reduce_max", buf, n);
  CommHandle h = do_all_reduce(buf, n, ReduceOp::max);
  bytes_sent_ += ring_volume::all_reduce(size(), 4.0 * n);
  return h;
}

CommHandle Communicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  check_count("reduce_scatter_sum", in, n);
  check_count("reduce_scatter_sum", out, n);
  CommHandle h = do_reduce_scatter_sum(in, out, n);
  bytes_sent_ += ring_volume::reduce_scatter(size(), 4.0 * n);
  return h;
}

CommHandle Communicator::all_gather(const float* in, float* out, int64_t n) {
  check_count("all_gather", in, n);
  check_count("all_gather", out, n);
  CommHandle h = do_all_gather(in, out, n);
  bytes_sent_ += ring_volume::all_gather(size(), 4.0 * n);
  return h;
}

CommHandle Communicator::broadcast(float* buf, int64_t n, int root) {
  check_count("broadcast", buf, n);
  check_peer("broadcast", root);
  CommHandle h = do_broadcast(buf, n, root);
  bytes_sent_ += ring_volume::broadcast(size(), 4.0 * n, rank() == root);
  return h;
}

CommHandle Communicator::send(const float* buf, int64_t n, int peer, int tag) {
  check_count("send", buf, n);
  check_peer("send", peer);
  if (tag < 0) fail("comm '", name(), "': send with a negative tag ", tag);
  CommHandle h = do_send(buf, n, peer, tag);
  bytes_sent_ += 4.0 * n;
  return h;
}

CommHandle Communicator::recv(float* buf, int64_t n, int peer, int tag) {
  check_count("recv", buf, n);
  check_peer("recv", peer);
  if (tag < 0) fail("comm '", name(), "': recv with a negative tag ", tag);
  return do_recv(buf, n, peer, tag);
}

double Communicator::all_reduce_f64(double value, ReduceOp op) {
  const double r = do_all_reduce_f64(value, op);
  bytes_sent_ += ring_volume::all_reduce(size(), 8.0);
  return r;
}

int64_t Communicator::all_reduce_i64(int64_t value, ReduceOp op) {
  const int64_t r = do_all_reduce_i64(value, op);
  bytes_sent_ += ring_volume::all_reduce(size(), 8.0);
  return r;
}

void Communicator::barrier() { do_barrier(); }

}  // namespace gt
