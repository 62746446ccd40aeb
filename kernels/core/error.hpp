// One error type for the whole trainer (parallel/collective_error.hpp's
// CollectiveError refines it for failures every rank agrees on). Every layer
// throws `Error` with a message that names what was wrong and what was
// expected; main() turns it into one "error: ..." line and a non-zero exit
// (an error on one rank mid-training aborts the job with it: MPI_Abort).
// Nothing below main() calls exit(), so resources are released by their
// destructors.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace gt {

// `text` made safe for one terminal line: valid UTF-8 passes through; each
// control byte (newline, escape, NUL, DEL, ...) and each byte that is not
// part of a valid UTF-8 sequence becomes "\xNN". Messages quote bytes read
// from files (a damaged header's name or dtype), which must not reach the
// terminal raw.
std::string printable(const std::string& text);

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(printable(what)) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// Throws gt::Error with the pieces streamed together: fail("key ", k, " ...").
template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(detail::concat(std::forward<Args>(args)...));
}

}  // namespace gt

// Internal invariant: names the failing expression and the source location.
// Used for programmer errors (shape mismatches between our own layers); user
// input is validated with gt::fail and a message written for the user.
#define GT_CHECK(cond, ...)                                                        \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      ::gt::fail("internal check failed: ", #cond, " at ", __FILE__, ":", __LINE__, \
                 " ", ::gt::detail::concat(std::string() , ##__VA_ARGS__));                        \
    }                                                                              \
  } while (0)
