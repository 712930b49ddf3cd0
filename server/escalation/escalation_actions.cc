// EscalationService's automatic and requested actions: what a rule's
// responses ask for, the ActionGate's verdict (dry run, approval, circuit
// breaker), the signed webhook to vigil-actuator through the action outbox,
// the action records, and the "remediation halted" incident of a tripped
// breaker.
#include "server/escalation/escalation_service.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "server/detection/detection_service.h"
#include "server/escalation/escalation_internal.h"

namespace vigil {

namespace escalation_internal {

// The request of an action (payload {"id", "body"}) to vigil-actuator at
// its configured URL; signed by the outbox. kNotFound for another
// receiver, kFailedPrecondition when no actuator is configured (any more).
absl::StatusOr<std::vector<OutboundRequest>> RenderAction(
    const ActuatorOptions& actuator, const std::string& receiver,
    const nlohmann::json& payload) {
  if (receiver != kActuatorReceiver)
    return absl::NotFoundError(absl::StrCat("no receiver ", receiver));
  if (actuator.url.empty())
    return absl::FailedPreconditionError("no actuator is configured");
  const std::string id = payload.is_object() ? StringAt(payload, "id", "") : "";
  auto body = payload.is_object() ? payload.find("body") : payload.end();
  if (id.empty() || body == payload.end() || !body->is_object())
    return absl::InvalidArgumentError("payload: no action id or body");
  OutboundRequest http;
  http.url = actuator.url;
  http.headers = {{"Content-Type", "application/json"},
                  {"Idempotency-Key", id},
                  {"User-Agent", "vigil/1"}};
  http.body = body->dump();
  return std::vector<OutboundRequest>{std::move(http)};
}

}  // namespace escalation_internal

namespace {

using Json = nlohmann::json;
using escalation_internal::kActuatorReceiver;
using escalation_internal::kInf;
using escalation_internal::StringAt;

constexpr char kActionsStream[] = "actions";
// Action records older than this are not reloaded at start (they stay in
// the "actions" stream).
constexpr double kActionMemorySeconds = 7 * 86400.0;
// A member coming to lead starts the actions of incidents opened (or
// raised) this recently only: the pair's marks of sent actions live a day.
constexpr double kTakeOverHorizonSeconds = 20 * 3600.0;

// The action a rule response asks for, or "" when it is no action.
std::string ActionOf(Response response) {
  switch (response) {
    case Response::kCheckpointThenPauseJob: return "checkpoint_then_pause_job";
    case Response::kPauseJob: return "pause_job";
    case Response::kCordonNode: return "cordon_node";
    case Response::kDiagnosticReport: return "diagnostic_report";
    case Response::kNotifySre:
    case Response::kLog: return "";
  }
  return "";
}

// Whether `id` can name an action another member made: "act-" and then
// only characters of its own ids (it goes into URLs and outbox keys).
bool IsActionId(std::string_view id) {
  if (!id.starts_with("act-") || id.size() > 128) return false;
  for (char c : id) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
          c == '.' || c == '~'))
      return false;
  }
  return true;
}

// The fleet-wide breaker count of cluster mode, for ActionGate.
class FleetSlots : public SharedBreaker {
 public:
  explicit FleetSlots(const EscalationServiceOptions::FleetSafety* fleet) : fleet_(fleet) {}
  absl::StatusOr<bool> Take(bool cordon, int limit, double window_seconds) override {
    return fleet_->take_slot(cordon ? "cordon" : "pause", limit, window_seconds);
  }

 private:
  const EscalationServiceOptions::FleetSafety* fleet_;
};

// Actions on a job rather than on a node.
bool IsJobAction(std::string_view action) {
  return action == "checkpoint_then_pause_job" || action == "pause_job";
}

bool IsAction(std::string_view action) {
  for (std::string_view a : {"checkpoint_then_pause_job", "pause_job",
                             "cordon_node", "uncordon_node", "diagnostic_report"})
    if (a == action) return true;
  return false;
}

}  // namespace

