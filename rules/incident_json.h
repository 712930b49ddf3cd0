// JSON form of incidents: the vigil-replay output line and the HTTP API use
// the same fields. Non-finite numbers are the strings "nan", "inf", "-inf";
// fields that do not apply are null.
#ifndef VIGIL_RULES_INCIDENT_JSON_H_
#define VIGIL_RULES_INCIDENT_JSON_H_

#include "nlohmann/json.hpp"
#include "rules/incident.h"

namespace vigil {

// A number, or "nan"/"inf"/"-inf" for non-finite values.
nlohmann::json JsonNumber(double value);

// {"kind", "node", "gpu", "dev", "series", "metric", "value",
//  "baseline_mean", "baseline_sigma", "score", "tier", "ts", "step",
//  "detail", "rule", "active", "inhibited"} of one piece of evidence, plus
// "nodes" for a condition of several nodes and "code" for an XID.
nlohmann::json EvidenceToJson(const Evidence& evidence);

// The replay output object: {"id", "severity", "kind", "job", "node" (or
// null), "gpu" (or null), "ts", "step", "summary", "hint", "evidence"},
// plus "nodes" (sorted) when the incident spans several nodes.
// With `full`, adds state, responses, hint_category, last_update_ts,
// resolved_ts, reopen_count, evidence_dropped and severity_history.
nlohmann::json IncidentToJson(const Incident& incident, bool full = false);

}  // namespace vigil

#endif  // VIGIL_RULES_INCIDENT_JSON_H_
