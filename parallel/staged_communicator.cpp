#include "parallel/staged_communicator.hpp"

#include <algorithm>
#include <functional>

#include "kernels/core/error.hpp"

namespace gt {

namespace {

constexpr size_t kFloat = sizeof(float);

size_t float_bytes(int64_t n) { return static_cast<size_t>(n) * kFloat; }
size_t bf16_bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(uint16_t); }

// The inner op, plus the copy of its result to the device once it is done.
class StagedOp final : public PendingOp {
 public:
  using Copy = std::function<void()>;
  StagedOp(std::unique_ptr<PendingOp> inner, StagingPool::Lease lease, Copy copy_back)
      : lease_(std::move(lease)), copy_back_(std::move(copy_back)), inner_(std::move(inner)) {}

  bool test() override {
    if (!inner_done_) {
      if (!inner_->test()) return false;
      inner_done_ = true;
    }
    finish();
    return true;
  }
  void wait(double deadline_s) override {
    if (!inner_done_) {
      inner_->wait(deadline_s);  // throws past the deadline: nothing copied, op stays pending
      inner_done_ = true;
    }
    finish();
  }
  double default_deadline() const override { return inner_->default_deadline(); }
  bool timed_out() const override { return inner_->timed_out(); }
  std::string describe() const override {
    return inner_->describe() + ", staged through host memory";
  }
  void log_warning(const std::string& msg) const override { inner_->log_warning(msg); }

 private:
  void finish() {
    if (copied_) return;
    copy_back_();  // a throw leaves copied_ false: the next test/wait retries
    copied_ = true;
  }
  // Declared first so it goes last: the buffer outlives the inner op using it.
  StagingPool::Lease lease_;
  Copy copy_back_;
  std::unique_ptr<PendingOp> inner_;
  bool inner_done_ = false;
  bool copied_ = false;
};

}  // namespace

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> inner,
                                       std::shared_ptr<HostStaging> staging)
    : staging_(std::move(staging)), inner_(std::move(inner)) {
  if (!inner_) fail("StagedCommunicator: an inner communicator is required");
  if (!staging_) fail("StagedCommunicator '", inner_->name(), "': a HostStaging is required");
  pool_ = StagingPool::create(staging_);
}

void StagedCommunicator::to_host(float* host, const float* device, int64_t n) {
  if (n > 0) staging_->to_host(host, device, float_bytes(n));
}

CommHandle StagedCommunicator::staged(CommHandle inner, StagingPool::Lease lease, CopyBack back) {
  // The copy holds the staging object, not this communicator: a handle may
  // outlive the communicator that started it.
  auto copy = [staging = staging_, back] {
    if (back.bytes > 0) staging->to_device(back.device, back.host, back.bytes);
  };
  std::unique_ptr<PendingOp> op = take_pending(inner);
  if (!op) {  // already complete (nothing in flight): the result is on the host now
    copy();
    return CommHandle();
  }
  return CommHandle(std::make_unique<StagedOp>(std::move(op), std::move(lease), std::move(copy)));
}

CommHandle StagedCommunicator::do_all_reduce(float* buf, int64_t n, ReduceOp op) {
  StagingPool::Lease lease = pool_->acquire(float_bytes(n));
  float* host = lease.floats();
  to_host(host, buf, n);
  CommHandle h;
  switch (op) {
    case ReduceOp::sum: h = inner_->all_reduce_sum(host, n); break;
    case ReduceOp::max: h = inner_->all_reduce_max(host, n); break;
    case ReduceOp::min:
      fail("comm '", name(), "': all_reduce_min on buffers is not a Communicator operation");
  }
  return staged(std::move(h), std::move(lease), {buf, host, float_bytes(n)});
}

CommHandle StagedCommunicator::do_reduce_scatter_sum(const float* in, float* out, int64_t n) {
  const int64_t total = n * size();
  // One buffer: the whole input, then this rank's block of the output.
  StagingPool::Lease lease = pool_->acquire(float_bytes(total + n));
  float* host_in = lease.floats();
  float* host_out = host_in ? host_in + total : nullptr;
  to_host(host_in, in, total);
  CommHandle h = inner_->reduce_scatter_sum(host_in, host_out, n);
  return staged(std::move(h), std::move(lease), {out, host_out, float_bytes(n)});
}

CommHandle StagedCommunicator::do_all_reduce_sum_bf16(uint16_t* buf, int64_t n) {
  StagingPool::Lease lease = pool_->acquire(bf16_bytes(n));
  auto* host = static_cast<uint16_t*>(static_cast<void*>(lease.floats()));
  if (n > 0) staging_->to_host(host, buf, bf16_bytes(n));
  CommHandle h = inner_->all_reduce_sum_bf16(host, n);
  return staged(std::move(h), std::move(lease), {buf, host, bf16_bytes(n)});
}

