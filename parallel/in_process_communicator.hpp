// InProcessCommunicator: the size-1 Communicator. Collectives over one rank are
// copies (or nothing, when in place), every handle is complete on return, and
// the ring volumes are 0 (p - 1 = 0). It lets unit tests and 1-rank runs use
// the same code paths as a real job without MPI. send/recv would be to self,
// which has no partner in one thread: they fail with a message saying so.
#pragma once

#include <string>

#include "parallel/communicator.hpp"

namespace gt {

class InProcessCommunicator final : public Communicator {
 public:
  explicit InProcessCommunicator(std::string name = "self") : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

 protected:
  CommHandle do_all_reduce(float* buf, int64_t n, ReduceOp op) override;
  CommHandle do_reduce_scatter_sum(const float* in, float* out, int64_t n) override;
  CommHandle do_all_reduce_sum_bf16(uint16_t* buf, int64_t n) override;
  CommHandle do_reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) override;
  CommHandle do_all_gather(const float* in, float* out, int64_t n) override;
  CommHandle do_broadcast(float* buf, int64_t n, int root) override;
  CommHandle do_all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                             const int64_t* recv_counts, int elem_bytes) override;
  CommHandle do_send(const float* buf, int64_t n, int peer, int tag) override;
  CommHandle do_recv(float* buf, int64_t n, int peer, int tag) override;
  double do_all_reduce_f64(double value, ReduceOp op) override;
  int64_t do_all_reduce_i64(int64_t value, ReduceOp op) override;
  void do_barrier() override {}

 private:
  std::string name_;
};

}  // namespace gt
