// safetensors reader/writer and the atomic-write/CRC32C helpers. Files are
// also built byte by byte here from the spec, so the tests check that we
// match the format, not only that the reader agrees with our own writer.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"
#include "test_util.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/io/safetensors.hpp"

namespace gt {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

void put_u64_le(std::vector<char>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// A file per the spec: u64 LE header length, the header text, then `data`.
std::vector<char> make_file(const std::string& header, const std::vector<char>& data) {
  std::vector<char> f;
  put_u64_le(&f, header.size());
  f.insert(f.end(), header.begin(), header.end());
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Runs `fn`, expects gt::Error, returns its message ("" when none was thrown).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected gt::Error";
  return "";
}

#define EXPECT_HAS(msg, part) \
  EXPECT_NE(std::string(msg).find(part), std::string::npos) << "message: " << (msg)

TEST(Safetensors, RoundTripValuesShapesMetadata) {
  TempDir tmp;
  const auto a = test::random_vector(64 * 192, 1);
  const auto b = test::random_vector(7, 2);
  const float scalar = 3.5f;
  SafetensorsWriter w;
  w.add_f32("h.0.attn.c_attn.weight", {64, 192}, a.data());
  w.add_f32("bias", {7}, b.data());
  w.add_f32("scalar", {}, &scalar);
  w.add_f32("empty", {0, 3}, nullptr);
  w.set_metadata("step", "12");
  w.set_metadata("format", "gt");
  const std::string path = tmp.file("m.safetensors");
  w.write_atomic(path);

  SafetensorsReader r(path);
  EXPECT_EQ(r.names(),
            (std::vector<std::string>{"bias", "empty", "h.0.attn.c_attn.weight", "scalar"}));
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"step", "12"}, {"format", "gt"}}));
  EXPECT_EQ(r.info("h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{64, 192}));
  EXPECT_EQ(r.info("h.0.attn.c_attn.weight").dtype, "F32");
  EXPECT_EQ(r.info("scalar").shape, std::vector<int64_t>{});
  EXPECT_TRUE(r.has("bias"));
  EXPECT_FALSE(r.has("nope"));

  std::vector<float> ga(a.size()), gb(b.size());
  float gs = 0;
  r.read_f32("h.0.attn.c_attn.weight", {64, 192}, ga.data());
  r.read_f32("bias", {7}, gb.data());
  r.read_f32("scalar", {}, &gs);
  r.read_f32("empty", {0, 3}, nullptr);
  EXPECT_EQ(std::memcmp(ga.data(), a.data(), a.size() * 4), 0);
  EXPECT_EQ(std::memcmp(gb.data(), b.data(), b.size() * 4), 0);
  EXPECT_EQ(gs, scalar);
}

// Our writer's bytes, decoded by hand per the spec.
TEST(Safetensors, WriterOutputFollowsSpec) {
  TempDir tmp;
  const std::vector<float> x = {1.f, 2.f, 3.f}, y = {-1.f, 0.5f};
  SafetensorsWriter w;
  w.add_f32("x", {3}, x.data());
  w.add_f32("y", {1, 2}, y.data());
  w.set_metadata("k", "v");
  w.write_atomic(tmp.file("t.safetensors"));
  const auto bytes = read_bytes(tmp.file("t.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header padded to a multiple of 8";
  ASSERT_EQ(bytes.size(), 8 + n + (3 + 2) * 4) << "data contiguous, no gaps, nothing after";
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  EXPECT_EQ(header[0], '{');
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}') << "only spaces after the JSON";
  const auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["x"]["dtype"], "F32");
  EXPECT_EQ(j["x"]["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(j["x"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(j["y"]["shape"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(j["y"]["data_offsets"], nlohmann::json::array({12, 20}));
  EXPECT_EQ(j["__metadata__"], nlohmann::json({{"k", "v"}}));
  float got[5];
  std::memcpy(got, bytes.data() + 8 + n, sizeof(got));
  EXPECT_EQ(got[0], 1.f);
  EXPECT_EQ(got[2], 3.f);
  EXPECT_EQ(got[3], -1.f);
  EXPECT_EQ(got[4], 0.5f);
}

// A file assembled byte by byte, the way another implementation would write
// it (unpadded header, key order not sorted, mixed dtypes).
TEST(Safetensors, ReadsHandWrittenFileF32Bf16F16) {
  TempDir tmp;
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[1,3],"data_offsets":[8,14]},)"
      R"("h":{"dtype":"F16","shape":[6],"data_offsets":[14,26]},)"
      R"("__metadata__":{"format":"pt"}})";
  std::vector<char> data;
  // F32 1.0 = 0x3F800000, -2.5 = 0xC0200000 (little-endian bytes).
  for (unsigned v : {0x00u, 0x00u, 0x80u, 0x3Fu, 0x00u, 0x00u, 0x20u, 0xC0u})
    data.push_back(static_cast<char>(v));
  // BF16 1.0 = 0x3F80, -3.0 = 0xC040, 3.140625 = 0x4049.
  for (unsigned v : {0x80u, 0x3Fu, 0x40u, 0xC0u, 0x49u, 0x40u}) data.push_back(static_cast<char>(v));
  // F16 1.0 = 0x3C00, -2.0 = 0xC000, 65504 = 0x7BFF, 2^-24 = 0x0001 (subnormal),
  // 2^-14 = 0x0400 (smallest normal), +inf = 0x7C00.
  for (unsigned v : {0x00u, 0x3Cu, 0x00u, 0xC0u, 0xFFu, 0x7Bu, 0x01u, 0x00u, 0x00u, 0x04u, 0x00u,
                     0x7Cu})
    data.push_back(static_cast<char>(v));
  write_bytes(tmp.file("hand.safetensors"), make_file(header, data));

  SafetensorsReader r(tmp.file("hand.safetensors"));
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.info("b").dtype, "BF16");
  float w[2], b[3], h[6];
  r.read_f32("w", {2}, w);
  r.read_f32("b", {1, 3}, b);
  r.read_f32("h", {6}, h);
  EXPECT_EQ(w[0], 1.f);
  EXPECT_EQ(w[1], -2.5f);
  EXPECT_EQ(b[0], 1.f);
  EXPECT_EQ(b[1], -3.f);
  EXPECT_EQ(b[2], 3.140625f);
  EXPECT_EQ(h[0], 1.f);
  EXPECT_EQ(h[1], -2.f);
  EXPECT_EQ(h[2], 65504.f);
  EXPECT_EQ(h[3], 0x1.0p-24f);
  EXPECT_EQ(h[4], 0x1.0p-14f);
  EXPECT_TRUE(std::isinf(h[5]) && h[5] > 0);
}

