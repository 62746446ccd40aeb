// CudaHostStaging: the HostStaging of a CUDA run with parallel.comm=mpi. The
// device buffers a StagedCommunicator is handed are copied through
// page-locked (cudaMallocHost) host memory, on the compute stream.
//
// Ordering: each copy is enqueued on the compute stream, the stream the
// model's kernels run on, so it sees everything those kernels wrote before
// the collective was started; then the stream is synchronised, so the bytes
// are there when the call returns (MPI reads the staging buffer right after
// to_host; the pool may reuse it right after to_device). That sync is the
// price of the staged path: compute does not overlap a staged collective's
// copies (the MPI transfer itself still overlaps, between start and wait).
//
// Compiled only in CUDA builds (target gt_parallel_cuda). Host-only header.
#pragma once

#include <cuda_runtime_api.h>

#include "parallel/host_staging.hpp"

namespace gt {

class CudaHostStaging final : public HostStaging {
 public:
  // `compute` is not owned and must outlive this object (and every
  // communicator that stages through it). Use it from a thread whose current
  // device is the stream's.
  explicit CudaHostStaging(cudaStream_t compute) : stream_(compute) {}

  void* allocate_host(size_t bytes) override;      // cudaMallocHost
  void free_host(void* p) noexcept override;        // cudaFreeHost, errors logged
  void to_host(void* host_dst, const void* device_src, size_t bytes) override;
  void to_device(void* device_dst, const void* host_src, size_t bytes) override;

 private:
  cudaStream_t stream_;
};

}  // namespace gt
