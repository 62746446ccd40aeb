// The backend-independent half of Communicator: argument checks, ring-volume
// accounting and the observer hook (done here once, so every backend counts
// and is observed the same way), and the CommHandle lifetime rules.
#include "parallel/communicator.hpp"

#include <limits>

#include "kernels/core/error.hpp"

namespace gt {

const char* comm_kind_name(CommKind k) {
  switch (k) {
    case CommKind::all_reduce: return "all_reduce";
    case CommKind::reduce_scatter: return "reduce_scatter";
    case CommKind::all_gather: return "all_gather";
    case CommKind::broadcast: return "broadcast";
    case CommKind::send: return "send";
    case CommKind::recv: return "recv";
    case CommKind::scalar_reduce: return "scalar_reduce";
    case CommKind::barrier: return "barrier";
    case CommKind::all_to_all: return "all_to_all";
  }
  return "?";
}

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

// ---- observed operations ------------------------------------------------------

namespace {

using ObsClock = CommObserver::Clock;

// A pending operation seen by an observer: forwards everything to the
// backend's op and reports the time its waits block and when it completes.
class ObservedOp final : public PendingOp {
 public:
  ObservedOp(std::unique_ptr<PendingOp> inner, CommObserver& obs, CommOp op, uint64_t token)
      : inner_(std::move(inner)), obs_(obs), op_(op), token_(token) {}

  bool test() override {
    const bool done = inner_->test();
    if (done) complete(ObsClock::now());
    return done;
  }
  void wait(double deadline_s) override {
    const auto begin = ObsClock::now();
    inner_->wait(deadline_s);  // throws past the deadline: nothing reported then
    const auto end = ObsClock::now();
    obs_.on_wait(token_, op_, begin, end);
    complete(end);
  }
  double default_deadline() const override { return inner_->default_deadline(); }
  bool timed_out() const override { return inner_->timed_out(); }
  std::string describe() const override { return inner_->describe(); }
  void log_warning(const std::string& msg) const override { inner_->log_warning(msg); }

 private:
  void complete(ObsClock::time_point t) {
    if (completed_) return;
    completed_ = true;
    obs_.on_complete(token_, op_, t);
  }
  std::unique_ptr<PendingOp> inner_;
  CommObserver& obs_;
  CommOp op_;
  uint64_t token_;
  bool completed_ = false;
};

}  // namespace

CommHandle Communicator::observed(CommHandle h, CommKind kind, int64_t n, double ring_bytes,
                                  ObsClock::time_point started) {
  if (!observer_) return h;
  const CommOp op{this, kind, n, ring_bytes};
  const uint64_t token = observer_->on_start(op, started);
  if (h.done()) {  // nothing to wait for (size 1, or already complete)
    observer_->on_complete(token, op, ObsClock::now());
    return h;
  }
  h.op_ = std::make_unique<ObservedOp>(std::move(h.op_), *observer_, op, token);
  return h;
}

// A blocking call: all of its time is exposed.
template <typename F>
auto Communicator::observed_blocking(CommKind kind, double ring_bytes, F&& call) {
  if (!observer_) return call();
  const CommOp op{this, kind, 1, ring_bytes};
  const auto begin = ObsClock::now();
  const uint64_t token = observer_->on_start(op, begin);
  auto result = call();
  const auto end = ObsClock::now();
  observer_->on_wait(token, op, begin, end);
  observer_->on_complete(token, op, end);
  return result;
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
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  CommHandle h = do_all_reduce(buf, n, ReduceOp::sum);
  const double v = ring_volume::all_reduce(size(), 4.0 * n);
  bytes_sent_ += v;
  return observed(std::move(h), CommKind::all_reduce, n, v, t0);
}

CommHandle Communicator::all_reduce_max(float* buf, int64_t n) {
  check_count("all_reduce_max", buf, n);
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  CommHandle h = do_all_reduce(buf, n, ReduceOp::max);
  const double v = ring_volume::all_reduce(size(), 4.0 * n);
  bytes_sent_ += v;
  return observed(std::move(h), CommKind::all_reduce, n, v, t0);
}

CommHandle Communicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  check_count("reduce_scatter_sum", in, n);
  check_count("reduce_scatter_sum", out, n);
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  CommHandle h = do_reduce_scatter_sum(in, out, n);
  const double v = ring_volume::reduce_scatter(size(), 4.0 * n);
  bytes_sent_ += v;
  return observed(std::move(h), CommKind::reduce_scatter, n, v, t0);
}

CommHandle Communicator::all_reduce_sum_bf16(uint16_t* buf, int64_t n) {
  check_count("all_reduce_sum_bf16", buf, n);
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  CommHandle h = do_all_reduce_sum_bf16(buf, n);
  const double v = ring_volume::all_reduce(size(), 2.0 * n);
  bytes_sent_ += v;
  return observed(std::move(h), CommKind::all_reduce, n, v, t0);
}

