#include "parallel/collective_error.hpp"

namespace gt {

void agree_on_setup(Communicator& world, std::exception_ptr local_error) {
  const int p = world.size(), r = world.rank();
  // max over ranks of (p - rank) for the failing ones: the lowest failing rank.
  const int64_t key = world.all_reduce_i64(local_error ? p - r : 0, ReduceOp::max);
  if (key == 0) return;
  const int64_t failing = world.all_reduce_i64(local_error ? 1 : 0, ReduceOp::sum);
  const int first = p - static_cast<int>(key);
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
