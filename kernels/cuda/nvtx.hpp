// NVTX range for the duration of a scope, named like the op it covers, so
// Nsight Systems shows the same names as our profiler (CudaOps opens one per
// Ops call, each kernel launcher one per launch). Header-only NVTX v3 from
// the CUDA toolkit: nothing to link, and a no-op unless a tool is attached.
//
// Host-only header.
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace gt::cuda {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace gt::cuda
