// The emulated NCCL: NVIDIA's NCCL API (nccl.h) over MPI, for the emulated
// CUDA device (docs/EMULATOR.md). This file owns the C entry points:
// communicators (finalize, destroy, abort, queries; their creation and split
// are in bootstrap.cpp), the operations' argument checks, groups and errors;
// comm.hpp / ops.cpp hold the operations themselves.
//
// Communicators. An ncclComm is a pair of private MPI communicators over its
// ranks (MPI_ERRORS_RETURN set on both; see CommState for why two) plus its
// rank, size, device and error state. ncclCommInitRank with nranks > 1 needs
// MPI initialised and is COLLECTIVE OVER MPI_COMM_WORLD: MPI_Comm_split with
// a color derived from the unique id and key = rank. So every world rank
// must call ncclCommInitRank at the same time, also ranks that are not in
// the new communicator (true of every use in this project: the NCCL world is
// made from the whole MPI world, and smaller ones with ncclCommSplit, which
// is collective over its parent only). nranks == 1 needs no MPI at all.
// At init the members exchange what they passed and all reach the same
// verdict: nranks against the split's size (and the world's), the ranks,
// and, as NCCL, no two ranks on one CUDA device of one host.
//
// Operations. Each NCCL call checks its arguments now (every buffer must lie
// in device memory of the communicator's device) and becomes a CommOp; an
// ungrouped call is one gt::emu::AsyncWork on its stream, a group
// (ncclGroupStart/End, nesting counted per host thread, as in NCCL) one
// AsyncWork on each of its streams: all its operations start together, once
// every one of those streams has reached the group, and every one of them
// waits until all are complete (NCCL's documented semantics for a group on
// several streams). Nothing runs at the call: the stream scheduler starts the
// work when it reaches the head of its stream at a synchronisation point and
// polls it until MPI has delivered. Reductions are deterministic and give the
// same bits on every rank (ops.cpp).
//
// Errors. Every failing call returns the code NCCL would and prints one
// "gt-emu: error:" line naming the call, the communicator (rank r of p) and
// what was wrong; ncclGetLastError returns that text. An MPI failure inside
// an operation is the communicator's asynchronous error
// (ncclCommGetAsyncError); from then on its operations complete without
// communicating, so that nothing waits forever on a broken communicator.
// ncclCommAbort does the same at once, cancels the receives it can and frees
// the handle (as NCCL does); ncclCommFinalize waits for the communicator's
// outstanding operations; ncclCommDestroy frees it (finalizing first if the
// caller did not).
//
// A limit of the deferred device: a rank's NCCL operation is posted to MPI
// only when that rank synchronises (or queries) its device. A rank that
// blocks in host-side MPI while its peers wait on an NCCL operation it has
// enqueued but never synchronised would deadlock where a GPU would have run
// it; the hang timeout of the scheduler (GT_EMU_HANG_TIMEOUT_S) names the
// operation then.
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "comm.hpp"
#include "diagnostics.hpp"
#include "emulator.hpp"

