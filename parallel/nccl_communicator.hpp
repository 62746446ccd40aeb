// NcclCommunicator: the NCCL backend of Communicator, on DEVICE fp32 buffers
// (compiled only when the CUDA toolkit is found; tests skip without a GPU).
//
// Streams and ordering (nothing implicit):
//   * Each communicator owns a non-blocking communication stream. Starting a
//     collective records an event on the caller's compute stream and makes
//     the communication stream wait for it, so the collective sees every
//     buffer the compute stream wrote before the call; then the NCCL call is
//     enqueued and a completion event recorded after it.
//   * test() queries that event. wait() never blocks the host: it makes the
//     compute stream wait for the event (cudaStreamWaitEvent), so compute
//     enqueued after wait() is ordered after the collective on the device,
//     and files the op for drain(). drain() polls the filed events (and
//     ncclCommGetAsyncError) on the host, each against its deadline counted
//     from its wait(); the trainer drains the mesh once per step, before it
//     reads the loss. The scalar reductions, whose result the host reads,
//     wait on the host with the deadline.
//   * send/recv are not started one by one (a lone ncclRecv blocks its stream
//     until matched, which deadlocks a ring): they are queued and launched
//     together in one ncclGroupStart/End when any of their handles is first
//     tested or waited, or when another collective starts.
//   * A deadline passing (in drain() or a host wait) or an asynchronous NCCL
//     error aborts the NCCL communicator (ncclCommAbort, so no kernel stays
//     spinning and the compute stream's waits end) and throws gt::Error
//     naming the op and the communicator; main() then aborts the job.
//
// Bootstrap (nccl-tests' pattern): rank 0 of an MPI communicator calls
// ncclGetUniqueId, MPI broadcasts it, every rank calls ncclCommInitRank on its
// device. Axes are made with ncclCommSplit. Teardown: ncclCommFinalize then
// ncclCommDestroy, before the streams go (members declared in that order).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_resources.hpp"
#include "parallel/collective_context.hpp"
#include "parallel/communicator.hpp"

namespace gt {

class MpiCommunicator;

namespace detail {
struct NcclCommDestroy {
  void operator()(ncclComm_t c) const noexcept;  // finalize + destroy; never throws
};
struct NcclWork;     // enqueued (or queued p2p) work and its completion event
struct DeviceWaits;  // operations waited on the device, for drain()
}  // namespace detail

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`. `device` is this rank's GPU; collectives
  // order after work on `compute` (the stream the model's kernels run on).
  static std::unique_ptr<NcclCommunicator> create(const MpiCommunicator& bootstrap, int device,
                                                  cudaStream_t compute, std::string name,
                                                  double deadline_s);
  // A one-rank communicator, no bootstrap: for a job run without MPI.
  static std::unique_ptr<NcclCommunicator> create_single(int device, cudaStream_t compute,
                                                         std::string name, double deadline_s);
  ~NcclCommunicator() override;

  // ncclCommSplit (collective over this communicator): ranks with the same
  // color form a group, ordered by key. Inherits device, stream and deadline.
  std::unique_ptr<NcclCommunicator> split(int color, int key, std::string name) const;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  ncclComm_t comm() const { return comm_.get(); }
  cudaStream_t comm_stream() const { return stream_.get(); }
  // ncclCommAbort: for a job that is going down (a peer failed).
  void abort() noexcept;

 protected:
  CommHandle do_all_reduce(float* buf, int64_t n, ReduceOp op) override;
  CommHandle do_reduce_scatter_sum(const float* in, float* out, int64_t n) override;
  CommHandle do_all_reduce_sum_bf16(uint16_t* buf, int64_t n) override;
  CommHandle do_reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) override;
  CommHandle do_all_gather(const float* in, float* out, int64_t n) override;
  CommHandle do_broadcast(float* buf, int64_t n, int root) override;
  CommHandle do_send(const float* buf, int64_t n, int peer, int tag) override;
  CommHandle do_recv(float* buf, int64_t n, int peer, int tag) override;
  CommHandle do_all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                             const int64_t* recv_counts, int elem_bytes) override;
  double do_all_reduce_f64(double value, ReduceOp op) override;
  int64_t do_all_reduce_i64(int64_t value, ReduceOp op) override;
  void do_barrier() override;
  void do_drain() override;

 private:
  NcclCommunicator(ncclComm_t comm, int device, cudaStream_t compute, std::string name,
                   double deadline_s);
  // Orders the comm stream after the compute stream and flushes queued p2p.
  void begin_collective();
  // The completion event recorded after what begin_collective enqueued.
  std::shared_ptr<detail::NcclWork> enqueue_done();
  // "<what> on communicator '<name>' (rank r of p)"
  std::string describe(const std::string& what) const;
  CommHandle handle(std::shared_ptr<detail::NcclWork> work, std::string what);
  CommHandle finish(const std::string& what) { return handle(enqueue_done(), describe(what)); }
  template <typename T>
  T scalar_all_reduce(T value, ReduceOp op, const char* what);
  // The open group of queued sends/receives (a fresh one once launched),
  // the communication stream ordered after the compute queued so far.
  detail::NcclWork& p2p_group();

  std::string name_;
  int device_;
  cudaStream_t compute_;
  double deadline_s_;
  int rank_ = 0, size_ = 1;
  // Declared before comm_ so they are destroyed after it.
  cuda::CudaStream stream_;
  cuda::CudaEvent ready_;  // compute stream -> comm stream ordering
  cuda::DeviceBuffer scalar_;  // 8 bytes for the blocking scalar reductions
  cuda::PinnedBuffer scalar_host_;
  std::shared_ptr<detail::NcclWork> p2p_;  // sends/receives queued, not yet launched
  std::shared_ptr<bool> aborted_;          // set by abort() or a deadline: no finalize then
  std::shared_ptr<detail::DeviceWaits> waits_;  // waited on the device, not yet drained
  // The job's step and phase (the bootstrap MPI communicator's context when
  // created; split communicators share it): deadline errors name them, and
  // with abort_on_deadline a missed deadline ends the job as an MPI wait does.
  std::shared_ptr<const CollectiveContext> context_;
  std::unique_ptr<ncclComm, detail::NcclCommDestroy> comm_;
};

}  // namespace gt
