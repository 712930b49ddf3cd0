// The default catalogue and the rule-document loader.
#include "rules/rule.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "rules/engine.h"

namespace vigil {
namespace {

using K = AnomalyKind;
using R = Response;

Anomaly Make(K kind, std::string metric = "", int tier = 1,
             std::string detail = "", double score = 0) {
  Anomaly a;
  a.kind = kind;
  a.job = "llama";
  a.node = "n1";
  a.metric = std::move(metric);
  a.tier = tier;
  a.detail = std::move(detail);
  a.score = score;
  return a;
}

TEST(SeverityTest, NamesRoundTrip) {
  for (int i = 0; i <= 3; ++i) {
    const auto s = static_cast<Severity>(i);
    EXPECT_EQ(ParseSeverity(SeverityName(s)), s);
  }
  EXPECT_EQ(SeverityName(Severity::kP0), "P0");
  EXPECT_FALSE(ParseSeverity("P4").has_value());
  EXPECT_EQ(ParseResponse("checkpoint_then_pause_job"),
            R::kCheckpointThenPauseJob);
  EXPECT_EQ(ParseHintCategory("data_pipeline"), HintCategory::kDataPipeline);
}

TEST(CatalogTest, EveryKindHasARuleAndNamesAreUnique) {
  const RuleSet set = DefaultRuleSet();
  for (int i = 0; i <= static_cast<int>(K::kMfuLow); ++i) {
    const auto kind = static_cast<K>(i);
    for (int tier : {1, 2}) {
      EXPECT_NE(set.Find(Make(kind, "some_metric", tier)), nullptr)
          << AnomalyKindName(kind) << " tier " << tier;
    }
  }
  std::set<std::string> names;
  for (const Rule& r : set.rules) {
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    EXPECT_FALSE(r.responses.empty()) << r.name;
    EXPECT_FALSE(r.summary.empty()) << r.name;
  }
}

struct CatalogCase {
  Anomaly anomaly;
  std::string rule;
  Severity severity;
  std::vector<R> responses;
};

TEST(CatalogTest, SeverityTable) {
  const RuleSet set = DefaultRuleSet();
  const std::vector<R> pause_cordon = {R::kCheckpointThenPauseJob,
                                       R::kCordonNode};
  for (const CatalogCase& c : std::vector<CatalogCase>{
           {Make(K::kNodeSilent), "node_down", Severity::kP0, pause_cordon},
           {Make(K::kGpuMissing), "gpu_drop", Severity::kP0, pause_cordon},
           {Make(K::kEccDbe), "ecc_double_bit", Severity::kP0, pause_cordon},
           {Make(K::kNvlinkErrors), "nvlink_errors", Severity::kP0,
            pause_cordon},
           {Make(K::kLossNan), "loss_nan", Severity::kP0, {R::kPauseJob}},
           {Make(K::kGradNan), "grad_nan", Severity::kP0, {R::kPauseJob}},
           {Make(K::kJobHang), "job_hang", Severity::kP0, pause_cordon},
           {Make(K::kThroughputDrop, "train_tokens_per_second", 2),
            "throughput_drop_severe",
            Severity::kP1,
            {R::kNotifySre}},
           {Make(K::kNetDrops),
            "network_packet_loss",
            Severity::kP1,
            {R::kNotifySre}},
           {Make(K::kNetRetransmits),
            "network_packet_loss",
            Severity::kP1,
            {R::kNotifySre}},
           {Make(K::kNetLinkDown),
            "network_link_down",
            Severity::kP1,
            {R::kNotifySre}},
           {Make(K::kGradExplosion),
            "grad_explosion",
            Severity::kP1,
            {R::kNotifySre}},
           {Make(K::kRowRemapPending),
            "row_remap_pending",
            Severity::kP1,
            {R::kNotifySre, R::kCordonNode}},
           {Make(K::kThroughputDrop, "train_tokens_per_second", 1),
            "throughput_drop",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kFragmentation),
            "gpu_memory_fragmentation",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kOomForecast),
            "oom_forecast",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kBaselineHigh, "train_dataloader_wait_seconds"),
            "dataloader_slow",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kBaselineHigh, "disk_read_seconds_total"),
            "disk_latency",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kPeriodicStall),
            "data_stall",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kThermalThrottle),
            "gpu_thermal_throttle",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kPeerPowerLow),
            "gpu_power_low",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kClockLow),
            "gpu_clock_low",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kNvlinkTrafficLow),
            "nvlink_traffic_low",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kLossOscillation),
            "loss_oscillation",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kLossScaleThrash),
            "loss_scale_thrash",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kEccSbeRate),
            "ecc_single_bit_rate",
            Severity::kP2,
            {R::kDiagnosticReport, R::kCordonNode}},
           {Make(K::kGradVanishing),
            "grad_vanishing",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kBaselineHigh, "train_loss"),
            "loss_divergence",
            Severity::kP2,
            {R::kDiagnosticReport}},
           {Make(K::kMfuLow), "mfu_low", Severity::kP3, {R::kLog}},
           {Make(K::kBaselineLow, "net_rx_bytes_total"),
            "network_traffic_low",
            Severity::kP3,
            {R::kLog}},
           {Make(K::kBaselineHigh, "my_widgets_total"),
            "baseline_fluctuation",
            Severity::kP3,
            {R::kLog}},
       }) {
    const Rule* r = set.Find(c.anomaly);
    ASSERT_NE(r, nullptr) << c.rule;
    EXPECT_EQ(r->name, c.rule);
    EXPECT_EQ(r->severity, c.severity) << c.rule;
    EXPECT_EQ(r->responses, c.responses) << c.rule;
  }
}

