#include "parallel/collective_error.hpp"

namespace gt {

int lowest_failing_rank(Communicator& world, bool failed) {
  const int64_t lowest =
      world.all_reduce_i64(failed ? world.rank() : world.size(), ReduceOp::min);
  return lowest == world.size() ? -1 : static_cast<int>(lowest);
}

void agree_on_setup(Communicator& world, std::exception_ptr local_error) {
  const int p = world.size(), r = world.rank();
  const int first = lowest_failing_rank(world, local_error != nullptr);
  if (first < 0) return;
  const int64_t failing = world.all_reduce_i64(local_error ? 1 : 0, ReduceOp::sum);
  if (first != r) throw CollectiveError("rank " + std::to_string(first) + " failed to start", false);
  std::string msg = "unknown error";
  try {
    std::rethrow_exception(local_error);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  // An error of every rank (a bad config) needs no rank; one of a few does.
  throw CollectiveError(failing < p ? "[rank " + std::to_string(r) + "] " + msg : msg, true);
}

}  // namespace gt
