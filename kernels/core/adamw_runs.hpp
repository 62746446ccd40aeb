// The runs of one multi-tensor AdamW step (Ops::adamw_update_runs) or of a
// gradient norm (Ops::sum_squares_runs), and the contract every backend
// checks before touching memory.
#pragma once

#include <cstdint>
#include <vector>

namespace gt {

// n elements at `param` in the parameter buffer (and its bf16 copy) and at
// `state` in the gradient and the moments; weight decay applies where `decay`.
struct AdamWRun {
  int64_t param = 0, state = 0, n = 0;
  bool decay = true;
};

// Throws gt::Error naming `op` unless every run has n >= 0, lies inside
// [0, param_len) and [0, state_len), and no two runs overlap in either buffer
// (an element updated twice would take two steps).
void check_adamw_runs(const char* op, const std::vector<AdamWRun>& runs, int64_t param_len,
                      int64_t state_len);

// The same for sum_squares_runs, which reads only the state offsets.
void check_state_runs(const char* op, const std::vector<AdamWRun>& runs, int64_t state_len);

// Appends r to runs, or extends the last run when r continues it: the same
// decay, and adjacent in both the parameter and the state buffer.
void append_run(std::vector<AdamWRun>& runs, const AdamWRun& r);

// Elements the runs cover in all (the work of one step).
int64_t adamw_runs_elems(const std::vector<AdamWRun>& runs);

}  // namespace gt