TEST(RenderSummaryTest, Placeholders) {
  Anomaly a = Make(K::kThroughputDrop, "train_tokens_per_second", 2, "", 0.35);
  a.value = 1234.5;
  a.baseline_mean = 2000;
  a.baseline_sigma = 50;
  EXPECT_EQ(RenderSummary("{job} {node} {gpu} {where} {value} {percent} "
                          "{baseline} {tier} {nope}",
                          a, "n1 gpu2"),
            "llama n1 - n1 gpu2 1234 35 % 2000 +- 50 2 {nope}");
}

TEST(LoadRuleSetTest, EmptyDocumentIsTheDefaults) {
  const auto set = LoadRuleSet("{}");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->rules.size(), DefaultRuleSet().rules.size());
  EXPECT_EQ(set->settings.resolve_after_s, 300);
}

TEST(LoadRuleSetTest, OverridesAndNewRulesApply) {
  const auto set = LoadRuleSet(R"json({
    "rules": [
      {"name": "gpu_thermal_throttle", "severity": "P1"},
      {"name": "mfu_low", "enabled": false},
      {"name": "very_slow_dataloader",
       "match": {"kind": "baseline_high",
                 "metric": "train_dataloader_*", "min_score": 10},
       "severity": "P1", "category": "data_pipeline",
       "summary": "Dataloader stalled on {where}: {value} s"},
      {"name": "xid_fatal", "match": {"kind": "xid", "xid_codes": [79]}}
    ],
    "settings": {"resolve_after_s": 60, "reopen_window_s": 600,
                 "group_window_s": 120, "hint_window_s": 900,
                 "max_evidence": 10, "fleet_window_s": 300, "fleet_jobs": 5}
  })json");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->settings.fleet_window_s, 300);
  EXPECT_EQ(set->settings.fleet_jobs, 5);
  EXPECT_EQ(set->settings.resolve_after_s, 60);
  EXPECT_EQ(set->settings.reopen_window_s, 600);
  EXPECT_EQ(set->settings.group_window_s, 120);
  EXPECT_EQ(set->settings.hint_window_s, 900);
  EXPECT_EQ(set->settings.max_evidence, 10);

  const Rule* thermal = set->Find(Make(K::kThermalThrottle));
  ASSERT_NE(thermal, nullptr);
  EXPECT_EQ(thermal->severity, Severity::kP1);
  EXPECT_EQ(thermal->responses, std::vector<R>{R::kNotifySre});
  EXPECT_EQ(thermal->category, HintCategory::kGpuHardware);  // kept

  EXPECT_EQ(set->Find(Make(K::kMfuLow)), nullptr);

  const Anomaly slow =
      Make(K::kBaselineHigh, "train_dataloader_wait_seconds", 1, "", 12);
  ASSERT_NE(set->Find(slow), nullptr);
  EXPECT_EQ(set->Find(slow)->name, "very_slow_dataloader");
  EXPECT_EQ(set->Find(slow)->responses, std::vector<R>{R::kNotifySre});
  const Anomaly mild =
      Make(K::kBaselineHigh, "train_dataloader_wait_seconds", 1, "", 4);
  EXPECT_EQ(set->Find(mild)->name, "dataloader_slow");

  // xid_fatal now only takes 79: 48 falls through to the catch-all.
  EXPECT_EQ(set->Find(Make(K::kXid, "", 1, "xid 79"))->name, "xid_fatal");
  EXPECT_EQ(set->Find(Make(K::kXid, "", 1, "xid 48"))->name, "xid");

  // The engine uses the loaded rules.
  IncidentEngine engine(*set);
  Anomaly a = slow;
  a.value = 30;
  a.ts = 5;
  const auto u = engine.Process({a});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.kind, "very_slow_dataloader");
  EXPECT_EQ(u[0].incident.severity, Severity::kP1);
  EXPECT_EQ(u[0].incident.summary, "Dataloader stalled on n1: 30 s");
  EXPECT_EQ(u[0].incident.hint_category, HintCategory::kDataPipeline);
}

