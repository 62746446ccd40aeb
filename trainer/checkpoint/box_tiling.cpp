// Tiling check by coordinate compression; see the header.
#include "trainer/checkpoint/box_tiling.hpp"

#include <algorithm>

namespace gt {

bool operator==(const TensorBox& a, const TensorBox& b) {
  return a.row0 == b.row0 && a.rows == b.rows && a.col0 == b.col0 && a.cols == b.cols;
}

namespace ckpt {

bool box_inside(const TensorBox& b, const TensorBox& whole) {
  // Written so that no sum can overflow, whatever a hostile manifest says.
  auto inside = [](int64_t a, int64_t n, int64_t lo, int64_t len) {
    return n >= 0 && a >= lo && a - lo <= len && n <= len - (a - lo);
  };
  return inside(b.row0, b.rows, whole.row0, whole.rows) &&
         inside(b.col0, b.cols, whole.col0, whole.cols);
}

TensorBox box_intersect(const TensorBox& a, const TensorBox& b) {
  const int64_t r0 = std::max(a.row0, b.row0), r1 = std::min(a.row0 + a.rows, b.row0 + b.rows);
  const int64_t c0 = std::max(a.col0, b.col0), c1 = std::min(a.col0 + a.cols, b.col0 + b.cols);
  if (r1 <= r0 || c1 <= c0) return TensorBox{};
  return TensorBox{r0, r1 - r0, c0, c1 - c0};
}

std::string box_str(const TensorBox& b, bool one_d) {
  auto range = [](int64_t a, int64_t n) {
    return "[" + std::to_string(a) + ", " + std::to_string(a + n) + ")";
  };
  if (one_d) return "elements " + range(b.row0, b.rows);
  return "rows " + range(b.row0, b.rows) + " x cols " + range(b.col0, b.cols);
}

std::optional<TilingProblem> find_tiling_problem(const TensorBox& target,
                                                 const std::vector<TensorBox>& boxes) {
  if (box_empty(target)) return std::nullopt;
  // Cut lines: the target's edges and every box's edges.
  std::vector<int64_t> rc = {target.row0, target.row0 + target.rows};
  std::vector<int64_t> cc = {target.col0, target.col0 + target.cols};
  for (const TensorBox& b : boxes) {
    if (box_empty(b)) continue;
    rc.insert(rc.end(), {b.row0, b.row0 + b.rows});
    cc.insert(cc.end(), {b.col0, b.col0 + b.cols});
  }
  for (auto* v : {&rc, &cc}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  const size_t nr = rc.size() - 1, nc = cc.size() - 1;
  auto index_of = [](const std::vector<int64_t>& cuts, int64_t x) {
    return static_cast<size_t>(std::lower_bound(cuts.begin(), cuts.end(), x) - cuts.begin());
  };
  auto cell_box = [&](size_t i, size_t j) {
    return TensorBox{rc[i], rc[i + 1] - rc[i], cc[j], cc[j + 1] - cc[j]};
  };
  // owner[cell] = index of the box covering it + 1 (0 = none yet).
  std::vector<size_t> owner(nr * nc, 0);
  for (size_t k = 0; k < boxes.size(); ++k) {
    const TensorBox& b = boxes[k];
    if (box_empty(b)) continue;
    const size_t i0 = index_of(rc, b.row0), i1 = index_of(rc, b.row0 + b.rows);
    const size_t j0 = index_of(cc, b.col0), j1 = index_of(cc, b.col0 + b.cols);
    for (size_t i = i0; i < i1; ++i)
      for (size_t j = j0; j < j1; ++j) {
        size_t& o = owner[i * nc + j];
        if (o != 0) return TilingProblem{true, cell_box(i, j), o - 1, k};
        o = k + 1;
      }
  }
  // The target's own cells are those inside its edges (boxes lie inside it,
  // so every cut is within the target and every cell belongs to it).
  for (size_t i = 0; i < nr; ++i)
    for (size_t j = 0; j < nc; ++j)
      if (owner[i * nc + j] == 0) {
        // Grow the gap along the row so a missing band reads as one rectangle.
        size_t j1 = j + 1;
        while (j1 < nc && owner[i * nc + j1] == 0) ++j1;
        TensorBox gap = cell_box(i, j);
        gap.cols = cc[j1] - cc[j];
        return TilingProblem{false, gap, 0, 0};
      }
  return std::nullopt;
}

}  // namespace ckpt
}  // namespace gt
