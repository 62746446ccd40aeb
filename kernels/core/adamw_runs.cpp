#include "kernels/core/adamw_runs.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

namespace {

// Sorted by `at`, each run must end where or before the next begins.
void check_disjoint(const char* op, const std::vector<AdamWRun>& runs, int64_t AdamWRun::*at,
                    const char* buffer) {
  std::vector<const AdamWRun*> order;
  order.reserve(runs.size());
  for (const auto& r : runs)
    if (r.n > 0) order.push_back(&r);
  std::sort(order.begin(), order.end(),
            [at](const AdamWRun* a, const AdamWRun* b) { return a->*at < b->*at; });
  for (size_t i = 1; i < order.size(); ++i)
    GT_CHECK(order[i - 1]->*at + order[i - 1]->n <= order[i]->*at, op, ": runs at ",
             order[i - 1]->*at, " (", order[i - 1]->n, " elements) and ", order[i]->*at,
             " overlap in the ", buffer, " buffer");
}

}  // namespace

void check_adamw_runs(const char* op, const std::vector<AdamWRun>& runs, int64_t param_len,
                      int64_t state_len) {
  for (const auto& r : runs) {
    GT_CHECK(r.n >= 0 && r.param >= 0 && r.state >= 0, op, ": a run has param ", r.param,
             ", state ", r.state, ", n ", r.n, " (none may be negative)");
    GT_CHECK(r.param + r.n <= param_len, op, ": run [", r.param, ", ", r.param + r.n,
             ") ends past the parameter buffer's ", param_len, " elements");
    GT_CHECK(r.state + r.n <= state_len, op, ": run [", r.state, ", ", r.state + r.n,
             ") ends past the gradient/moment buffers' ", state_len, " elements");
  }
  check_disjoint(op, runs, &AdamWRun::param, "parameter");
  check_disjoint(op, runs, &AdamWRun::state, "gradient/moment");
}

void check_state_runs(const char* op, const std::vector<AdamWRun>& runs, int64_t state_len) {
  for (const auto& r : runs) {
    GT_CHECK(r.n >= 0 && r.state >= 0, op, ": a run has state ", r.state, ", n ", r.n,
             " (none may be negative)");
    GT_CHECK(r.state + r.n <= state_len, op, ": run [", r.state, ", ", r.state + r.n,
             ") ends past the buffer's ", state_len, " elements");
  }
  check_disjoint(op, runs, &AdamWRun::state, "summed");
}

void append_run(std::vector<AdamWRun>& runs, const AdamWRun& r) {
  if (!runs.empty()) {
    AdamWRun& last = runs.back();
    if (last.decay == r.decay && last.param + last.n == r.param && last.state + last.n == r.state) {
      last.n += r.n;
      return;
    }
  }
  runs.push_back(r);
}

int64_t adamw_runs_elems(const std::vector<AdamWRun>& runs) {
  int64_t n = 0;
  for (const auto& r : runs) n += r.n;
  return n;
}

}  // namespace gt
