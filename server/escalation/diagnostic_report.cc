#include "server/escalation/diagnostic_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vigil {

std::string DiagnosticReport(const Incident& incident) {
  std::string out = absl::StrFormat(
      "Vigil diagnostic report for %s\n\nSeverity: %s\nKind: %s\nJob: %s\n"
      "Node: %s\nGPU: %s\nFirst detected: %.0f (step %s)\n\nSummary: %s\n\n"
      "Root-cause hint (%s): %s\n\nEvidence:\n",
      incident.id, SeverityName(incident.severity), incident.kind, incident.job,
      incident.node.empty() ? "-" : incident.node,
      incident.gpu ? absl::StrCat(*incident.gpu) : "-", incident.ts,
      incident.step ? absl::StrCat(*incident.step) : "-", incident.summary,
      HintCategoryName(incident.hint_category), incident.hint);
  for (const Evidence& e : incident.evidence) {
    const Anomaly& a = e.anomaly;
    absl::StrAppendFormat(
        &out, "- %s %s on %s%s: value %g, baseline %g +- %g, score %g at %.0f%s%s\n",
        AnomalyKindName(a.kind), a.metric, a.node.empty() ? incident.job : a.node,
        a.gpu ? absl::StrCat(" gpu", *a.gpu) : "", a.value, a.baseline_mean,
        a.baseline_sigma, a.score, a.ts, a.detail.empty() ? "" : ": ",
        a.detail);
  }
  if (incident.evidence_dropped > 0)
    absl::StrAppend(&out, "(", incident.evidence_dropped, " more not shown)\n");
  return out;
}

}  // namespace vigil
