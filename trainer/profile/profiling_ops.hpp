// ProfilingOps: an Ops decorator that forwards every call to the real backend
// and, while the Profiler is recording (a profiled step), times the call and
// records its op class, shape, FLOPs and bytes (op_costs.hpp). The model and
// the sharding code are unchanged: the run hands them this object instead of
// the backend when profiling is configured, and not at all otherwise.
//
// Outside profiled steps each call costs one branch on Profiler::recording().
// Shapes are read from the views before the backend checks them; a malformed
// call still fails in the backend with the backend's message.
#pragma once

#include <memory>

#include "kernels/ops.hpp"
#include "trainer/profile/profiler.hpp"

namespace gt {

std::unique_ptr<Ops> make_profiling_ops(std::unique_ptr<Ops> inner, Profiler& profiler);
// Not owning `inner`, which must outlive the result.
std::unique_ptr<Ops> make_profiling_ops(Ops& inner, Profiler& profiler);

}  // namespace gt
