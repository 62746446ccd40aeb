// CollectiveError: an error every rank of the job knows about at the same
// point (a start-up that failed on some rank, a run stopped by a decision all
// ranks took together). Every rank throws it and exits non-zero on its own,
// without MPI_Abort, and only the rank with `report` set prints it, so the
// user reads one line instead of one per rank.
//
// agree_on_setup: collective over `world`. Each rank passes the error its
// set-up raised (or null). If none did, it returns. Otherwise every rank
// throws CollectiveError; the lowest failing rank's carries its own message
// (with its rank when the job has several) and reports it.
#pragma once

#include <exception>
#include <string>

#include "kernels/core/error.hpp"
#include "parallel/communicator.hpp"

namespace gt {

class CollectiveError : public Error {
 public:
  CollectiveError(const std::string& what, bool report) : Error(what), report_(report) {}
  bool report() const { return report_; }

 private:
  bool report_;
};

void agree_on_setup(Communicator& world, std::exception_ptr local_error);

// Collective over `world`: the lowest rank that passed failed = true, or -1
// when none did. The agreement under agree_on_setup and the checkpoint commit.
int lowest_failing_rank(Communicator& world, bool failed);

}  // namespace gt
