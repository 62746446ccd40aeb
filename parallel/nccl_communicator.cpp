#include "parallel/nccl_communicator.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <type_traits>

#include "kernels/core/error.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "parallel/mpi_check.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/mpi_session.hpp"

#define NCCL_CHECK(expr) GT_API_CHECK("NCCL", expr, ncclSuccess, ncclGetErrorString)
#define NCCL_LOG_ERROR(expr) GT_API_LOG("NCCL", expr, ncclSuccess, ncclGetErrorString)

namespace gt {

void detail::NcclCommDestroy::operator()(ncclComm_t c) const noexcept {
  // Finalize flushes outstanding work; destroy frees. After an abort the
  // handle is already gone (released), so this only runs on a healthy comm.
  NCCL_LOG_ERROR(ncclCommFinalize(c));
  NCCL_LOG_ERROR(ncclCommDestroy(c));
}

namespace detail {

// Work enqueued on a communication stream (or, for send/recv, queued until
// launched as one group) and the event that marks its completion.
struct NcclWork {
  struct P2p {
    bool send;
    void* buf;
    size_t n;  // elements of `type`
    int peer;
    ncclDataType_t type = ncclFloat32;
  };
  ncclComm_t comm;
  cudaStream_t stream;
  std::shared_ptr<bool> aborted;
  cuda::CudaEvent done;
  bool launched = false;
  std::vector<P2p> p2p;

  NcclWork(ncclComm_t c, cudaStream_t s, std::shared_ptr<bool> a)
      : comm(c), stream(s), aborted(std::move(a)) {}
  void launch() {
    if (launched) return;
    launched = true;
    NCCL_CHECK(ncclGroupStart());
    for (const P2p& op : p2p) {
      if (op.send)
        NCCL_CHECK(ncclSend(op.buf, op.n, op.type, op.peer, comm, stream));
      else
        NCCL_CHECK(ncclRecv(op.buf, op.n, op.type, op.peer, comm, stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    done.record(stream);
  }
};

// The operations this communicator's consumers waited on the device (the
// compute stream waits for their events; the host has not seen them end),
// in wait order, for drain() to watch against their deadlines.
struct DeviceWaits {
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::shared_ptr<NcclWork> work;
    std::string what;
    double deadline_s;
    Clock::time_point since;
    std::string where;  // the job's CollectiveContext::where() at wait(); "" = none
    bool abort_job;     // its abort_on_deadline
  };
  std::vector<Entry> entries;
};

}  // namespace detail

namespace {

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  fail("unknown ReduceOp ", static_cast<int>(op));
}

// Fails on an asynchronous NCCL error of `comm`, naming `what`.
void check_async(ncclComm_t comm, const std::string& what) {
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess && async != ncclInProgress)
    fail(what, ": NCCL reported an asynchronous error: ", ncclGetErrorString(async), " (",
         ncclGetLastError(comm), ")");
}

bool event_done(const cuda::CudaEvent& e) {
  const cudaError_t rc = cudaEventQuery(e.get());
  if (rc == cudaErrorNotReady) return false;
  CUDA_CHECK(rc);
  return true;
}

// Polls `work` on the host until it is done; past `deadline_s` (counted from
// `since`, 0 = none) aborts the communicator (kernels of a collective a peer
// never joined spin forever) and throws naming `what`, after `where` (the
// job's step and phase when the op was waited). With `abort_job_on_deadline`
// (a training job's CollectiveContext) it ends the job instead, as an MPI
// wait does: by then a peer is hung or dead.
void host_wait(detail::NcclWork& work, const std::string& what, double deadline_s,
               detail::DeviceWaits::Clock::time_point since, const std::string& where,
               bool abort_job_on_deadline) {
  using Clock = detail::DeviceWaits::Clock;
  auto nap = std::chrono::microseconds(5);
  for (;;) {
    work.launch();
    check_async(work.comm, what);
    if (event_done(work.done)) return;
    const double waited = std::chrono::duration<double>(Clock::now() - since).count();
    if (deadline_s > 0 && waited >= deadline_s) {
      if (!*work.aborted) {
        NCCL_LOG_ERROR(ncclCommAbort(work.comm));
        *work.aborted = true;
      }
      const std::string msg = detail::concat(
          where.empty() ? "" : where + ": ", what, " did not complete within its deadline of ",
          deadline_s, " s (waited ", waited,
          " s); a peer rank has probably not started the same collective (hung or "
          "failed). The NCCL communicator was aborted");
      if (abort_job_on_deadline)
        abort_job(1, msg + " (runtime.collective_timeout_s); aborting the job");
      fail(msg);
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(500));
  }
}

class NcclPendingOp final : public PendingOp {
 public:
  NcclPendingOp(std::shared_ptr<detail::NcclWork> work, std::string what, double deadline,
                cudaStream_t compute, std::shared_ptr<detail::DeviceWaits> waits,
                std::shared_ptr<const CollectiveContext> context)
      : work_(std::move(work)),
        what_(std::move(what)),
        deadline_(deadline),
        compute_(compute),
        waits_(std::move(waits)),
        context_(std::move(context)) {}

