// The CPU backend: fp32, BLAS sgemm for every matmul (attention included),
// OpenMP for the elementwise and row-wise loops. It defines what "correct"
// means for every other backend.
#pragma once

#include <memory>

#include "kernels/ops.hpp"

namespace gt {

// threads <= 0 means all cores. Sets the BLAS and OpenMP thread counts.
std::unique_ptr<Ops> make_cpu_ops(int threads);

}  // namespace gt
