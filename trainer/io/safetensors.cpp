// safetensors reader/writer; the format is
// https://huggingface.co/docs/safetensors (spec section "Format"):
//   u64 LE N | N bytes of UTF-8 JSON (may end in spaces) | data section.
// Offsets in the JSON are relative to the data section. The reader keeps
// only the header in memory; tensor bytes are pread on demand, chunk by
// chunk, so a 500 MB file never exists twice in RAM.
#include "trainer/io/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"
#include "trainer/io/atomic_file.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this code copies it raw");

namespace gt {
namespace {

using json = nlohmann::json;

// The reference implementation's limit (safetensors MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Every dtype the spec names, with its size in bytes. Only F32/BF16/F16 can
// be read as fp32, but a file holding others is still a valid file.
int dtype_size(const std::string& d) {
  static const std::pair<const char*, int> kTable[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto& [name, size] : kTable)
    if (d == name) return size;
  return 0;
}

// numel, or fails on overflow (a hostile header must not wrap around).
uint64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<uint64_t>::max() / ud / 8)
      fail(where, ": shape ", shape_str(shape), " has too many elements");
    n *= ud;
  }
  return n;
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / nan (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal half: normalise the mantissa into an fp32 normal.
    exp = 113;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Owns an fd for the duration of one call.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

void pread_all(int fd, void* dst, size_t n, uint64_t offset, const std::string& what) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail("cannot read ", what, ": ", std::strerror(errno));
    }
    if (r == 0) fail("cannot read ", what, ": unexpected end of file (truncated?)");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

// Parses one tensor entry of the header; `where` is "tensor NAME in FILE".
SafetensorInfo parse_entry(const std::string& name, const json& v, const std::string& where) {
  if (!v.is_object()) fail(where, ": header entry is not an object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) fail(where, ": header entry is missing field \"", field, "\"");
  SafetensorInfo info;
  info.name = name;
  const json& dt = v["dtype"];
  if (!dt.is_string()) fail(where, ": \"dtype\" is not a string");
  info.dtype = dt.get<std::string>();
  if (dtype_size(info.dtype) == 0)
    fail(where, ": unknown dtype \"", info.dtype,
         "\" (the spec's dtypes are BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, "
         "U32, F32, F64, I64, U64)");
  const json& sh = v["shape"];
  if (!sh.is_array()) fail(where, ": \"shape\" is not an array");
  for (const json& d : sh) {
    if (!d.is_number_integer()) fail(where, ": \"shape\" ", sh.dump(), " holds a non-integer");
    const int64_t dim = d.get<int64_t>();
    if (dim < 0) fail(where, ": \"shape\" ", sh.dump(), " has a negative dimension");
    info.shape.push_back(dim);
  }
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    fail(where, ": \"data_offsets\" ", off.dump(), " is not [begin, end] with begin, end >= 0");
  info.begin = off[0].get<uint64_t>();
  info.end = off[1].get<uint64_t>();
  return info;
}

}  // namespace

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) fail("cannot open safetensors file ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("cannot stat ", path, ": ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("safetensors file ", path, " is not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8)
    fail("safetensors file ", path, " is ", file_size,
         " bytes, shorter than the 8-byte header length that starts every safetensors file");

  unsigned char len_bytes[8];
  pread_all(f.fd, len_bytes, 8, 0, path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes)
    fail("safetensors file ", path, ": header length ", header_len, " exceeds the ",
         kMaxHeaderBytes, "-byte limit (not a safetensors file, or corrupt)");
  if (header_len > file_size - 8)
    fail("safetensors file ", path, ": header length ", header_len, " is larger than the ",
         file_size - 8, " bytes that follow it (truncated or not a safetensors file)");
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  std::string text(header_len, '\0');
  pread_all(f.fd, text.data(), text.size(), 8, path);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("safetensors file ", path, ": header is not valid JSON: ", e.what());
  }
  if (!header.is_object())
    fail("safetensors file ", path, ": header is a JSON ", header.type_name(),
         ", expected an object {name: {dtype, shape, data_offsets}}");

  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") {
      if (!v.is_object())
        fail("safetensors file ", path, ": \"__metadata__\" is not an object");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string())
          fail("safetensors file ", path, ": \"__metadata__\" value for \"", mk,
               "\" is not a string");
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + key + " in " + path;
    SafetensorInfo info = parse_entry(key, v, where);
    if (info.end < info.begin)
      fail(where, ": data_offsets [", info.begin, ", ", info.end, "] end before begin");
    if (info.end > data_size)
      fail(where, ": data_offsets [", info.begin, ", ", info.end,
           "] run past the end of the data section (", data_size,
           " bytes; the file is truncated or the header is wrong)");
    const uint64_t want = checked_numel(info.shape, where) * dtype_size(info.dtype);
    if (info.end - info.begin != want)
      fail(where, ": data_offsets [", info.begin, ", ", info.end, "] span ",
           info.end - info.begin, " bytes, but shape ", shape_str(info.shape), " of ",
           info.dtype, " needs ", want);
    tensors_.emplace(key, std::move(info));
  }

  // Overlap check: sorted by begin, each tensor must start at or after the
  // previous one's end. (Zero-byte tensors overlap nothing.)
  std::vector<const SafetensorInfo*> by_offset;
  for (const auto& kv : tensors_)
    if (kv.second.end > kv.second.begin) by_offset.push_back(&kv.second);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorInfo* a, const SafetensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorInfo& a = *by_offset[i - 1];
    const SafetensorInfo& b = *by_offset[i];
    if (b.begin < a.end)
      fail("safetensors file ", path, ": tensors ", a.name, " [", a.begin, ", ", a.end,
           ") and ", b.name, " [", b.begin, ", ", b.end, ") overlap");
  }
}

