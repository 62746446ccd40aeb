// Named tensors for running the same op sequence through two Ops backends
// (tests/cuda/test_cuda_ops.cpp): a tensor is created on first use, its
// initial contents a function of its name only, so CpuOps and CudaOps see
// identical inputs; get() returns its current contents on the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/core/tensor.hpp"
#include "test_util.hpp"

namespace gt::test {

enum class Init { random, zeros, poison };

class NamedTensors {
 public:
  // gpu: device tensors on `stream`; otherwise host tensors.
  NamedTensors(bool gpu, cudaStream_t stream) : gpu_(gpu), stream_(stream) {}

  // An fp32 tensor (created with `init` on first use, values in [lo, hi)).
  TensorView f32(const std::string& name, std::initializer_list<int64_t> shape,
                 Init init = Init::random, float lo = -1.f, float hi = 1.f) {
    Entry& e = entry(name, shape, DType::f32);
    if (e.fresh) {
      e.fresh = false;
      std::vector<float> v;
      if (init == Init::random) v = random_vector(e.numel, seed(name), lo, hi);
      else if (init == Init::zeros) v.assign(e.numel, 0.f);
      else v.assign(e.numel, std::numeric_limits<float>::quiet_NaN());
      if (gpu_) {
        e.dev_f = std::make_unique<DeviceArray<float>>(v, stream_);
        if (init == Init::poison) e.dev_f->poison();
      } else {
        e.host_f = std::move(v);
      }
    }
    return view(e, shape);
  }
  // A random fp32 tensor with values in [lo, hi).
  TensorView f32(const std::string& name, std::initializer_list<int64_t> shape, float lo,
                 float hi) {
    return f32(name, shape, Init::random, lo, hi);
  }
  // An int32 tensor of values in [0, hi).
  TensorView i32(const std::string& name, std::initializer_list<int64_t> shape, int32_t hi) {
    Entry& e = entry(name, shape, DType::i32);
    if (e.fresh) {
      e.fresh = false;
      auto v = random_ints(e.numel, seed(name), 0, hi);
      if (gpu_) e.dev_i = std::make_unique<DeviceArray<int32_t>>(v, stream_);
      else e.host_i = std::move(v);
    }
    return view(e, shape);
  }
  // Current contents of an fp32 tensor.
  std::vector<float> get(const std::string& name) const {
    const Entry& e = entries_.at(name);
    return gpu_ ? e.dev_f->download() : e.host_f;
  }

 private:
  struct Entry {
    DType dtype = DType::f32;
    int64_t numel = 0;
    bool fresh = true;
    std::vector<float> host_f;
    std::vector<int32_t> host_i;
    std::unique_ptr<DeviceArray<float>> dev_f;
    std::unique_ptr<DeviceArray<int32_t>> dev_i;
  };

  static uint64_t seed(const std::string& name) {  // FNV-1a: stable across runs
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
    return h;
  }

  Entry& entry(const std::string& name, std::initializer_list<int64_t> shape, DType dtype) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      Entry e;
      e.dtype = dtype;
      e.numel = n;
      it = entries_.emplace(name, std::move(e)).first;
    }
    GT_CHECK(it->second.dtype == dtype && it->second.numel == n, "tensor ", name,
             " reused with another dtype or size");
    return it->second;
  }

  TensorView view(Entry& e, std::initializer_list<int64_t> shape) {
    void* data = nullptr;
    if (e.dtype == DType::f32) data = gpu_ ? static_cast<void*>(e.dev_f->get()) : e.host_f.data();
    else data = gpu_ ? static_cast<void*>(e.dev_i->get()) : e.host_i.data();
    return make_view(data, e.dtype, gpu_ ? Device::cuda : Device::cpu, shape);
  }

  bool gpu_;
  cudaStream_t stream_;
  std::map<std::string, Entry> entries_;
};

}  // namespace gt::test
