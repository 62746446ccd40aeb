#include "trainer/parallelize/activation_placement.hpp"

#include "kernels/core/error.hpp"

namespace gt {

const char* to_string(ActDim d) {
  switch (d) {
    case ActDim::sequence: return "sequence";
    case ActDim::hidden: return "hidden";
    case ActDim::heads: return "heads";
    case ActDim::vocabulary: return "vocabulary";
  }
  return "?";
}

std::string AxisPlacement::str() const {
  switch (kind) {
    case Kind::replicated: return "replicated";
    case Kind::sharded: return std::string("shard(") + to_string(dim) + ")";
    case Kind::partial: return "partial";
  }
  return "?";
}

std::string ActivationPlacement::str() const { return "{tp: " + tp.str() + ", cp: " + cp.str() + "}"; }

namespace {

[[noreturn]] void mismatch(const Activation& a, const std::string& want, const std::string& got,
                           const std::string& layer, const char* role) {
  fail(layer, ": ", role, " '", a.name, "' is ", got, "; expected ", want);
}

}  // namespace

void expect_placement(const Activation& a, const ActivationPlacement& want, const std::string& layer,
                      const char* role, PlacementLog* log) {
  if (a.placement != want) mismatch(a, want.str(), a.placement.str(), layer, role);
  if (log) log->record(layer, role, a);
}

void expect_tp(const Activation& a, const AxisPlacement& want, const std::string& layer,
               const char* role, PlacementLog* log) {
  if (a.placement.tp != want)
    mismatch(a, "tp: " + want.str(), a.placement.str(), layer, role);
  if (log) log->record(layer, role, a);
}

void expect_cp(const Activation& a, const AxisPlacement& want, const std::string& layer,
               const char* role, PlacementLog* log) {
  if (a.placement.cp != want)
    mismatch(a, "cp: " + want.str(), a.placement.str(), layer, role);
  if (log) log->record(layer, role, a);
}

Activation added(TensorView out, const Activation& a, const Activation& b, std::string name,
                 const std::string& layer, PlacementLog* log) {
  expect_placement(b, a.placement, layer, "addend", log);
  return given({out, a.placement, std::move(name)}, layer, "sum", log);
}

Activation given(Activation a, const std::string& layer, const char* role, PlacementLog* log) {
  if (log) log->record(layer, role, a);
  return a;
}

}  // namespace gt
