// TensorView: a non-owning view (data, dtype, device, shape, strides) that
// every op takes, so kernels can check the shapes they are handed instead of
// trusting comments. Views are cheap to copy; memory is owned elsewhere
// (Buffer below on the CPU, the CUDA backend's arena on the GPU).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "kernels/core/error.hpp"

namespace gt {

// u8: fp8 codes (e4m3 or e5m2, the op says which; kernels/core/fp8.hpp), which
// only the fp8 ops take.
enum class DType { f32, bf16, i32, u8 };
enum class Device { cpu, cuda };

inline size_t dtype_size(DType t) {
  return t == DType::bf16 ? 2 : t == DType::u8 ? 1 : 4;
}
const char* dtype_name(DType t);
const char* device_name(Device d);

constexpr int kMaxDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements

  bool empty() const { return data == nullptr; }
  int64_t numel() const;
  int64_t size(int d) const;
  bool contiguous() const;
  std::string shape_str() const;  // "(B, T, C)" style: "(4, 64, 128)"

  float* f32() const;
  int32_t* i32() const;
};

// A contiguous view of `shape` over `data`.
TensorView make_view(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);
inline TensorView cpu_f32(float* p, std::initializer_list<int64_t> shape) {
  return make_view(p, DType::f32, Device::cpu, shape);
}
inline TensorView cpu_i32(int32_t* p, std::initializer_list<int64_t> shape) {
  return make_view(p, DType::i32, Device::cpu, shape);
}

// Throws naming `what` unless `t` is contiguous with exactly `shape`.
void expect_shape(const TensorView& t, std::initializer_list<int64_t> shape, const char* what);

// Owning, 64-byte aligned host buffer (RAII; move-only).
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t bytes);
  HostBuffer(HostBuffer&&) noexcept = default;
  HostBuffer& operator=(HostBuffer&&) noexcept = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return ptr_.get(); }
  float* f32() const { return static_cast<float*>(ptr_.get()); }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> ptr_;
  size_t bytes_ = 0;
};

}  // namespace gt
