#include "rules/incident_json.h"

#include <cmath>
#include <string>

namespace vigil {

nlohmann::json JsonNumber(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

namespace {

// A number where it applies; null for the NaN that marks "not applicable".
nlohmann::json OptionalNumber(double value) {
  return std::isnan(value) ? nlohmann::json(nullptr) : JsonNumber(value);
}

nlohmann::json OrNull(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

}  // namespace

nlohmann::json EvidenceToJson(const Evidence& evidence) {
  const Anomaly& a = evidence.anomaly;
  nlohmann::json j;
  j["kind"] = std::string(AnomalyKindName(a.kind));
  j["node"] = OrNull(a.node);
  j["gpu"] = a.gpu ? nlohmann::json(*a.gpu) : nlohmann::json(nullptr);
  j["dev"] = OrNull(a.dev);
  j["series"] = a.series_id ? nlohmann::json(*a.series_id) : nlohmann::json(nullptr);
  j["metric"] = OrNull(a.metric);
  // The decisive value itself may be NaN (a NaN loss): keep it visible.
  j["value"] = a.kind == AnomalyKind::kLossNan || a.kind == AnomalyKind::kGradNan
                   ? JsonNumber(a.value)
                   : OptionalNumber(a.value);
  j["baseline_mean"] = OptionalNumber(a.baseline_mean);
  j["baseline_sigma"] = OptionalNumber(a.baseline_sigma);
  j["score"] = JsonNumber(a.score);
  j["tier"] = a.tier;
  j["ts"] = a.ts;
  j["step"] = a.step ? nlohmann::json(*a.step) : nlohmann::json(nullptr);
  j["detail"] = a.detail;
  if (!a.nodes.empty()) j["nodes"] = a.nodes;
  if (a.code) j["code"] = *a.code;
  j["rule"] = evidence.rule;
  j["active"] = evidence.active;
  j["inhibited"] = evidence.inhibited;
  return j;
}

nlohmann::json IncidentToJson(const Incident& incident, bool full) {
  nlohmann::json j;
  j["id"] = incident.id;
  j["severity"] = std::string(SeverityName(incident.severity));
  j["kind"] = incident.kind;
  j["job"] = incident.job;
  j["node"] = OrNull(incident.node);
  j["gpu"] = incident.gpu ? nlohmann::json(*incident.gpu) : nlohmann::json(nullptr);
  // Only incidents that span several nodes carry "nodes" (node is null).
  if (!incident.nodes.empty()) j["nodes"] = incident.nodes;
  j["ts"] = incident.ts;
  j["step"] = incident.step ? nlohmann::json(*incident.step) : nlohmann::json(nullptr);
  j["summary"] = incident.summary;
  j["hint"] = incident.hint;
  nlohmann::json evidence = nlohmann::json::array();
  for (const Evidence& e : incident.evidence) evidence.push_back(EvidenceToJson(e));
  j["evidence"] = std::move(evidence);
  if (full) {
    j["state"] = std::string(IncidentStateName(incident.state));
    j["hint_category"] = std::string(HintCategoryName(incident.hint_category));
    nlohmann::json responses = nlohmann::json::array();
    for (Response r : incident.responses) responses.push_back(std::string(ResponseName(r)));
    j["responses"] = std::move(responses);
    j["last_update_ts"] = incident.last_update_ts;
    j["resolved_ts"] = incident.resolved_ts ? nlohmann::json(*incident.resolved_ts)
                                            : nlohmann::json(nullptr);
    j["reopen_count"] = incident.reopen_count;
    j["evidence_dropped"] = incident.evidence_dropped;
    nlohmann::json history = nlohmann::json::array();
    for (const SeverityChange& c : incident.severity_history) {
      history.push_back({{"severity", std::string(SeverityName(c.severity))},
                         {"ts", c.ts},
                         {"rule", c.rule}});
    }
    j["severity_history"] = std::move(history);
  }
  return j;
}

}  // namespace vigil
