// This host's name, for every message and file that names where a process
// runs (error lines, lock files, the comm chooser's per-host count).
#pragma once

#include <string>

namespace gt {

// gethostname(), "unknown-host" when it cannot be read.
std::string this_host();

}  // namespace gt
