// DetectionPipeline (detector + engine joined) on hand-made frames, and the
// JSON form of incidents (IncidentToJson, EvidenceToJson, JsonNumber).
#include "rules/pipeline.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rules/incident_json.h"

namespace vigil {
namespace {

constexpr double kStart = 1764000000;

SeriesKey Key(std::string metric, std::string node) {
  SeriesKey k{std::move(metric), {{"job", "llama"}, {"node", std::move(node)}}};
  EXPECT_TRUE(NormalizeSeriesKey(&k).ok());
  return k;
}

// Feeds one frame of `node` with series `id` = `value`.
void Feed(DetectionPipeline& p, const std::string& node, double ts,
          int64_t step, uint32_t id, double value,
          std::vector<IncidentUpdate>* out) {
  const uint32_t ids[] = {id};
  const double values[] = {value};
  FrameView f;
  f.node = node;
  f.job = "llama";
  f.step = step;
  f.ts = ts;
  f.ids = ids;
  f.values = values;
  p.ProcessFrame(f, out);
}

std::set<std::string> Keys(const nlohmann::json& j) {
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  return keys;
}

TEST(PipelineTest, RegistersSeriesOnceAndRejectsAConflictingKey) {
  DetectionPipeline p(DetectorOptions(), DefaultRuleSet());
  EXPECT_FALSE(p.HasSeries(0));
  ASSERT_TRUE(p.RegisterSeries(0, Key("train_loss", "n0")).ok());
  EXPECT_TRUE(p.HasSeries(0));
  EXPECT_TRUE(p.RegisterSeries(0, Key("train_loss", "n0")).ok());
  EXPECT_EQ(p.RegisterSeries(0, Key("train_loss", "n1")).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(PipelineTest, NanLossOpensAP0IncidentAtTheFrameTime) {
  DetectionPipeline p(DetectorOptions(), DefaultRuleSet());
  ASSERT_TRUE(p.RegisterSeries(0, Key("train_loss", "n0")).ok());
  std::vector<IncidentUpdate> out;
  for (int i = 0; i < 3; ++i) Feed(p, "n0", kStart + i, 10 + i, 0, 2.5, &out);
  EXPECT_TRUE(out.empty());
  Feed(p, "n0", kStart + 3, 13, 0, std::nan(""), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, UpdateType::kOpened);
  EXPECT_EQ(out[0].incident.kind, "loss_nan");
  EXPECT_EQ(out[0].incident.severity, Severity::kP0);
  EXPECT_EQ(out[0].incident.ts, kStart + 3);
  EXPECT_EQ(out[0].incident.step, 13);
  EXPECT_EQ(p.Incidents().size(), 1u);
  EXPECT_EQ(p.detector_stats().frames, 4);
}

TEST(PipelineTest, AdvanceTimeDetectsASilentNode) {
  DetectionPipeline p(DetectorOptions(), DefaultRuleSet());
  ASSERT_TRUE(p.RegisterSeries(0, Key("gpu_power_watts", "n0")).ok());
  ASSERT_TRUE(p.RegisterSeries(1, Key("gpu_power_watts", "n1")).ok());
  std::vector<IncidentUpdate> out;
  for (int i = 0; i < 30; ++i) {
    Feed(p, "n0", kStart + i, i, 0, 600, &out);
    Feed(p, "n1", kStart + i, i, 1, 600, &out);
  }
  ASSERT_TRUE(out.empty());
  // n1 stops; n0 goes on (its step too): n1 died inside a running job.
  for (int i = 30; i < 40; ++i) Feed(p, "n0", kStart + i, i, 0, 600, &out);
  p.AdvanceTime(kStart + 29 + 10, &out);
  EXPECT_TRUE(out.empty());  // under min_silence_s (15 s)
  for (int i = 40; i < 60; ++i) Feed(p, "n0", kStart + i, i, 0, 600, &out);
  p.AdvanceTime(kStart + 29 + 30, &out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].incident.kind, "node_down");
  EXPECT_EQ(out[0].incident.node, "n1");
  EXPECT_EQ(out[0].incident.severity, Severity::kP0);
}

// Both nodes of a job stop at one step: the job ended. A lifecycle
// incident (P3), no node_down.
TEST(PipelineTest, NodesStoppingTogetherEndTheJob) {
  DetectionPipeline p(DetectorOptions(), DefaultRuleSet());
  ASSERT_TRUE(p.RegisterSeries(0, Key("gpu_power_watts", "n0")).ok());
  ASSERT_TRUE(p.RegisterSeries(1, Key("gpu_power_watts", "n1")).ok());
  std::vector<IncidentUpdate> out;
  for (int i = 0; i < 30; ++i) {
    Feed(p, "n0", kStart + i, i, 0, 600, &out);
    Feed(p, "n1", kStart + i, i, 1, 600, &out);
  }
  p.AdvanceTime(kStart + 29 + 60, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, UpdateType::kOpened);
  EXPECT_EQ(out[0].incident.kind, "job_ended");
  EXPECT_EQ(out[0].incident.severity, Severity::kP3);
  EXPECT_NE(out[0].incident.summary.find("step 29"), std::string::npos)
      << out[0].incident.summary;
}

TEST(IncidentJsonTest, ReplayObjectHasTheContractKeysAndNulls) {
  Incident inc;
  inc.id = "inc-000007";
  inc.severity = Severity::kP1;
  inc.kind = "network_packet_loss";
  inc.job = "llama";
  inc.ts = kStart;
  inc.summary = "s";
  inc.hint = "h";
  Evidence e;
  e.anomaly.kind = AnomalyKind::kLossNan;
  e.anomaly.value = std::numeric_limits<double>::quiet_NaN();
  e.anomaly.score = std::numeric_limits<double>::infinity();
  e.rule = "loss_nan";
  inc.evidence.push_back(e);
  nlohmann::json j = IncidentToJson(inc);
  EXPECT_EQ(Keys(j), (std::set<std::string>{"id", "severity", "kind", "job",
                                            "node", "gpu", "ts", "step",
                                            "summary", "hint", "evidence"}));
  EXPECT_EQ(j["severity"], "P1");
  EXPECT_EQ(j["node"], nullptr);
  EXPECT_EQ(j["gpu"], nullptr);
  EXPECT_EQ(j["step"], nullptr);
  EXPECT_EQ(j["evidence"][0]["value"], "nan");  // the NaN loss stays visible
  EXPECT_EQ(j["evidence"][0]["score"], "inf");
  EXPECT_EQ(j["evidence"][0]["baseline_mean"], nullptr);

  inc.node = "n3";
  inc.gpu = 5;
  inc.step = 42;
  j = IncidentToJson(inc);
  EXPECT_EQ(j["node"], "n3");
  EXPECT_EQ(j["gpu"], 5);
  EXPECT_EQ(j["step"], 42);

  nlohmann::json full = IncidentToJson(inc, /*full=*/true);
  for (const char* key : {"state", "responses", "hint_category",
                          "last_update_ts", "resolved_ts", "reopen_count",
                          "evidence_dropped", "severity_history"}) {
    EXPECT_TRUE(full.contains(key)) << key;
  }
}

TEST(IncidentJsonTest, JsonNumberWritesNonFiniteValuesAsStrings) {
  EXPECT_EQ(JsonNumber(1.5), 1.5);
  EXPECT_EQ(JsonNumber(std::nan("")), "nan");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(JsonNumber(-std::numeric_limits<double>::infinity()), "-inf");
}

}  // namespace
}  // namespace vigil
