// DataLoader: maps a global sample index to a window of tokens, which makes
// the batch order a pure function of (config, step) — the contract every
// layout and every resume relies on.
//
// Windows: shard i of n_i tokens offers floor((n_i - 1) / seq_len) windows,
// window k starting at token k*seq_len (inputs: seq_len tokens from there,
// targets: the same shifted by one). Windows are numbered across shards in
// order; sample g uses window g mod W (W = total windows), so the stream
// wraps to the next shard, then to the first.
// With shuffle on, epoch e = g / W reads the windows in a permutation drawn
// from (seed, e), so resuming at any sample index sees the same batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/token_shard.hpp"

namespace gt {

class DataLoader {
 public:
  // `key` names the config key for messages ("data.train").
  DataLoader(const std::vector<std::string>& patterns, const char* key, int vocab_size,
             int seq_len, bool shuffle, uint64_t seed);

  int64_t num_windows() const { return total_windows_; }
  int64_t num_tokens() const;
  size_t num_shards() const { return shards_.size(); }

  // Rows [first_sample, first_sample + rows) of the global sample stream
  // into inputs/targets, each (rows, seq_len) int32.
  void fill(int64_t first_sample, int rows, int32_t* inputs, int32_t* targets);
  // Tokens [start, start + length) of a window (its inputs; the targets are
  // the next tokens, as always).
  struct Span {
    int start = 0, length = 0;
  };
  // The same rows, only the given spans of each window, concatenated in
  // order: each (rows, sum of the lengths). What a context-parallel rank
  // holds of each sequence (its chunks, parallel.cp).
  void fill(int64_t first_sample, int rows, int32_t* inputs, int32_t* targets,
            const std::vector<Span>& spans);

 private:
  int64_t window_for_sample(int64_t g);
  void ensure_permutation(int64_t epoch);

  int seq_len_;
  bool shuffle_;
  uint64_t seed_;
  std::vector<TokenShard> shards_;
  std::vector<int64_t> first_window_;  // prefix sums of windows per shard
  int64_t total_windows_ = 0;
  int64_t perm_epoch_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace gt