// BF16 is the top half of an fp32: every bf16 bit pattern converts exactly.
TEST(Safetensors, Bf16ConversionIsExactTruncation) {
  TempDir tmp;
  const auto src = test::random_vector(3001, 7, -100.f, 100.f);
  std::vector<char> data;
  std::vector<float> expected;
  for (float f : src) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint16_t top = static_cast<uint16_t>(bits >> 16);
    data.push_back(static_cast<char>(top & 0xFF));
    data.push_back(static_cast<char>(top >> 8));
    const uint32_t back = static_cast<uint32_t>(top) << 16;
    float e;
    std::memcpy(&e, &back, 4);
    expected.push_back(e);
  }
  const std::string header = R"({"t":{"dtype":"BF16","shape":[3001],"data_offsets":[0,6002]}})";
  write_bytes(tmp.file("bf.safetensors"), make_file(header, data));
  std::vector<float> got(3001);
  SafetensorsReader(tmp.file("bf.safetensors")).read_f32("t", {3001}, got.data());
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * 4), 0);
}

// --- malformed files: each error names the file and (where there is one) the tensor.

struct BadFile : ::testing::Test {
  TempDir tmp;
  std::string path = tmp.file("bad.safetensors");
  std::string open_error(const std::string& header, size_t data_bytes = 16) {
    write_bytes(path, make_file(header, std::vector<char>(data_bytes, 0)));
    return error_of([&] { SafetensorsReader r(path); });
  }
};

TEST_F(BadFile, ShorterThan8Bytes) {
  write_bytes(path, {'a', 'b', 'c'});
  const std::string msg = error_of([&] { SafetensorsReader r(path); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "3 bytes, shorter than the 8-byte header length");
}

TEST_F(BadFile, HeaderLengthLargerThanFile) {
  std::vector<char> f;
  put_u64_le(&f, 1000);
  f.push_back('{');
  f.push_back('}');
  write_bytes(path, f);
  const std::string msg = error_of([&] { SafetensorsReader r(path); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "header length 1000 is larger than the 2 bytes that follow it");
}

TEST_F(BadFile, HeaderLengthOver100MB) {
  std::vector<char> f;
  put_u64_le(&f, 200'000'000);
  f.resize(64, ' ');
  write_bytes(path, f);
  const std::string msg = error_of([&] { SafetensorsReader r(path); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "header length 200000000 exceeds the 100000000-byte limit");
}

TEST_F(BadFile, HeaderNotJson) {
  const std::string msg = open_error(R"({"a": {"dtype": "F32", )");
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "header is not valid JSON");
}

TEST_F(BadFile, HeaderNotAnObject) {
  const std::string msg = open_error("[1, 2, 3]");
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "header is a JSON array, expected an object");
}

TEST_F(BadFile, EntryMissingField) {
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    nlohmann::json e = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
    e.erase(field);
    const std::string msg = open_error(nlohmann::json({{"wte", e}}).dump());
    EXPECT_HAS(msg, "tensor wte in " + path);
    EXPECT_HAS(msg, std::string("missing field \"") + field + "\"");
  }
}