  bool test() override {
    work_->launch();
    check_async(work_->comm, what_);
    return event_done(work_->done);
  }

  // On the device: the compute stream waits for the completion event; the
  // host goes on, and drain() watches the deadline (see PendingOp::wait).
  void wait(double deadline_s) override {
    if (test()) return;
    CUDA_CHECK(cudaStreamWaitEvent(compute_, work_->done.get(), 0));
    waits_->entries.push_back({work_, what_, deadline_s, detail::DeviceWaits::Clock::now(),
                               context_ ? context_->where() : std::string(),
                               context_ && context_->abort_on_deadline});
  }

  double default_deadline() const override { return deadline_; }
  // wait() never throws on its deadline (drain() does, for the communicator).
  bool timed_out() const override { return false; }
  std::string describe() const override { return what_; }
  void log_warning(const std::string& msg) const override {
    std::fprintf(stderr, "warning: %s\n", msg.c_str());
  }

 private:
  std::shared_ptr<detail::NcclWork> work_;
  std::string what_;
  double deadline_;
  cudaStream_t compute_;
  std::shared_ptr<detail::DeviceWaits> waits_;
  std::shared_ptr<const CollectiveContext> context_;  // may be null
};

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device, cudaStream_t compute,
                                   std::string name, double deadline_s)
    : name_(std::move(name)),
      device_(device),
      compute_(compute),
      deadline_s_(deadline_s),
      scalar_(sizeof(double)),
      scalar_host_(sizeof(double)),
      aborted_(std::make_shared<bool>(false)),
      waits_(std::make_shared<detail::DeviceWaits>()),
      comm_(comm) {
  NCCL_CHECK(ncclCommUserRank(comm, &rank_));
  NCCL_CHECK(ncclCommCount(comm, &size_));
  p2p_ = std::make_shared<detail::NcclWork>(comm, stream_.get(), aborted_);
}

NcclCommunicator::~NcclCommunicator() {
  // An aborted communicator is already freed by NCCL: finalizing it is invalid.
  if (*aborted_) (void)comm_.release();
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(const MpiCommunicator& bootstrap,
                                                           int device, cudaStream_t compute,
                                                           std::string name,
                                                           double deadline_s) {
  CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap.rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, bootstrap.comm()));
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  std::unique_ptr<NcclCommunicator> out(
      new NcclCommunicator(comm, device, compute, std::move(name), deadline_s));
  out->context_ = bootstrap.context();  // the job's step and phase, in deadline errors
  return out;
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create_single(int device,
                                                                  cudaStream_t compute,
                                                                  std::string name,
                                                                  double deadline_s) {
  CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));  // nobody to share it with: one rank
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, 1, id, 0));
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, device, compute, std::move(name), deadline_s));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::split(int color, int key,
                                                          std::string name) const {
  if (color < 0) fail("NcclCommunicator '", name_, "'.split: color must be >= 0, got ", color);
  ncclComm_t sub = nullptr;
  NCCL_CHECK(ncclCommSplit(comm_.get(), color, key, &sub, nullptr));
  std::unique_ptr<NcclCommunicator> out(
      new NcclCommunicator(sub, device_, compute_, std::move(name), deadline_s_));
  out->context_ = context_;
  return out;
}

