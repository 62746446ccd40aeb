// Shard geometry: which part of the flat parameter buffer this rank owns
// under FSDP, and where each piece of a parameter sits in the global
// (unsharded, HF-named) tensor. Pure arithmetic, no communication, so it is
// unit-tested on its own and shared by the optimizer, the gradient norm and
// the checkpoint code.
//
// FSDP splits every unit (ParameterLayout::units(), padded to a multiple of
// fsdp) into fsdp equal contiguous shards; shard k of unit u is the flat range
// [begin_u + k*S_u, begin_u + (k+1)*S_u) with S_u = size_u / fsdp. A rank's
// shards of all units are stored back to back ("shard storage"). With
// fsdp = 1 the one shard is the whole unit and storage offsets are flat offsets.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/model/parameter_layout.hpp"

namespace gt {

// A piece of one parameter's local (tp-shard) tensor: elements
// [local_begin, local_end) in row-major order, at `flat` in the flat layout and
// `storage` in this rank's shard storage.
struct ParamSegment {
  const ParamSpec* spec = nullptr;
  int64_t local_begin = 0, local_end = 0;
  int64_t flat = 0;
  int64_t storage = 0;
  int64_t size() const { return local_end - local_begin; }
};

class ShardGeometry {
 public:
  ShardGeometry(const ParameterLayout& layout, int fsdp, int fsdp_rank);

  int fsdp() const { return fsdp_; }
  int fsdp_rank() const { return fsdp_rank_; }
  int64_t shard_size(int unit) const;      // S_u
  int64_t shard_begin(int unit) const;     // flat offset of this rank's shard of unit u
  int64_t shard_storage(int unit) const;   // offset of that shard in shard storage
  int64_t storage_total() const { return storage_total_; }

  // Every parameter's part inside this rank's shards, in layout order.
  const std::vector<ParamSegment>& owned() const { return owned_; }
  // Every parameter whole (storage = flat): what a rank holding full
  // parameters stores.
  const std::vector<ParamSegment>& whole() const { return whole_; }

 private:
  const ParameterLayout& layout_;
  int fsdp_, fsdp_rank_;
  std::vector<int64_t> storage_offset_;
  int64_t storage_total_ = 0;
  std::vector<ParamSegment> owned_, whole_;
};

// A rectangle of a global tensor (viewed as 2-D; a 1-D tensor of N is (N, 1))
// holding a contiguous run of a segment's elements, which start at element
// `offset` of the segment.
struct SegmentBox {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  int64_t offset = 0;
};
// The boxes covering local elements [local_begin, local_end) of `s` (this tp
// rank's shard, layout built for that rank), in order.
std::vector<SegmentBox> segment_boxes(const ParameterLayout& layout, const ParamSpec& s,
                                      int64_t local_begin, int64_t local_end);
// Columns of a tensor shape viewed as 2-D.
inline int64_t cols_2d(const std::vector<int64_t>& shape) {
  return shape.size() == 2 ? shape[1] : 1;
}

}  // namespace gt