TEST_F(BadFile, UnknownDtype) {
  const std::string msg =
      open_error(R"({"wte":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})");
  EXPECT_HAS(msg, "tensor wte in " + path);
  EXPECT_HAS(msg, "unknown dtype \"F33\"");
}

TEST_F(BadFile, NegativeDim) {
  const std::string msg =
      open_error(R"({"wte":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})");
  EXPECT_HAS(msg, "tensor wte in " + path);
  EXPECT_HAS(msg, "[2,-1] has a negative dimension");
}

TEST_F(BadFile, OffsetsPastEndOfFile) {
  const std::string msg =
      open_error(R"({"wte":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", 16);
  EXPECT_HAS(msg, "tensor wte in " + path);
  EXPECT_HAS(msg, "run past the end of the data section (16 bytes");
}

TEST_F(BadFile, OffsetsEndBeforeBegin) {
  const std::string msg =
      open_error(R"({"wte":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})");
  EXPECT_HAS(msg, "tensor wte in " + path);
  EXPECT_HAS(msg, "[8, 0] end before begin");
}

TEST_F(BadFile, SpanDiffersFromShape) {
  const std::string msg =
      open_error(R"({"wte":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})");
  EXPECT_HAS(msg, "tensor wte in " + path);
  EXPECT_HAS(msg, "span 8 bytes, but shape [3] of BF16 needs 6");
}

TEST_F(BadFile, OverlappingTensors) {
  const std::string msg = open_error(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})");
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "tensors a [0, 8) and b [4, 12) overlap");
}

TEST_F(BadFile, MetadataValueNotString) {
  const std::string msg = open_error(R"({"__metadata__":{"step":12}})");
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "\"__metadata__\" value for \"step\" is not a string");
}

