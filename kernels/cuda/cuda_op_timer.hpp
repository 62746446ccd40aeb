// CudaOpTimer: the profiler's OpTimer for the CUDA backend (see op_timer.hpp).
// begin()/end() record a timing event pair on the compute stream around the
// op (CudaOps opens the NVTX range itself); collect() waits for the last
// event once, at the end of a profiled step, and converts each pair to
// seconds. Start times are mapped to the host's steady clock through the first
// event of the step, so traces line up with the host-side collectives.
// Events are pooled and reused across steps: no allocation in steady state.
// CudaOps::make_op_timer makes one on its stream. Host-only header.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/cuda/cuda_resources.hpp"
#include "kernels/op_timer.hpp"

namespace gt {

class CudaOpTimer final : public OpTimer {
 public:
  explicit CudaOpTimer(cudaStream_t stream) : stream_(stream) {}
  size_t begin(const char* name) override;
  void end(size_t index) override;
  std::vector<Span> collect() override;

 private:
  struct Pair {
    cuda::CudaEvent start{0}, stop{0};  // flags 0: timing enabled
  };
  cudaStream_t stream_;
  std::vector<Pair> pool_;         // grows to the most ops one step has seen
  size_t used_ = 0;                // pairs recorded since the last collect()
  Clock::time_point host_anchor_;  // host time at the first begin() of the step
};

}  // namespace gt
