// What the planner's CPU tests share: the layout matrix's models
// (layout_matrix_models.hpp) and this repository's configs and hardware
// files (GT_SOURCE_DIR, the gt_tests build's).
#pragma once

#include <string>

#include "layout_matrix_models.hpp"
#include "trainer/config/config.hpp"
#include "trainer/plan/hardware.hpp"

namespace gt::test {

// configs/<name>.yaml and configs/hardware/<name>.yaml of this repository.
inline Config config(const std::string& name) {
  return load_config(std::string(GT_SOURCE_DIR) + "/configs/" + name + ".yaml", {});
}
inline Config gpt2_xl() { return config("gpt2_1.5b"); }

inline HardwareSpec hardware(const std::string& name) {
  return load_hardware(std::string(GT_SOURCE_DIR) + "/configs/hardware/" + name + ".yaml");
}

}  // namespace gt::test