absl::Status EscalationService::LoadActions() {
  const double now = options_.clock->Now();
  for (const Event& e : options_.store->ListEvents(
           kActionsStream, now - kActionMemorySeconds, kInf, 1'000'000)) {
    Json action = Json::parse(e.payload, nullptr, false);
    if (!action.is_object() || !action.contains("id") || !action["id"].is_string())
      continue;
    // (The key first: json's operator= takes its argument by value, and the
    // right side of an assignment is evaluated first.)
    const std::string id = action["id"].get<std::string>();
    // Actions are stored as they are decided, the counter only with the
    // next snapshot: never hand out an id an action already has.
    int64_t number = 0;
    // "act-000012", or "act-<shard>-000012" in cluster mode.
    const size_t dash = id.rfind('-');
    if (absl::StartsWith(id, "act-") &&
        absl::SimpleAtoi(absl::string_view(id).substr(dash + 1), &number))
      next_action_ = std::max(next_action_, number + 1);
    actions_[id] = std::move(action);
  }
  return absl::OkStatus();
}

void EscalationService::StartActions(const Incident& incident,
                                     const absl::flat_hash_set<std::string>* started_elsewhere) {
  // The pair's leader acts; a standby that comes to lead starts what the
  // old one did not (TakeOverActions, docs/SCALING.md).
  if (options_.pair.has_value() && !options_.pair->leading()) return;
  for (Response response : incident.responses) {
    const std::string action = ActionOf(response);
    if (action.empty()) continue;
    if (action == "cordon_node" && incident.node.empty()) continue;
    const std::string pair_key =
        absl::StrCat(PairIncidentKey(incident), "/", action, "/", incident.node);
    if (started_elsewhere != nullptr && started_elsewhere->contains(pair_key)) continue;
    // One automatic request per incident, action and target.
    const std::string key =
        absl::StrCat("auto/", incident.id, "/", action, "/", incident.node);
    bool seen = false;
    for (const auto& [id, a] : actions_) {
      if (a.value("key", "") == key) seen = true;
    }
    if (seen) continue;
    Json record = {{"key", key},
                   {"incident_id", incident.id},
                   {"severity", std::string(SeverityName(incident.severity))},
                   {"action", action},
                   {"job", incident.job},
                   {"node", action == "cordon_node" || action == "diagnostic_report"
                                ? incident.node
                                : std::string()},
                   {"reason", incident.summary},
                   {"requested_by", "vigil"}};
    bool approved = false;
    if (options_.pair.has_value()) {
      record["pair_key"] = pair_key;
      // The other member asked for this action before: ask under its id,
      // and take the approval a human gave there.
      if (auto it = pair_approvals_.find(pair_key); it != pair_approvals_.end()) {
        if (!actions_.contains(it->second.action_id)) {
          record["id"] = it->second.action_id;
          record["created_ts"] = options_.clock->Now();
        }
        if (!it->second.approved_by.empty()) {
          record["approved_by"] = it->second.approved_by;
          approved = true;
        }
      }
    }
    if (!incident.node.empty() && options_.claimed_node && options_.claimed_node(incident.node))
      record["unverified_node"] = true;
    if (IsJobAction(action)) {
      // Only what a node's agent verified with the scheduler is acted on
      // automatically (docs/SECURITY.md): the job's id, on a node that runs
      // it, which the actuator checks with the scheduler again.
      std::optional<VerifiedJob> verified;
      if (options_.verified_job && !incident.job.empty())
        verified = options_.verified_job(incident.job, incident.node);
      if (verified) {
        record["job_id"] = verified->job_id;
        record["node"] = verified->node;
      } else {
        record["unverified"] = true;
      }
    }
    const Json decided = Decide(std::move(record), approved, options_.clock->Now());
    if (decided.value("state", "") == "pending_approval")
      QueueApprovalOperation(decided, "pending_approval", "");
  }
}

