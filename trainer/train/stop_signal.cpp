#include "trainer/train/stop_signal.hpp"

#include <csignal>

#include "parallel/communicator.hpp"

namespace gt {

namespace {

volatile std::sig_atomic_t g_received = 0;  // see the header: the only process-wide state
struct sigaction g_old_term, g_old_int;

void on_signal(int sig) { g_received = sig; }

}  // namespace

StopSignal::StopSignal() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // Repeats are expected and only set the flag again: mpirun signals its
  // children's process groups and a wrapper may forward the same signal,
  // and Ctrl-C reaches mpirun and the ranks alike. (SA_RESETHAND, "the
  // second signal kills", would turn those duplicates into a lost
  // checkpoint.) No SA_RESTART needed: the loop polls the flag.
  sa.sa_flags = 0;
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

int StopSignal::received() { return g_received; }

const char* StopSignal::name() {
  switch (g_received) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "";
  }
}

void StopSignal::reset() { g_received = 0; }

bool agree_to_stop(Communicator& job) {
  return job.all_reduce_i64(StopSignal::received() != 0 ? 1 : 0, ReduceOp::max) != 0;
}

}  // namespace gt
