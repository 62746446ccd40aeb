// Communicator bootstrap of the emulated NCCL (see nccl.cpp for the design):
// ncclCommInitRank's MPI split of MPI_COMM_WORLD with a color derived from
// the unique id, the members' exchange of what each passed (so that all reach
// the same verdict, duplicate devices included), and ncclCommSplit.
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "comm.hpp"
#include "diagnostics.hpp"
#include "emulator.hpp"

namespace gt::emu::nccl {

namespace {

// What each member passed to ncclCommInitRank, exchanged so that all reach
// the same verdict (no member returns an error while another goes on into
// the communicator's first collective and hangs there).
struct PeerInfo {
  uint64_t id_hash;
  int32_t rank, nranks, device, pad;
  char host[256];
};

uint64_t fnv1a(const ncclUniqueId& id, uint64_t seed) {
  uint64_t h = seed;
  for (char c : id.internal) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

int id_color(const ncclUniqueId& id) {
  const uint64_t h = fnv1a(id, 14695981039346656037ull);
  return static_cast<int>((h ^ (h >> 31)) & 0x7fffffff);  // MPI colors are >= 0
}

// The members' verdict on what they passed; empty when all is well.
std::string verify_members(const std::vector<PeerInfo>& all, int world, ncclResult_t* code) {
  const int size = static_cast<int>(all.size());
  for (const PeerInfo& p : all) {
    if (p.nranks == size) continue;
    *code = ncclInvalidUsage;
    if (p.nranks > world)
      return "nranks " + std::to_string(p.nranks) + " exceeds the MPI world size " +
             std::to_string(world) + " (the emulated NCCL's ranks are MPI processes)";
    return std::to_string(size) +
           " process(es) called ncclCommInitRank with this unique id "
           "but one passed nranks " +
           std::to_string(p.nranks) +
           " (every rank of the communicator must call it, and every world rank at the same "
           "time: the emulated ncclCommInitRank is collective over MPI_COMM_WORLD)";
  }
  for (const PeerInfo& p : all) {
    if (p.id_hash == all.front().id_hash) continue;
    *code = ncclInternalError;
    return "two different unique ids mapped to the same MPI_Comm_split color";
  }
  for (int i = 0; i < size; ++i) {
    if (all[static_cast<size_t>(i)].rank == i) continue;
    *code = ncclInvalidUsage;
    return "two processes passed the same rank " +
           std::to_string(all[static_cast<size_t>(i)].rank) + " (ranks must be 0.." +
           std::to_string(size - 1) + ", each once)";
  }
  for (int i = 0; i < size; ++i) {
    for (int j = i + 1; j < size; ++j) {
      const PeerInfo &a = all[static_cast<size_t>(i)], &b = all[static_cast<size_t>(j)];
      if (a.device != b.device || std::strcmp(a.host, b.host) != 0) continue;
      *code = ncclInvalidUsage;
      return "Duplicate GPU detected: rank " + std::to_string(i) + " and rank " +
             std::to_string(j) + " both on CUDA device " + std::to_string(a.device) + " of host " +
             a.host;
    }
  }
  return {};
}

// MPI_Comm_dup of `control` for the data path, both returning errors.
ncclResult_t make_data_comm(const char* api, MPI_Comm* control, MPI_Comm* data) {
  MPI_Comm_set_errhandler(*control, MPI_ERRORS_RETURN);
  const int rc = MPI_Comm_dup(*control, data);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(control);
    return fail_call(ncclSystemError, api, nullptr, "MPI_Comm_dup failed: " + mpi_error_text(rc));
  }
  MPI_Comm_set_errhandler(*data, MPI_ERRORS_RETURN);
  return ncclSuccess;
}

}  // namespace

ncclResult_t init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank) {
  const std::string api =
      "ncclCommInitRank(nranks " + std::to_string(nranks) + ", rank " + std::to_string(rank) + ")";
  if (!out) return fail_call(ncclInvalidArgument, api, nullptr, "comm is NULL");
  *out = nullptr;
  Emulator& emu = Emulator::get();
  if (cudaError_t e = sticky_error())
    return fail_call(ncclUnhandledCudaError, api, nullptr,
                     std::string("the device has faulted (") + error_name(e) + ")");
  if (emu.device_count() == 0)
    return fail_call(ncclUnhandledCudaError, api, nullptr,
                     "no emulated CUDA device is visible (GT_EMU_DEVICES, CUDA_VISIBLE_DEVICES)");
  const int device = current_device();
  if (nranks < 1) return fail_call(ncclInvalidArgument, api, nullptr, "nranks must be >= 1");
  if (nranks == 1) {
    if (rank != 0) return fail_call(ncclInvalidArgument, api, nullptr, "rank must be 0");
    *out = new_comm(new_state(0, 1, device, MPI_COMM_NULL, MPI_COMM_NULL));
    return ncclSuccess;
  }
  if (!mpi_up()) {
    int finalised = 0;
    MPI_Finalized(&finalised);
    return fail_call(
        ncclInvalidUsage, api, nullptr,
        std::string("more than one rank needs MPI: the emulated NCCL runs over "
                    "MPI_COMM_WORLD, and MPI ") +
            (finalised ? "has been finalised" : "is not initialised (call MPI_Init first)"));
  }
  // Collective over MPI_COMM_WORLD (see the file comment). A rank with a bad
  // argument still takes part, with no color, so that its peers fail on the
  // size check instead of hanging in the split.
  const bool bad_rank = rank < 0 || rank >= nranks;
  MPI_Comm control = MPI_COMM_NULL;
  const int rc =
      MPI_Comm_split(MPI_COMM_WORLD, bad_rank ? MPI_UNDEFINED : id_color(id), rank, &control);
  if (bad_rank) {
    if (control != MPI_COMM_NULL) MPI_Comm_free(&control);
    return fail_call(ncclInvalidArgument, api, nullptr, "rank must be in [0, nranks)");
  }
  if (rc != MPI_SUCCESS)
    return fail_call(ncclSystemError, api, nullptr,
                     "MPI_Comm_split of MPI_COMM_WORLD failed: " + mpi_error_text(rc));
  MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN);
  int world = 0, size = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_size(control, &size);
  MPI_Comm_rank(control, &me);

  PeerInfo mine;
  std::memset(&mine, 0, sizeof mine);
  mine.id_hash = fnv1a(id, 0x9e3779b97f4a7c15ull);
  mine.rank = rank;
  mine.nranks = nranks;
  mine.device = device;
  if (gethostname(mine.host, sizeof mine.host - 1) != 0) std::strcpy(mine.host, "?");
  std::vector<PeerInfo> all(static_cast<size_t>(size));
  const int rc_gather =
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, control);
  if (rc_gather != MPI_SUCCESS) {
    MPI_Comm_free(&control);
    return fail_call(
        ncclSystemError, api, nullptr,
        "MPI_Allgather of the members' arguments failed: " + mpi_error_text(rc_gather));
  }
  ncclResult_t code = ncclSuccess;
  const std::string problem = verify_members(all, world, &code);
  if (!problem.empty()) {
    MPI_Comm_free(&control);
    return fail_call(code, api, nullptr, problem);
  }
  MPI_Comm data = MPI_COMM_NULL;
  if (ncclResult_t r = make_data_comm(api.c_str(), &control, &data)) return r;
  *out = new_comm(new_state(me, size, device, control, data));
  return ncclSuccess;
}

