// MPI_CHECK: the one check for every MPI call. A failing call throws gt::Error
// naming the expression, MPI's own error string, this process's rank and host
// and the source location, so the message that reaches main() says which rank
// failed where. It only works when MPI returns errors as values: every
// communicator we create gets MPI_ERRORS_RETURN (set_errors_return below);
// with MPI's default handler (MPI_ERRORS_ARE_FATAL) the job would die inside
// the call and no message of ours would ever be printed.
#pragma once

#include <mpi.h>

#include <string>

#include "kernels/core/error.hpp"
#include "kernels/core/host.hpp"

namespace gt::detail {

// MPI's text for an error code; usable before MPI_Init and after MPI_Finalize.
inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return "unknown MPI error code " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// "rank 3 on host-a": the world rank when MPI is up, "rank ?" otherwise.
inline std::string mpi_where() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  std::string rank = "?";
  if (initialised && !finalised) {
    int r = -1;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &r) == MPI_SUCCESS) rank = std::to_string(r);
  }
  return "rank " + rank + " on " + this_host();
}

[[noreturn]] inline void mpi_fail(int code, const char* expr, const char* file, int line) {
  fail("MPI call failed: ", expr, ": ", mpi_error_string(code), " (code ", code, ") on ",
       mpi_where(), " at ", file, ":", line);
}

}  // namespace gt::detail

#define MPI_CHECK(expr)                                                  \
  do {                                                                   \
    const int gt_mpi_rc_ = (expr);                                       \
    if (gt_mpi_rc_ != MPI_SUCCESS)                                       \
      ::gt::detail::mpi_fail(gt_mpi_rc_, #expr, __FILE__, __LINE__);     \
  } while (0)

namespace gt {

// Make `comm` report errors as return values (so MPI_CHECK can throw) instead
// of aborting the job inside the failing call.
inline void set_errors_return(MPI_Comm comm) {
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
}

}  // namespace gt
