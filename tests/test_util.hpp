// Shared test helpers: seeded random fills, one expect_close that reports the
// worst element (index, got, expected), and temporary directories.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/core/bf16.hpp"

namespace gt::test {

// Uniform in [lo, hi), deterministic for a given seed.
std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f);
std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi_exclusive);

// bf16 bits of each value by the host rule of kernels/core/bf16.hpp (what
// CpuOps::cast computes), the fp32 values of bf16 bits, and values exactly
// representable in bf16 (so a CPU twin and a bf16 kernel see the same inputs).
inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_from_float(v[i]);
  return out;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}
inline std::vector<float> round_to_bf16(const std::vector<float>& v) {
  return from_bf16(to_bf16(v));
}

// Passes when |got-exp| <= atol + rtol*|exp| everywhere; otherwise fails once,
// naming the worst index with its got/expected values and how many failed.
::testing::AssertionResult all_close(const float* got, const float* expected, size_t n,
                                     float atol, float rtol);
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& expected, float atol,
                                            float rtol) {
  if (got.size() != expected.size())
    return ::testing::AssertionFailure()
           << "size mismatch: got " << got.size() << ", expected " << expected.size();
  return all_close(got.data(), expected.data(), got.size(), atol, rtol);
}

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes an llm.c token shard (header of 256 int32: magic 20240520, version 1, count).
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// The message of the gt::Error that f() throws, or "<no error>".
std::string error_message(const std::function<void()>& f);

// Runs a shell command, returns its exit status; stdout+stderr go to *output.
int run_command(const std::string& cmd, std::string* output);

}  // namespace gt::test
