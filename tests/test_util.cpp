#include "test_util.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sys/wait.h>

#include "kernels/core/error.hpp"

namespace gt::test {

std::vector<float> random_vector(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = lo + (hi - lo) * static_cast<float>((rng() >> 11) * 0x1.0p-53);
  return v;
}

std::vector<int32_t> random_ints(size_t n, uint64_t seed, int32_t lo, int32_t hi_exclusive) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  const uint64_t span = static_cast<uint64_t>(hi_exclusive - lo);
  for (auto& x : v) x = lo + static_cast<int32_t>(rng() % span);
  return v;
}

::testing::AssertionResult all_close(const float* got, const float* expected, size_t n,
                                     float atol, float rtol) {
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], e = expected[i];
    const double tol = atol + rtol * std::fabs(e);
    const double err = std::fabs(g - e);
    const bool ok = std::isfinite(g) == std::isfinite(e) && (err <= tol || g == e);
    if (!ok) {
      ++bad;
      const double excess = std::isfinite(err) ? err / tol : INFINITY;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << n << " elements differ (atol " << atol << ", rtol " << rtol
         << "); worst at index " << worst << ": got " << got[worst] << ", expected "
         << expected[worst];
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "gt_test_XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  std::array<int32_t, 256> header{};
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), sizeof(header));
  f.write(reinterpret_cast<const char*>(tokens.data()),
          static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  if (!f) throw std::runtime_error("cannot write shard " + path);
}

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const gt::Error& e) {
    return e.what();
  }
  return "<no error>";
}

int run_command(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace gt::test