namespace gt::emu::nccl {

namespace {

// Live handles: a call with anything else (destroyed, aborted, garbage) is
// an error instead of a use after free.
std::set<const ncclComm*>& live_comms() {
  static auto* s = new std::set<const ncclComm*>;  // never destroyed: usable at exit
  return *s;
}

int g_serial = 0;

thread_local std::string t_last_error;

// The open group of this host thread.
struct Grouped {
  std::unique_ptr<CommOp> op;
  cudaStream_t stream;
};
thread_local int t_group_depth = 0;
thread_local std::vector<Grouped> t_group;
thread_local ncclResult_t t_group_error = ncclSuccess;

// An operation that fails inside a group also fails the group's
// ncclGroupEnd, as in NCCL.
ncclResult_t note_in_group(ncclResult_t rc) {
  if (rc != ncclSuccess && t_group_depth > 0 && t_group_error == ncclSuccess) t_group_error = rc;
  return rc;
}

// Frees the communicator's MPI side (ncclCommDestroy, ncclCommAbort).
void release_mpi(CommState& st) {
  st.closed = true;  // operations still queued complete without touching MPI
  for (CommOp* op : std::vector<CommOp*>(st.in_flight.begin(), st.in_flight.end())) op->abandon();
  if (st.data == MPI_COMM_NULL) return;
  if (!mpi_up()) {  // MPI_Finalize has freed everything already
    st.data = st.control = MPI_COMM_NULL;
    return;
  }
  // A request that could be neither completed nor cancelled (a collective a
  // peer never joined, a send nobody receives) still references the data
  // communicator. The communicator is then leaked on purpose: MPI_Comm_free
  // would only mark it for a deallocation that waits for that request,
  // which never completes, and freeing is formally collective, which the
  // peer that never came will not join either. One communicator of a run
  // that is going down costs nothing.
  if (st.leaked) return;
  MPI_Comm_free(&st.data);
  MPI_Comm_free(&st.control);
}

// ncclCommFinalize's wait: runs the device until the communicator has no
// outstanding operation. The scheduler starts what is queued and polls what
// has started (MPI_Test on its requests), blocking, with its hang report.
ncclResult_t wait_outstanding(const char* api, CommState* st) {
  if (st->outstanding > 0 && !st->broken()) {
    if (!st->local() && !mpi_up())
      return fail_call(ncclInvalidUsage, api, st,
                       std::to_string(st->outstanding) +
                           " operation(s) are still outstanding but MPI has been finalised");
    const bool ok = Emulator::get().streams.run_until(
        [st] { return st->outstanding == 0 || st->broken(); }, StreamScheduler::Mode::block);
    if (!ok)
      return fail_call(ncclUnhandledCudaError, api, st,
                       std::string("the device faulted while waiting for the communicator's "
                                   "outstanding operations (") +
                           error_name(sticky_error()) + ")");
  }
  if (st->async_error != ncclSuccess)
    return fail_call(
        st->async_error, api, st,
        "the communicator has an asynchronous error (reported above): " + st->last_error);
  return ncclSuccess;
}

// ---- the operations' checks ----------------------------------------------------------

// The stream on the communicator's device: NCCL switches to that device, so
// stream 0 is its legacy stream whatever the caller's current device is.
CUstream_st* resolve_stream(cudaStream_t s, const CommState& st, const std::string& api) {
  const int saved = current_device();
  set_current_device(st.device);
  CUstream_st* r = stream_for(s, api.c_str());  // reports an invalid stream itself
  set_current_device(saved);
  return r;
}

ncclResult_t check_op(const char* api, ncclComm_t comm, cudaStream_t stream, ncclDataType_t t,
                      size_t count) {
  if (ncclResult_t rc = check_comm(api, comm)) return rc;
  const CommState* st = comm->st.get();
  if (cudaError_t e = sticky_error())
    return fail_call(ncclUnhandledCudaError, api, st,
                     std::string("the device has faulted (") + error_name(e) +
                         "): nothing can be enqueued until cudaDeviceReset");
  if (type_size(t) == 0)
    return fail_call(
        ncclInvalidArgument, api, st,
        "datatype " + std::to_string(static_cast<int>(t)) + " is not an ncclDataType_t");
  const std::string where = std::string(api) + " on " + st->label();
  CUstream_st* s = resolve_stream(stream, *st, where);
  if (!s) return fail_call(ncclUnhandledCudaError, api, st, "not a live stream", /*print=*/false);
  if (s->device != st->device)
    return fail_call(ncclUnhandledCudaError, api, st,
                     "the stream belongs to device " + std::to_string(s->device) +
                         " but the communicator to device " + std::to_string(st->device));
  if (count > static_cast<size_t>(INT_MAX))
    return fail_call(ncclInvalidArgument, api, st,
                     "count " + std::to_string(count) +
                         " exceeds the emulator's limit of INT_MAX elements per rank (MPI "
                         "counts are int)");
  return ncclSuccess;
}

ncclResult_t check_reduction(const char* api, const CommState* st, ncclDataType_t t,
                             ncclRedOp_t op) {
  if (!reducible(t))
    return fail_call(ncclInvalidArgument, api, st,
                     std::string("reductions of ") + type_name(t) + " are not emulated");
  if (op < ncclSum || op > ncclAvg)
    return fail_call(ncclInvalidArgument, api, st,
                     "op " + std::to_string(static_cast<int>(op)) +
                         " is not a built-in ncclRedOp_t (the emulator has no "
                         "ncclRedOpCreatePreMulSum)");
  return ncclSuccess;
}

// `bytes` at `p` must lie in one device allocation of the communicator's device.
ncclResult_t check_buffer(const char* api, const CommState* st, const char* name, const void* p,
                          size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  const std::string what =
      std::string(name) + " " + address(p) + " (" + std::to_string(bytes) + " bytes)";
  const Allocation* a = device_range(p, bytes);
  if (!a) {
    const Allocation* any = Emulator::get().memory.find(p);
    std::string why;
    if (!p)
      why = std::string(name) + " is NULL but " + std::to_string(bytes) + " bytes are needed";
    else if (any && any->pinned)
      why = what + " is pinned host memory (cudaMallocHost); NCCL buffers must be device memory";
    else if (any)
      why = what + " runs past the end of its device allocation of " + std::to_string(any->bytes) +
            " bytes";
    else
      why = what + " is not device memory (host memory, or freed)";
    return fail_call(ncclInvalidArgument, api, st, why);
  }
  if (a->device != st->device)
    return fail_call(ncclInvalidArgument, api, st,
                     what + " is memory of device " + std::to_string(a->device) +
                         " but the communicator is on device " + std::to_string(st->device));
  return ncclSuccess;
}

ncclResult_t check_rank(const char* api, const CommState* st, const char* name, int r) {
  if (r >= 0 && r < st->size) return ncclSuccess;
  return fail_call(ncclInvalidArgument, api, st,
                   std::string(name) + " " + std::to_string(r) + " is not a rank of the " +
                       std::to_string(st->size) + "-rank communicator");
}

// Enqueues operations (one call's, or one group's): sequence numbers in
// issue order, then per device one GroupJoin, with a GroupWork on each of
// its streams (in the order the streams first appear). Nothing is enqueued
// unless every stream is still live.
ncclResult_t launch(std::vector<Grouped> ops) {
  std::vector<CUstream_st*> streams;
  for (Grouped& g : ops) {
    CommState& st = g.op->state();
    CUstream_st* s = resolve_stream(g.stream, st, "ncclGroupEnd on " + st.label());
    if (!s)  // destroyed between the call and ncclGroupEnd
      return fail_call(
          ncclUnhandledCudaError, "ncclGroupEnd", &st,
          "the stream of " + g.op->what() + " is no longer live; the group was not launched",
          /*print=*/false);
    streams.push_back(s);
  }
  struct PerDevice {
    int device;
    std::shared_ptr<GroupJoin> join;
    std::vector<CUstream_st*> streams;
  };
  std::vector<PerDevice> devices;
  for (size_t k = 0; k < ops.size(); ++k) {
    CommState& st = ops[k].op->state();
    ops[k].op->enqueue(st.next_seq++);
    size_t d = 0;
    while (d < devices.size() && devices[d].device != st.device) ++d;
    if (d == devices.size()) devices.push_back({st.device, std::make_shared<GroupJoin>(), {}});
    PerDevice& pd = devices[d];
    pd.join->ops.push_back(std::move(ops[k].op));
    bool seen = false;
    for (CUstream_st* s : pd.streams) seen = seen || s == streams[k];
    if (!seen) pd.streams.push_back(streams[k]);
  }
  for (PerDevice& pd : devices) {
    pd.join->streams = static_cast<int>(pd.streams.size());
    for (CUstream_st* s : pd.streams)
      Emulator::get().streams.enqueue_async(s, std::make_unique<GroupWork>(pd.join));
  }
  return ncclSuccess;
}

ncclResult_t submit(std::unique_ptr<CommOp> op, cudaStream_t stream) {
  if (t_group_depth > 0) {
    t_group.push_back({std::move(op), stream});
    return ncclSuccess;
  }
  std::vector<Grouped> one;
  one.push_back({std::move(op), stream});
  return launch(std::move(one));
}

}  // namespace

// ---- shared with bootstrap.cpp (declared in comm.hpp) ---------------------------------

// Reports a failed call (one line, unless `print` is false because the
// emulator's runtime has printed it already) and returns its code.
ncclResult_t fail_call(ncclResult_t code, const std::string& api, const CommState* st,
                       const std::string& msg, bool print) {
  std::string text = api;
  if (st) text += " on " + st->label();
  text += ": " + msg;
  if (print) report("error", text);
  t_last_error = text;
  return code;
}

std::shared_ptr<CommState> new_state(int rank, int size, int device, MPI_Comm control,
                                     MPI_Comm data) {
  auto st = std::make_shared<CommState>();
  st->serial = ++g_serial;
  st->rank = rank;
  st->size = size;
  st->device = device;
  st->control = control;
  st->data = data;
  return st;
}

ncclComm_t new_comm(std::shared_ptr<CommState> st) {
  auto* c = new ncclComm;
  c->st = std::move(st);
  live_comms().insert(c);
  return c;
}

// The handle is live (and, unless allowed, not finalized).
ncclResult_t check_comm(const char* api, const ncclComm* comm, bool allow_finalized) {
  if (!comm) return fail_call(ncclInvalidArgument, api, nullptr, "comm is NULL");
  if (!live_comms().count(comm))
    return fail_call(ncclInvalidArgument, api, nullptr,
                     "comm " + address(comm) +
                         " is not a live communicator (destroyed, aborted, or never created)");
  if (comm->finalized && !allow_finalized)
    return fail_call(ncclInvalidUsage, api, comm->st.get(), "called after ncclCommFinalize");
  return ncclSuccess;
}

}  // namespace gt::emu::nccl

