#include "agent/sim/scenario_spec.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

using testing::HasSubstr;

TEST(ScenarioSpecTest, NamesAndDefaults) {
  EXPECT_TRUE(ScenarioSpecFromName("healthy")->faults.empty());
  absl::StatusOr<ScenarioSpec> spec = ScenarioSpecFromName("thermal_throttle");
  ASSERT_TRUE(spec.ok());
  ASSERT_EQ(spec->faults.size(), 1u);
  ASSERT_TRUE(
      ResolveFaultDefaults({}, "n001", {"n000", "n001"}, 8, 8, &*spec).ok());
  const FaultSpec& f = spec->faults[0];
  EXPECT_EQ(f.node, "n001");
  EXPECT_EQ(f.gpu, 3);
  EXPECT_EQ(f.at_seconds, 120);
  EXPECT_FALSE(f.at_step.has_value());
  EXPECT_THAT(ScenarioSpecFromName("nope").status().message(),
              HasSubstr("loss_scale_thrash"));
  for (const std::string& kind : FaultKindNames()) {
    EXPECT_TRUE(ScenarioSpecFromName(kind).ok()) << kind;
    EXPECT_FALSE(FaultKindHelp(kind).empty()) << kind;
  }
}

TEST(ScenarioSpecTest, ParsesAFullSpec) {
  absl::StatusOr<ScenarioSpec> spec = ParseScenarioSpec(R"({
    "name": "drill",
    "faults": [
      {"kind": "packet_loss_hang", "node": "n002", "gpu": 1, "dev": "mlx5_1",
       "at_step": 1500, "magnitude": 0.001, "hang_after_seconds": 30},
      {"kind": "dataloader_stall", "at_seconds": 10, "duration_seconds": 60,
       "period_steps": 5},
      {"kind": "grad_explosion", "nan": true}]})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "drill");
  ASSERT_EQ(spec->faults.size(), 3u);
  EXPECT_EQ(spec->faults[0].node, "n002");
  EXPECT_EQ(spec->faults[0].at_step, 1500);
  EXPECT_EQ(spec->faults[0].hang_after_seconds, 30);
  EXPECT_EQ(spec->faults[1].period_steps, 5);
  EXPECT_EQ(spec->faults[1].duration_seconds, 60);
  EXPECT_EQ(spec->faults[2].nan, true);
}

TEST(ScenarioSpecTest, ReportsEveryErrorWithItsPath) {
  absl::StatusOr<ScenarioSpec> spec = ParseScenarioSpec(R"({
    "nmae": "x",
    "faults": [
      {"kind": "thermal_throttle", "gpu": 99, "magnitude": "big"},
      {"gpu": 1, "at_step": 5, "at_seconds": 3},
      7,
      {"kind": "meteor_strike", "node": "", "nan": 1, "colour": "red"}]})");
  ASSERT_FALSE(spec.ok());
  std::string m(spec.status().message());
  for (const char* want :
       {"$.nmae: unknown field", "$.faults[0].gpu: must be an integer 0..63",
        "$.faults[0].magnitude: must be a number", "$.faults[1].kind: missing",
        "$.faults[1]: give at_step or at_seconds, not both",
        "$.faults[2]: must be an object",
        "$.faults[3].kind: unknown fault kind \"meteor_strike\"",
        "$.faults[3].node: must be a non-empty string",
        "$.faults[3].nan: must be true or false",
        "$.faults[3].colour: unknown field"}) {
    EXPECT_THAT(m, HasSubstr(want));
  }
  EXPECT_THAT(ParseScenarioSpec("{").status().message(),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(ParseScenarioSpec("[]").status().message(),
              HasSubstr("$: must be an object"));
  EXPECT_THAT(ParseScenarioSpec("{}").status().message(),
              HasSubstr("$.faults: missing"));
}

TEST(ScenarioSpecTest, ResolveChecksPlacementAndAppliesOverrides) {
  ScenarioSpec spec = *ParseScenarioSpec(
      R"({"faults": [{"kind": "packet_loss_hang", "at_seconds": 5}]})");
  FaultOverrides o;
  o.at_step = 42;
  o.gpu = 1;
  ASSERT_TRUE(ResolveFaultDefaults(o, "n000", {}, 4, 4, &spec).ok());
  EXPECT_EQ(spec.faults[0].at_step, 42);
  EXPECT_FALSE(spec.faults[0].at_seconds.has_value());
  EXPECT_EQ(spec.faults[0].dev, "mlx5_1");

  ScenarioSpec bad = *ScenarioSpecFromName("ecc_dbe");
  o = {};
  o.gpu = 8;
  EXPECT_FALSE(ResolveFaultDefaults(o, "n000", {}, 8, 8, &bad).ok());
  bad = *ScenarioSpecFromName("ecc_dbe");
  o = {};
  o.node = "n009";
  EXPECT_THAT(ResolveFaultDefaults(o, "n000", {"n000"}, 8, 8, &bad).message(),
              HasSubstr("not in the cluster"));
  bad = *ParseScenarioSpec(
      R"({"faults": [{"kind": "packet_loss_hang", "dev": "eth0"}]})");
  EXPECT_FALSE(ResolveFaultDefaults({}, "n000", {}, 8, 8, &bad).ok());
}

}  // namespace
}  // namespace vigil::agent
