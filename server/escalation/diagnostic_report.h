// The plain-text diagnostic report that email and ticket pages carry.
#ifndef VIGIL_SERVER_ESCALATION_DIAGNOSTIC_REPORT_H_
#define VIGIL_SERVER_ESCALATION_DIAGNOSTIC_REPORT_H_

#include <string>

#include "rules/incident.h"

namespace vigil {

// A plain-text diagnostic report of `incident`: what, where, since when,
// the hint and every piece of evidence with its baseline.
std::string DiagnosticReport(const Incident& incident);

}  // namespace vigil

#endif  // VIGIL_SERVER_ESCALATION_DIAGNOSTIC_REPORT_H_
