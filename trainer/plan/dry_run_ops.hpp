// DryRunOps: an Ops backend that computes nothing. It stands for the CUDA
// backend (views say Device::cuda, attention saves the log-sum-exp as CudaOps
// does) so that the real model, parameter store and optimizer issue exactly
// the op sequence of a CUDA step, which the Profiler records with each op's
// FLOPs and bytes: the per-op cost table (`trainer costs`) without a GPU and
// without doing 12 TFLOP of arithmetic on the CPU.
//
// It lists no op. Every call goes through the Ops entry point, which checks
// its shapes and tells the observer (the profiler), and then skips it: the
// hook around every op (Ops::begin_op) says not to run. So an op added to Ops
// is dry-run, and costed, without a line here.
//
// The planner's memory model asks one for the attention sizes of either
// backend (make_dry_run_ops(Device::cpu)): the same Ops queries the model
// makes (ContextParallelAttention::saved_elems and the rest), answered by
// kernels/core/attention_kernels.hpp's rule for that device.
//
// Memory is address space only: every Buffer is a PROT_NONE reservation
// (MAP_NORESERVE), so a 124M model at B=16 (~20 GB of buffers) costs nothing,
// and host code touching it would fault, as it would on a device. upload()
// does nothing, download() fills the host side with zeros, sum_squares()
// returns 0 (what a skipped value-returning op returns): the values a dry
// run produces are zeros and mean nothing.
#pragma once

#include <memory>

#include "kernels/ops.hpp"

namespace gt {

// `device`: the backend it stands for (its views' device and attention sizes).
std::unique_ptr<Ops> make_dry_run_ops(Device device = Device::cuda);

}  // namespace gt
