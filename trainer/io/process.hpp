// Questions about another process on this host, for the files that name one
// (a checkpoint staging directory, the run lock): is it still running, and
// since when (to tell a live owner from a reused pid).
#pragma once

#include <string>

#include "kernels/core/host.hpp"  // this_host(), which lock files record

namespace gt {

// True while `pid` runs. A zombie (dead, not yet reaped: a rank whose mpirun
// has just exited) counts as gone, which kill(pid, 0) alone would not say. A
// pid we may not signal (EPERM) is alive. pid <= 0: true (unknown: keep).
bool process_alive(long pid);

// The process's start time in clock ticks since boot (/proc/<pid>/stat field
// 22), or -1 when it cannot be read.
long process_start_time(long pid);

}  // namespace gt