void EscalationService::QueueApprovalOperation(const Json& action, std::string_view verb,
                                               std::string_view who) {
  if (!options_.pair.has_value() || options_.pair->share_operation == nullptr ||
      !action.contains("pair_key"))
    return;
  approval_operations_.emplace_back(action["pair_key"].get<std::string>(),
                                    Json{{"verb", std::string(verb)},
                                         {"action_id", action.value("id", "")},
                                         {"who", std::string(who)},
                                         {"ts", options_.clock->Now()},
                                         {"from", options_.pair->self}});
  tick_cv_.notify_all();
}

Json EscalationService::Decide(Json action, bool approved, double now) {
  if (!action.contains("id")) {
    // In a cluster the id names the shard, so any server can send an
    // approval to the shard that holds the action, and the member
    // ("act-s0~a-000001"): both members of a pair number their actions,
    // and one that comes to lead must not reuse the other's ids.
    action["id"] = options_.pair.has_value()
                       ? absl::StrFormat("act-%s-%06d",
                                         absl::StrReplaceAll(options_.pair->self, {{"/", "~"}}),
                                         next_action_++)
                       : absl::StrFormat("act-%06d", next_action_++);
    action["created_ts"] = now;
  }
  ActionRequest request;
  request.incident_id = action.value("incident_id", "");
  request.severity =
      ParseSeverity(action.value("severity", "P3")).value_or(Severity::kP3);
  request.action = action.value("action", "");
  request.job = action.value("job", "");
  request.node = action.value("node", "");
  request.unverified_job = action.value("unverified", false);
  request.unverified_node = action.value("unverified_node", false);
  if (options_.actuator.url.empty()) {
    // Remediation is off: record what would have been asked, never count it
    // against the circuit breaker.
    action["verdict"] = "disabled";
    action["state"] = "not_sent";
    action["decision"] = "no actuator configured";
    action["updated_ts"] = now;
    SaveAction(action);
    return action;
  }
  int job_nodes = 0;
  if (!request.job.empty()) {
    SeriesFilter filter;
    filter.job = request.job;
    std::set<std::string> nodes;
    for (const SeriesInfo& info : options_.store->ListSeries(filter)) {
      for (const auto& [name, value] : info.key.labels) {
        if (name == "node") nodes.insert(value);
      }
    }
    job_nodes = static_cast<int>(nodes.size());
  }
  std::optional<FleetSlots> fleet_slots;
  if (options_.fleet.has_value()) fleet_slots.emplace(&*options_.fleet);
  const ActionDecision decision = gate_.Decide(
      request, job_nodes, approved, now, fleet_slots ? &*fleet_slots : nullptr);
  action["verdict"] = std::string(ActionVerdictName(decision.verdict));
  action["decision"] = decision.reason;
  action["updated_ts"] = now;
  switch (decision.verdict) {
    case ActionVerdict::kDryRun: action["state"] = "dry_run"; break;
    case ActionVerdict::kNeedsApproval: action["state"] = "pending_approval"; break;
    case ActionVerdict::kHalted: action["state"] = "halted"; break;
    case ActionVerdict::kRun: action["state"] = "sent"; break;
  }
  if (decision.tripped) {
    pending_halts_.push_back(decision.reason);
    breaker_ts_ = now;
    // Every server of the fleet halts with this one.
    QueueFleetEntry("breaker", {{"tripped", true}, {"reason", decision.reason}, {"ts", now}});
    tick_cv_.notify_all();
  }
  if (decision.verdict == ActionVerdict::kRun) {
    Json body = {{"id", action["id"]},
                 {"action", request.action},
                 {"incident_id", request.incident_id},
                 {"severity", action["severity"]},
                 {"job", action.value("job_id", request.job)},
                 {"node", request.node},
                 {"reason", action.value("reason", "")},
                 {"requested_by", action.value("approved_by", action.value("requested_by", "vigil"))},
                 {"checkpoint_timeout_seconds",
                  options_.actuator.checkpoint_timeout_seconds}};
    OutboxItem item;
    item.key = absl::StrCat("action/", action["id"].get<std::string>());
    item.incident_id = request.incident_id;
    item.kind = "action";
    item.description = absl::StrCat(request.action, " ", request.job,
                                    request.node.empty() ? "" : " ", request.node);
    item.priority = static_cast<int>(request.severity);
    // Rendered at each send (RenderAction) and signed then.
    item.routes.push_back({kActuatorReceiver, "webhook",
                           Json{{"id", action["id"]}, {"body", body}}});
    absl::Status s = action_outbox_->Enqueue(std::move(item));
    if (!s.ok() && !absl::IsAlreadyExists(s)) {
      action["state"] = "failed";
      action["detail"] = std::string(s.message());
    } else if (options_.pair.has_value() && options_.pair->action_started &&
               action.contains("pair_key")) {
      // Marked once queued (durably): a member taking over does not send
      // it again. A leader dying in between makes the next one send it
      // again; cordons and pauses of a job already paused are no-ops.
      action_marks_.push_back(action["pair_key"].get<std::string>());
      tick_cv_.notify_all();
    }
  }
  SaveAction(action);
  return action;
}

