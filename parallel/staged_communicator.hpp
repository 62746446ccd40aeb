// StagedCommunicator: a Communicator on DEVICE buffers that runs each
// collective as a HOST collective of another communicator (an MpiCommunicator
// in practice), staging through host memory. It lets a CUDA run use MPI,
// which NCCL cannot replace when several ranks share one GPU (NCCL refuses
// two ranks on a device): parallel.comm=mpi on runtime.device=cuda.
//
// Per operation:
//   start:      device inputs -> a host staging buffer leased for this op
//               (HostStaging::to_host, complete on return), then the inner
//               communicator's collective on that host buffer.
//   completion: the first test() that sees the inner op done, or wait(),
//               copies the result host -> device (HostStaging::to_device),
//               then the buffer goes back to the pool. Only outputs are
//               copied back (a broadcast root's and a send's buffers are not).
// So the device buffers hold the result once the handle has completed, as
// with every backend; compute issued after wait() sees it.
//
// Invariants
// - Owns `inner`: every op on it goes through this object, so the order of
//   collectives on the inner communicator is the order they were started here
//   (MPI's matching rule). The inner's own bytes_sent also grows; read this
//   one's, which counts exactly as the inner would for the same calls (the
//   Communicator base counts from size(), which is the inner's).
// - Each pending op owns its own staging buffer (StagingPool), so any number
//   may be in flight and be completed in any order.
// - Deadlines, timed_out() and describe() are the inner op's: a deadline
//   error names the inner op and communicator, and an abandoned op leaks its
//   staging buffer with it rather than free memory MPI may still write.
// - The observer sees this communicator's ops; their time includes the copies.
// - all_gather is always run in place on the host (this rank's block copied
//   into its slot of the staging output), so in == out + rank*n works too.
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.hpp"
#include "parallel/host_staging.hpp"
#include "parallel/staging_pool.hpp"

namespace gt {

class StagedCommunicator final : public Communicator {
 public:
  // `staging` may be shared by several communicators (one per mesh axis);
  // each keeps its own pool of buffers.
  StagedCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<HostStaging> staging);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }

  // The host communicator underneath (its counters include every staged op).
  Communicator& inner() const { return *inner_; }
  // Idle staging buffers, for tests of reuse.
  size_t idle_staging_buffers() const { return pool_->idle_buffers(); }

 protected:
  CommHandle do_all_reduce(float* buf, int64_t n, ReduceOp op) override;
  CommHandle do_reduce_scatter_sum(const float* in, float* out, int64_t n) override;
  CommHandle do_all_reduce_sum_bf16(uint16_t* buf, int64_t n) override;
  CommHandle do_reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) override;
  CommHandle do_all_gather(const float* in, float* out, int64_t n) override;
  CommHandle do_broadcast(float* buf, int64_t n, int root) override;
  CommHandle do_send(const float* buf, int64_t n, int peer, int tag) override;
  CommHandle do_recv(float* buf, int64_t n, int peer, int tag) override;
  double do_all_reduce_f64(double value, ReduceOp op) override;
  int64_t do_all_reduce_i64(int64_t value, ReduceOp op) override;
  void do_barrier() override;
  CommHandle do_all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                             const int64_t* recv_counts, int elem_bytes) override;

 private:
  // Where an op's result goes on completion: `bytes` from host to device.
  struct CopyBack {
    void* device = nullptr;
    const void* host = nullptr;
    size_t bytes = 0;
  };
  void to_host(float* host, const float* device, int64_t n);
  // Wraps the inner op's handle; copies back at once if it is already done.
  CommHandle staged(CommHandle inner, StagingPool::Lease lease, CopyBack back);

  std::shared_ptr<HostStaging> staging_;
  std::shared_ptr<StagingPool> pool_;  // shared with the leases of pending ops
  std::unique_ptr<Communicator> inner_;
};

}  // namespace gt
