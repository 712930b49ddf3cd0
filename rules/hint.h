// Root-cause hints: which family of causes (data pipeline, communication,
// GPU hardware, model, ...) the evidence of an incident and the recent
// anomalies of its job point to, and what to do about it. Used by the
// engine; pure.
#ifndef VIGIL_RULES_HINT_H_
#define VIGIL_RULES_HINT_H_

#include <string>
#include <vector>

#include "detector/anomaly.h"
#include "rules/incident.h"

namespace vigil {

// One raise seen in a job, with the category of the rule it matched
// (kGeneral when none matched).
struct Observation {
  Anomaly anomaly;
  HintCategory category = HintCategory::kGeneral;
};

// A hint: its category and one paragraph of concrete next steps.
struct Hint {
  HintCategory category = HintCategory::kGeneral;
  std::string text;
};

// Whether a hung job produces `kind` by itself once its step stops (power,
// clock and traffic fall, baselines move, throughput and MFU drop): such
// anomalies are inhibited by a hang and never taken as its cause.
bool IsHangConsequence(AnomalyKind kind);

// The hint for an incident whose primary rule has category `primary`.
// `recent` holds the incident's own (not inhibited) evidence and the job's
// raises within the hint window; anomalies a hang causes (power, traffic,
// baselines, throughput after the stall began) are not taken as causes.
// Symptom incidents (kPerformance) take the category with the most
// distinct conditions among GPU hardware, communication, data pipeline and
// node (ties: the earliest); loss oscillation with data-pipeline evidence
// and no gradient anomaly is a data problem.
Hint BuildHint(HintCategory primary, const std::vector<Observation>& recent);

}  // namespace vigil

#endif  // VIGIL_RULES_HINT_H_
