#include "kernels/core/host.hpp"

#include <unistd.h>

namespace gt {

std::string this_host() {
  char host[256] = "";
  if (::gethostname(host, sizeof host) != 0) return "unknown-host";
  host[sizeof host - 1] = '\0';
  return host[0] ? host : "unknown-host";
}

}  // namespace gt
