// The incident model: what rules/ makes of anomalies. One Incident is one
// fault of one job, with its severity P0-P3, its localisation, the
// automatic responses to run, a root-cause hint and the anomalies that are
// its evidence. Plain data; no I/O, no clock.
#ifndef VIGIL_RULES_INCIDENT_H_
#define VIGIL_RULES_INCIDENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "detector/anomaly.h"

namespace vigil {

// Incident severity; a lower value is more severe (kP0 < kP3).
enum class Severity : uint8_t {
  kP0,  // Fatal: pause the job, isolate the faulty node, page.
  kP1,  // Severe: notify SRE.
  kP2,  // Warning: diagnostic report, manual check.
  kP3,  // Info: record only.
};

// "P0".."P3".
std::string_view SeverityName(Severity severity);
// The severity named "P0".."P3", or nullopt for any other text.
std::optional<Severity> ParseSeverity(std::string_view name);

// An automatic response the server runs for an incident. Names
// (ResponseName) are a contract with the server's webhooks.
enum class Response : uint8_t {
  kCheckpointThenPauseJob,  // Save a checkpoint, then pause the job.
  kPauseJob,                // Pause without a checkpoint (weights are bad).
  kCordonNode,              // Mark the incident's node unschedulable.
  kNotifySre,               // Instant message to the SRE on call.
  kDiagnosticReport,        // Generate a diagnostic report / ticket.
  kLog,                     // Record only (dashboard).
};

// The stable snake_case name of `response`, e.g. "cordon_node".
std::string_view ResponseName(Response response);
// The response named `name`, or nullopt when none has that name.
std::optional<Response> ParseResponse(std::string_view name);

// Root-cause family of a rule and of an incident's hint. A rule's category
// also decides what it groups with (see engine.h).
enum class HintCategory : uint8_t {
  kGpuHardware,    // Cooling, power, ECC, XID, a GPU lost: one card.
  kCommunication,  // RDMA NIC drops/retransmits/link, NVLink.
  kDataPipeline,   // Dataloader, storage latency, periodic starvation.
  kModel,          // Loss/grad numerics, hyper-parameters.
  kMemory,         // Allocator fragmentation, OOM forecast.
  kNode,           // The whole node stopped reporting.
  kPerformance,    // A job-wide symptom (throughput, hang, MFU) whose
                   // cause is found by correlating the job's anomalies.
  kGeneral,        // A baseline fluctuation with no known meaning.
  kApplication,    // The job's own code faulted on the GPU (application
                   // XIDs): attributed to the job, not to the node.
  kLifecycle,      // A job's life (its end): recorded, never a fault.
};

// "gpu_hardware", "communication", "data_pipeline", "model", "memory",
// "node", "performance", "general", "application", "lifecycle".
std::string_view HintCategoryName(HintCategory category);
// The category named `name`, or nullopt when none has that name.
std::optional<HintCategory> ParseHintCategory(std::string_view name);

// Firing until every condition of the incident has cleared for the
// resolve delay; a resolved incident can be reopened.
enum class IncidentState : uint8_t { kFiring, kResolved };

// "firing" / "resolved".
std::string_view IncidentStateName(IncidentState state);

// One condition attached to an incident: the raise that attached it (its
// baseline mean/sigma are those at detection; tier and score follow
// escalations of the same condition).
struct Evidence {
  Anomaly anomaly;
  // The rule the anomaly matched ("" when none matched and it was attached
  // as context only).
  std::string rule;
  // True while the condition has not cleared.
  bool active = true;
  // Attached because a node-down, hang or slowdown incident inhibits it: a
  // consequence of the fault, not a cause.
  bool inhibited = false;
};

// One step of an incident's severity history.
struct SeverityChange {
  Severity severity = Severity::kP3;
  double ts = 0;
  // The rule whose evidence set the severity.
  std::string rule;
};

// One fault of one job.
struct Incident {
  // "inc-000001", ...: allocated in order, so a replay yields the same ids.
  std::string id;
  Severity severity = Severity::kP3;
  // The name of the rule of the incident's primary (most specific cause)
  // evidence, e.g. "gpu_thermal_throttle", "network_packet_loss"; it
  // changes when more specific evidence arrives (see engine.h).
  std::string kind;
  std::string job;
  // Localisation: empty node / nullopt gpu when the fault is job-wide or
  // spans several nodes/GPUs.
  std::string node;
  std::optional<int> gpu;
  // When the fault spans several nodes (nodes of a job that fell silent
  // together: a rack, a switch, a partition): each of them, sorted; `node`
  // is then empty. Empty otherwise.
  std::vector<std::string> nodes;
  // First detection: the opening anomaly's time and step.
  double ts = 0;
  std::optional<int64_t> step;
  // Time of the last change (evidence, severity, state).
  double last_update_ts = 0;
  IncidentState state = IncidentState::kFiring;
  // Set while resolved: when it resolved.
  std::optional<double> resolved_ts;
  // How many times it was reopened.
  int reopen_count = 0;
  // One line for humans, from the primary evidence.
  std::string summary;
  // Root-cause hint: category and concrete next steps.
  HintCategory hint_category = HintCategory::kGeneral;
  std::string hint;
  // Responses of every rule matched by its evidence, in enum order
  // (cordon_node only when `node` is set).
  std::vector<Response> responses;
  // Distinct conditions, in attach order, at most RuleSettings::max_evidence;
  // evidence_dropped counts the rest.
  std::vector<Evidence> evidence;
  int evidence_dropped = 0;
  // Opening severity first, then every change.
  std::vector<SeverityChange> severity_history;
};

// What happened to an incident.
enum class UpdateType : uint8_t {
  kOpened,
  kSeverityRaised,
  kEvidenceAdded,
  kResolved,
  kReopened,
};

// "opened", "severity_raised", "evidence_added", "resolved", "reopened".
std::string_view UpdateTypeName(UpdateType type);

// One change of one incident, with its state after the change.
struct IncidentUpdate {
  UpdateType type = UpdateType::kOpened;
  double ts = 0;
  Incident incident;
};

}  // namespace vigil

#endif  // VIGIL_RULES_INCIDENT_H_