CommHandle Communicator::reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) {
  check_count("reduce_scatter_sum_bf16", in, n);
  check_count("reduce_scatter_sum_bf16", out, n);
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  CommHandle h = do_reduce_scatter_sum_bf16(in, out, n);
  const double v = ring_volume::reduce_scatter(size(), 2.0 * n);
  bytes_sent_ += v;
  return observed(std::move(h), CommKind::reduce_scatter, n, v, t0);
}

CommHandle Communicator::all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                                      const int64_t* recv_counts, int elem_bytes) {
  if (elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8)
    fail("comm '", name(), "': all_to_all_v of ", elem_bytes,
         "-byte elements; expected 2 (bf16), 4 (fp32, int32) or 8 (64-bit)");
  if (send_counts == nullptr || recv_counts == nullptr)
    fail("comm '", name(), "': all_to_all_v without its counts");
  int64_t sent = 0, received = 0, sent_away = 0;
  for (int q = 0; q < size(); ++q) {
    if (send_counts[q] < 0 || recv_counts[q] < 0)
      fail("comm '", name(), "': all_to_all_v with a negative count for rank ", q, " (send ",
           send_counts[q], ", receive ", recv_counts[q], ")");
    sent += send_counts[q];
    received += recv_counts[q];
    if (q != rank()) sent_away += send_counts[q];
  }
  // MPI counts bytes in int: the totals must fit (in bytes, which the
  // message below calls elements).
  check_count("all_to_all_v (bytes)", in, sent * elem_bytes);
  check_count("all_to_all_v (bytes)", out, received * elem_bytes);
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  CommHandle h = do_all_to_all_v(in, send_counts, out, recv_counts, elem_bytes);
  const double v = static_cast<double>(sent_away) * elem_bytes;
  bytes_sent_ += v;
  return observed(std::move(h), CommKind::all_to_all, sent, v, t0);
}

CommHandle Communicator::do_all_to_all_v(const void*, const int64_t*, void*, const int64_t*,
                                         int) {
  fail("comm '", name(), "': all_to_all_v is not implemented on this backend (expert "
       "parallelism, parallel.ep > 1, needs it; MPI, staged MPI and NCCL have it)");
}

CommHandle Communicator::all_gather(const float* in, float* out, int64_t n) {
  check_count("all_gather", in, n);
  check_count("all_gather", out, n);
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  CommHandle h = do_all_gather(in, out, n);
  const double v = ring_volume::all_gather(size(), 4.0 * n);
  bytes_sent_ += v;
  return observed(std::move(h), CommKind::all_gather, n, v, t0);
}

CommHandle Communicator::broadcast(float* buf, int64_t n, int root) {
  check_count("broadcast", buf, n);
  check_peer("broadcast", root);
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  CommHandle h = do_broadcast(buf, n, root);
  const double v = ring_volume::broadcast(size(), 4.0 * n, rank() == root);
  bytes_sent_ += v;
  return observed(std::move(h), CommKind::broadcast, n, v, t0);
}

CommHandle Communicator::send(const float* buf, int64_t n, int peer, int tag) {
  check_count("send", buf, n);
  check_peer("send", peer);
  if (tag < 0) fail("comm '", name(), "': send with a negative tag ", tag);
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  CommHandle h = do_send(buf, n, peer, tag);
  bytes_sent_ += 4.0 * n;
  return observed(std::move(h), CommKind::send, n, 4.0 * n, t0);
}

CommHandle Communicator::recv(float* buf, int64_t n, int peer, int tag) {
  check_count("recv", buf, n);
  check_peer("recv", peer);
  if (tag < 0) fail("comm '", name(), "': recv with a negative tag ", tag);
  const auto t0 = observer_ ? ObsClock::now() : ObsClock::time_point{};
  return observed(do_recv(buf, n, peer, tag), CommKind::recv, n, 0.0, t0);
}

double Communicator::all_reduce_f64(double value, ReduceOp op) {
  const double v = ring_volume::all_reduce(size(), 8.0);
  const double r = observed_blocking(CommKind::scalar_reduce, v,
                                     [&] { return do_all_reduce_f64(value, op); });
  bytes_sent_ += v;
  return r;
}

int64_t Communicator::all_reduce_i64(int64_t value, ReduceOp op) {
  const double v = ring_volume::all_reduce(size(), 8.0);
  const int64_t r = observed_blocking(CommKind::scalar_reduce, v,
                                      [&] { return do_all_reduce_i64(value, op); });
  bytes_sent_ += v;
  return r;
}

void Communicator::barrier() {
  observed_blocking(CommKind::barrier, 0.0, [&] {
    do_barrier();
    return 0;
  });
}

}  // namespace gt