void NcclCommunicator::abort() noexcept {
  if (!comm_ || *aborted_) return;
  NCCL_LOG_ERROR(ncclCommAbort(comm_.get()));
  *aborted_ = true;
}

detail::NcclWork& NcclCommunicator::p2p_group() {
  if (p2p_->launched) p2p_ = std::make_shared<detail::NcclWork>(comm_.get(), stream_.get(), aborted_);
  // Every op of a group orders after the compute queued before it joined:
  // the group launches at its first wait, and a send queued after more
  // compute (a pipeline's forward writing the buffer it sends) must not
  // read it before that compute is done. The waits queue on the
  // communication stream ahead of the group's launch.
  CUDA_CHECK(cudaSetDevice(device_));
  ready_.record(compute_);
  stream_.wait(ready_.get());
  return *p2p_;
}

void NcclCommunicator::begin_collective() {
  CUDA_CHECK(cudaSetDevice(device_));
  if (!p2p_->launched && !p2p_->p2p.empty()) p2p_->launch();  // queued p2p first, in issue order
  ready_.record(compute_);
  stream_.wait(ready_.get());
}

std::shared_ptr<detail::NcclWork> NcclCommunicator::enqueue_done() {
  auto work = std::make_shared<detail::NcclWork>(comm_.get(), stream_.get(), aborted_);
  work->launched = true;
  work->done.record(stream_.get());
  return work;
}

std::string NcclCommunicator::describe(const std::string& what) const {
  return what + " on communicator '" + name_ + "' (rank " + std::to_string(rank_) + " of " +
         std::to_string(size_) + ")";
}

CommHandle NcclCommunicator::handle(std::shared_ptr<detail::NcclWork> work, std::string what) {
  return CommHandle(std::make_unique<NcclPendingOp>(std::move(work), std::move(what), deadline_s_,
                                                    compute_, waits_, context_));
}

void NcclCommunicator::do_drain() {
  // In wait order; each deadline counts from its wait().
  for (const auto& e : waits_->entries)
    host_wait(*e.work, e.what, e.deadline_s, e.since, e.where, e.abort_job);
  waits_->entries.clear();
}

CommHandle NcclCommunicator::do_all_reduce(float* buf, int64_t n, ReduceOp op) {
  begin_collective();
  NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<size_t>(n), ncclFloat32, to_nccl(op),
                           comm_.get(), stream_.get()));
  return finish(std::string("all_reduce_") + reduce_op_name(op) + " of " + std::to_string(n) +
                " floats");
}

CommHandle NcclCommunicator::do_reduce_scatter_sum(const float* in, float* out, int64_t n) {
  begin_collective();
  NCCL_CHECK(ncclReduceScatter(in, out, static_cast<size_t>(n), ncclFloat32, ncclSum,
                               comm_.get(), stream_.get()));
  return finish("reduce_scatter_sum of " + std::to_string(n) + " floats per rank");
}

CommHandle NcclCommunicator::do_all_reduce_sum_bf16(uint16_t* buf, int64_t n) {
  begin_collective();
  NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<size_t>(n), ncclBfloat16, ncclSum, comm_.get(),
                           stream_.get()));
  return finish("all_reduce_sum_bf16 of " + std::to_string(n) + " bf16");
}

CommHandle NcclCommunicator::do_reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out,
                                                        int64_t n) {
  begin_collective();
  NCCL_CHECK(ncclReduceScatter(in, out, static_cast<size_t>(n), ncclBfloat16, ncclSum, comm_.get(),
                               stream_.get()));
  return finish("reduce_scatter_sum_bf16 of " + std::to_string(n) + " bf16 per rank");
}

CommHandle NcclCommunicator::do_all_gather(const float* in, float* out, int64_t n) {
  // NCCL's all-gather is in place when in == out + rank * n, as ours allows.
  begin_collective();
  NCCL_CHECK(ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat32, comm_.get(),
                           stream_.get()));
  return finish("all_gather of " + std::to_string(n) + " floats per rank");
}

CommHandle NcclCommunicator::do_broadcast(float* buf, int64_t n, int root) {
  begin_collective();
  NCCL_CHECK(ncclBroadcast(buf, buf, static_cast<size_t>(n), ncclFloat32, root, comm_.get(),
                           stream_.get()));
  return finish("broadcast of " + std::to_string(n) + " floats from " + std::to_string(root));
}

