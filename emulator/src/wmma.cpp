// The runtime half of nvcuda::wmma (gt_emu/wmma.hpp): fragment layouts, the
// pointer rules, and the warp-wide product of mma_sync.
#include <cstdio>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <vector>

#include "block_scheduler.hpp"
#include "config.hpp"

namespace gt::emu {

namespace detail {

namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

const uint16_t* wmma_permutation(FragUse use, int m, int n, int k, bool col_major) {
  static std::mutex mu;
  using Key = std::tuple<uint64_t, int, int, int, int, bool>;
  static auto* cache = new std::map<Key, std::vector<uint16_t>>;
  std::lock_guard<std::mutex> lock(mu);
  const Key key{config().wmma_layout_seed, static_cast<int>(use), m, n, k, col_major};
  auto it = cache->find(key);
  if (it != cache->end()) return it->second.data();
  const int rows = use == FragUse::a ? m : use == FragUse::b ? k : m;
  const int cols = use == FragUse::a ? k : n;
  std::vector<uint16_t> perm(static_cast<size_t>(rows * cols));
  std::iota(perm.begin(), perm.end(), uint16_t{0});
  // Seed 0: lane l holds the row-major elements [l*ne, (l+1)*ne). Any other
  // seed: a shuffle that differs per fragment type.
  uint64_t s = config().wmma_layout_seed;
  if (s != 0) {
    s ^= (static_cast<uint64_t>(use) << 40) ^ (static_cast<uint64_t>(m) << 32) ^
         (static_cast<uint64_t>(n) << 24) ^ (static_cast<uint64_t>(k) << 16) ^
         (col_major ? 1u : 0u);
    for (size_t i = perm.size() - 1; i > 0; --i)
      std::swap(perm[i], perm[static_cast<size_t>(splitmix(s) % (i + 1))]);
  }
  return cache->emplace(key, std::move(perm)).first->second.data();
}

int lane_id() {
  const unsigned linear = g_thread_idx.x + g_block_dim.x * (g_thread_idx.y + g_block_dim.y * g_thread_idx.z);
  return static_cast<int>(linear % 32);
}

void check_wmma_pointer(const void* p, unsigned ldm, int elem_bytes, const char* api, Site site) {
  char buf[320];
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) {
    std::snprintf(buf, sizeof buf,
                  "%s: the pointer %p is not 256-bit (32-byte) aligned, which CUDA requires", api, p);
    device_fault(buf, site);
  }
  if ((static_cast<size_t>(ldm) * elem_bytes) % 16 != 0) {
    std::snprintf(buf, sizeof buf,
                  "%s: ldm = %u elements (%zu bytes) is not a multiple of 16 bytes, which CUDA "
                  "requires (a GPU silently computes garbage here)",
                  api, ldm, static_cast<size_t>(ldm) * elem_bytes);
    device_fault(buf, site);
  }
}

void warp_mma(const MmaLane& lane, Site site) { block_runner().warp_mma(lane, site); }

}  // namespace detail

// D = A B + C for the whole warp: gather the tiles from the lanes' fragments
// (by each fragment type's permutation), multiply in fp32 in k order, scatter D.
void BlockRunner::compute_mma(int w, unsigned mask) {
  using detail::FragUse;
  const auto& first =
      *static_cast<const detail::MmaLane*>(threads_[static_cast<size_t>(w * 32)].payload);
  const int m = first.m, n = first.n, k = first.k;
  const uint16_t* pa = detail::wmma_permutation(FragUse::a, m, n, k, first.a_col_major);
  const uint16_t* pb = detail::wmma_permutation(FragUse::b, m, n, k, first.b_col_major);
  const uint16_t* pc = detail::wmma_permutation(FragUse::acc, m, n, k, false);
  const int na = m * k / 32, nb = k * n / 32, nc = m * n / 32;
  std::vector<float> A(static_cast<size_t>(m * k)), B(static_cast<size_t>(k * n)),
      C(static_cast<size_t>(m * n));
  for (int l = 0; l < 32; ++l) {
    const auto& x =
        *static_cast<const detail::MmaLane*>(threads_[static_cast<size_t>(w * 32 + l)].payload);
    if (x.m != m || x.n != n || x.k != k || x.a_col_major != first.a_col_major ||
        x.b_col_major != first.b_col_major)
      fault(cudaErrorLaunchFailure, "wmma::mma_sync: the lanes of warp " + std::to_string(w) +
                                        " pass fragments of different shapes or layouts");
    for (int i = 0; i < na; ++i) A[pa[l * na + i]] = __bfloat162float(x.a[i]);
    for (int i = 0; i < nb; ++i) B[pb[l * nb + i]] = __bfloat162float(x.b[i]);
    for (int i = 0; i < nc; ++i) C[pc[l * nc + i]] = x.c[i];
  }
  std::vector<float> D(C);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      float acc = C[static_cast<size_t>(r * n + c)];
      for (int p = 0; p < k; ++p)
        acc += A[static_cast<size_t>(r * k + p)] * B[static_cast<size_t>(p * n + c)];
      D[static_cast<size_t>(r * n + c)] = acc;
    }
  for (int l = 0; l < 32; ++l) {
    const auto& x =
        *static_cast<const detail::MmaLane*>(threads_[static_cast<size_t>(w * 32 + l)].payload);
    for (int i = 0; i < nc; ++i) x.d[i] = D[pc[l * nc + i]];
  }
  (void)mask;
}

}  // namespace gt::emu
