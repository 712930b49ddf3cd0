// The fault kinds added for the cluster evaluation, in the single-job
// simulator: nvlink_bandwidth_degraded, xid_storm, rack_down.
#include <cmath>
#include <cstdint>
#include <set>
#include <string>

#include "agent/sim/cluster_sim.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/agent/sim/scenario_harness.h"

namespace vigil::agent {
namespace {

// Frames before the fault (which starts 60 s in) and well after it.
constexpr size_t kBefore = 50, kAfter = 200, kEnd = 399;

TEST(ScenariosFleetTest, NvlinkBandwidthDegradedQuietlyMakesAStraggler) {
  HarnessRun run = RunScenario("nvlink_bandwidth_degraded", {});
  const ResolvedFault& f = run.faults[0];
  EXPECT_GE(f.magnitude, 0.2);
  EXPECT_LE(f.magnitude, 0.3);
  const NodeFrames& n = run.nodes[1];
  double tx3 =
      Increase(n, GpuKey("gpu_nvlink_tx_bytes_total", 3), kAfter, kEnd);
  for (int g = 0; g < 3; ++g) {
    double tx =
        Increase(n, GpuKey("gpu_nvlink_tx_bytes_total", g), kAfter, kEnd);
    EXPECT_GT(tx3, 0.15 * tx) << g;
    EXPECT_LT(tx3, 0.35 * tx) << g;
  }
  // No error counter, no XID anywhere.
  for (const NodeFrames& node : run.nodes) {
    for (int g = 0; g < 4; ++g) {
      for (const char* m :
           {"gpu_nvlink_crc_errors_total", "gpu_nvlink_replay_errors_total",
            "gpu_nvlink_recovery_errors_total", "gpu_xid_errors_total",
            "gpu_pcie_replays_total"}) {
        EXPECT_EQ(Increase(node, GpuKey(m, g), 0, kEnd), 0) << m << g;
      }
      EXPECT_EQ(node.values[kEnd].at(GpuKey("gpu_xid_last", g)), 0);
    }
  }
  // The job's step time rises by well over 30 % on every node, in
  // lockstep; the slow GPU is not one that draws little power.
  for (const NodeFrames& node : run.nodes) {
    EXPECT_GT(Mean(node, "train_step_time_seconds", kAfter, kEnd),
              1.3 * Mean(node, "train_step_time_seconds", 0, kBefore))
        << node.node;
  }
  EXPECT_NEAR(run.nodes[0].steps[kEnd], run.nodes[1].steps[kEnd], 1);
  EXPECT_GT(Mean(n, GpuKey("gpu_power_watts", 3), kAfter, kEnd),
            Mean(n, GpuKey("gpu_power_watts", 2), kAfter, kEnd) - 30);
  std::vector<ExpectedIncident> expected = ExpectedIncidents(f);
  ASSERT_EQ(expected.size(), 1u);
  EXPECT_EQ(expected[0].severity, "P1");
  EXPECT_TRUE(expected[0].node);
  EXPECT_TRUE(expected[0].gpu);
}

// An xid_storm spec with `code` (0: the seed's choice).
ScenarioSpec XidStorm(int code) {
  ScenarioSpec spec = *ScenarioSpecFromName("xid_storm");
  if (code != 0) spec.faults[0].xid = code;
  return spec;
}

TEST(ScenariosFleetTest, XidStormCountsThousandsOfEventsOnOneGpu) {
  HarnessOptions options;
  options.ticks = 420;
  for (int code : {94, 13}) {
    HarnessRun run = RunSpec(XidStorm(code), options);
    const ResolvedFault& f = run.faults[0];
    EXPECT_EQ(f.xid_code, code);
    const NodeFrames& n = run.nodes[1];
    std::string xid = GpuKey("gpu_xid_errors_total", 3);
    EXPECT_EQ(Increase(n, xid, 0, 55), 0);
    double storm = Increase(n, xid, 55, 419);  // within 6 minutes
    EXPECT_GT(storm, 0.6 * f.magnitude) << code;
    EXPECT_LT(storm, 1.4 * f.magnitude) << code;
    EXPECT_GE(f.magnitude, 5000);
    EXPECT_EQ(n.values[419].at(GpuKey("gpu_xid_last", 3)), code);
    EXPECT_EQ(Increase(n, GpuKey("gpu_xid_errors_total", 2), 0, 419), 0);
    EXPECT_EQ(Increase(run.nodes[0], xid, 0, 419), 0);
    std::vector<ExpectedIncident> expected = ExpectedIncidents(f);
    ASSERT_EQ(expected.size(), 1u);
    if (code == 94) {  // contained ECC: the GPU's
      EXPECT_EQ(expected[0].kinds, std::vector<std::string>{"xid_gpu_error"});
      EXPECT_EQ(expected[0].severity, "P1");
      EXPECT_TRUE(expected[0].node && expected[0].gpu);
    } else {  // the application's: the job's
      EXPECT_EQ(expected[0].kinds, std::vector<std::string>{"xid_app_error"});
      EXPECT_EQ(expected[0].severity, "P2");
      EXPECT_FALSE(expected[0].node || expected[0].gpu);
    }
  }
  // Without "xid" the seed picks hardware or application storms.
  std::set<int> codes;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    ScenarioSpec spec = XidStorm(0);
    ASSERT_TRUE(ResolveFaultDefaults({}, "n001", {}, 8, 8, &spec).ok());
    codes.insert((*ResolveFaults(spec, seed))[0].xid_code);
  }
  EXPECT_TRUE(codes.count(94));
  EXPECT_TRUE(codes.count(13) || codes.count(31));
}

TEST(ScenariosFleetTest, RackDownSilencesSeveralNodesAtOnceAndTheJobHangs) {
  HarnessOptions options;
  options.nodes = 4;
  options.gpus = 2;
  HarnessRun run = RunScenario("rack_down", options);
  const ResolvedFault& f = run.faults[0];
  EXPECT_EQ(f.spec.nodes, (std::vector<std::string>{"n001", "n002", "n003"}));
  ASSERT_TRUE(run.onsets[0].has_value());
  for (int n = 1; n < 4; ++n) {
    const NodeFrames& down = run.nodes[n];
    ASSERT_FALSE(down.ts.empty());
    EXPECT_LT(down.ts.back(), run.onsets[0]->ts) << n;
    EXPECT_GT(down.ts.back(), run.onsets[0]->ts - 2) << n;
  }
  const NodeFrames& up = run.nodes[0];
  EXPECT_EQ(up.ts.size(), 400u);
  EXPECT_EQ(up.steps[kEnd], up.steps[kAfter]);  // hung
  std::vector<ExpectedIncident> expected = ExpectedIncidents(f);
  ASSERT_EQ(expected.size(), 1u);
  EXPECT_EQ(expected[0].kinds, std::vector<std::string>{"node_down"});
  EXPECT_EQ(expected[0].severity, "P0");
  EXPECT_TRUE(expected[0].nodes);
  EXPECT_FALSE(expected[0].node);
}

TEST(ScenariosFleetTest, RackDownDefaultsWrapAndTruthNamesTheNodes) {
  ScenarioSpec spec = *ScenarioSpecFromName("rack_down");
  std::vector<std::string> names = ClusterNodeNames(4);
  ASSERT_TRUE(
      ResolveFaultDefaults({std::string("n003")}, "n001", names, 8, 8, &spec)
          .ok());
  EXPECT_EQ(spec.faults[0].nodes,
            (std::vector<std::string>{"n003", "n000", "n001"}));
  // Two nodes: one goes down, one stays up.
  spec = *ScenarioSpecFromName("rack_down");
  ASSERT_TRUE(
      ResolveFaultDefaults({}, "n001", ClusterNodeNames(2), 8, 8, &spec).ok());
  EXPECT_EQ(spec.faults[0].nodes, (std::vector<std::string>{"n001"}));
  // A node outside the cluster is refused.
  absl::StatusOr<ScenarioSpec> parsed = ParseScenarioSpec(
      R"({"faults": [{"kind": "rack_down", "nodes": ["n001", "n009"]}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(ResolveFaultDefaults({}, "n001", names, 8, 8, &*parsed).ok());

  ClusterOptions options;
  options.nodes = 4;
  options.gpus = 1;
  options.seconds = 60;
  spec = *ScenarioSpecFromName("rack_down");
  // Half-way between ticks: every node sees it at the same tick.
  ASSERT_TRUE(
      ResolveFaultDefaults({std::nullopt, std::nullopt, std::nullopt, 20.5},
                           "n001", names, 1, 1, &spec)
          .ok());
  absl::StatusOr<ClusterRun> run =
      SimulateCluster(options, spec, [](std::string_view) {});
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->frames, 3u * 21 + 60u);
  nlohmann::json truth =
      nlohmann::json::parse(TruthJson(options, "rack_down", *run));
  const nlohmann::json& fault = truth["faults"][0];
  EXPECT_TRUE(fault["node"].is_null());
  EXPECT_EQ(fault["nodes"], nlohmann::json::array({"n001", "n002", "n003"}));
  EXPECT_EQ(fault["expected"][0]["nodes"], fault["nodes"]);
  EXPECT_EQ(fault["severity"], "P0");
}

TEST(ScenariosFleetTest, SpecParsesNodesAndXid) {
  absl::StatusOr<ScenarioSpec> spec = ParseScenarioSpec(R"({"faults": [
      {"kind": "rack_down", "nodes": ["n004", "n005"]},
      {"kind": "xid_storm", "xid": 31, "magnitude": 2000}]})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->faults[0].nodes, (std::vector<std::string>{"n004", "n005"}));
  EXPECT_EQ(spec->faults[1].xid, 31);
  absl::StatusOr<ScenarioSpec> bad = ParseScenarioSpec(R"({"faults": [
      {"kind": "rack_down", "nodes": []},
      {"kind": "xid_storm", "xid": "94"}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("$.faults[0].nodes"),
            std::string::npos);
  EXPECT_NE(bad.status().message().find("$.faults[1].xid"), std::string::npos);
  // With the first node of "nodes" as its node.
  ASSERT_TRUE(
      ResolveFaultDefaults({}, "n001", ClusterNodeNames(8), 8, 8, &*spec).ok());
  EXPECT_EQ(spec->faults[0].node, "n004");
}

}  // namespace
}  // namespace vigil::agent