bool SafetensorsReader::has(const std::string& name) const { return tensors_.count(name) != 0; }

const SafetensorInfo& SafetensorsReader::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  std::string avail;
  size_t shown = 0;
  for (const auto& kv : tensors_) {
    if (shown == 5) {
      avail += ", ... (" + std::to_string(tensors_.size()) + " in all)";
      break;
    }
    avail += (shown++ ? ", " : "") + kv.first;
  }
  fail("tensor ", name, " not found in ", path_, " (it has ",
       tensors_.empty() ? std::string("no tensors") : avail, ")");
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

void SafetensorsReader::read_f32(const std::string& name,
                                 const std::vector<int64_t>& expected_shape, float* dst) const {
  const SafetensorInfo& t = info(name);
  if (t.shape != expected_shape)
    fail("tensor ", name, " (", path_, "): expected shape ", shape_str(expected_shape),
         ", got ", shape_str(t.shape));
  const int esize = dtype_size(t.dtype);
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
    fail("tensor ", name, " (", path_, "): expected dtype F32, BF16 or F16 (read as fp32), got ",
         "dtype ", t.dtype);
  const uint64_t numel = (t.end - t.begin) / static_cast<uint64_t>(esize);
  if (numel == 0) return;
  GT_CHECK(dst != nullptr, "read_f32 of ", name, " into a null buffer");

  // Reopened per call so a reader holds no descriptor; the size is checked
  // again in case the file was truncated since the header was read.
  Fd f(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) fail("cannot open safetensors file ", path_, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("cannot stat ", path_, ": ", std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) < data_start_ + t.end)
    fail("tensor ", name, " in ", path_, ": the file is ", st.st_size,
         " bytes now, too short for the tensor's data (it was truncated after opening)");

  const std::string what = "tensor " + name + " from " + path_;
  const uint64_t offset = data_start_ + t.begin;
  if (t.dtype == "F32") {
    pread_all(f.fd, dst, numel * 4, offset, what);
    return;
  }
  // 16-bit: convert in chunks through a small staging buffer.
  constexpr uint64_t kChunk = uint64_t{1} << 20;  // elements
  std::vector<uint16_t> stage(static_cast<size_t>(std::min(numel, kChunk)));
  const bool bf16 = t.dtype == "BF16";
  for (uint64_t done = 0; done < numel;) {
    const uint64_t n = std::min(kChunk, numel - done);
    pread_all(f.fd, stage.data(), n * 2, offset + done * 2, what);
    float* out = dst + done;
    if (bf16) {
      for (uint64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(stage[i]);
    } else {
      for (uint64_t i = 0; i < n; ++i) out[i] = f16_to_f32(stage[i]);
    }
    done += n;
  }
}

void SafetensorsReader::read_f32_box(const std::string& name, int64_t row0, int64_t rows,
                                     int64_t col0, int64_t cols, float* dst,
                                     int64_t dst_row_stride) const {
  const SafetensorInfo& t = info(name);
  const std::string where = "tensor " + name + " in " + path_;
  if (t.dtype != "F32") fail(where, " has dtype ", t.dtype, "; a box can be read only from F32");
  if (t.shape.size() > 2)
    fail(where, " has shape ", shape_str(t.shape), "; a box can be read only from 1-D or 2-D");
  const int64_t R = t.shape.empty() ? 1 : t.shape[0];
  const int64_t C = t.shape.size() == 2 ? t.shape[1] : 1;
  if (row0 < 0 || rows < 0 || col0 < 0 || cols < 0 || row0 + rows > R || col0 + cols > C)
    fail(where, ": box rows [", row0, ", ", row0 + rows, ") x cols [", col0, ", ", col0 + cols,
         ") is outside its (", R, ", ", C, ") view");
  if (rows == 0 || cols == 0) return;
  GT_CHECK(dst != nullptr && dst_row_stride >= cols, "read_f32_box of ", name,
           ": null buffer or row stride ", dst_row_stride, " < ", cols);

  Fd f(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) fail("cannot open safetensors file ", path_, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("cannot stat ", path_, ": ", std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) < data_start_ + t.end)
    fail(where, ": the file is ", st.st_size,
         " bytes now, too short for the tensor's data (it was truncated after opening)");

  const uint64_t base = data_start_ + t.begin;
  auto elem_offset = [&](int64_t r, int64_t c) {
    return base + (static_cast<uint64_t>(r) * static_cast<uint64_t>(C) +
                   static_cast<uint64_t>(c)) * sizeof(float);
  };
  if (cols == C && dst_row_stride == cols) {  // whole rows into a dense buffer: one read
    pread_all(f.fd, dst, static_cast<size_t>(rows * cols) * sizeof(float), elem_offset(row0, 0),
              where);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    pread_all(f.fd, dst + r * dst_row_stride, static_cast<size_t>(cols) * sizeof(float),
              elem_offset(row0 + r, col0), where);
}

void SafetensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape,
                                const float* data) {
  add_entry(name, shape, data, /*copy=*/true);
}

void SafetensorsWriter::add_f32_view(const std::string& name, const std::vector<int64_t>& shape,
                                     const float* data) {
  add_entry(name, shape, data, /*copy=*/false);
}

void SafetensorsWriter::add_entry(const std::string& name, const std::vector<int64_t>& shape,
                                  const float* data, bool copy) {
  if (name.empty()) fail("safetensors writer: empty tensor name");
  if (name == "__metadata__") fail("safetensors writer: \"__metadata__\" is reserved");
  for (const Entry& e : entries_)
    if (e.name == name) fail("safetensors writer: tensor ", name, " added twice");
  for (int64_t d : shape)
    if (d < 0) fail("safetensors writer: tensor ", name, " has negative shape ", shape_str(shape));
  const uint64_t numel = checked_numel(shape, "safetensors writer: tensor " + name);
  if (numel > 0 && data == nullptr) fail("safetensors writer: tensor ", name, " has null data");
  Entry e;
  e.name = name;
  e.shape = shape;
  e.numel = numel;
  if (copy) e.copy.assign(data, data + numel);
  entries_.push_back(std::move(e));
  // The view of a copy is taken after the move: the vector's buffer moved with it.
  entries_.back().view = copy ? entries_.back().copy.data() : data;
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

WrittenFile SafetensorsWriter::write_atomic(const std::string& path,
                                            const ByteProgress& progress) const {
  // Data goes in insertion order, back to back from offset 0.
  json header = json::object();
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    const uint64_t bytes = e.numel * sizeof(float);
    header[e.name] = {{"dtype", "F32"}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (the spec
  // allows trailing 0x20 in the header).
  text.append((8 - text.size() % 8) % 8, ' ');

  unsigned char len_bytes[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i, n >>= 8) len_bytes[i] = static_cast<unsigned char>(n & 0xFF);

  AtomicFile f(path);
  f.write(len_bytes, 8);
  f.write(text.data(), text.size());
  // In pieces of at most 64 MiB, so a progress line moves within one large
  // tensor (GPT-2's wte is 154 MB).
  constexpr uint64_t kPiece = uint64_t{64} << 20;
  uint64_t done = 0;
  for (const Entry& e : entries_) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(e.view);
    const uint64_t n = e.numel * sizeof(float);
    for (uint64_t at = 0; at < n; at += kPiece) {
      const uint64_t len = std::min(kPiece, n - at);
      f.write(bytes + at, len);
      done += len;
      if (progress) progress(done, offset);
    }
  }
  f.commit();
  return WrittenFile{f.bytes_written(), f.crc32c()};
}

}  // namespace gt
