#include "trainer/data/data_loader.hpp"

#include <algorithm>
#include <random>

#include "kernels/core/error.hpp"

namespace gt {

namespace {
// splitmix64: decorrelates (seed, epoch) into a generator seed.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

DataLoader::DataLoader(const std::vector<std::string>& patterns, const char* key,
                       int vocab_size, int seq_len, bool shuffle, uint64_t seed)
    : seq_len_(seq_len), shuffle_(shuffle), seed_(seed) {
  if (patterns.empty()) fail(key, ": no data files given");
  for (const auto& path : expand_shard_patterns(patterns, key)) {
    shards_.emplace_back(path, vocab_size);
    // A shard too short for one window would be skipped without a word.
    if (shards_.back().size() < static_cast<int64_t>(seq_len) + 1)
      fail("data shard too short (", path, ", ", key, "): expected at least seq_len+1=",
           seq_len + 1, " tokens, got ", shards_.back().size(),
           "; it holds no window: remove it or lower train.seq_len");
  }
  for (const auto& s : shards_) {
    first_window_.push_back(total_windows_);
    total_windows_ += s.size() > 0 ? (s.size() - 1) / seq_len_ : 0;
  }
  GT_CHECK(total_windows_ > 0, "every shard holds a window, so the stream does");
}

int64_t DataLoader::num_tokens() const {
  int64_t n = 0;
  for (const auto& s : shards_) n += s.size();
  return n;
}

void DataLoader::ensure_permutation(int64_t epoch) {
  if (perm_epoch_ == epoch) return;
  perm_.resize(static_cast<size_t>(total_windows_));
  for (int64_t i = 0; i < total_windows_; ++i) perm_[i] = i;
  // Fisher-Yates with mt19937_64 (fully specified by the standard) and our
  // own bounded draw, so the order is identical on every platform.
  std::mt19937_64 rng(mix(seed_ ^ mix(static_cast<uint64_t>(epoch))));
  for (int64_t i = total_windows_ - 1; i > 0; --i) {
    const uint64_t j = rng() % static_cast<uint64_t>(i + 1);
    std::swap(perm_[i], perm_[j]);
  }
  perm_epoch_ = epoch;
}

int64_t DataLoader::window_for_sample(int64_t g) {
  GT_CHECK(g >= 0);
  if (!shuffle_) return g % total_windows_;
  ensure_permutation(g / total_windows_);
  return perm_[g % total_windows_];
}

void DataLoader::fill(int64_t first_sample, int rows, int32_t* inputs, int32_t* targets) {
  fill(first_sample, rows, inputs, targets, {Span{0, seq_len_}});
}

void DataLoader::fill(int64_t first_sample, int rows, int32_t* inputs, int32_t* targets,
                      const std::vector<Span>& spans) {
  int64_t width = 0;
  for (const Span& sp : spans) {
    GT_CHECK(sp.start >= 0 && sp.length >= 0 && sp.start + sp.length <= seq_len_,
             "DataLoader::fill: span [", sp.start, ", ", sp.start + sp.length,
             ") outside a window of ", seq_len_, " tokens");
    width += sp.length;
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t w = window_for_sample(first_sample + r);
    const size_t shard = static_cast<size_t>(
        std::upper_bound(first_window_.begin(), first_window_.end(), w) - first_window_.begin() -
        1);
    const int64_t start = (w - first_window_[shard]) * seq_len_;
    const TokenShard& s = shards_[shard];
    int64_t at = static_cast<int64_t>(r) * width;
    for (const Span& sp : spans)
      for (int t = sp.start; t < sp.start + sp.length; ++t, ++at) {
        inputs[at] = s.token(start + t);
        targets[at] = s.token(start + t + 1);
      }
  }
}

}  // namespace gt