void EscalationService::SaveAction(const Json& action) {
  const std::string id = action["id"].get<std::string>();
  actions_[id] = action;
  const double ts = action.value("updated_ts", options_.clock->Now());
  (void)options_.store->AppendEvent(Event{kActionsStream, ts, 0, action.dump()});
  const std::string incident = action.value("incident_id", "");
  if (!incident.empty()) {
    AddTimeline(incident, {{"type", "action"},
                           {"ts", ts},
                           {"action_id", id},
                           {"action", action.value("action", "")},
                           {"state", action.value("state", "")},
                           {"detail", action.value("detail", action.value("decision", ""))}});
  }
  dirty_ = true;
}

Json EscalationService::ListActions(std::string_view incident_id) const {
  std::lock_guard<std::mutex> l(mu_);
  Json list = Json::array();
  for (auto it = actions_.rbegin(); it != actions_.rend(); ++it) {
    if (incident_id.empty() || it->second.value("incident_id", "") == incident_id)
      list.push_back(it->second);
  }
  return {{"actions", std::move(list)}};
}

absl::StatusOr<Json> EscalationService::RequestAction(const Json& body,
                                                      const Identity& who) {
  absl::StatusOr<Json> result;
  const std::string action = body.is_object() ? body.value("action", "") : "";
  if (!body.is_object()) {
    result = absl::InvalidArgumentError("body must be a JSON object");
  } else if (!IsAction(action)) {
    result = absl::InvalidArgumentError(absl::StrCat(
        "action: must be one of checkpoint_then_pause_job, pause_job, "
        "cordon_node, uncordon_node, diagnostic_report (got \"",
        action, "\")"));
  } else if (!body.contains("job") || !body["job"].is_string() ||
             body["job"].get<std::string>().empty()) {
    result = absl::InvalidArgumentError("job: required");
  } else if ((action == "cordon_node" || action == "uncordon_node") &&
             (!body.contains("node") || !body["node"].is_string() ||
              body["node"].get<std::string>().empty())) {
    result = absl::InvalidArgumentError("node: required for " + action);
  } else {
    std::lock_guard<std::mutex> l(mu_);
    std::string severity = "P1";
    const std::string incident = body.value("incident_id", "");
    if (auto it = incidents_.find(incident); it != incidents_.end())
      severity = std::string(SeverityName(it->second.severity));
    Json record = {{"key", ""},
                   {"incident_id", incident},
                   {"severity", severity},
                   {"action", action},
                   {"job", body.value("job", "")},
                   {"node", body.value("node", "")},
                   {"reason", body.value("reason", "")},
                   {"requested_by", who.name},
                   {"approved_by", who.name}};
    result = Decide(std::move(record), /*approved=*/true, options_.clock->Now());
  }
  RecordAudit(who, "request_action", action, body.dump(), result.status());
  return result;
}

