#include "trainer/model/parameter_store.hpp"

#include <cstring>

#include "kernels/core/error.hpp"

namespace gt {

LocalParameters::LocalParameters(const ParameterLayout& layout)
    : units_(layout.units()),
      params_(static_cast<size_t>(layout.total()) * sizeof(float)),
      grads_(static_cast<size_t>(layout.total()) * sizeof(float)) {
  // Padding between tensors is never written by an op: keep it zero so sums
  // over the flat buffers (norms, checksums) see only real values.
  std::memset(params_.data(), 0, params_.bytes());
  std::memset(grads_.data(), 0, grads_.bytes());
}

int64_t LocalParameters::begin(int unit) const {
  GT_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "unit ", unit);
  return units_[static_cast<size_t>(unit)].begin;
}

}  // namespace gt
