// safetensors reader and writer (the format HF transformers uses): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape,
// data_offsets}, "__metadata__": {...}}, then the raw little-endian data.
// The reader validates the header completely (size, JSON, dtypes, offsets in
// range and non-overlapping, shape * dtype size == byte span) before any
// tensor is handed out; every error names the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/io/progress.hpp"

namespace gt {

// "[128, 384]": a tensor shape as error messages, manifests and the HF
// import name it.
std::string shape_str(const std::vector<int64_t>& shape);

struct SafetensorInfo {
  std::string name;
  std::string dtype;            // "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

class SafetensorsReader {
 public:
  // Reads and validates the header; the data is read on demand.
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const;
  const SafetensorInfo& info(const std::string& name) const;  // throws naming the tensor
  std::vector<std::string> names() const;                     // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Copies tensor `name` into dst as fp32 (F32, BF16 and F16 are converted).
  // Throws if the tensor is missing or its shape differs from `expected_shape`
  // ("tensor h.0.attn.c_attn.weight in FILE: expected shape [64, 192], got [192, 64]").
  void read_f32(const std::string& name, const std::vector<int64_t>& expected_shape,
                float* dst) const;

  // Copies rows [row0, row0 + rows) x cols [col0, col0 + cols) of F32 tensor
  // `name`, viewed as 2-D ([R, C] is itself, [N] is (N, 1), [] is (1, 1)),
  // into dst, whose rows are dst_row_stride floats apart. Only those bytes
  // are read (one pread per row, or one in all when whole rows are wanted
  // and dst is dense). Throws naming the tensor when it is not F32, has more
  // than 2 dimensions, or the box is outside it.
  void read_f32_box(const std::string& name, int64_t row0, int64_t rows, int64_t col0,
                    int64_t cols, float* dst, int64_t dst_row_stride) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;  // file offset of the data section
  std::map<std::string, SafetensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// What write_atomic wrote: the file's size and the CRC32C of its bytes,
// computed as they were written (no second pass over the file).
struct WrittenFile {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

class SafetensorsWriter {
 public:
  // Data is copied at add() time, so the caller's buffers may change afterwards.
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  // Not copied: `data` must stay valid and unchanged until write_atomic()
  // returns. For large buffers (checkpoint shards) that must not exist twice.
  void add_f32_view(const std::string& name, const std::vector<int64_t>& shape,
                    const float* data);
  void set_metadata(const std::string& key, const std::string& value);

  // Writes `path` atomically: to "<path>.tmp.<pid>", fsync, rename. On any
  // failure the temporary file is removed and nothing exists at `path` that
  // was not there before.
  // `progress` hears the data bytes written, every 64 MiB at most.
  WrittenFile write_atomic(const std::string& path, const ByteProgress& progress = {}) const;

 private:
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> copy;      // add_f32: owned copy (view points into it)
    const float* view = nullptr;  // the numel floats written
    uint64_t numel = 0;
  };
  void add_entry(const std::string& name, const std::vector<int64_t>& shape, const float* data,
                 bool copy);
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace gt
