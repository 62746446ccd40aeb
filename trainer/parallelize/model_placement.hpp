// The placement table of the configured model family (model.arch): what
// ParameterLayout cuts for a tp rank.
#pragma once

#include <vector>

#include "trainer/config/config.hpp"
#include "trainer/parallelize/placement.hpp"

namespace gt {

std::vector<PlacedUnit> model_placement(const ModelConfig& m);

}  // namespace gt
