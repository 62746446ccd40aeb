// CudaOps memory (see cuda_ops.hpp): the Buffers every model tensor lives in,
// host <-> device copies, and the device-memory figures the trainer logs.
// Allocation happens at setup (the model, the parameter store and the
// optimizer state allocate once); a training step never calls cudaMalloc.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"

namespace gt {

namespace {
void check_transfer(const TensorView& t, const char* what) {
  GT_CHECK(t.device == Device::cuda && t.contiguous(), "CUDA ", what,
           ": expected a contiguous cuda tensor, got ", device_name(t.device), " ",
           t.shape_str());
}
}  // namespace

Buffer CudaOps::allocate(size_t bytes) {
  if (bytes == 0) return {};
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();  // clear the sticky-free allocation error before asking
    cudaMemGetInfo(&free_b, &total_b);
    fail("CUDA out of memory: allocating ", bytes, " bytes with ", device_bytes_in_use(),
         " in use by this run, ", free_b, " free of ", total_b,
         " on the device (try a smaller train.micro_batch, train.recompute, or a higher "
         "parallel.fsdp_stage): ", cudaGetErrorString(err));
  }
  // The memset runs on our stream; synchronising makes the zeros visible to
  // any stream (NCCL's) before the first use.
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream()));
  stream_.synchronize();
  count_buffer_bytes(static_cast<int64_t>(bytes));
  return Buffer(p, bytes, Device::cuda, [this, bytes](void* q) {
    // Kernels still queued may use the memory: let them finish first. Errors
    // are not thrown from a destructor; a sticky CUDA error resurfaces at the
    // next checked call.
    cudaStreamSynchronize(stream());
    cudaFree(q);
    count_buffer_bytes(-static_cast<int64_t>(bytes));
  });
}

void CudaOps::upload(TensorView dst, const void* host) {
  check_transfer(dst, "upload");
  const size_t bytes = static_cast<size_t>(dst.numel()) * dtype_size(dst.dtype);
  // Small uploads (a micro-batch's tokens and targets) go through pinned
  // staging and return at once; large ones (setup) from pageable memory,
  // waiting for the copy so the caller may reuse `host` when we return.
  uploads_.copy_or_wait(dst.data, host, bytes, stream());
}

void CudaOps::download(void* host, TensorView src) {
  check_transfer(src, "download");
  const size_t bytes = static_cast<size_t>(src.numel()) * dtype_size(src.dtype);
  CUDA_CHECK(cudaMemcpyAsync(host, src.data, bytes, cudaMemcpyDeviceToHost, stream()));
  stream_.synchronize();
}

int64_t CudaOps::device_bytes_in_use() const {
  return buffer_bytes_ + static_cast<int64_t>(scratch_.bytes()) +
         static_cast<int64_t>(options_.workspace_bytes) *
             (fp8_gemm_ ? 2 : 1);  // the fp8 context's workspace is the same size
}

void CudaOps::count_buffer_bytes(int64_t delta) {
  buffer_bytes_ += delta;
  peak_bytes_ = std::max(peak_bytes_, device_bytes_in_use());
}

}  // namespace gt