CommHandle StagedCommunicator::do_reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out,
                                                          int64_t n) {
  const int64_t total = n * size();
  StagingPool::Lease lease = pool_->acquire(bf16_bytes(total + n));
  auto* host_in = static_cast<uint16_t*>(static_cast<void*>(lease.floats()));
  uint16_t* host_out = host_in ? host_in + total : nullptr;
  if (total > 0) staging_->to_host(host_in, in, bf16_bytes(total));
  CommHandle h = inner_->reduce_scatter_sum_bf16(host_in, host_out, n);
  return staged(std::move(h), std::move(lease), {out, host_out, bf16_bytes(n)});
}

CommHandle StagedCommunicator::do_all_gather(const float* in, float* out, int64_t n) {
  // Gathered in place on the host whether or not it was in place on the
  // device: one staging buffer, and in == out + rank*n needs no special case.
  const int64_t total = n * size();
  StagingPool::Lease lease = pool_->acquire(float_bytes(total));
  float* host_out = lease.floats();
  float* host_mine = host_out ? host_out + static_cast<int64_t>(rank()) * n : nullptr;
  to_host(host_mine, in, n);
  CommHandle h = inner_->all_gather(host_mine, host_out, n);
  return staged(std::move(h), std::move(lease), {out, host_out, float_bytes(total)});
}

CommHandle StagedCommunicator::do_all_to_all_v(const void* in, const int64_t* send_counts,
                                                void* out, const int64_t* recv_counts,
                                                int elem_bytes) {
  // The counts are host arrays already; only the payload is staged: the
  // whole send buffer, then the whole receive buffer, in one lease.
  int64_t sent = 0, received = 0;
  for (int q = 0; q < size(); ++q) {
    sent += send_counts[q];
    received += recv_counts[q];
  }
  const size_t send_bytes = static_cast<size_t>(sent * elem_bytes);
  const size_t recv_bytes = static_cast<size_t>(received * elem_bytes);
  // At least 8 bytes of send room: MPI must not see the two buffers alias,
  // not even with nothing to send.
  const size_t send_room = std::max<size_t>(send_bytes, 8);
  StagingPool::Lease lease = pool_->acquire(send_room + recv_bytes);
  auto* host_in = static_cast<char*>(static_cast<void*>(lease.floats()));
  char* host_out = host_in ? host_in + send_room : nullptr;
  if (send_bytes > 0) staging_->to_host(host_in, in, send_bytes);
  CommHandle h = inner_->all_to_all_v(host_in, send_counts, host_out, recv_counts, elem_bytes);
  return staged(std::move(h), std::move(lease), {out, host_out, recv_bytes});
}

CommHandle StagedCommunicator::do_broadcast(float* buf, int64_t n, int root) {
  StagingPool::Lease lease = pool_->acquire(float_bytes(n));
  float* host = lease.floats();
  const bool is_root = rank() == root;
  if (is_root) to_host(host, buf, n);  // only the root's data matters
  CommHandle h = inner_->broadcast(host, n, root);
  // The root's device buffer already holds the data.
  const CopyBack back = is_root ? CopyBack{} : CopyBack{buf, host, float_bytes(n)};
  return staged(std::move(h), std::move(lease), back);
}

CommHandle StagedCommunicator::do_send(const float* buf, int64_t n, int peer, int tag) {
  StagingPool::Lease lease = pool_->acquire(float_bytes(n));
  to_host(lease.floats(), buf, n);
  CommHandle h = inner_->send(lease.floats(), n, peer, tag);
  return staged(std::move(h), std::move(lease), CopyBack{});
}

CommHandle StagedCommunicator::do_recv(float* buf, int64_t n, int peer, int tag) {
  StagingPool::Lease lease = pool_->acquire(float_bytes(n));
  float* host = lease.floats();
  CommHandle h = inner_->recv(host, n, peer, tag);
  return staged(std::move(h), std::move(lease), {buf, host, float_bytes(n)});
}

// Scalars and the barrier are host values already: straight through.
double StagedCommunicator::do_all_reduce_f64(double value, ReduceOp op) {
  return inner_->all_reduce_f64(value, op);
}

int64_t StagedCommunicator::do_all_reduce_i64(int64_t value, ReduceOp op) {
  return inner_->all_reduce_i64(value, op);
}

void StagedCommunicator::do_barrier() { inner_->barrier(); }

}  // namespace gt