ncclResult_t split(ncclComm_t comm, int color, int key, ncclComm_t* out) {
  const char* api = "ncclCommSplit";
  if (ncclResult_t rc = check_comm(api, comm)) return rc;
  CommState* st = comm->st.get();
  if (out) *out = nullptr;
  const bool no_color = color == NCCL_SPLIT_NOCOLOR;
  ncclResult_t bad_code = ncclInvalidArgument;
  std::string bad;
  if (st->async_error != ncclSuccess) {
    bad_code = st->async_error;
    bad = "the communicator has an asynchronous error (reported above)";
  } else if (!out) {
    bad = "newcomm is NULL";
  } else if (color < 0 && !no_color) {
    bad = "color " + std::to_string(color) + " must be >= 0 or NCCL_SPLIT_NOCOLOR";
  }
  if (st->control == MPI_COMM_NULL) {  // one rank, made without MPI
    if (!bad.empty()) return fail_call(bad_code, api, st, bad);
    if (!no_color) *out = new_comm(new_state(0, 1, st->device, MPI_COMM_NULL, MPI_COMM_NULL));
    return ncclSuccess;
  }
  if (!mpi_up()) return fail_call(ncclInvalidUsage, api, st, "MPI has been finalised");
  // Collective over the parent (on the control communicator, which an
  // asynchronous error leaves usable): a rank that fails still takes part,
  // with no color, so that its peers do not hang in the split.
  MPI_Comm control = MPI_COMM_NULL;
  const int rc =
      MPI_Comm_split(st->control, bad.empty() && !no_color ? color : MPI_UNDEFINED, key, &control);
  if (!bad.empty()) {
    if (control != MPI_COMM_NULL) MPI_Comm_free(&control);
    return fail_call(bad_code, api, st, bad);
  }
  if (rc != MPI_SUCCESS)
    return fail_call(ncclSystemError, api, st, "MPI_Comm_split failed: " + mpi_error_text(rc));
  if (control == MPI_COMM_NULL) return ncclSuccess;  // NCCL_SPLIT_NOCOLOR: *newcomm = NULL
  MPI_Comm data = MPI_COMM_NULL;
  if (ncclResult_t r = make_data_comm(api, &control, &data)) return r;
  int size = 0, me = 0;
  MPI_Comm_size(control, &size);
  MPI_Comm_rank(control, &me);
  *out = new_comm(new_state(me, size, st->device, control, data));
  return ncclSuccess;
}

}  // namespace gt::emu::nccl
