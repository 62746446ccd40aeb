// The shared progress line (trainer/io/progress.hpp) against the cases in
// tests/progress_format.json, which tests/scripts/test_progress.py checks
// scripts/progress.py against too: the trainer's and the tools' lines agree.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "trainer/io/progress.hpp"

namespace gt {
namespace {

TEST(Progress, LinesMatchTheSharedCases) {
  std::ifstream in(std::string(GT_SOURCE_DIR) + "/tests/progress_format.json");
  ASSERT_TRUE(in) << "tests/progress_format.json";
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_GE(j["cases"].size(), 5u);
  for (const auto& c : j["cases"]) {
    EXPECT_EQ(progress_line(c["job"], c["done"], c["total"], c["unit"], c["elapsed"],
                            c["fields"].get<std::vector<std::string>>()),
              c["want"].get<std::string>());
  }
}

TEST(Progress, ClockRoundsToTheSecondAndNeverGoesNegative) {
  EXPECT_EQ(clock_text(0), "0:00:00");
  EXPECT_EQ(clock_text(59.6), "0:01:00");
  EXPECT_EQ(clock_text(3600 * 27 + 61), "27:01:01");
  EXPECT_EQ(clock_text(-4), "0:00:00");
}

}  // namespace
}  // namespace gt
