#include "trainer/sharding/shard_geometry.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

ShardGeometry::ShardGeometry(const ParameterLayout& layout, int fsdp, int fsdp_rank)
    : layout_(layout), fsdp_(fsdp), fsdp_rank_(fsdp_rank) {
  GT_CHECK(fsdp >= 1 && fsdp_rank >= 0 && fsdp_rank < fsdp, "fsdp rank ", fsdp_rank, " of ", fsdp);
  for (const auto& u : layout.units()) {
    GT_CHECK(u.size() % fsdp == 0, "unit ", u.name, " of ", u.size(),
             " elements is not padded to a multiple of fsdp=", fsdp);
    storage_offset_.push_back(storage_total_);
    storage_total_ += u.size() / fsdp;
  }
  for (const auto& s : layout.specs()) {
    whole_.push_back(ParamSegment{&s, 0, s.numel, s.offset, s.offset});
    const int64_t lo = std::max(s.offset, shard_begin(s.unit));
    const int64_t hi = std::min(s.offset + s.numel, shard_begin(s.unit) + shard_size(s.unit));
    if (lo >= hi) continue;
    owned_.push_back(ParamSegment{&s, lo - s.offset, hi - s.offset, lo,
                                  shard_storage(s.unit) + (lo - shard_begin(s.unit))});
  }
}

int64_t ShardGeometry::shard_size(int unit) const {
  return layout_.units()[static_cast<size_t>(unit)].size() / fsdp_;
}
int64_t ShardGeometry::shard_begin(int unit) const {
  return layout_.units()[static_cast<size_t>(unit)].begin + fsdp_rank_ * shard_size(unit);
}
int64_t ShardGeometry::shard_storage(int unit) const {
  return storage_offset_[static_cast<size_t>(unit)];
}

std::vector<SegmentBox> segment_boxes(const ParameterLayout& layout, const ParamSpec& s,
                                      int64_t local_begin, int64_t local_end) {
  GT_CHECK(0 <= local_begin && local_begin <= local_end && local_end <= s.numel, s.name,
           ": segment [", local_begin, ", ", local_end, ") of ", s.numel);
  const int64_t cols = cols_2d(s.shape);
  // Rows of a rows-split tensor come in `parts` groups that map to different
  // global places; a box never crosses a group boundary.
  const int64_t group_rows = s.split == TpSplit::rows ? s.shape[0] / s.parts : s.shape[0];
  std::vector<SegmentBox> out;
  int64_t pos = local_begin;
  while (pos < local_end) {
    const int64_t r = pos / cols, c = pos % cols;
    SegmentBox b;
    if (c == 0 && pos + cols <= local_end) {
      const int64_t group_end = (r / group_rows + 1) * group_rows;
      b.rows = std::min((local_end - pos) / cols, group_end - r);
      b.cols = cols;
    } else {
      b.rows = 1;
      b.cols = std::min(cols - c, local_end - pos);
    }
    b.row0 = layout.global_row(s, r);
    b.col0 = layout.global_col(s, c);
    b.offset = pos - local_begin;
    out.push_back(b);
    pos += b.rows * b.cols;
  }
  return out;
}

}  // namespace gt
