#include "trainer/model/parameter_store.hpp"

#include "kernels/core/error.hpp"

namespace gt {

// Ops::allocate zero-fills: the padding between tensors is never written by
// an op, so it stays zero and sums over the flat buffers see only real values.
LocalParameters::LocalParameters(const ParameterLayout& layout, Ops& ops)
    : units_(layout.units()),
      params_(ops.allocate(static_cast<size_t>(layout.total()) * sizeof(float))),
      grads_(ops.allocate(static_cast<size_t>(layout.total()) * sizeof(float))) {}

int64_t LocalParameters::begin(int unit) const {
  GT_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "unit ", unit);
  return units_[static_cast<size_t>(unit)].begin;
}

}  // namespace gt
