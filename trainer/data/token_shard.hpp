// One llm.c token shard, memory-mapped read-only: a header of 256 int32
// followed by the tokens, in either of llm.c's two formats:
//   GPT-2     magic 20240520, version 1, uint16 tokens;
//   Llama 3   magic 20240801, version 7, uint32 tokens (vocabularies past
//             65536, such as Llama 3's 128256).
// Header ints: [0] magic, [1] version, [2] token count; [3] is ours: the
// vocabulary size of the tokenizer that wrote the shard (0 = not recorded;
// llm.c leaves it 0 and ignores it). Opening validates the header against
// the file size, the recorded vocabulary and every token against
// model.vocab_size, so a bad file is rejected by name before training starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gt {

class TokenShard {
 public:
  static constexpr int32_t kMagic = 20240520;  // uint16 tokens
  static constexpr int32_t kVersion = 1;
  static constexpr int32_t kMagicU32 = 20240801;  // uint32 tokens
  static constexpr int32_t kVersionU32 = 7;
  static constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

  TokenShard(const std::string& path, int vocab_size);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&&) = delete;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return num_tokens_; }
  // Token i, 0 <= i < size().
  int32_t token(int64_t i) const {
    return wide_ ? static_cast<int32_t>(tokens32_[i]) : static_cast<int32_t>(tokens16_[i]);
  }
  bool wide() const { return wide_; }  // uint32 tokens

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens16_ = nullptr;  // one of the two, as the header says
  const uint32_t* tokens32_ = nullptr;
  bool wide_ = false;
  int64_t num_tokens_ = 0;
};

// Expands paths and globs in order (each glob's matches sorted), dropping
// duplicates. A pattern that matches nothing is an error naming it and `key`.
std::vector<std::string> expand_shard_patterns(const std::vector<std::string>& patterns,
                                               const char* key);

}  // namespace gt
