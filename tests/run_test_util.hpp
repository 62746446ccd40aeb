// Helpers of the tests that run whole trainings (run_training) and read
// what they write: token streams to train on, metrics.jsonl's records, a
// file's bytes. Header-only.
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gt::test {

// A learnable byte-level corpus: one sentence `repeats` times.
inline std::vector<uint16_t> corpus_tokens(int repeats) {
  std::string text;
  for (int i = 0; i < repeats; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  return std::vector<uint16_t>(text.begin(), text.end());
}

// n tokens of a fixed pattern over a 256-word vocabulary (no two runs of it
// alike for a while; nothing to learn quickly).
inline std::vector<uint16_t> pattern_tokens(int n) {
  std::vector<uint16_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(static_cast<uint16_t>((i * 31 + i / 7) % 256));
  return tokens;
}

// metrics.jsonl's records, in file order.
inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Each record's "loss".
inline std::vector<double> losses_of(const std::string& metrics) {
  std::vector<double> out;
  for (const auto& r : read_metrics(metrics)) out.push_back(r.at("loss"));
  return out;
}

inline std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace gt::test
