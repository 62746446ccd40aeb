// Helpers shared by the MPI tests: a private world communicator per test, the
// closed-form fill every test uses (rank g fills x[i] = g + i*0.5, exact in
// fp32 for the sizes here, so results are compared exactly), and the layouts
// that fit the running world size.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace gt::test
