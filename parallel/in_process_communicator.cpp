#include "parallel/in_process_communicator.hpp"

#include <cstring>

#include "kernels/core/error.hpp"

namespace gt {

namespace {
template <typename T>
void copy_elems(const T* in, T* out, int64_t n) {
  if (n > 0 && in != out) std::memmove(out, in, static_cast<size_t>(n) * sizeof(T));
}
}  // namespace

CommHandle InProcessCommunicator::do_all_reduce(float*, int64_t, ReduceOp) { return CommHandle{}; }

CommHandle InProcessCommunicator::do_reduce_scatter_sum(const float* in, float* out, int64_t n) {
  copy_elems(in, out, n);
  return CommHandle{};
}

// One rank: the sum is its own value, already bf16; nothing is rounded.
CommHandle InProcessCommunicator::do_all_reduce_sum_bf16(uint16_t*, int64_t) {
  return CommHandle{};
}

CommHandle InProcessCommunicator::do_reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out,
                                                             int64_t n) {
  copy_elems(in, out, n);
  return CommHandle{};
}

CommHandle InProcessCommunicator::do_all_gather(const float* in, float* out, int64_t n) {
  copy_elems(in, out, n);
  return CommHandle{};
}

// One rank: what it sends itself is what it receives.
CommHandle InProcessCommunicator::do_all_to_all_v(const void* in, const int64_t* send_counts,
                                                  void* out, const int64_t* recv_counts,
                                                  int elem_bytes) {
  if (send_counts[0] != recv_counts[0])
    fail("comm '", name_, "': all_to_all_v sends ", send_counts[0], " elements to itself but "
         "expects to receive ", recv_counts[0]);
  if (send_counts[0] > 0) std::memcpy(out, in, static_cast<size_t>(send_counts[0] * elem_bytes));
  return CommHandle{};
}

CommHandle InProcessCommunicator::do_broadcast(float*, int64_t, int) { return CommHandle{}; }

CommHandle InProcessCommunicator::do_send(const float*, int64_t n, int peer, int tag) {
  fail("comm '", name_, "': send of ", n, " floats to peer ", peer, " (tag ", tag,
       ") on an in-process communicator of size 1: the only peer is this rank itself, and a "
       "send to self has no one to receive it; use an MPI communicator for point-to-point");
}

CommHandle InProcessCommunicator::do_recv(float*, int64_t n, int peer, int tag) {
  fail("comm '", name_, "': recv of ", n, " floats from peer ", peer, " (tag ", tag,
       ") on an in-process communicator of size 1: no other rank exists to send it; use an "
       "MPI communicator for point-to-point");
}

double InProcessCommunicator::do_all_reduce_f64(double value, ReduceOp) { return value; }
int64_t InProcessCommunicator::do_all_reduce_i64(int64_t value, ReduceOp) { return value; }

}  // namespace gt