absl::StatusOr<Json> EscalationService::ApproveAction(std::string_view id,
                                                      const Identity& who) {
  absl::StatusOr<Json> result;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = actions_.find(id);
    if (it == actions_.end()) {
      result = absl::NotFoundError(absl::StrCat("no action \"", std::string(id), "\""));
    } else if (it->second.value("state", "") != "pending_approval") {
      result = absl::FailedPreconditionError(absl::StrCat(
          std::string(id), " is ", it->second.value("state", ""),
          ", not pending_approval"));
    } else {
      Json action = it->second;
      action["approved_by"] = who.name;
      result = Decide(std::move(action), /*approved=*/true, options_.clock->Now());
      QueueApprovalOperation(*result, "approve", who.name);
    }
  }
  RecordAudit(who, "approve_action", id, "", result.status());
  return result;
}

void EscalationService::NotePairApproval(const std::string& pair_key, const Json& op) {
  const std::string from = StringAt(op, "from", "");
  const std::string action_id = StringAt(op, "action_id", "");
  if (from == options_.pair->self || !IsActionId(action_id)) return;
  const auto ts_at = op.find("ts");
  if (ts_at == op.end() || !ts_at->is_number()) return;
  const double ts = ts_at->get<double>();
  std::lock_guard<std::mutex> l(mu_);
  // What the other member asked long ago is no longer taken over.
  const double horizon = options_.clock->Now() - kTakeOverHorizonSeconds;
  std::erase_if(pair_approvals_,
                 [&](const auto& entry) { return entry.second.ts < horizon; });
  PairApproval& approval = pair_approvals_[pair_key];
  if (approval.ts >= ts) return;
  approval.action_id = action_id;
  approval.approved_by =
      StringAt(op, "verb", "") == "approve"
          ? absl::StrCat(StringAt(op, "who", "someone"), " (via ", from, ")")
          : std::string();
  approval.ts = ts;
}

void EscalationService::MarkStartedActions() {
  std::vector<std::string> marks;
  std::vector<std::pair<std::string, Json>> operations;
  {
    std::lock_guard<std::mutex> l(mu_);
    marks.swap(action_marks_);
    operations.swap(approval_operations_);
  }
  if (options_.pair->action_started) {
    for (const std::string& key : marks) options_.pair->action_started(key);
  }
  for (const auto& [key, operation] : operations) options_.pair->share_operation(key, operation);
}

void EscalationService::TakeOverActions() {
  if (!options_.pair->started_actions) return;
  // Read the marks before taking the lock: etcd may be slow.
  absl::StatusOr<absl::flat_hash_set<std::string>> started = options_.pair->started_actions();
  std::lock_guard<std::mutex> l(mu_);
  if (!started.ok()) {
    std::fprintf(stderr,
                 "vigil-server: leading the pair now, but the old leader's actions cannot be "
                 "read (%s): starting none of earlier incidents\n",
                 std::string(started.status().message()).c_str());
    return;
  }
  const double now = options_.clock->Now();
  int incidents = 0;
  const size_t before = actions_.size();
  for (const auto& [id, incident] : incidents_) {
    if (incident.state == IncidentState::kResolved || id == halt_incident_) continue;
    absl::StatusOr<Lifecycle> lifecycle = escalator_.LifecycleOf(id);
    if (lifecycle.ok() && *lifecycle == Lifecycle::kResolved) continue;
    // Marks live a day: older decisions cannot be told apart from new ones.
    const double decided =
        incident.severity_history.empty() ? incident.ts : incident.severity_history.back().ts;
    if (now - decided > kTakeOverHorizonSeconds) continue;
    StartActions(incident, &*started);
    ++incidents;
  }
  if (actions_.size() != before) {
    std::fprintf(stderr,
                 "vigil-server: leading the pair now: %zu action(s) of %d open incident(s) the "
                 "old leader had not sent\n",
                 actions_.size() - before, incidents);
  }
}

