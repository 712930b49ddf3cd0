// Rules: which anomaly becomes which incident kind, with what severity,
// responses, summary and root-cause category. A built-in catalogue
// implements the P0-P3 table; a JSON rule document overrides and extends
// it. Pure: the caller reads the file, this parses the text.
//
// Rule document (every key optional; unknown keys are errors):
//   {
//     "rules": [
//       {
//         "name": "gpu_thermal_throttle",   // required, unique in the file
//         "enabled": true,
//         "match": {                         // required for a new rule
//           "kind": "thermal_throttle",      // or ["net_drops", ...]
//           "metric": "gpu_*",               // or [...]; '*' ends a prefix
//           "tier": 2,                       // exact tier (throughput_drop)
//           "min_score": 0.5,                // |anomaly.score| >= this
//           "xid_codes": [79, 48]            // the code in detail "xid N"
//         },
//         "severity": "P1",                  // required for a new rule
//         "responses": ["notify_sre"],       // default: by severity
//         "summary": "Throttle on {where}: {detail}",
//         "category": "gpu_hardware",        // default: "general"
//         "generic": false                   // default: false
//       }
//     ],
//     "settings": {"resolve_after_s": 300, "reopen_window_s": 3600,
//                  "group_window_s": 600, "hint_window_s": 1800,
//                  "max_evidence": 50, "node_group_window_s": 120,
//                  "lemon_window_s": 604800, "lemon_jobs": 3,
//                  "risk_gpu_hours": 1000}
//   }
// A rule whose name is in the catalogue overrides the fields it gives (a
// given "match" replaces the whole match) and keeps its place; a new rule
// is placed before the catalogue, in file order. An anomaly takes the first
// enabled rule that matches it. Summary placeholders: {job} {node} {gpu}
// {dev} {where} {metric} {value} {score} {percent} (score x 100)
// {baseline} (mean +- sigma) {detail} {tier}.
#ifndef VIGIL_RULES_RULE_H_
#define VIGIL_RULES_RULE_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "detector/anomaly.h"
#include "rules/incident.h"

namespace vigil {

// Which anomalies a rule takes. Every given condition must hold.
struct RuleMatch {
  // At least one kind.
  std::vector<AnomalyKind> kinds;
  // Metric names; an entry ending in '*' is a prefix. Empty: any metric.
  std::vector<std::string> metrics;
  // Exact tier, when set.
  std::optional<int> tier;
  // Minimum |score|, when set.
  std::optional<double> min_score;
  // XID codes: the anomaly's code (else a detail starting "xid N") must be
  // listed. Empty: any (or no) code.
  std::vector<int> xid_codes;

  // Whether `anomaly` (a raise) satisfies every condition.
  bool Matches(const Anomaly& anomaly) const;
};

// Maps matching anomalies onto an incident kind.
struct Rule {
  // The incident kind, e.g. "gpu_thermal_throttle".
  std::string name;
  bool enabled = true;
  RuleMatch match;
  Severity severity = Severity::kP3;
  std::vector<Response> responses;
  // Template of the incident's one-line summary (placeholders above).
  std::string summary;
  // Root-cause family: drives grouping and the hint.
  HintCategory category = HintCategory::kGeneral;
  // A generic baseline rule: a metric left its baseline, which many faults
  // cause (temperature up, traffic or step time off, any fluctuation). An
  // incident is named after a cause-specific rule rather than a generic
  // one of the same family and severity (see engine.h), and a generic
  // baseline drop is taken as a consequence of a slowdown of its job.
  bool generic = false;
};

// Incident lifecycle settings.
struct RuleSettings {
  // An incident resolves once all its conditions have cleared and nothing
  // changed for this long. 300 s: longer than a checkpoint save or a
  // flapping N-of-M detector's clear/raise cycle.
  double resolve_after_s = 300;
  // A matching anomaly within this long after resolution reopens the same
  // incident instead of opening a duplicate.
  double reopen_window_s = 3600;
  // A job-wide symptom (throughput, hang) joins a cause incident of its job
  // active within this long, and a cause joins a symptom-only incident
  // opened within this long: a throttle can take minutes to cost
  // throughput, and a packet loss minutes to hang NCCL.
  double group_window_s = 600;
  // How far back the job's anomalies are correlated for a hint.
  double hint_window_s = 1800;
  // Evidence kept per incident (the rest is counted).
  int max_evidence = 50;
  // Nodes of one job that fall silent within this long of each other are
  // one node-down incident (a rack, a switch, a partition), not one each.
  double node_group_window_s = 120;
  // Repeat offenders: a node implicated in incidents (GPU hardware,
  // communication, node) of at least lemon_jobs different jobs within
  // lemon_window_s is a "lemon": one incident of rule lemon_node naming
  // its history, with a suggested drain.
  double lemon_window_s = 7 * 86400;
  int lemon_jobs = 3;
  // Fleet-wide faults: incidents (P0-P2) of one class - storage and data
  // pipeline, network, nodes lost, hangs - in at least fleet_jobs
  // different jobs within fleet_window_s point at what the jobs share (a
  // file system, a fabric switch, rack power, the scheduler): one
  // fleet_wide_fault incident naming them. 0 jobs disables.
  double fleet_window_s = 600;
  int fleet_jobs = 3;
  // GPU-hours at risk: a P2 incident whose job has GPUs x hours since its
  // last checkpoint (or its start) >= this rises to rule
  // gpu_hours_at_risk's severity (P1): a fault on a 1,024-GPU job that
  // has not saved for 3 h costs far more than on 8 GPUs. 0 disables.
  double risk_gpu_hours = 1000;
};

// A full rule configuration: ordered rules and settings.
struct RuleSet {
  std::vector<Rule> rules;
  RuleSettings settings;

  // The first enabled rule matching the raise `anomaly`, or nullptr.
  // Points into `rules`.
  const Rule* Find(const Anomaly& anomaly) const;
};

// The built-in catalogue (see README.md for the table) with default
// settings.
RuleSet DefaultRuleSet();

// The default rule set with the JSON rule document `text` applied.
// kInvalidArgument listing every error found, one per line, each starting
// with its position: "line L, column C" for a syntax error, else the JSON
// path ("rules[2].severity: ...").
absl::StatusOr<RuleSet> LoadRuleSet(std::string_view text);

// The default responses of a severity: P0 checkpoint_then_pause_job +
// cordon_node, P1 notify_sre, P2 diagnostic_report, P3 log.
std::vector<Response> DefaultResponses(Severity severity);

// `summary` with its placeholders filled from `anomaly`; `where` is the
// localisation text ("n3 gpu5", "n7 mlx5_0", "job llama").
// Unknown placeholders are copied verbatim.
std::string RenderSummary(std::string_view summary, const Anomaly& anomaly,
                          std::string_view where);

// Whether `name` (without braces) is a summary placeholder.
bool IsSummaryPlaceholder(std::string_view name);

}  // namespace vigil

#endif  // VIGIL_RULES_RULE_H_
