// Box geometry for checkpoints, shared by save (do the ranks' pieces tile
// each tensor exactly once?) and load (which saved pieces does a wanted box
// need, and do they cover it?). Boxes are in a tensor's 2-D view (see
// TensorBox); everything here is exact integer arithmetic.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "trainer/checkpoint/checkpoint.hpp"

namespace gt::ckpt {

inline bool box_empty(const TensorBox& b) { return b.rows <= 0 || b.cols <= 0; }
inline int64_t box_area(const TensorBox& b) { return box_empty(b) ? 0 : b.rows * b.cols; }

// True when `b` has non-negative extents and lies inside `whole`.
bool box_inside(const TensorBox& b, const TensorBox& whole);

// The common part of a and b (empty, rows = cols = 0, when they do not meet).
TensorBox box_intersect(const TensorBox& a, const TensorBox& b);

// "rows [0, 4) x cols [2, 5)"; for a 1-D tensor (one_d) "elements [0, 4)".
std::string box_str(const TensorBox& b, bool one_d);

// Where `boxes` fail to cover `target` exactly once: a gap (an uncovered
// rectangle) or an overlap (a rectangle in boxes[first] and boxes[second]).
struct TilingProblem {
  bool overlap = false;
  TensorBox where;
  size_t first = 0, second = 0;  // overlap only
};

// nullopt when the boxes (each inside target) cover target exactly once.
// Works on the grid cut by every box edge: cost O(k log k + cells), where
// cells <= (2k+1)^2 for k boxes and is small for the band and grid shapes
// parallel layouts produce.
std::optional<TilingProblem> find_tiling_problem(const TensorBox& target,
                                                 const std::vector<TensorBox>& boxes);

}  // namespace gt::ckpt
