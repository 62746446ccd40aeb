// Graceful stop on SIGTERM / SIGINT (a preempted cluster job, Ctrl-C): the
// handler only sets a flag; the training loop reads it once per step, the
// ranks agree on it (an all-reduce, so they all stop after the same step),
// write a committed checkpoint and exit 0. Further signals change nothing
// (one signal often arrives twice: from mpirun and from a wrapper or the
// terminal); SIGKILL ends a run that must not save.
//
// The flag is the one piece of process-wide state here, and has to be: a
// signal handler can reach nothing else. It is a volatile sig_atomic_t,
// written only by the handler; installing the handlers twice is harmless.
#pragma once

namespace gt {

class Communicator;

class StopSignal {
 public:
  // Installs the SIGTERM and SIGINT handlers; the destructor restores the
  // previous ones. Construct one in main() for a training run.
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // The signal received (SIGTERM, SIGINT), or 0. Async-signal-safe to read.
  static int received();
  // "SIGTERM" / "SIGINT" / "" for messages.
  static const char* name();
  // Forgets a received signal (tests).
  static void reset();
};

// Collective over `job` (once per step, on every rank): true on every rank
// when any rank has received a stop signal, so all stop after the same step.
bool agree_to_stop(Communicator& job);

}  // namespace gt
