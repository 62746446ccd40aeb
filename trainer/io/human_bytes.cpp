#include "trainer/io/human_bytes.hpp"

#include <cstdio>

namespace gt {

std::string human_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while ((bytes >= 1024 || bytes <= -1024) && u < 5) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", bytes, kUnits[u]);
  return buf;
}

}  // namespace gt
