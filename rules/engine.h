// The incident engine: anomalies in, incident updates out. One incident per
// fault: anomalies of one job that share a root cause are grouped, the
// most specific evidence localises the incident, node-down and hang
// incidents absorb the noise they cause, incidents resolve once their
// conditions have cleared for a while and reopen (same id) when the fault
// comes back. Time is only the anomalies' ts and Advance(ts): a replayed
// trace yields the same incidents, ids included, every run.
//
// Grouping, by the category of the rule an anomaly matches:
//  - gpu_hardware: the incident of the same node and GPU (thermal + power
//    low + clock low + NVLink traffic low on n3 gpu5 are one incident).
//  - communication / node: the same node, and the same category or GPU
//    (drops on two NICs of n7 are one incident).
//  - data_pipeline / model / memory: one incident per job and category.
//  - performance (throughput drop, hang, MFU, step time): a job-wide
//    symptom; joins the most severe P0-P2 cause incident of the job active
//    within group_window_s, else the job's symptom incident. A cause that
//    arrives within group_window_s of a symptom-only incident takes it over.
//  - general: joins an incident on the same node (and GPU), else its own.
// Inhibition: while a node_silent condition is active, every anomaly of
// that node joins its incident; while a job_hang is active, power, clock,
// traffic, baseline, throughput, MFU and stall anomalies of the job join
// the hang's incident. A generic baseline drop (Rule::generic, e.g. power,
// clock or traffic below baseline) that groups with nothing joins the
// job's slowdown: its most severe P0-P2 cause incident active within
// group_window_s, else its performance incident; a slower job drags every
// GPU's power and every NIC's traffic. Inhibited evidence changes neither
// severity nor responses nor hint nor kind.
// Primary evidence: the incident's kind, category (hence grouping and
// hint), summary and localisation text follow the attached evidence whose
// rule names the fault best, ranked by family first (a cause - GPU
// hardware, communication, data pipeline, model, memory, node - over a
// job-wide performance symptom over a general fluctuation), then severity,
// then a cause-specific rule over a generic baseline one. So evidence that
// raises the severity renames the incident (temperature P3 -> thermal
// throttle P2, loss divergence P2 -> grad explosion P1 -> loss NaN P0),
// evidence of equal severity renames it only when it is cause-specific and
// the primary is generic, and a symptom (throughput, hang) that raises a
// cause incident leaves it named after its cause. The first detection (ts,
// step) stays; severity_history records the rule of each rise.
// Severity only rises while an incident fires (a severity_raised update);
// a reopened incident restarts at its new evidence's severity.
//
// Job lifecycle: a kJobEnded anomaly with a node ends every condition of
// that job on that node; one without a node ends every condition of the
// job and opens the job's lifecycle incident (job_ended, P3). Node-silent
// conditions survive a job's end: a dead node stays down until it reports.
// Nodes: a node-silent anomaly naming several nodes, and node-silent
// anomalies of one job within node_group_window_s of an open node-down
// incident, make one incident whose `nodes` lists them all.
// XIDs: one condition per (GPU, code); a storm's later raises update its
// count and rate in place.
// Repeat offenders: a node implicated in incidents (GPU hardware,
// communication, node; P0-P2; localised to it) of lemon_jobs different
// jobs within lemon_window_s opens one lemon_node incident (job "") whose
// evidence lists them; it resolves when the window no longer holds them.
// Only an engine that raises fleet incidents opens it (at once for its own
// implications, at the next Process or Advance for others'); every engine
// counts.
// Fleet-wide faults: incidents (P0-P2) of one class - "storage" (data
// pipeline), "network" (communication), "nodes" (nodes lost) or "hang"
// (job hangs) - in fleet_jobs different jobs within fleet_window_s open one
// fleet_wide_fault incident (job "", the class as its device) naming them;
// it resolves when the window no longer holds them. Only an engine that
// raises fleet incidents (set_raises_fleet_incidents) opens it; every
// engine counts.
// GPU-hours at risk: a firing P2 incident whose job (JobContextSource) has
// GPUs x hours since its last checkpoint >= risk_gpu_hours rises to the
// gpu_hours_at_risk rule's severity, with that figure as evidence.
#ifndef VIGIL_RULES_ENGINE_H_
#define VIGIL_RULES_ENGINE_H_