using gt::emu::Emulator;
using gt::emu::Lock;
namespace emu_nccl = gt::emu::nccl;

extern "C" {

// ---- versions, ids, errors -------------------------------------------------------------

ncclResult_t ncclGetVersion(int* version) {
  if (!version)
    return emu_nccl::fail_call(ncclInvalidArgument, "ncclGetVersion", nullptr, "version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  Lock lock(Emulator::get().mu);
  if (!id)
    return emu_nccl::fail_call(ncclInvalidArgument, "ncclGetUniqueId", nullptr, "uniqueId is NULL");
  // Only its hash matters (the color of ncclCommInitRank's split): a fresh
  // value per call, from this process, this moment and a random number.
  static uint64_t counter = 0;
  struct {
    char magic[8] = {'g', 't', '-', 'e', 'm', 'u', 0, 0};
    uint64_t pid, time, counter, random;
  } fields;
  fields.pid = static_cast<uint64_t>(getpid());
  fields.time =
      static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  fields.counter = ++counter;
  std::random_device rd;
  fields.random = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  static_assert(sizeof fields <= sizeof id->internal, "the fields fit in an ncclUniqueId");
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, &fields, sizeof fields);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  // NCCL's texts, pointing at the emulator's report instead of NCCL_DEBUG.
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (the gt-emu: error line on stderr says which)";
    case ncclSystemError:
      return "unhandled system error (the gt-emu: error line on stderr says which)";
    case ncclInternalError: return "internal error (the gt-emu: error line on stderr says which)";
    case ncclInvalidArgument:
      return "invalid argument (the gt-emu: error line on stderr says which)";
    case ncclInvalidUsage: return "invalid usage (the gt-emu: error line on stderr says which)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  Lock lock(Emulator::get().mu);
  // An asynchronous error is the communicator's; any other is the calling thread's.
  if (comm && emu_nccl::live_comms().count(comm) && comm->st->async_error != ncclSuccess)
    return comm->st->last_error.c_str();
  return emu_nccl::t_last_error.c_str();
}

// ---- communicators -----------------------------------------------------------------------

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  Lock lock(Emulator::get().mu);
  return emu_nccl::init_rank(comm, nranks, id, rank);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t*) {
  Lock lock(Emulator::get().mu);
  return emu_nccl::init_rank(comm, nranks, id, rank);  // every config is a blocking default
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t*) {
  Lock lock(Emulator::get().mu);
  return emu_nccl::split(comm, color, key, newcomm);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclCommFinalize";
  if (comm && emu_nccl::live_comms().count(comm) && comm->finalized)
    return emu_nccl::fail_call(ncclInvalidUsage, api, comm->st.get(), "already finalized");
  if (ncclResult_t rc = emu_nccl::check_comm(api, comm)) return rc;
  emu_nccl::CommState* st = comm->st.get();
  for (const emu_nccl::Grouped& g : emu_nccl::t_group)
    if (&g.op->state() == st)
      return emu_nccl::fail_call(ncclInvalidUsage, api, st,
                                 "called inside an open group that holds operations of this "
                                 "communicator (call ncclGroupEnd first)");
  comm->finalized = true;
  return emu_nccl::wait_outstanding(api, st);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclCommDestroy";
  if (!comm) return ncclSuccess;  // as NCCL
  if (ncclResult_t rc = emu_nccl::check_comm(api, comm, /*allow_finalized=*/true)) return rc;
  std::shared_ptr<emu_nccl::CommState> st = comm->st;
  ncclResult_t rc = ncclSuccess;
  if (!comm->finalized) {  // NCCL finalizes a communicator the caller did not
    comm->finalized = true;
    rc = emu_nccl::wait_outstanding(api, st.get());
  }
  emu_nccl::release_mpi(*st);
  emu_nccl::live_comms().erase(comm);
  delete comm;
  return rc;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  Lock lock(Emulator::get().mu);
  if (!comm) return ncclSuccess;  // as NCCL
  if (ncclResult_t rc = emu_nccl::check_comm("ncclCommAbort", comm, /*allow_finalized=*/true))
    return rc;
  // Every outstanding operation completes on its next poll, without its
  // peers: later stream syncs and cudaFree do not wait for ranks that will
  // never come. The handle goes now, as in NCCL; the state stays with the
  // operations still queued.
  std::shared_ptr<emu_nccl::CommState> st = comm->st;
  st->aborted = true;
  emu_nccl::release_mpi(*st);
  emu_nccl::live_comms().erase(comm);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclCommGetAsyncError";
  if (ncclResult_t rc = emu_nccl::check_comm(api, comm, /*allow_finalized=*/true)) return rc;
  if (!async_error)
    return emu_nccl::fail_call(ncclInvalidArgument, api, comm->st.get(), "asyncError is NULL");
  *async_error = comm->st->async_error;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclCommCount";
  if (ncclResult_t rc = emu_nccl::check_comm(api, comm, /*allow_finalized=*/true)) return rc;
  if (!count) return emu_nccl::fail_call(ncclInvalidArgument, api, comm->st.get(), "count is NULL");
  *count = comm->st->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclCommUserRank";
  if (ncclResult_t rc = emu_nccl::check_comm(api, comm, /*allow_finalized=*/true)) return rc;
  if (!rank) return emu_nccl::fail_call(ncclInvalidArgument, api, comm->st.get(), "rank is NULL");
  *rank = comm->st->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclCommCuDevice";
  if (ncclResult_t rc = emu_nccl::check_comm(api, comm, /*allow_finalized=*/true)) return rc;
  if (!device)
    return emu_nccl::fail_call(ncclInvalidArgument, api, comm->st.get(), "device is NULL");
  *device = comm->st->device;
  return ncclSuccess;
}

