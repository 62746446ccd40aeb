#include "parallel/mpi_session.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "parallel/mpi_check.hpp"

namespace gt {

namespace {
const char* level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown MPI thread level";
}
}  // namespace

MpiSession::MpiSession(int* argc, char*** argv, std::shared_ptr<spdlog::logger> log)
    : log_(log ? std::move(log) : spdlog::default_logger()) {
  int initialised = 0, finalised = 0;
  MPI_CHECK(MPI_Initialized(&initialised));
  MPI_CHECK(MPI_Finalized(&finalised));
  if (finalised)
    fail("MpiSession: MPI has already been finalised in this process; MPI cannot be "
         "initialised twice (construct one MpiSession for the whole program)");
  if (initialised) {
    MPI_CHECK(MPI_Query_thread(&thread_level_));
  } else {
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
    initialised_here_ = true;
  }
  try {
    // Errors on the world communicator come back as values (MPI_CHECK throws).
    set_errors_return(MPI_COMM_WORLD);
    if (thread_level_ < MPI_THREAD_FUNNELED)
      fail("MpiSession: MPI provides only ", level_name(thread_level_),
           "; the trainer needs at least MPI_THREAD_FUNNELED (other threads exist, only the "
           "main thread calls MPI)");
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));

    MPI_Comm local = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_,
                                  MPI_INFO_NULL, &local));
    const int rc_rank = MPI_Comm_rank(local, &local_rank_);
    const int rc_size = MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    MPI_CHECK(rc_rank);
    MPI_CHECK(rc_size);

    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_CHECK(MPI_Get_processor_name(name, &len));
    host_.assign(name, static_cast<size_t>(len));
  } catch (...) {
    if (initialised_here_) MPI_Finalize();
    throw;
  }

  if (world_rank_ == 0) {
    if (thread_level_ >= MPI_THREAD_MULTIPLE)
      log_->info("MPI: {} ranks, thread level {}{}", world_size_, level_name(thread_level_),
                 initialised_here_ ? "" : " (MPI was already initialised)");
    else
      log_->info("MPI: {} ranks, thread level {} (MULTIPLE not available: only the main thread "
                 "may call MPI){}",
                 world_size_, level_name(thread_level_),
                 initialised_here_ ? "" : " (MPI was already initialised)");
  }
  log_->debug("MPI rank {} of {} on {} (local rank {} of {})", world_rank_, world_size_, host_,
              local_rank_, local_size_);
}

MpiSession::~MpiSession() {
  if (!initialised_here_) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised) return;
  const int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS)
    log_->error("MPI_Finalize failed on rank {}: {}", world_rank_, detail::mpi_error_string(rc));
}

const char* MpiSession::thread_level_name() const { return level_name(thread_level_); }

void abort_job(int code, const std::string& msg) {
  std::fprintf(stderr, "[%s] fatal: %s\n", detail::mpi_where().c_str(), msg.c_str());
  std::fflush(stderr);
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);  // no MPI (or MPI_Abort returned): end this process at least
}

}  // namespace gt
