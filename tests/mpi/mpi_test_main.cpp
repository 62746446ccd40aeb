// gtest main for the MPI tests: MPI is up (MpiSession) before any test runs
// and every rank runs the same tests in the same order (they are collective).
// Rank 0 prints gtest's usual output; the other ranks print only their
// failures, prefixed with their rank. The exit code is non-zero on EVERY rank
// when any rank failed (the failure counts are all-reduced at the end), so
// mpirun and ctest see a failure wherever it happened.
//
// `--gt_abort_demo`: instead of the tests, the last rank calls abort_job()
// while the others sit in a barrier with no deadline; the job must end (ctest
// checks the message) instead of hanging.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "kernels/core/error.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/mpi_session.hpp"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // The test's name is kept here rather than asked for in OnTestPartResult:
  // gtest calls that listener with UnitTest's (non-recursive) mutex held, and
  // UnitTest::current_test_info() takes the same mutex, so asking there
  // deadlocks the rank on its first failure and hangs the whole job.
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestEnd(const ::testing::TestInfo&) override { test_ = "?"; }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] FAILED %s at %s:%d\n%s\n", rank_, test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_ = "?";
};

int abort_demo(const gt::MpiSession& session) {
  auto world = gt::MpiCommunicator::dup(MPI_COMM_WORLD, "abort-demo");
  if (session.world_rank() == session.world_size() - 1)
    gt::abort_job(3, "abort demo from the last rank (rank " +
                         std::to_string(session.world_rank()) + ")");
  world->barrier();  // never completes: the last rank never joins
  std::fprintf(stderr, "abort demo: barrier completed, which it must not\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    gt::MpiSession session(&argc, &argv);
    ::testing::InitGoogleTest(&argc, argv);
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], "--gt_abort_demo") == 0) return abort_demo(session);

    const int rank = session.world_rank();
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (rank != 0) {
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(rank));
    }

    const int rc = RUN_ALL_TESTS();
    const auto* ut = ::testing::UnitTest::GetInstance();
    int64_t failed = ut->failed_test_count() + (rc != 0 && ut->failed_test_count() == 0 ? 1 : 0);
    int64_t any = 0;
    {
      auto world = gt::MpiCommunicator::dup(MPI_COMM_WORLD, "test-summary", 120.0);
      any = world->all_reduce_i64(failed, gt::ReduceOp::sum);
      world->barrier();
    }
    if (rank == 0)
      std::printf("gt_mpi_tests: %d rank(s), %lld failed test(s) summed over ranks\n",
                  session.world_size(), static_cast<long long>(any));
    return any == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
