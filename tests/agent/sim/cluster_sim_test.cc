#include "agent/sim/cluster_sim.h"

#include <cmath>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace vigil::agent {
namespace {

using json = nlohmann::json;

struct Output {
  std::string text;
  ClusterRun run;
};

Output Simulate(const std::string& scenario, const ClusterOptions& options) {
  ScenarioSpec spec = *ScenarioSpecFromName(scenario);
  std::vector<std::string> names = ClusterNodeNames(options.nodes);
  EXPECT_TRUE(
      ResolveFaultDefaults({std::nullopt, std::nullopt, std::nullopt, 30.0},
                           names[1], names, options.gpus, options.gpus, &spec)
          .ok());
  Output out;
  absl::StatusOr<ClusterRun> run = SimulateCluster(
      options, spec, [&](std::string_view s) { out.text.append(s); });
  EXPECT_TRUE(run.ok()) << run.status();
  out.run = *run;
  return out;
}

TEST(ClusterSimTest, JsonlIsSortedWithTypedLabels) {
  ClusterOptions options;
  options.nodes = 3;
  options.gpus = 2;
  options.seconds = 120;
  options.start_ts = 1764000000.25;
  Output out = Simulate("loss_nan", options);
  std::istringstream lines(out.text);
  std::string line;
  double last_ts = 0;
  uint64_t frames = 0, samples = 0;
  std::set<std::string> nodes;
  bool saw_nan = false;
  std::map<std::string, double> node_last_ts;
  while (std::getline(lines, line)) {
    json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line.substr(0, 200);
    ASSERT_TRUE(j.is_object());
    ASSERT_TRUE(j["ts"].is_number());
    double ts = j["ts"].get<double>();
    EXPECT_GE(ts, last_ts);
    last_ts = ts;
    EXPECT_NEAR(ts * 1000, std::round(ts * 1000), 1e-3);  // whole ms
    ASSERT_TRUE(j["node"].is_string());
    std::string node = j["node"];
    if (node_last_ts.count(node)) {
      EXPECT_NEAR(ts - node_last_ts[node], 1.0, 0.021);
    }
    node_last_ts[node] = ts;
    nodes.insert(node);
    EXPECT_EQ(j["job"], "llama-70b");
    ASSERT_TRUE(j["step"].is_number_integer());
    ASSERT_TRUE(j["samples"].is_array());
    EXPECT_EQ(j.size(), 5u);
    for (const json& s : j["samples"]) {
      ASSERT_TRUE(s["m"].is_string());
      std::string m = s["m"];
      ASSERT_TRUE(s.contains("v"));
      if (s["v"].is_string()) {
        std::string v = s["v"];
        EXPECT_TRUE(v == "nan" || v == "inf" || v == "-inf") << v;
        saw_nan = saw_nan || (m == "train_loss" && v == "nan");
      } else {
        EXPECT_TRUE(s["v"].is_number()) << m;
      }
      if (m.starts_with("gpu_") || m.starts_with("torch_")) {
        EXPECT_TRUE(s["gpu"].is_number_integer()) << m;
        EXPECT_FALSE(s.contains("dev"));
      } else if (m.starts_with("net_") || m.starts_with("disk_")) {
        EXPECT_TRUE(s["dev"].is_string()) << m;
        EXPECT_FALSE(s.contains("gpu"));
      } else {
        EXPECT_EQ(s.size(), 2u) << m;
      }
      ++samples;
    }
    ++frames;
  }
  EXPECT_TRUE(saw_nan);
  EXPECT_EQ(nodes, (std::set<std::string>{"n000", "n001", "n002"}));
  EXPECT_EQ(frames, 3u * 120);
  EXPECT_EQ(frames, out.run.frames);
  EXPECT_EQ(samples, out.run.samples);
}

TEST(ClusterSimTest, NumbersRoundTrip) {
  ClusterOptions options;
  options.nodes = 2;
  options.gpus = 1;
  options.seconds = 5;
  Output out = Simulate("healthy", options);
  // Every number token parses back to a double that prints identically.
  std::istringstream lines(out.text);
  std::string line;
  while (std::getline(lines, line)) {
    json j = json::parse(line);
    for (const json& s : j["samples"]) {
      if (!s["v"].is_number_float()) continue;
      double v = s["v"].get<double>();
      std::string text = s["v"].dump();
      EXPECT_EQ(std::stod(text), v);
    }
  }
}

TEST(ClusterSimTest, NodeDownLeavesAGapAndTruthSaysSo) {
  ClusterOptions options;
  options.nodes = 2;
  options.gpus = 1;
  options.seconds = 90;
  Output out = Simulate("node_down", options);
  EXPECT_EQ(out.run.frames, 90u + 30u);
  ASSERT_EQ(out.run.onsets.size(), 1u);
  ASSERT_TRUE(out.run.onsets[0].has_value());
  json truth = json::parse(TruthJson(options, "node_down", out.run));
  EXPECT_EQ(truth["scenario"], "node_down");
  ASSERT_EQ(truth["faults"].size(), 1u);
  const json& f = truth["faults"][0];
  EXPECT_EQ(f["kind"], "node_down");
  EXPECT_EQ(f["node"], "n001");
  EXPECT_TRUE(f["gpu"].is_null());
  EXPECT_EQ(f["severity"], "P0");
  EXPECT_NEAR(f["start_ts"].get<double>(), options.start_ts + 30, 0.1);
  EXPECT_EQ(f["expected"][0]["kinds"][0], "node_down");
}

TEST(ClusterSimTest, TruthOfEveryKindHasASeverity) {
  for (const std::string& kind : FaultKindNames()) {
    ScenarioSpec spec = *ScenarioSpecFromName(kind);
    ASSERT_TRUE(ResolveFaultDefaults({}, "n001", {}, 8, 8, &spec).ok());
    absl::StatusOr<std::vector<ResolvedFault>> faults = ResolveFaults(spec, 3);
    ASSERT_TRUE(faults.ok());
    std::vector<ExpectedIncident> expected = ExpectedIncidents((*faults)[0]);
    ASSERT_FALSE(expected.empty()) << kind;
    EXPECT_FALSE(expected[0].kinds.empty()) << kind;
  }
  ClusterOptions options;
  options.nodes = 1;
  options.seconds = 2;
  Output out = Simulate("healthy", options);
  EXPECT_TRUE(
      json::parse(TruthJson(options, "healthy", out.run))["faults"].empty());
}

TEST(ClusterSimTest, RejectsBadOptions) {
  ClusterOptions options;
  options.interval_seconds = 0.01;
  EXPECT_FALSE(SimulateCluster(options, {}, [](std::string_view) {}).ok());
}

}  // namespace
}  // namespace vigil::agent