// ---- groups --------------------------------------------------------------------------------

ncclResult_t ncclGroupStart() {
  Lock lock(Emulator::get().mu);
  ++emu_nccl::t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  Lock lock(Emulator::get().mu);
  if (emu_nccl::t_group_depth == 0)
    return emu_nccl::fail_call(ncclInvalidUsage, "ncclGroupEnd", nullptr,
                               "no group is open (ncclGroupEnd without ncclGroupStart)");
  if (--emu_nccl::t_group_depth > 0) return ncclSuccess;  // only the outermost launches
  std::vector<emu_nccl::Grouped> ops = std::move(emu_nccl::t_group);
  emu_nccl::t_group.clear();
  const ncclResult_t failed = emu_nccl::t_group_error;
  emu_nccl::t_group_error = ncclSuccess;
  if (failed != ncclSuccess)
    return emu_nccl::fail_call(failed, "ncclGroupEnd", nullptr,
                               "a call in the group failed (reported above), so the group "
                               "was not launched (" +
                                   std::to_string(ops.size()) + " operation(s) dropped)");
  return emu_nccl::launch(std::move(ops));
}

// ---- collectives and point-to-point ---------------------------------------------------------

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclAllReduce";
  auto run = [&]() -> ncclResult_t {
    if (ncclResult_t rc = emu_nccl::check_op(api, comm, stream, datatype, count)) return rc;
    const emu_nccl::CommState* st = comm->st.get();
    if (ncclResult_t rc = emu_nccl::check_reduction(api, st, datatype, op)) return rc;
    const size_t bytes = count * emu_nccl::type_size(datatype);
    if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "sendbuff", sendbuff, bytes)) return rc;
    if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "recvbuff", recvbuff, bytes)) return rc;
    if (count == 0) return ncclSuccess;  // nothing to move, on any rank
    return emu_nccl::submit(
        emu_nccl::make_all_reduce(comm->st, sendbuff, recvbuff, count, datatype, op), stream);
  };
  return emu_nccl::note_in_group(run());
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclReduceScatter";
  auto run = [&]() -> ncclResult_t {
    if (ncclResult_t rc = emu_nccl::check_op(api, comm, stream, datatype, recvcount)) return rc;
    const emu_nccl::CommState* st = comm->st.get();
    if (ncclResult_t rc = emu_nccl::check_reduction(api, st, datatype, op)) return rc;
    const size_t bytes = recvcount * emu_nccl::type_size(datatype);
    if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "sendbuff", sendbuff,
                                                 bytes * static_cast<size_t>(st->size)))
      return rc;
    if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "recvbuff", recvbuff, bytes)) return rc;
    if (recvcount == 0) return ncclSuccess;
    return emu_nccl::submit(
        emu_nccl::make_reduce_scatter(comm->st, sendbuff, recvbuff, recvcount, datatype, op),
        stream);
  };
  return emu_nccl::note_in_group(run());
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclAllGather";
  auto run = [&]() -> ncclResult_t {
    if (ncclResult_t rc = emu_nccl::check_op(api, comm, stream, datatype, sendcount)) return rc;
    const emu_nccl::CommState* st = comm->st.get();
    const size_t bytes = sendcount * emu_nccl::type_size(datatype);
    if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "sendbuff", sendbuff, bytes)) return rc;
    if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "recvbuff", recvbuff,
                                                 bytes * static_cast<size_t>(st->size)))
      return rc;
    if (sendcount == 0) return ncclSuccess;
    return emu_nccl::submit(
        emu_nccl::make_all_gather(comm->st, sendbuff, recvbuff, sendcount, datatype), stream);
  };
  return emu_nccl::note_in_group(run());
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclBroadcast";
  auto run = [&]() -> ncclResult_t {
    if (ncclResult_t rc = emu_nccl::check_op(api, comm, stream, datatype, count)) return rc;
    const emu_nccl::CommState* st = comm->st.get();
    if (ncclResult_t rc = emu_nccl::check_rank(api, st, "root", root)) return rc;
    const size_t bytes = count * emu_nccl::type_size(datatype);
    if (st->rank == root)  // other ranks' sendbuff is not read
      if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "sendbuff", sendbuff, bytes)) return rc;
    if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "recvbuff", recvbuff, bytes)) return rc;
    if (count == 0) return ncclSuccess;
    return emu_nccl::submit(
        emu_nccl::make_broadcast(comm->st, sendbuff, recvbuff, count, datatype, root), stream);
  };
  return emu_nccl::note_in_group(run());
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclSend";
  auto run = [&]() -> ncclResult_t {
    if (ncclResult_t rc = emu_nccl::check_op(api, comm, stream, datatype, count)) return rc;
    const emu_nccl::CommState* st = comm->st.get();
    if (ncclResult_t rc = emu_nccl::check_rank(api, st, "peer", peer)) return rc;
    if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "sendbuff", sendbuff,
                                                 count * emu_nccl::type_size(datatype)))
      return rc;
    // Zero-count messages are sent too: both sides see one, so matching stays in step.
    return emu_nccl::submit(emu_nccl::make_send(comm->st, sendbuff, count, datatype, peer), stream);
  };
  return emu_nccl::note_in_group(run());
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  Lock lock(Emulator::get().mu);
  const char* api = "ncclRecv";
  auto run = [&]() -> ncclResult_t {
    if (ncclResult_t rc = emu_nccl::check_op(api, comm, stream, datatype, count)) return rc;
    const emu_nccl::CommState* st = comm->st.get();
    if (ncclResult_t rc = emu_nccl::check_rank(api, st, "peer", peer)) return rc;
    if (ncclResult_t rc = emu_nccl::check_buffer(api, st, "recvbuff", recvbuff,
                                                 count * emu_nccl::type_size(datatype)))
      return rc;
    return emu_nccl::submit(emu_nccl::make_recv(comm->st, recvbuff, count, datatype, peer), stream);
  };
  return emu_nccl::note_in_group(run());
}

}  // extern "C"
