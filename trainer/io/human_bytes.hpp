// Byte counts for people: log lines and error messages.
#pragma once

#include <string>

namespace gt {

// "512 B", "1.50 KiB", "3.25 GiB", ... (powers of 1024, up to PiB).
std::string human_bytes(double bytes);

}  // namespace gt
