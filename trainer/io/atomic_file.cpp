// Atomic writes (tmp + fsync + rename + fsync dir) and CRC32C; see the header.
#include "trainer/io/atomic_file.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "kernels/core/error.hpp"

namespace gt {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Slicing-by-8 tables for the reflected Castagnoli polynomial 0x82F63B78.
struct Crc32cTables {
  uint32_t t[8][256];
  Crc32cTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};

const Crc32cTables& tables() {
  static const Crc32cTables tabs;
  return tabs;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const uint8_t* p,
                                                         size_t n) {
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  for (; n > 0; --n) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return ~static_cast<uint32_t>(c);
}

bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

void write_all(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux caps one write at ~2 GiB; stay well below.
    const size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write ", what, ": ", errno_text());
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

namespace detail {
uint32_t crc32c_update_portable(uint32_t crc, const void* data, size_t n) {
  const auto& t = tables().t;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    // Little-endian load of the first word, folded with the running CRC.
    const uint32_t lo = (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                         uint32_t(p[3]) << 24) ^ c;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; n > 0; --n) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}
}  // namespace detail

uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (have_sse42()) return crc32c_sse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return detail::crc32c_update_portable(crc, data, n);
}

uint32_t crc32c_file(const std::string& path, uint64_t* bytes_out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open ", path, " to checksum it: ", errno_text());
  std::vector<char> buf(size_t{4} << 20);
  uint32_t crc = 0;
  uint64_t total = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      const std::string why = errno_text();
      ::close(fd);
      fail("cannot read ", path, " to checksum it: ", why);
    }
    if (r == 0) break;
    crc = crc32c_update(crc, buf.data(), static_cast<size_t>(r));
    total += static_cast<uint64_t>(r);
  }
  ::close(fd);
  if (bytes_out) *bytes_out = total;
  return crc;
}

std::string format_crc32c(uint32_t crc) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "crc32c:%08x", crc);
  return buf;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void make_parent_dir(const std::string& path, const std::string& what) {
  const std::string folder = parent_dir(path);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) fail(what, ": cannot create the folder ", folder, " for ", path, ": ", ec.message());
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory ", dir, " to fsync it: ", errno_text());
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    fail("cannot fsync directory ", dir, ": ", why);
  }
  ::close(fd);
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open ", path, " to fsync it: ", errno_text());
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    fail("cannot fsync ", path, ": ", why);
  }
  ::close(fd);
}

AtomicFile::AtomicFile(const std::string& path)
    : path_(path), tmp_path_(path + ".tmp." + std::to_string(::getpid())) {
  // O_TRUNC, not O_EXCL: a leftover with our pid belongs to a dead process
  // whose pid was recycled (or to an earlier failed attempt of ours).
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create ", tmp_path_, " (to write ", path_, "): ", errno_text());
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_path_.c_str());  // never throws: best effort on the error path
}

void AtomicFile::write(const void* data, size_t n) {
  GT_CHECK(!committed_ && fd_ >= 0, "write after commit of ", path_);
  write_all(fd_, data, n, tmp_path_);
  crc_ = crc32c_update(crc_, data, n);
  bytes_ += n;
}

void AtomicFile::commit() {
  GT_CHECK(!committed_ && fd_ >= 0, "double commit of ", path_);
  if (::fsync(fd_) != 0) fail("cannot fsync ", tmp_path_, ": ", errno_text());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close ", tmp_path_, ": ", errno_text());
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    fail("cannot rename ", tmp_path_, " to ", path_, ": ", errno_text());
  committed_ = true;
  fsync_dir(parent_dir(path_));
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile f(path);
  f.write(contents.data(), contents.size());
  f.commit();
}

}  // namespace gt
