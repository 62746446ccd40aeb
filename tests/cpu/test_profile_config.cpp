// The profile.* config keys: defaults, reading, the round trip, and the
// rejected values with messages naming the key.
#include <string>

#include <gtest/gtest.h>

#include "test_util.hpp"
#include "trainer/config/config.hpp"

namespace gt {
namespace {

const std::string kMinimal = "data:\n  train: shard.bin\n";

TEST(ProfileConfig, DefaultsAreOff) {
  const Config c = parse_config(kMinimal, "x.yaml", {});
  EXPECT_EQ(c.profile.every, 0);
  EXPECT_EQ(c.profile.steps, 1);
  EXPECT_TRUE(c.profile.report);
  EXPECT_FALSE(c.profile.trace);
  EXPECT_EQ(c.profile.hardware, "");
  EXPECT_EQ(c.profile.peaks, "");
}

TEST(ProfileConfig, ReadsEveryKeyAndRoundTrips) {
  const Config c = parse_config(kMinimal +
                                    "profile:\n  every: 10\n  steps: 3\n  report: false\n"
                                    "  trace: true\n  hardware: configs/hardware/h100.yaml\n"
                                    "  peaks: runs/peaks.json\n",
                                "x.yaml", {});
  EXPECT_EQ(c.profile.every, 10);
  EXPECT_EQ(c.profile.steps, 3);
  EXPECT_FALSE(c.profile.report);
  EXPECT_TRUE(c.profile.trace);
  EXPECT_EQ(c.profile.hardware, "configs/hardware/h100.yaml");
  EXPECT_EQ(c.profile.peaks, "runs/peaks.json");
  const Config back = parse_config(to_yaml(c), "x.yaml", {});
  EXPECT_EQ(back.profile.every, 10);
  EXPECT_EQ(back.profile.steps, 3);
  EXPECT_FALSE(back.profile.report);
  EXPECT_TRUE(back.profile.trace);
  EXPECT_EQ(back.profile.hardware, c.profile.hardware);
  EXPECT_EQ(back.profile.peaks, c.profile.peaks);
}

TEST(ProfileConfig, OverridesWork) {
  const Config c =
      parse_config(kMinimal, "x.yaml", {"profile.every=5", "profile.trace=true"});
  EXPECT_EQ(c.profile.every, 5);
  EXPECT_TRUE(c.profile.trace);
}

TEST(ProfileConfig, RejectedValuesNameTheKey) {
  auto error = [](const std::vector<std::string>& o) {
    return test::error_message([&] { parse_config(kMinimal, "x.yaml", o); });
  };
  std::string m = error({"profile.every=-1"});
  EXPECT_NE(m.find("profile.every ("), std::string::npos) << m;
  EXPECT_NE(m.find("expected an integer >= 0, got -1"), std::string::npos) << m;
  m = error({"profile.steps=0"});
  EXPECT_NE(m.find("profile.steps ("), std::string::npos) << m;
  EXPECT_NE(m.find("expected an integer >= 1, got 0"), std::string::npos) << m;
  m = error({"profile.every=2", "profile.steps=3"});
  EXPECT_NE(m.find("profile.steps ("), std::string::npos) << m;
  EXPECT_NE(m.find("expected at most profile.every=2, got 3"), std::string::npos) << m;
  m = error({"profile.trace=yes"});
  EXPECT_NE(m.find("profile.trace"), std::string::npos) << m;
  m = error({"profile.evry=2"});
  EXPECT_NE(m.find("profile.every"), std::string::npos) << m;  // the suggestion
}

TEST(ProfileConfig, DefaultYamlListsTheProfileSection) {
  const Config c = load_config(std::string(GT_SOURCE_DIR) + "/configs/default.yaml", {});
  EXPECT_EQ(c.profile.every, 0);
  EXPECT_EQ(c.profile.steps, 1);
  EXPECT_TRUE(c.profile.report);
  EXPECT_FALSE(c.profile.trace);
}

}  // namespace
}  // namespace gt