Json EscalationService::Remediation() const {
  std::lock_guard<std::mutex> l(mu_);
  const std::shared_ptr<const Settings> settings = this->settings();
  const InterlockConfig& c = settings->escalation.interlocks;
  std::vector<std::string> approval;
  for (Severity s : c.approval_severities) approval.emplace_back(SeverityName(s));
  return {{"tripped", gate_.tripped()},
          {"halt_incident", halt_incident_},
          {"dry_run", c.dry_run},
          {"approval_severities", approval},
          {"max_cordons", c.max_cordons},
          {"max_pauses", c.max_pauses},
          {"window_seconds", c.window_seconds},
          {"max_job_node_percent", c.max_job_node_percent},
          {"actuator", options_.actuator.url}};
}

Json EscalationService::ResetRemediation(const Identity& who) {
  std::string halt;
  {
    std::lock_guard<std::mutex> l(mu_);
    const double now = options_.clock->Now();
    halt = ResetBreaker(now);
    breaker_ts_ = now;
    QueueFleetEntry("breaker", {{"tripped", false}, {"by", who.name}, {"ts", now}});
  }
  if (options_.fleet.has_value()) {
    // The fleet's count starts again too (the gate forgot its own).
    if (absl::Status s = options_.fleet->clear_slots(); !s.ok())
      std::fprintf(stderr, "vigil-server: cluster: cannot clear the breaker's slots: %s\n",
                   std::string(s.message()).c_str());
  }
  ResolveHaltIncident(halt);
  RecordAudit(who, "reset_remediation", halt, "", absl::OkStatus());
  return Remediation();
}

std::string EscalationService::ResetBreaker(double now) {
  gate_.Reset(now);
  dirty_ = true;
  return std::exchange(halt_incident_, "");
}

void EscalationService::ResolveHaltIncident(const std::string& halt) {
  if (halt.empty()) return;
  IncidentUpdate update;
  update.type = UpdateType::kResolved;
  update.ts = options_.clock->Now();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = incidents_.find(halt); it != incidents_.end())
      update.incident = it->second;
  }
  update.incident.id = halt;
  update.incident.state = IncidentState::kResolved;
  update.incident.resolved_ts = update.ts;
  (void)options_.detection->PublishExternal(std::move(update));
}

void EscalationService::ClaimHaltIncident() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (halt_incident_.empty()) return;
  }
  std::optional<Incident> left =
      options_.detection->ClaimInherited("remediation_halted");
  std::lock_guard<std::mutex> l(mu_);
  if (left && left->id == halt_incident_) incidents_[left->id] = *std::move(left);
}

void EscalationService::OpenHaltIncidents() {
  std::vector<std::string> reasons;
  std::string job;
  {
    std::lock_guard<std::mutex> l(mu_);
    reasons.swap(pending_halts_);
    if (reasons.empty() || !halt_incident_.empty()) return;
  }
  const double now = options_.clock->Now();
  IncidentUpdate update;
  update.type = UpdateType::kOpened;
  update.ts = now;
  Incident& incident = update.incident;
  incident.severity = Severity::kP1;
  incident.kind = "remediation_halted";
  incident.job = "cluster";
  incident.ts = now;
  incident.last_update_ts = now;
  incident.summary = absl::StrCat("Automatic remediation halted: ", reasons.front());
  incident.hint_category = HintCategory::kGeneral;
  incident.hint =
      "The circuit breaker stopped automatic cordons/pauses because too many "
      "fired at once: check for a cluster-wide cause (network, power, a bad "
      "rule) before acting by hand; reset with `vigilctl remediation reset`.";
  incident.responses = {Response::kNotifySre};
  incident.severity_history = {{Severity::kP1, now, "remediation_halted"}};
  absl::StatusOr<std::string> id = options_.detection->PublishExternal(update);
  if (id.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    halt_incident_ = *id;
    dirty_ = true;
  }
}

}  // namespace vigil