// Bytes of a damaged header reach the message escaped: a terminal shows
// one line of text, never raw control or non-UTF-8 bytes. Each header below
// quotes such bytes where the reader echoes them (the JSON parser's last
// token, a tensor name, a dtype, a metadata key).
TEST_F(BadFile, ErrorLinesEscapeTheBytesTheyQuote) {
  const std::string junk = std::string("\xff\xfe\x1b[31m\n\x01", 8) + "ok";
  const std::string broken_utf8 = std::string("{\"w\xc3\x28\": 1}");
  const std::vector<std::string> headers = {
      "{\"" + junk,                                                          // not JSON
      broken_utf8,                                                           // invalid UTF-8
      R"({"wte":{"dtype":"F\u001b[2J","shape":[2],"data_offsets":[0,8]}})",  // escape in a dtype
      R"({"a\u0000b":{"dtype":"F32","shape":[2]}})",                         // NUL in a name
      R"({"__metadata__":{"k\u0007":1}})",                                   // BEL in a key
  };
  for (const std::string& header : headers) {
    const std::string msg = open_error(header);
    EXPECT_HAS(msg, path);
    for (unsigned char c : msg) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte 0x" << std::hex << int(c) << " in: " << msg;
      if (!(c >= 0x20 && c < 0x7f)) break;
    }
  }
  // Valid UTF-8 stays readable; the rest is \xNN.
  EXPECT_EQ(printable("caf\xc3\xa9 \x1b[1m\xff\n"), "caf\xc3\xa9 \\x1b[1m\\xff\\x0a");
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80") << "a surrogate is not valid UTF-8";
  EXPECT_EQ(printable("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");
}

TEST(Safetensors, ReadMissingTensorListsAvailableNames) {
  TempDir tmp;
  const float v[2] = {1, 2};
  SafetensorsWriter w;
  for (const char* n : {"wte", "wpe", "ln_f.weight"}) w.add_f32(n, {2}, v);
  w.write_atomic(tmp.file("m.safetensors"));
  SafetensorsReader r(tmp.file("m.safetensors"));
  float out[2];
  const std::string msg = error_of([&] { r.read_f32("lm_head", {2}, out); });
  EXPECT_HAS(msg, "tensor lm_head not found in " + tmp.file("m.safetensors"));
  EXPECT_HAS(msg, "ln_f.weight, wpe, wte");
}

TEST(Safetensors, ReadShapeMismatchNamesTensorAndShapes) {
  TempDir tmp;
  const auto a = test::random_vector(192 * 64, 3);
  SafetensorsWriter w;
  w.add_f32("h.0.attn.c_attn.weight", {192, 64}, a.data());
  w.write_atomic(tmp.file("m.safetensors"));
  SafetensorsReader r(tmp.file("m.safetensors"));
  std::vector<float> out(a.size());
  const std::string msg =
      error_of([&] { r.read_f32("h.0.attn.c_attn.weight", {64, 192}, out.data()); });
  EXPECT_EQ(msg, "tensor h.0.attn.c_attn.weight (" + tmp.file("m.safetensors") +
                     "): expected shape [64, 192], got [192, 64]");
}

TEST(Safetensors, ReadDetectsTruncationAfterOpen) {
  TempDir tmp;
  const auto a = test::random_vector(100, 4);
  SafetensorsWriter w;
  w.add_f32("a", {100}, a.data());
  w.write_atomic(tmp.file("m.safetensors"));
  SafetensorsReader r(tmp.file("m.safetensors"));
  fs::resize_file(tmp.file("m.safetensors"), fs::file_size(tmp.file("m.safetensors")) - 4);
  std::vector<float> out(100);
  EXPECT_HAS(error_of([&] { r.read_f32("a", {100}, out.data()); }), "truncated");
}

TEST(Safetensors, WriterRejectsDuplicatesAndReservedNames) {
  const float v = 0;
  SafetensorsWriter w;
  w.add_f32("a", {1}, &v);
  EXPECT_HAS(error_of([&] { w.add_f32("a", {1}, &v); }), "tensor a added twice");
  EXPECT_HAS(error_of([&] { w.add_f32("__metadata__", {1}, &v); }), "reserved");
  EXPECT_HAS(error_of([&] { w.add_f32("n", {-1}, &v); }), "negative shape");
}

// A viewed (not copied) entry is written from the caller's buffer, and the
// returned size and CRC32C are those of the file on disk.
TEST(Safetensors, ViewEntryAndWrittenDigestMatchTheFile) {
  TempDir tmp;
  const auto a = test::random_vector(33, 5);
  SafetensorsWriter w;
  w.add_f32_view("a", {3, 11}, a.data());
  w.add_f32("b", {2}, a.data());
  const WrittenFile written = w.write_atomic(tmp.file("m.safetensors"));
  uint64_t bytes = 0;
  EXPECT_EQ(written.crc32c, crc32c_file(tmp.file("m.safetensors"), &bytes));
  EXPECT_EQ(written.bytes, bytes);
  std::vector<float> out(33);
  SafetensorsReader(tmp.file("m.safetensors")).read_f32("a", {3, 11}, out.data());
  EXPECT_EQ(out, a);
}

// Boxes of a 2-D and a 1-D tensor (viewed as (N, 1)) into a strided buffer.
TEST(Safetensors, ReadBoxOfTwoAndOneDimensionalTensors) {
  TempDir tmp;
  std::vector<float> a(5 * 7), b(9);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 100.f + static_cast<float>(i);
  SafetensorsWriter w;
  w.add_f32("a", {5, 7}, a.data());
  w.add_f32("b", {9}, b.data());
  w.write_atomic(tmp.file("m.safetensors"));
  SafetensorsReader r(tmp.file("m.safetensors"));

  // rows [1, 4) x cols [2, 5) into a buffer with row stride 4 (last column untouched).
  std::vector<float> out(3 * 4, -1.f);
  r.read_f32_box("a", 1, 3, 2, 3, out.data(), 4);
  const std::vector<float> want = {9, 10, 11, -1, 16, 17, 18, -1, 23, 24, 25, -1};
  EXPECT_EQ(out, want);
  std::vector<float> rows(2 * 7);  // whole rows, dense: the single-read path
  r.read_f32_box("a", 3, 2, 0, 7, rows.data(), 7);
  EXPECT_EQ(rows, std::vector<float>(a.begin() + 21, a.end()));
  std::vector<float> mid(4);
  r.read_f32_box("b", 2, 4, 0, 1, mid.data(), 1);
  EXPECT_EQ(mid, (std::vector<float>{102, 103, 104, 105}));

  EXPECT_HAS(error_of([&] { r.read_f32_box("a", 4, 2, 0, 7, rows.data(), 7); }),
             "box rows [4, 6) x cols [0, 7) is outside its (5, 7) view");
  EXPECT_HAS(error_of([&] { r.read_f32_box("b", 0, 1, 1, 1, mid.data(), 1); }),
             "outside its (9, 1) view");
}

// --- atomic writes

TEST(AtomicFile, WriteLeavesOnlyTheTarget) {
  TempDir tmp;
  const float v[3] = {1, 2, 3};
  SafetensorsWriter w;
  w.add_f32("v", {3}, v);
  w.write_atomic(tmp.file("m.safetensors"));
  w.write_atomic(tmp.file("m.safetensors"));  // overwrite in place
  write_file_atomic(tmp.file("config.yaml"), "a: 1\n");
  write_file_atomic(tmp.file("config.yaml"), "a: 2\n");
  EXPECT_EQ(dir_entries(tmp.path()), (std::vector<std::string>{"config.yaml", "m.safetensors"}));
  const auto text = read_bytes(tmp.file("config.yaml"));
  EXPECT_EQ(std::string(text.begin(), text.end()), "a: 2\n");
}

TEST(AtomicFile, FailedRenameRemovesTmpAndKeepsTarget) {
  TempDir tmp;
  // A non-empty directory at the target: rename(2) fails after all bytes are written.
  fs::create_directory(tmp.file("out.safetensors"));
  write_bytes(tmp.file("out.safetensors/keep"), {'x'});
  const float v = 1;
  SafetensorsWriter w;
  w.add_f32("v", {1}, &v);
  EXPECT_HAS(error_of([&] { w.write_atomic(tmp.file("out.safetensors")); }), "cannot rename");
  EXPECT_EQ(dir_entries(tmp.path()), std::vector<std::string>{"out.safetensors"});
  EXPECT_TRUE(fs::exists(tmp.file("out.safetensors/keep")));
}

TEST(AtomicFile, UncommittedIsRemoved) {
  TempDir tmp;
  {
    AtomicFile f(tmp.file("x.bin"));
    f.write("abc", 3);
    EXPECT_TRUE(fs::exists(f.tmp_path()));
  }  // destroyed without commit(): an exception on the way out
  EXPECT_TRUE(dir_entries(tmp.path()).empty());
}

TEST(AtomicFile, MissingDirectoryIsAnError) {
  TempDir tmp;
  EXPECT_HAS(error_of([&] { write_file_atomic(tmp.file("no/such/dir/f"), "x"); }),
             "cannot create " + tmp.file("no/such/dir/f") + ".tmp.");
}

// --- CRC32C

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c_update(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(detail::crc32c_update_portable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_update(0, "", 0), 0u);
  const std::vector<unsigned char> zeros(32, 0);  // RFC 3720 B.4
  EXPECT_EQ(crc32c_update(0, zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(format_crc32c(0xE3069283u), "crc32c:e3069283");
}

TEST(Crc32c, FastPathMatchesPortableAndStreams) {
  const auto r = test::random_ints(100003, 5, 0, 256);
  std::vector<unsigned char> buf(r.begin(), r.end());
  const uint32_t whole = detail::crc32c_update_portable(0, buf.data(), buf.size());
  // Odd offsets and lengths exercise the unaligned head and tail.
  for (size_t off : {0, 1, 3, 7}) {
    for (size_t len : {0, 1, 5, 8, 9, 63, 4096, 99991}) {
      EXPECT_EQ(crc32c_update(0, buf.data() + off, len),
                detail::crc32c_update_portable(0, buf.data() + off, len))
          << "off " << off << " len " << len;
    }
  }
  uint32_t c = 0;
  for (size_t pos = 0; pos < buf.size(); pos += 777)
    c = crc32c_update(c, buf.data() + pos, std::min<size_t>(777, buf.size() - pos));
  EXPECT_EQ(c, whole);

  TempDir tmp;
  write_bytes(tmp.file("f"), std::vector<char>(buf.begin(), buf.end()));
  uint64_t bytes = 0;
  EXPECT_EQ(crc32c_file(tmp.file("f"), &bytes), whole);
  EXPECT_EQ(bytes, buf.size());
  EXPECT_HAS(error_of([&] { crc32c_file(tmp.file("missing")); }), tmp.file("missing"));
}

}  // namespace
}  // namespace gt
