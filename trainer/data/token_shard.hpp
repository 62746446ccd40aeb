// One llm.c token shard, memory-mapped read-only: a header of 256 int32
// (magic 20240520, version 1, token count) followed by uint16 tokens. Opening
// validates the header against the file size and every token against the
// vocabulary, so a bad file is rejected by name before training starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gt {

class TokenShard {
 public:
  static constexpr int32_t kMagic = 20240520;
  static constexpr int32_t kVersion = 1;
  static constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

  TokenShard(const std::string& path, int vocab_size);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&&) = delete;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return num_tokens_; }
  const uint16_t* tokens() const { return tokens_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t num_tokens_ = 0;
};

// Expands paths and globs in order (each glob's matches sorted), dropping
// duplicates. A pattern that matches nothing is an error naming it and `key`.
std::vector<std::string> expand_shard_patterns(const std::vector<std::string>& patterns,
                                               const char* key);

}  // namespace gt
