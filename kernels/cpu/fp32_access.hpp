// Fp32 access to fp32-or-bf16 tensors, for the CPU ops that take bf16
// storage (kernels/ops.hpp: "bf16 storage"). Every such op is written once in
// fp32: a bf16 input is widened exactly into a per-call buffer, a bf16 output
// is computed in a buffer and rounded to nearest even once at the end. So a
// bf16 call is bit for bit the fp32 call on the bf16 values, then rounded:
// the semantics the CUDA kernels (fp32 math on bf16 loads and stores) are
// tested against. fp32 tensors are used in place, with no copy.
//
// Private to kernels/cpu. Construct these before any OpenMP region (they
// allocate and may throw).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"

namespace gt::cpu {

// A tensor read as fp32.
class Fp32In {
 public:
  explicit Fp32In(const TensorView& t) {
    if (t.dtype == DType::bf16) {
      buf_.resize(static_cast<size_t>(t.numel()));
      widen_bf16(buf_.data(), static_cast<const uint16_t*>(t.data), t.numel());
      ptr_ = buf_.data();
    } else {
      ptr_ = t.f32();
    }
  }
  const float* get() const { return ptr_; }

 private:
  std::vector<float> buf_;
  const float* ptr_ = nullptr;
};

// A tensor written as fp32: get() is the tensor itself (fp32) or a buffer
// that store() rounds into it (bf16). `load` fills the buffer with the
// tensor's values first, for outputs that accumulate.
class Fp32Out {
 public:
  explicit Fp32Out(const TensorView& t, bool load = false) : t_(t) {
    if (t.dtype == DType::bf16) {
      buf_.resize(static_cast<size_t>(t.numel()));
      if (load) widen_bf16(buf_.data(), static_cast<const uint16_t*>(t.data), t.numel());
      ptr_ = buf_.data();
    } else {
      ptr_ = t.f32();
    }
  }
  float* get() const { return ptr_; }
  // The results into a bf16 tensor (a no-op for fp32). Call once, after the
  // math, outside any OpenMP region.
  void store() {
    if (t_.dtype == DType::bf16)
      narrow_to_bf16(static_cast<uint16_t*>(t_.data), buf_.data(), t_.numel());
  }

 private:
  TensorView t_;
  std::vector<float> buf_;
  float* ptr_ = nullptr;
};

}  // namespace gt::cpu
