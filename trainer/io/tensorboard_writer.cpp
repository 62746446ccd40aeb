#include "trainer/io/tensorboard_writer.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "kernels/core/error.hpp"
#include "trainer/io/atomic_file.hpp"

namespace gt {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Protocol buffer wire format: a key is (field << 3) | wire type; varints are
// 7 bits a byte, least significant first; 64-bit and 32-bit fields are
// little-endian; length-delimited fields are a varint length then the bytes.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void key(std::string& out, int field, int wire) { varint(out, (uint64_t(field) << 3) | wire); }
template <class T>
void little(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the hosts we build for are little-endian (static_assert below)
  out.append(b, sizeof(T));
}
void fixed64_double(std::string& out, int field, double v) {
  key(out, field, 1);
  little(out, v);
}
void fixed32_float(std::string& out, int field, float v) {
  key(out, field, 5);
  little(out, v);
}
void bytes_field(std::string& out, int field, const std::string& b) {
  key(out, field, 2);
  varint(out, b.size());
  out += b;
}
void varint_field(std::string& out, int field, uint64_t v) {
  key(out, field, 0);
  varint(out, v);
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "TFRecord framing assumes little-endian");

void flatten(const std::string& prefix, const nlohmann::json& j,
             std::vector<std::pair<std::string, double>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string tag = prefix.empty() ? it.key() : prefix + "/" + it.key();
    if (it->is_object())
      flatten(tag, *it, out);
    else if (it->is_number() && tag != "step")
      out.emplace_back(tag, it->get<double>());
  }
}

}  // namespace

uint32_t TensorBoardWriter::masked_crc(const void* data, size_t n) {
  const uint32_t c = crc32c_update(0, data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string TensorBoardWriter::record(const std::string& data) {
  std::string out;
  const uint64_t len = data.size();
  little(out, len);
  little(out, masked_crc(&len, sizeof(len)));
  out += data;
  little(out, masked_crc(data.data(), data.size()));
  return out;
}

std::string TensorBoardWriter::version_event(double wall_time) {
  std::string e;
  fixed64_double(e, 1, wall_time);
  bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string TensorBoardWriter::session_start_event(double wall_time, int64_t step) {
  std::string log;
  varint_field(log, 1, 1);  // SessionLog.status = START
  std::string e;
  fixed64_double(e, 1, wall_time);
  varint_field(e, 2, static_cast<uint64_t>(step));
  bytes_field(e, 7, log);
  return e;
}

std::string TensorBoardWriter::scalars_event(
    double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    bytes_field(v, 1, tag);
    fixed32_float(v, 2, static_cast<float>(value));
    bytes_field(summary, 1, v);
  }
  std::string e;
  fixed64_double(e, 1, wall_time);
  varint_field(e, 2, static_cast<uint64_t>(step));
  bytes_field(e, 5, summary);
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t resumed_at) {
  char host[256] = "host";
  gethostname(host, sizeof(host) - 1);
  const double t = now_seconds();
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host +
          "." + std::to_string(getpid());
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) fail("log.tensorboard: cannot create ", path_);
  append(version_event(t));
  if (resumed_at > 0) append(session_start_event(t, resumed_at));
}

void TensorBoardWriter::append(const std::string& event) {
  out_ << record(event);
  out_.flush();  // a live run: the reader sees each step as it is written
  if (!out_) fail("log.tensorboard: cannot write ", path_);
}

void TensorBoardWriter::write_scalars(int64_t step,
                                      const std::vector<std::pair<std::string, double>>& scalars) {
  if (!scalars.empty()) append(scalars_event(now_seconds(), step, scalars));
}

void TensorBoardWriter::write_record(int64_t step, const nlohmann::json& record) {
  std::vector<std::pair<std::string, double>> scalars;
  flatten("", record, scalars);
  write_scalars(step, scalars);
}

}  // namespace gt
