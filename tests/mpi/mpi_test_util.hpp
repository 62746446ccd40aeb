// Helpers shared by the MPI tests: a private world communicator per test, the
// closed-form fill every test uses (rank g fills x[i] = g + i*0.5, exact in
// fp32 for the sizes here, so results are compared exactly), and the layouts
// that fit the running world size.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/core/bf16.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/parallel_dims.hpp"
#include "test_util.hpp"

namespace gt::test {

// Deadline on every test communicator: a test that goes wrong on one rank
// (a mismatched collective) turns into an error after this long, not a hang.
constexpr double kTestDeadlineS = 60.0;

inline std::unique_ptr<MpiCommunicator> test_world(const char* name = "test-world") {
  return MpiCommunicator::dup(MPI_COMM_WORLD, name, kTestDeadlineS);
}

inline float fill_value(int rank, int64_t i) {
  return static_cast<float>(rank) + 0.5f * static_cast<float>(i);
}

inline std::vector<float> filled(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = fill_value(rank, i);
  return v;
}

// bf16 sums (all_reduce_sum_bf16, reduce_scatter_sum_bf16). Rank g's element
// i is (g + i % 16) / 4: every partial sum over up to 8 ranks is a multiple
// of 1/4 below 64, exact in bf16's 8 significant bits, so the result is
// exact whatever order a backend adds in.
inline uint16_t bf16_fill_value(int rank, int64_t i) {
  return bf16_from_float(0.25f * static_cast<float>(rank + i % 16));
}
inline std::vector<uint16_t> bf16_filled(int rank, int64_t n) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = bf16_fill_value(rank, i);
  return v;
}
// The sum over p ranks of element i, as a float.
inline float bf16_fill_sum(int p, int64_t i) {
  return 0.25f * static_cast<float>(p * (p - 1) / 2 + p * (i % 16));
}
// Values whose sums do round: rank g's element i, a bf16 in (-2, 2) from a
// hash of (g, i), with many fraction bits set.
inline uint16_t bf16_rough_value(int rank, int64_t i) {
  uint64_t h = (static_cast<uint64_t>(rank) << 32) ^ static_cast<uint64_t>(i);
  h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdULL;
  h = (h ^ (h >> 33)) * 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  const float u = static_cast<float>(h >> 40) / static_cast<float>(1u << 24);  // [0, 1)
  return bf16_from_float(4.0f * u - 2.0f);
}
// How far a bf16 sum of p values may be from their exact sum: one rounding
// (half a bf16 ulp, 2^-8 relative) of each of the p - 1 partial sums, each
// at most sum |x|.
inline float bf16_sum_bound(int p, float sum_abs) {
  return static_cast<float>(p - 1) * std::ldexp(1.0f, -8) * sum_abs;
}

// Exact comparison (atol = rtol = 0) with the worst index in the message.
inline ::testing::AssertionResult exactly(const std::vector<float>& got,
                                          const std::vector<float>& expected) {
  return all_close(got, expected, 0.f, 0.f);
}

// Every (dp, fsdp, tp) with dp * fsdp * tp == world.
inline std::vector<ParallelDims> layouts_for(int world) {
  std::vector<ParallelDims> out;
  for (int dp = 1; dp <= world; ++dp)
    for (int fsdp = 1; dp * fsdp <= world; ++fsdp)
      if (world % (dp * fsdp) == 0) out.push_back(ParallelDims{dp, fsdp, world / (dp * fsdp)});
  return out;
}

// The odd (and zero, and one) element counts every collective is run at.
inline const std::vector<int64_t>& test_counts() {
  static const std::vector<int64_t> counts = {0, 1, 7, 33, 1001};
  return counts;
}

// What a bf16 all-reduce of bf16_rough_value(rank, i), i < got.size(),
// over p ranks may give: within bf16_sum_bound of the exact sum, at p = 2
// (one addition) exactly the rounded fp32 sum, and the same bits on every
// rank (checked with `agree`, a host communicator over the same ranks).
inline void expect_rough_bf16_sums(const std::vector<float>& got, int p, Communicator& agree) {
  double checksum = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const auto k = static_cast<int64_t>(i);
    double exact = 0, sum_abs = 0;
    for (int g = 0; g < p; ++g) {
      const float v = bf16_to_float(bf16_rough_value(g, k));
      exact += v;
      sum_abs += std::fabs(v);
    }
    ASSERT_LE(std::fabs(got[i] - exact), bf16_sum_bound(p, static_cast<float>(sum_abs)))
        << "i=" << i;
    if (p == 2) {
      ASSERT_EQ(got[i], bf16_round(bf16_to_float(bf16_rough_value(0, k)) +
                                   bf16_to_float(bf16_rough_value(1, k))))
          << "i=" << i;
    }
    checksum += got[i] * static_cast<double>(i + 1);
  }
  EXPECT_EQ(agree.all_reduce_f64(checksum, ReduceOp::max),
            agree.all_reduce_f64(checksum, ReduceOp::min))
      << "the ranks received different bits";
}

// The bf16 sums of `c` on buffers the host can read (an MPI communicator, or
// a staged one over host memory): exact on bf16_filled values at every test
// count; on bf16_rough_value ones, within bf16_sum_bound of the exact sum,
// the same bits on every rank, and at p = 2 (one addition) exactly the
// rounded fp32 sum. Bytes are counted at 2 per element.
inline void check_bf16_sums_on_host(Communicator& c) {
  const int p = c.size(), r = c.rank();
  const double before = c.bytes_sent();
  double want_bytes = 0;
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = bf16_filled(r, n);
    c.all_reduce_sum_bf16(x.data(), n).wait();
    want_bytes += ring_volume::all_reduce(p, 2.0 * n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bf16_to_float(x[static_cast<size_t>(i)]), bf16_fill_sum(p, i)) << "i=" << i;

    auto in = bf16_filled(r, n * p);
    std::vector<uint16_t> out(static_cast<size_t>(n), 0xFFFF);
    c.reduce_scatter_sum_bf16(in.data(), out.data(), n).wait();
    want_bytes += ring_volume::reduce_scatter(p, 2.0 * n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bf16_to_float(out[static_cast<size_t>(i)]), bf16_fill_sum(p, r * n + i))
          << "i=" << i;
  }
  EXPECT_DOUBLE_EQ(c.bytes_sent() - before, want_bytes);

  const int64_t n = 1001;
  std::vector<uint16_t> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = bf16_rough_value(r, i);
  c.all_reduce_sum_bf16(x.data(), n).wait();
  std::vector<float> got(x.size());
  for (size_t i = 0; i < x.size(); ++i) got[i] = bf16_to_float(x[i]);
  expect_rough_bf16_sums(got, p, c);
}

}  // namespace gt::test