CommHandle NcclCommunicator::do_send(const float* buf, int64_t n, int peer, int tag) {
  // NCCL matches point-to-point messages per peer pair in issue order and has
  // no tags: ranks must issue them in the same order (our rings do).
  p2p_group().p2p.push_back({true, const_cast<float*>(buf), static_cast<size_t>(n), peer});
  return handle(p2p_, "send of " + std::to_string(n) + " floats to " + std::to_string(peer) +
                          " (tag " + std::to_string(tag) + ") on communicator '" + name_ + "'");
}

CommHandle NcclCommunicator::do_recv(float* buf, int64_t n, int peer, int tag) {
  p2p_group().p2p.push_back({false, buf, static_cast<size_t>(n), peer});
  return handle(p2p_, "recv of " + std::to_string(n) + " floats from " + std::to_string(peer) +
                          " (tag " + std::to_string(tag) + ") on communicator '" + name_ + "'");
}

CommHandle NcclCommunicator::do_all_to_all_v(const void* in, const int64_t* send_counts,
                                              void* out, const int64_t* recv_counts,
                                              int elem_bytes) {
  // NCCL has no all-to-all-v: a send and a receive per peer with a non-zero
  // block (both sides skip the same empty ones: recv_counts[q] on this rank
  // is send_counts[me] on q), in bytes, queued with this communicator's
  // other point-to-point ops and launched as one group at the first wait.
  // The block to and from this rank itself goes through NCCL too.
  detail::NcclWork& group = p2p_group();
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  int64_t sent = 0, received = 0;
  for (int q = 0; q < size_; ++q) {
    const int64_t s = send_counts[q] * elem_bytes, r = recv_counts[q] * elem_bytes;
    if (s > 0)
      group.p2p.push_back({true, const_cast<char*>(src + sent), static_cast<size_t>(s), q, ncclInt8});
    if (r > 0) group.p2p.push_back({false, dst + received, static_cast<size_t>(r), q, ncclInt8});
    sent += s;
    received += r;
  }
  return handle(p2p_, "all_to_all_v of " + std::to_string(sent) + " bytes sent, " +
                          std::to_string(received) + " received on communicator '" + name_ + "'");
}

namespace {
template <typename T>
constexpr ncclDataType_t nccl_type() {
  return std::is_same_v<T, double> ? ncclFloat64 : ncclInt64;
}
}  // namespace

// One value through the device and back, blocking (with the deadline).
template <typename T>
T NcclCommunicator::scalar_all_reduce(T value, ReduceOp op, const char* what) {
  static_assert(sizeof(T) <= sizeof(double), "scalar buffer holds 8 bytes");
  begin_collective();
  *scalar_host_.as<T>() = value;
  CUDA_CHECK(cudaMemcpyAsync(scalar_.data(), scalar_host_.data(), sizeof(T),
                             cudaMemcpyHostToDevice, stream_.get()));
  NCCL_CHECK(ncclAllReduce(scalar_.data(), scalar_.data(), 1, nccl_type<T>(), to_nccl(op),
                           comm_.get(), stream_.get()));
  CUDA_CHECK(cudaMemcpyAsync(scalar_host_.data(), scalar_.data(), sizeof(T),
                             cudaMemcpyDeviceToHost, stream_.get()));
  // The host reads the result: a host wait, with the deadline.
  host_wait(*enqueue_done(), describe(std::string(what) + "(" + reduce_op_name(op) + ")"),
            deadline_s_, detail::DeviceWaits::Clock::now(),
            context_ ? context_->where() : std::string(), context_ && context_->abort_on_deadline);
  return *scalar_host_.as<T>();
}

double NcclCommunicator::do_all_reduce_f64(double value, ReduceOp op) {
  return scalar_all_reduce(value, op, "all_reduce_f64");
}

int64_t NcclCommunicator::do_all_reduce_i64(int64_t value, ReduceOp op) {
  return scalar_all_reduce(value, op, "all_reduce_i64");
}

void NcclCommunicator::do_barrier() {
  // NCCL has no barrier: an all-reduce of one value is one.
  do_all_reduce_i64(0, ReduceOp::sum);
}

}  // namespace gt
