#include "trainer/data/token_shard.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <glob.h>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/core/error.hpp"

namespace gt {

TokenShard::TokenShard(const std::string& path, int vocab_size) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("data shard (", path, "): expected a readable file, got ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("data shard (", path, "): expected a readable file, got ", std::strerror(err));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < kHeaderBytes) {
    ::close(fd);
    fail("data shard (", path, "): expected an llm.c shard of at least its 1024-byte header, got ",
         bytes, " bytes; write shards with scripts/prepare_data.py");
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) fail("data shard (", path, "): cannot mmap it: ", std::strerror(err));
  map_ = map;
  map_bytes_ = bytes;

  int32_t header[256];
  std::memcpy(header, map_, sizeof(header));
  // The destructor does not run when the constructor throws: unmap by hand.
  // The message is built before unmapping: `why` may refer to mapped tokens.
  auto reject = [&](auto&&... why) {
    std::string msg = detail::concat("data shard (", path, "): ", why...);
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    fail(msg);
  };
  if (header[0] != kMagic && header[0] != kMagicU32)
    reject("expected llm.c magic ", kMagic, " (uint16 tokens) or ", kMagicU32,
           " (uint32 tokens), got bad magic ", header[0],
           "; is this a raw or headerless token file? convert it with scripts/prepare_data.py");
  wide_ = header[0] == kMagicU32;
  const int32_t version = wide_ ? kVersionU32 : kVersion;
  if (header[1] != version)
    reject("expected version ", version, " with magic ", header[0], ", got version ", header[1]);
  if (header[2] < 0) reject("expected a token count >= 0 in the header, got ", header[2]);
  const size_t width = wide_ ? sizeof(uint32_t) : sizeof(uint16_t);
  const size_t expected = kHeaderBytes + static_cast<size_t>(header[2]) * width;
  if (expected != bytes)
    reject("expected ", expected, " bytes (the header says ", header[2], " tokens), got ", bytes,
           " bytes: truncated, or not an llm.c shard");
  if (header[3] > vocab_size)
    reject("written by a tokenizer of ", header[3], " tokens (header int 3), expected at most ",
           "model.vocab_size=", vocab_size,
           "; raise model.vocab_size or tokenize with a smaller vocabulary");
  num_tokens_ = header[2];
  const char* data = static_cast<const char*>(map_) + kHeaderBytes;
  if (wide_)
    tokens32_ = reinterpret_cast<const uint32_t*>(data);
  else
    tokens16_ = reinterpret_cast<const uint16_t*>(data);
  for (int64_t i = 0; i < num_tokens_; ++i) {
    const int64_t t = wide_ ? static_cast<int64_t>(tokens32_[i]) : tokens16_[i];
    if (t >= vocab_size)
      reject("expected tokens < model.vocab_size=", vocab_size, ", got token ", t, " at position ",
             i);
  }
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      map_(other.map_),
      map_bytes_(other.map_bytes_),
      tokens16_(other.tokens16_),
      tokens32_(other.tokens32_),
      wide_(other.wide_),
      num_tokens_(other.num_tokens_) {
  other.map_ = nullptr;
  other.tokens16_ = nullptr;
  other.tokens32_ = nullptr;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

std::vector<std::string> expand_shard_patterns(const std::vector<std::string>& patterns,
                                               const char* key) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& pattern : patterns) {
    glob_t g{};
    int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (rc != 0) {
      globfree(&g);
      fail(key, " (", pattern, "): expected a file or a glob matching one, got no match",
           rc == GLOB_NOMATCH ? "; run scripts/prepare_data.py to create the token shards" : "");
    }
    for (size_t i = 0; i < g.gl_pathc; ++i) {  // glob() sorts its matches
      std::string p = g.gl_pathv[i];
      if (seen.insert(p).second) out.push_back(p);
    }
    globfree(&g);
  }
  return out;
}

}  // namespace gt