#include <memory>
#include <string>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "detector/anomaly.h"
#include "detector/detector.h"
#include "rules/incident.h"
#include "rules/rule.h"

namespace vigil {

// What the engine may ask about a job's current run (the pipeline answers
// from the detector).
class JobContextSource {
 public:
  virtual ~JobContextSource() = default;
  // The job's current run; nullopt when unknown.
  virtual std::optional<JobContext> Context(std::string_view job) const = 0;
};

// Not thread-safe: one thread (or one lock) drives an instance. Keeps
// firing incidents and resolved ones for reopen_window_s; memory is
// bounded by the number of open faults.
class IncidentEngine {
 public:
  explicit IncidentEngine(RuleSet rules = DefaultRuleSet());
  ~IncidentEngine();
  IncidentEngine(const IncidentEngine&) = delete;
  IncidentEngine& operator=(const IncidentEngine&) = delete;

  // Consumes anomalies (raises and clears, in ts order as the detector
  // emits them) and returns the updates they caused, in order. At most one
  // update per anomaly (severity_raised wins over evidence_added), plus
  // resolutions that became due by the anomaly's ts. Anomalies that match
  // no enabled rule are only remembered for hints. Never fails.
  std::vector<IncidentUpdate> Process(const std::vector<Anomaly>& anomalies);

  // Moves time to `ts` (ignored if earlier than the latest seen) and
  // returns the resolutions that became due; forgets incidents resolved
  // more than reopen_window_s ago. Cheap when nothing is due.
  std::vector<IncidentUpdate> Advance(double ts);

  // Firing and recently resolved incidents, oldest first.
  std::vector<Incident> Incidents() const;

  // The rules in use.
  const RuleSet& rules() const;

  // Uses `rules` from now on (a config reload): new anomalies are matched
  // against them and their settings apply to every incident at once
  // (resolve_after_s, reopen_window_s, ...). Incidents already open keep
  // the rules that opened and joined them (their severity and summary)
  // until they resolve; a rule that was removed or disabled opens nothing
  // new.
  void SetRules(RuleSet rules);

  // Where GPU-hours at risk come from (not owned; null: never raised).
  void set_context_source(const JobContextSource* source);

  // One incident that implicated a node (repeat offenders), or that may
  // share its cause with other jobs' (fleet-wide faults): what engines that
  // watch other jobs of the fleet must learn (AddImplication).
  struct NodeImplication {
    std::string node;   // the node implicated; "" when `cause` is set
    std::string cause;  // a fleet-wide fault's class ("storage", ...)
    double ts = 0;
    std::string job;
    std::string id;
    std::string kind;
    std::optional<int> gpu;
  };
  // Makes the engine keep the implications it makes for TakeImplications
  // (off by default: nobody takes them from a lone engine).
  void set_record_implications(bool record);
  // Moves the implications this engine recorded since the last call to
  // `out` (appended).
  void TakeImplications(std::vector<NodeImplication>* out);
  // Records an implication another engine made (its jobs are not this
  // engine's): it counts toward this engine's repeat offenders (or
  // fleet-wide faults) as its own do, raised at the next Process or
  // Advance if this engine raises fleet incidents. One already known (same
  // node or cause, time, job and GPU) changes nothing. Never fails.
  void AddImplication(const NodeImplication& implication);

  // Whether this engine opens the incidents that span jobs: fleet-wide
  // faults and repeat offenders (default true). Engines that share
  // implications count the same faults; one of them raises (in cluster
  // mode, the fleet leader's shard: docs/SCALING.md), so a node is one
  // lemon however its jobs are spread. Turned on, it raises at the next
  // Process or Advance what the counts already hold, but no lemon of a
  // node it has one of (firing or resolved). Turning it off leaves open
  // ones to resolve on their own.
  void set_raises_fleet_incidents(bool raises);

  // The repeat-offender history (which incidents implicated which node,
  // within lemon_window_s) and the fleet-wide fault windows (under "@" and
  // the class: node names must not start with '@') as JSON text, and back:
  // they must outlive a server restart. RestoreHistory: kInvalidArgument
  // for text that is not such a document (nothing changes then).
  std::string SaveHistory() const;
  absl::Status RestoreHistory(std::string_view text);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vigil

#endif  // VIGIL_RULES_ENGINE_H_