TEST(LoadRuleSetTest, ReportsEveryErrorWithItsPath) {
  const auto set = LoadRuleSet(R"json({
    "rulez": [],
    "settings": {"resolve_after_s": "300", "max_evidence": 0, "colour": 1,
                 "fleet_jobs": 1},
    "rules": [
      {"name": "gpu_thermal_throttle", "severity": "P5"},
      {"name": "custom", "match": {"kind": "thermal_trottle", "tier": 3},
       "severity": "P2", "enabled": "yes"},
      {"name": "custom", "match": {"kind": ["net_drops", 7]}, "severity": "P1"},
      {"name": "mfu_low", "responses": ["log", "reboot"],
       "summary": "MFU {valeu} on {where"},
      {"name": "new_one", "match": {"kind": "mfu_low"}},
      {"name": "node_down", "colour": "red", "category": "weather"},
      {"name": "odd", "match": {"kind": "net_drops", "xid_codes": [79]},
       "severity": "P1"},
      "not a rule",
      {"match": {"kind": "xid"}, "severity": "P0"}
    ]
  })json");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(set.status().message());
  const std::vector<std::string> want = {
      "rulez: unknown key",
      "settings.resolve_after_s: must be a number",
      "settings.max_evidence: must be an integer",
      "settings.colour: unknown key",
      "settings.fleet_jobs: must be 0 (off) or an integer in [2, 1000]",
      "rules[0].severity: must be one of",
      "rules[1].match.kind: unknown anomaly kind \"thermal_trottle\"",
      "rules[1].match.tier: must be the integer 1 or 2",
      "rules[1].enabled: must be a boolean",
      "rules[2].name: duplicate rule name \"custom\" (also rules[1])",
      "rules[2].match.kind[1]: must be a string",
      "rules[3].responses[1]: unknown response \"reboot\"",
      "rules[3].summary: unknown placeholder {valeu}",
      "rules[3].summary: unclosed '{'",
      "rules[4]: new rule \"new_one\" (not in the catalogue) needs "
      "\"severity\"",
      "rules[5].colour: unknown key",
      "rules[5].category: unknown category \"weather\"",
      "rules[6].match.xid_codes: only applies to kind \"xid\"",
      "rules[7]: must be an object, not string",
      "rules[8].name: required",
  };
  for (const std::string& w : want) {
    EXPECT_NE(msg.find(w), std::string::npos) << "missing: " << w << "\n"
                                              << msg;
  }
  const std::vector<std::string> lines = absl::StrSplit(msg, '\n');
  EXPECT_EQ(lines.size(), want.size()) << msg;
}

TEST(LoadRuleSetTest, SyntaxErrorHasLineAndColumn) {
  const auto set =
      LoadRuleSet("{\n  \"rules\": [\n    {\"name\": \"x\",, }\n  ]\n}");
  ASSERT_FALSE(set.ok());
  const std::string msg(set.status().message());
  EXPECT_EQ(msg.rfind("line 3, column 18 (byte 32): syntax error ", 0), 0u)
      << msg;
  EXPECT_NE(msg.find("syntax error"), std::string::npos) << msg;
}

TEST(LoadRuleSetTest, NonObjectDocument) {
  const auto set = LoadRuleSet("[1, 2]");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().message(),
            "$: the document must be an object, not array");
  const auto rules_not_array = LoadRuleSet(R"({"rules": {}})");
  ASSERT_FALSE(rules_not_array.ok());
  EXPECT_EQ(rules_not_array.status().message(),
            "rules: must be an array, not object");
}

}  // namespace
}  // namespace vigil
