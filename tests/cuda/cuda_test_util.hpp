// Helpers for the CUDA twin tests (tests/cuda/test_cuda_*.cpp): a typed
// device array that uploads, downloads and poisons on one stream, and host
// bf16 conversion (kernels/core/bf16.hpp: __float2bfloat16_rn's rule). The
// CPU backend (make_cpu_ops) is always the reference; nothing here computes
// an op.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/core/bf16.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_resources.hpp"

namespace gt::test {

template <typename T>
class DeviceArray {
 public:
  DeviceArray(size_t n, cudaStream_t stream) : buf_(n * sizeof(T)), n_(n), stream_(stream) {}
  DeviceArray(const std::vector<T>& host, cudaStream_t stream) : DeviceArray(host.size(), stream) {
    upload(host);
  }

  T* get() const { return buf_.as<T>(); }
  size_t size() const { return n_; }

  void upload(const std::vector<T>& host) {
    GT_CHECK(host.size() == n_, "upload of ", host.size(), " into ", n_);
    CUDA_CHECK(cudaMemcpyAsync(get(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // Every byte 0xFF: NaN as fp32, bf16 and double, so any element a kernel
  // fails to write shows up in the comparison.
  void poison() {
    CUDA_CHECK(cudaMemsetAsync(get(), 0xFF, n_ * sizeof(T), stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // Waits for all work queued on the stream, then copies back.
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost,
                               stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host;
  }

 private:
  cuda::DeviceBuffer buf_;
  size_t n_;
  cudaStream_t stream_;
};

// A device TensorView over a DeviceArray (bf16 arrays are DeviceArray<uint16_t>).
template <typename T>
TensorView dev_view(const DeviceArray<T>& a, DType dtype, std::initializer_list<int64_t> shape) {
  TensorView v = make_view(a.get(), dtype, Device::cuda, shape);
  GT_CHECK(static_cast<size_t>(v.numel()) * dtype_size(dtype) <= a.size() * sizeof(T),
           "dev_view larger than its array");
  return v;
}

// The cases of a test: all of them, or with GT_TEST_SHAPES=small only those
// `small` accepts. CI's ThreadSanitizer pass on the emulated device sets it
// (every instrumented access is ~10x slower there): the odd sizes and every
// branch stay, the production-sized shapes go.
inline bool small_shapes() {
  const char* v = std::getenv("GT_TEST_SHAPES");
  return v && std::string(v) == "small";
}
// Production shapes (GPT-2 124M's attention, a block at C=768, the LM-head
// GEMM) run on a real GPU: nullptr there, else why they skip (minutes per
// case on the emulated device; GT_TEST_SHAPES=small asks for small ones).
// scripts/gpu_check.sh runs them (--gtest_filter='*AtProductionShape*').
// GT_TEST_SHAPES=production runs them on the emulated device too, to try a
// new production test before a GPU session spends time on it.
inline const char* production_shapes_skipped() {
  const char* v = std::getenv("GT_TEST_SHAPES");
  if (v && std::string(v) == "production") return nullptr;
  if (small_shapes()) return "production shape: GT_TEST_SHAPES=small";
#if defined(TRAINER_CUDA_EMULATOR)
  return "production shape: minutes on the emulated device (GT_TEST_SHAPES=production runs it); "
         "a GPU runs it (scripts/gpu_check.sh)";
#else
  return nullptr;
#endif
}

template <typename Case, size_t N, typename Small>
std::vector<Case> select_cases(const Case (&all)[N], Small small) {
  std::vector<Case> out;
  for (const Case& c : all)
    if (!small_shapes() || small(c)) out.push_back(c);
  return out;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace gt::test
