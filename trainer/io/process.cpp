#include "trainer/io/process.hpp"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <string>

#include <signal.h>
#include <unistd.h>

namespace gt {

namespace {
// /proc/<pid>/stat after the command name (which may hold spaces and
// parentheses): "S ppid ...", or "" when unreadable.
std::string stat_after_name(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!f || !std::getline(f, text)) return "";
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return "";
  return text.substr(close + 2);
}
}  // namespace

bool process_alive(long pid) {
  if (pid <= 0) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  const std::string rest = stat_after_name(pid);
  return rest.empty() || rest[0] != 'Z';  // no /proc: trust kill()
}

long process_start_time(long pid) {
  std::istringstream rest(stat_after_name(pid));
  std::string field;
  for (int i = 3; i <= 22; ++i)  // fields 3 (state) .. 22 (starttime)
    if (!(rest >> field)) return -1;
  try {
    return std::stol(field);
  } catch (...) {
    return -1;
  }
}

}  // namespace gt
