#include "server/escalation_service.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/catch_all.h"
#include "common/status_macros.h"
#include "notify/signing.h"
#include "server/detection_service.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

// The string at `key` of the object `obj`, or `fallback` when it is absent
// or not a string.
std::string StringAt(const Json& obj, const char* key,
                     const std::string& fallback) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>()
                                            : fallback;
}

constexpr char kStateKey[] = "escalation";
constexpr char kActionsStream[] = "actions";
constexpr char kAuditStream[] = "audit";
constexpr char kActuatorReceiver[] = "vigil-actuator";
constexpr double kInf = std::numeric_limits<double>::infinity();
// Action records older than this are not reloaded at start (they stay in
// the "actions" stream).
constexpr double kActionMemorySeconds = 7 * 86400.0;

std::string TimelineStream(std::string_view id) {
  return absl::StrCat("timeline/", std::string(id));
}

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

// A plain-text diagnostic report of `incident`: what, where, since when,
// the hint and every piece of evidence with its baseline.
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

Json StatusJson(const absl::Status& s) {
  return s.ok() ? Json("ok") : Json(std::string(s.ToString()));
}

// `notice` as stored in an outbox item's payload: everything a renderer
// needs besides the receiver's configuration, no credentials.
Json NoticeToJson(const Notice& notice) {
  Json recipients = Json::array();
  for (const Recipient& r : notice.recipients)
    recipients.push_back(
        {{"name", r.name}, {"phone", r.phone}, {"email", r.email}, {"im", r.im}});
  Json j = {{"key", notice.key},
            {"event", notice.event},
            {"incident_id", notice.incident_id},
            {"severity", notice.severity},
            {"kind", notice.kind},
            {"job", notice.job},
            {"node", notice.node},
            {"summary", notice.summary},
            {"hint", notice.hint},
            {"state", notice.state},
            {"incident_ts", notice.incident_ts},
            {"url", notice.url},
            {"recipients", recipients},
            {"acknowledged_by", notice.acknowledged_by},
            {"report", notice.report}};
  if (notice.gpu) j["gpu"] = *notice.gpu;
  return j;
}

// The notice NoticeToJson stored; kInvalidArgument if `j` is not one.
absl::StatusOr<Notice> NoticeFromJson(const Json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("notice: not an object");
  Notice n;
  n.key = StringAt(j, "key", "");
  n.event = StringAt(j, "event", "");
  n.incident_id = StringAt(j, "incident_id", "");
  n.severity = StringAt(j, "severity", "");
  n.kind = StringAt(j, "kind", "");
  n.job = StringAt(j, "job", "");
  n.node = StringAt(j, "node", "");
  n.summary = StringAt(j, "summary", "");
  n.hint = StringAt(j, "hint", "");
  n.state = StringAt(j, "state", "");
  n.url = StringAt(j, "url", "");
  n.acknowledged_by = StringAt(j, "acknowledged_by", "");
  n.report = StringAt(j, "report", "");
  if (auto gpu = j.find("gpu"); gpu != j.end()) {
    if (!gpu->is_number_integer())
      return absl::InvalidArgumentError("notice.gpu: not an integer");
    n.gpu = gpu->get<int>();
  }
  if (auto ts = j.find("incident_ts"); ts != j.end() && ts->is_number())
    n.incident_ts = ts->get<double>();
  auto recipients = j.find("recipients");
  if (recipients == j.end() || !recipients->is_array())
    return absl::InvalidArgumentError("notice.recipients: not an array");
  for (const Json& r : *recipients) {
    if (!r.is_object())
      return absl::InvalidArgumentError("notice.recipients: not an object");
    n.recipients.push_back({StringAt(r, "name", ""), StringAt(r, "phone", ""),
                            StringAt(r, "email", ""), StringAt(r, "im", "")});
  }
  return n;
}

// The requests of a page (payload {"notice"}) to the receiver named
// `receiver`, from its configuration in `notifications` at `now`.
// kNotFound when no such receiver is configured (any more).
absl::StatusOr<std::vector<OutboundRequest>> RenderPage(
    const NotificationOptions& notifications, const std::string& receiver,
    const Json& payload, double now) {
  const ReceiverConfig* config = nullptr;
  for (const ReceiverConfig& r : notifications.receivers) {
    if (r.name == receiver) config = &r;
  }
  if (config == nullptr)
    return absl::NotFoundError(
        absl::StrCat("no receiver ", receiver, " is configured"));
  auto notice = payload.find("notice");
  if (!payload.is_object() || notice == payload.end())
    return absl::InvalidArgumentError("payload: no notice");
  absl::StatusOr<Notice> parsed = NoticeFromJson(*notice);
  if (!parsed.ok()) return parsed.status();
  return RenderNotice(*config, *parsed, now);
}

// The request of an action (payload {"id", "body"}) to vigil-actuator at
// its configured URL; signed by the outbox. kNotFound for another
// receiver, kFailedPrecondition when no actuator is configured (any more).
absl::StatusOr<std::vector<OutboundRequest>> RenderAction(
    const ActuatorOptions& actuator, const std::string& receiver,
    const Json& payload) {
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

}  // namespace

EscalationService::EscalationService(EscalationServiceOptions options)
    : options_(std::move(options)),
      escalator_(options_.escalation),
      gate_(options_.escalation.interlocks) {
  OutboxOptions o;
  o.store = options_.store;
  o.transport = options_.transport;
  o.clock = options_.clock;
  o.base_backoff_seconds = options_.notifications.retry_base_seconds;
  o.max_backoff_seconds = options_.notifications.retry_max_seconds;
  OutboxOptions actions = o;
  // Requests are rendered at send time from the configuration, so the
  // outboxes store no credentials.
  o.render = [this](const std::string& receiver, const Json& payload,
                    double now) {
    return RenderPage(options_.notifications, receiver, payload, now);
  };
  actions.render = [this](const std::string& receiver, const Json& payload,
                          double) {
    return RenderAction(options_.actuator, receiver, payload);
  };
  for (const ReceiverConfig& r : options_.notifications.receivers) {
    if (int rate = EffectiveRatePerMinute(r); rate > 0) o.rate_per_minute[r.name] = rate;
    if (r.type == "webhook" && r.settings.contains("secret") &&
        r.settings["secret"].is_string())
      o.signing_secrets[r.name] = r.settings["secret"].get<std::string>();
  }
  outbox_ = std::make_unique<Outbox>(
      std::move(o), [this](const DeliveryStatus& s) { OnDelivery(s); });
  // The actuator answers once the action is done, which for a checkpoint
  // means after the job confirmed it or the checkpoint timeout passed.
  actions.stream = "outbox/actions";
  actions.request_timeout_seconds = options_.actuator.checkpoint_timeout_seconds + 60;
  if (!options_.actuator.secret.empty())
    actions.signing_secrets[kActuatorReceiver] = options_.actuator.secret;
  action_outbox_ = std::make_unique<Outbox>(
      std::move(actions), [this](const DeliveryStatus& s) { OnDelivery(s); });
}

EscalationService::~EscalationService() { Stop(); }

absl::Status EscalationService::Start() {
  if (started_) return absl::FailedPreconditionError("already started");
  {
    std::lock_guard<std::mutex> l(mu_);
    VIGIL_RETURN_IF_ERROR(LoadState());
  }
  VIGIL_RETURN_IF_ERROR(outbox_->Start());
  if (absl::Status s = action_outbox_->Start(); !s.ok()) {
    outbox_->Stop();
    return s;
  }
  started_ = true;
  // The first tick is due one period after Start(), not after the thread
  // happens to run: a clock moved in between must still be noticed.
  const double first_tick = options_.clock->Now() + options_.tick_seconds;
  tick_thread_ = std::thread([this, first_tick] { TickLoop(first_tick); });
  return absl::OkStatus();
}

void EscalationService::Stop() {
  if (!started_) return;
  {
    std::lock_guard<std::mutex> l(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.notify_all();
  tick_thread_.join();
  outbox_->Stop();
  action_outbox_->Stop();
  std::lock_guard<std::mutex> l(mu_);
  (void)SaveState();
  started_ = false;
}

absl::Status EscalationService::LoadState() {
  absl::StatusOr<std::string> text = options_.store->GetState(kStateKey);
  // Without a snapshot (a crash before the first) the actions still count.
  if (absl::IsNotFound(text.status())) return LoadActions();
  VIGIL_RETURN_IF_ERROR(text.status());
  Json state = Json::parse(*text, nullptr, false);
  if (state.is_discarded() || !state.is_object())
    return absl::DataLossError("stored escalation state is not JSON");
  absl::Status s = escalator_.Import(state.value("escalator", Json::object()));
  if (s.ok()) s = gate_.Import(state.value("gate", Json::object()));
  if (!s.ok())
    return absl::DataLossError(
        absl::StrCat("stored escalation state: ", s.message()));
  next_action_ = state.value("next_action", int64_t{1});
  next_silence_ = state.value("next_silence", int64_t{1});
  halt_incident_ = state.value("halt_incident", std::string());
  const Json stored_incidents = state.value("incidents", Json::object());
  for (const auto& [id, j] : stored_incidents.items()) {
    Incident& incident = incidents_[id];
    incident.id = id;
    incident.severity = ParseSeverity(j.value("severity", "P3")).value_or(Severity::kP3);
    incident.kind = j.value("kind", "");
    incident.job = j.value("job", "");
    incident.node = j.value("node", "");
    if (j.contains("gpu") && j["gpu"].is_number_integer())
      incident.gpu = j["gpu"].get<int>();
    incident.ts = j.value("ts", 0.0);
    incident.summary = j.value("summary", "");
    incident.hint = j.value("hint", "");
  }
  return LoadActions();
}

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
    if (absl::StartsWith(id, "act-") &&
        absl::SimpleAtoi(absl::string_view(id).substr(4), &number))
      next_action_ = std::max(next_action_, number + 1);
    actions_[id] = std::move(action);
  }
  return absl::OkStatus();
}

absl::Status EscalationService::SaveState() {
  Json incidents = Json::object();
  for (const auto& [id, incident] : incidents_) {
    incidents[id] = {{"severity", std::string(SeverityName(incident.severity))},
                     {"kind", incident.kind},
                     {"job", incident.job},
                     {"node", incident.node},
                     {"gpu", incident.gpu ? Json(*incident.gpu) : Json(nullptr)},
                     {"ts", incident.ts},
                     {"summary", incident.summary},
                     {"hint", incident.hint}};
  }
  Json state = {{"escalator", escalator_.Export()},
                {"gate", gate_.Export()},
                {"next_action", next_action_},
                {"next_silence", next_silence_},
                {"halt_incident", halt_incident_},
                {"incidents", std::move(incidents)}};
  dirty_ = false;
  return options_.store->PutState(kStateKey, state.dump());
}

void EscalationService::OnIncidentUpdate(const IncidentUpdate& update) {
  std::lock_guard<std::mutex> l(mu_);
  const double now = options_.clock->Now();
  incidents_[update.incident.id] = update.incident;
  Handle(escalator_.OnIncidentUpdate(update, now));
  if (update.type == UpdateType::kOpened || update.type == UpdateType::kReopened ||
      update.type == UpdateType::kSeverityRaised)
    StartActions(update.incident);
  dirty_ = true;
  if (options_.changes != nullptr)
    options_.changes->Publish({{"topic", "incident"},
                               {"id", update.incident.id},
                               {"type", std::string(UpdateTypeName(update.type))},
                               {"ts", update.ts},
                               {"severity", std::string(SeverityName(update.incident.severity))},
                               {"state", std::string(IncidentStateName(update.incident.state))}});
}

void EscalationService::Handle(const EscalationOutput& out) {
  for (const EscalationEvent& e : out.events) {
    AddTimeline(e.incident_id, {{"type", e.type},
                                {"ts", e.ts},
                                {"who", e.who},
                                {"detail", e.detail}});
  }
  for (const Page& page : out.pages) EnqueuePage(page);
  if (!out.pages.empty() || !out.events.empty()) dirty_ = true;
}

void EscalationService::EnqueuePage(const Page& page) {
  auto incident_it = incidents_.find(page.incident_id);
  const std::string page_name =
      absl::StrCat(std::string(PageEventName(page.event)), " via ", page.channel,
                   page.users.empty() ? "" : " to ",
                   absl::StrJoin(page.users, ", "));
  auto timeline = [&](std::string type, std::string detail) {
    AddTimeline(page.incident_id, {{"type", std::move(type)},
                                   {"ts", page.ts},
                                   {"key", page.key},
                                   {"channel", page.channel},
                                   {"users", page.users},
                                   {"detail", std::move(detail)}});
  };
  if (incident_it == incidents_.end())
    return timeline("page_skipped", "incident unknown to escalation");
  const Incident& incident = incident_it->second;
  auto route_it = options_.notifications.channels.find(page.channel);
  if (route_it == options_.notifications.channels.end() ||
      route_it->second.receivers.empty())
    return timeline("page_skipped",
                    absl::StrCat("no receiver configured for channel ", page.channel));

  Notice notice;
  notice.event = std::string(PageEventName(page.event));
  notice.incident_id = incident.id;
  notice.severity = std::string(SeverityName(incident.severity));
  notice.kind = incident.kind;
  notice.job = incident.job;
  notice.node = incident.node;
  notice.gpu = incident.gpu;
  notice.summary = incident.summary;
  notice.hint = incident.hint;
  notice.incident_ts = incident.ts;
  notice.url = absl::StrCat(options_.notifications.public_url, "/#/incidents/",
                            incident.id);
  if (absl::StatusOr<Json> status = escalator_.StatusOf(incident.id); status.ok()) {
    notice.state = status->value("lifecycle", "firing");
    notice.acknowledged_by = status->value("acknowledged_by", "");
  }
  for (const std::string& name : page.users) {
    Recipient r;
    r.name = name;
    for (const User& u : options_.escalation.users) {
      if (u.name == name) r = {u.name, u.phone, u.email, u.im};
    }
    notice.recipients.push_back(std::move(r));
  }
  if (page.channel == "email" || page.channel == "ticket")
    notice.report = DiagnosticReport(incident);

  const ChannelRoute& route = route_it->second;
  std::vector<OutboxItem> items;
  for (const std::string& receiver_name : route.receivers) {
    const ReceiverConfig* receiver = nullptr;
    for (const ReceiverConfig& r : options_.notifications.receivers) {
      if (r.name == receiver_name) receiver = &r;
    }
    if (receiver == nullptr) continue;  // the config loader rejects this
    notice.key = route.failover ? page.key : absl::StrCat(page.key, "@", receiver->name);
    absl::StatusOr<std::vector<OutboundRequest>> requests =
        RenderNotice(*receiver, notice, page.ts);
    if (!requests.ok()) {
      timeline("page_skipped", absl::StrCat(receiver->name, ": ",
                                            requests.status().message()));
      continue;
    }
    if (requests->empty()) continue;  // nothing to say on this receiver
    // Rendered again at each send (RenderPage); only the notice is stored.
    OutboxRoute outbox_route{receiver->name, receiver->type,
                             Json{{"notice", NoticeToJson(notice)}}};
    if (route.failover && !items.empty()) {
      items.back().routes.push_back(std::move(outbox_route));
      continue;
    }
    OutboxItem item;
    item.key = notice.key;
    item.incident_id = incident.id;
    item.kind = "page";
    item.description = absl::StrCat(notice.severity, " ", page_name);
    item.priority = static_cast<int>(incident.severity);
    item.routes.push_back(std::move(outbox_route));
    items.push_back(std::move(item));
  }
  for (OutboxItem& item : items) {
    const std::string receivers = [&] {
      std::vector<std::string> names;
      for (const OutboxRoute& r : item.routes) names.push_back(r.receiver);
      return absl::StrJoin(names, " -> ");
    }();
    absl::Status s = outbox_->Enqueue(std::move(item));
    if (absl::IsAlreadyExists(s)) continue;  // restored state re-asked for it
    timeline(s.ok() ? "page_queued" : "page_failed",
             s.ok() ? absl::StrCat(page_name, " (", receivers, ")")
                    : std::string(s.message()));
  }
}

void EscalationService::StartActions(const Incident& incident) {
  for (Response response : incident.responses) {
    const std::string action = ActionOf(response);
    if (action.empty()) continue;
    if (action == "cordon_node" && incident.node.empty()) continue;
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
    Decide(std::move(record), /*approved=*/false, options_.clock->Now());
  }
}

Json EscalationService::Decide(Json action, bool approved, double now) {
  if (!action.contains("id")) {
    action["id"] = absl::StrFormat("act-%06d", next_action_++);
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
  const ActionDecision decision = gate_.Decide(request, job_nodes, approved, now);
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

void EscalationService::OnDelivery(const DeliveryStatus& status) {
  std::lock_guard<std::mutex> l(mu_);
  if (status.kind == "action") {
    const std::string id = status.key.substr(status.key.find('/') + 1);
    auto it = actions_.find(id);
    if (it == actions_.end()) return;
    Json action = it->second;
    if (status.state == "pending") {
      action["detail"] = status.last_detail;
      action["attempts"] = status.attempts;
      actions_[id] = action;  // progress only; not a timeline entry
      return;
    }
    action["state"] = status.state == "delivered" ? "done" : "failed";
    // The actuator's answer is external input: a field of another type
    // than the contract's is ignored, never thrown on.
    Json answer = Json::parse(status.last_response, nullptr, false);
    if (answer.is_object()) {
      action["result"] = answer;
      if (StringAt(answer, "status", "") == "failed") action["state"] = "failed";
      action["detail"] = StringAt(answer, "detail", status.last_detail);
    } else {
      action["detail"] = status.last_detail;
    }
    action["updated_ts"] = status.updated_ts;
    SaveAction(action);
    return;
  }
  if (status.incident_id.empty()) return;
  AddTimeline(status.incident_id, {{"type", "delivery"},
                                   {"ts", status.updated_ts},
                                   {"key", status.key},
                                   {"state", status.state},
                                   {"receiver", status.receiver},
                                   {"attempts", status.attempts},
                                   {"detail", status.last_detail}});
}

void EscalationService::AddTimeline(std::string_view id, Json event) {
  const double ts = event.value("ts", options_.clock->Now());
  (void)options_.store->AppendEvent(Event{TimelineStream(id), ts, 0, event.dump()});
  if (options_.changes != nullptr)
    options_.changes->Publish({{"topic", "incident"},
                               {"id", std::string(id)},
                               {"type", event.value("type", "")},
                               {"ts", ts}});
}

void EscalationService::AddAudit(const Identity& who, std::string_view action,
                                 std::string_view target, std::string_view detail,
                                 const absl::Status& result) {
  Json entry = {{"ts", options_.clock->Now()},
                {"who", who.name},
                {"role", std::string(RoleName(who.role))},
                {"action", std::string(action)},
                {"target", std::string(target)},
                {"detail", std::string(detail)},
                {"result", StatusJson(result)}};
  (void)options_.store->AppendEvent(
      Event{kAuditStream, entry["ts"].get<double>(), 0, entry.dump()});
  if (options_.changes != nullptr)
    options_.changes->Publish({{"topic", "audit"},
                               {"action", std::string(action)},
                               {"target", std::string(target)},
                               {"ts", entry["ts"]}});
}

absl::StatusOr<Json> EscalationService::Operate(std::string_view verb,
                                                std::string_view id,
                                                const Identity& who,
                                                std::string_view comment) {
  absl::StatusOr<Json> status;
  {
    std::lock_guard<std::mutex> l(mu_);
    const double now = options_.clock->Now();
    absl::StatusOr<EscalationOutput> out;
    if (verb == "acknowledge") {
      out = escalator_.Acknowledge(id, who.name, now);
    } else if (verb == "unacknowledge") {
      out = escalator_.Unacknowledge(id, who.name, now);
    } else {
      out = escalator_.Resolve(id, who.name, now);
    }
    if (out.ok()) {
      Handle(*out);
      if (!comment.empty())
        AddTimeline(id, {{"type", "comment"},
                         {"ts", now},
                         {"who", who.name},
                         {"detail", std::string(comment)}});
      dirty_ = true;
      status = escalator_.StatusOf(id);
      if (status.ok()) (*status)["id"] = std::string(id);
    } else {
      status = out.status();
    }
  }
  AddAudit(who, verb, id, comment, status.status());
  return status;
}

absl::StatusOr<Json> EscalationService::Acknowledge(std::string_view id,
                                                    const Identity& who,
                                                    std::string_view comment) {
  return Operate("acknowledge", id, who, comment);
}

absl::StatusOr<Json> EscalationService::Unacknowledge(std::string_view id,
                                                      const Identity& who) {
  return Operate("unacknowledge", id, who, "");
}

absl::StatusOr<Json> EscalationService::Resolve(std::string_view id,
                                                const Identity& who,
                                                std::string_view comment) {
  return Operate("resolve", id, who, comment);
}

absl::StatusOr<Json> EscalationService::AddSilence(const Json& body,
                                                   const Identity& who) {
  absl::StatusOr<Json> result;
  std::string id;
  {
    std::lock_guard<std::mutex> l(mu_);
    const double now = options_.clock->Now();
    absl::StatusOr<Silence> silence = ParseSilence(body, now);
    if (silence.ok()) {
      silence->id = absl::StrFormat("sil-%06d", next_silence_++);
      silence->author = who.name;
      id = silence->id;
      absl::StatusOr<EscalationOutput> out = escalator_.AddSilence(*silence, now);
      if (out.ok()) {
        Handle(*out);
        dirty_ = true;
        result = SilenceToJson(*silence);
      } else {
        result = out.status();
      }
    } else {
      result = silence.status();
    }
  }
  AddAudit(who, "silence", id, body.dump(), result.status());
  return result;
}

absl::StatusOr<Json> EscalationService::ExpireSilence(std::string_view id,
                                                      const Identity& who) {
  absl::StatusOr<Json> result;
  {
    std::lock_guard<std::mutex> l(mu_);
    const double now = options_.clock->Now();
    Json found;
    for (const Silence& s : escalator_.ActiveSilences(now)) {
      if (s.id == id) found = SilenceToJson(s);
    }
    absl::StatusOr<EscalationOutput> out = escalator_.ExpireSilence(id, who.name, now);
    if (out.ok()) {
      Handle(*out);
      dirty_ = true;
      if (found.is_object()) found["ends_at"] = now;
      result = found.is_object() ? found : Json{{"id", std::string(id)}};
    } else {
      result = out.status();
    }
  }
  AddAudit(who, "expire_silence", id, "", result.status());
  return result;
}

Json EscalationService::ListSilences() const {
  std::lock_guard<std::mutex> l(mu_);
  Json list = Json::array();
  for (const Silence& s : escalator_.ActiveSilences(options_.clock->Now()))
    list.push_back(SilenceToJson(s));
  return {{"silences", std::move(list)}};
}

Json EscalationService::ListDeliveries(std::string_view incident_id,
                                       size_t limit) const {
  std::vector<DeliveryStatus> all = outbox_->List(incident_id, limit);
  for (DeliveryStatus& s : action_outbox_->List(incident_id, limit))
    all.push_back(std::move(s));
  std::stable_sort(all.begin(), all.end(),
                   [](const DeliveryStatus& a, const DeliveryStatus& b) {
                     return a.created_ts > b.created_ts;
                   });
  if (all.size() > limit) all.resize(limit);
  Json list = Json::array();
  for (const DeliveryStatus& s : all) list.push_back(DeliveryStatusToJson(s));
  return {{"deliveries", std::move(list)}};
}

Json EscalationService::WithoutRawAnswers(Json listing) {
  for (const char* list : {"deliveries", "actions"}) {
    auto it = listing.find(list);
    if (it == listing.end() || !it->is_array()) continue;
    for (Json& entry : *it) {
      if (!entry.is_object()) continue;
      entry.erase("last_response");
      entry.erase("result");
    }
  }
  return listing;
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
  AddAudit(who, "request_action", action, body.dump(), result.status());
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
    }
  }
  AddAudit(who, "approve_action", id, "", result.status());
  return result;
}

Json EscalationService::Remediation() const {
  std::lock_guard<std::mutex> l(mu_);
  const InterlockConfig& c = options_.escalation.interlocks;
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
    gate_.Reset(options_.clock->Now());
    halt = std::exchange(halt_incident_, "");
    dirty_ = true;
  }
  if (!halt.empty()) {
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
  AddAudit(who, "reset_remediation", halt, "", absl::OkStatus());
  return Remediation();
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

Json EscalationService::Audit(size_t limit) const {
  std::vector<Event> events =
      options_.store->ListEvents(kAuditStream, -kInf, kInf, 1'000'000);
  Json list = Json::array();
  for (auto it = events.rbegin(); it != events.rend() && list.size() < limit; ++it) {
    Json entry = Json::parse(it->payload, nullptr, false);
    if (!entry.is_discarded()) list.push_back(std::move(entry));
  }
  return {{"entries", std::move(list)}};
}

Json EscalationService::OnCall() const {
  const double now = options_.clock->Now();
  Json list = Json::array();
  for (const Schedule& s : options_.escalation.schedules) {
    absl::StatusOr<std::string> user = OnCallAt(s, now);
    list.push_back({{"name", s.name}, {"user", user.ok() ? Json(*user) : Json(nullptr)}});
  }
  return {{"schedules", std::move(list)}};
}

void EscalationService::Decorate(Json* incident) const {
  const std::string id = incident->value("id", "");
  std::lock_guard<std::mutex> l(mu_);
  absl::StatusOr<Json> status = escalator_.StatusOf(id);
  if (status.ok()) {
    (*incident)["lifecycle"] = status->value("lifecycle", "firing");
    (*incident)["escalation"] = *std::move(status);
  } else {
    (*incident)["lifecycle"] = incident->value("state", "firing");
  }
}

std::vector<Json> EscalationService::Timeline(std::string_view id) const {
  std::vector<Json> out;
  for (const Event& e : options_.store->ListEvents(TimelineStream(id), -kInf,
                                                   kInf, 100'000)) {
    Json j = Json::parse(e.payload, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

absl::StatusOr<std::string> EscalationService::TwilioCallback(
    std::string_view query, const std::multimap<std::string, std::string>& form,
    std::string_view signature) {
  const ReceiverConfig* voice = nullptr;
  for (const ReceiverConfig& r : options_.notifications.receivers) {
    if (r.type == "twilio_voice") voice = &r;
  }
  if (voice == nullptr)
    return absl::NotFoundError("no twilio_voice receiver is configured");
  // Twilio signs the full URL followed by every POST parameter, sorted by
  // name, as name + value, with HMAC-SHA1 under the auth token (base64).
  std::string signed_text = absl::StrCat(
      voice->settings.value("callback_url", ""), query.empty() ? "" : "?",
      std::string(query));
  for (const auto& [name, value] : form) absl::StrAppend(&signed_text, name, value);
  const std::string expected = Base64Encode(
      HmacSha1(voice->settings.value("auth_token", ""), signed_text));
  if (!ConstantTimeEquals(expected, signature))
    return absl::UnauthenticatedError("X-Twilio-Signature does not match");
  {
    auto call = form.find("CallSid");
    if (call == form.end() || call->second.empty())
      return absl::InvalidArgumentError("Twilio callback without CallSid");
    auto digits = form.find("Digits");
    const std::string seen_key = absl::StrCat(
        call->second, "/", digits == form.end() ? "" : digits->second);
    const double now = options_.clock->Now();
    constexpr double kTwilioReplaySeconds = 86400;
    constexpr size_t kMaxTwilioCalls = 100'000;
    std::lock_guard<std::mutex> l(twilio_mu_);
    std::erase_if(twilio_calls_, [&](const auto& entry) {
      return entry.second < now - kTwilioReplaySeconds;
    });
    if (twilio_calls_.contains(seen_key))
      return absl::AlreadyExistsError(
          "this Twilio callback was already handled (a replay?)");
    if (twilio_calls_.size() >= kMaxTwilioCalls) twilio_calls_.clear();
    twilio_calls_.emplace(seen_key, now);
  }
  std::map<std::string, std::string> query_params;
  for (absl::string_view pair : absl::StrSplit(absl::string_view(query.data(), query.size()), '&', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(pair, absl::MaxSplits('=', 1));
    query_params[UrlDecode(kv.first)] = UrlDecode(kv.second);
  }
  const std::string incident = query_params["incident"];
  const std::string key = query_params["key"];
  auto digits_it = form.find("Digits");
  const std::string digits = digits_it == form.end() ? "" : digits_it->second;
  // The key names who was called: "<incident>/<n>/phone/<user>".
  const std::string user = key.substr(key.rfind('/') + 1);
  const Identity who{absl::StrCat("phone:", user), Role::kOperator};
  std::string say;
  if (digits == "1") {
    absl::StatusOr<Json> s = Acknowledge(incident, who, "acknowledged by phone");
    say = s.ok() ? "Incident acknowledged. Thank you."
                 : absl::StrCat("Could not acknowledge: ", s.status().message());
  } else if (digits == "2") {
    absl::StatusOr<Json> s = Resolve(incident, who, "resolved by phone");
    say = s.ok() ? "Incident resolved."
                 : absl::StrCat("Could not resolve: ", s.status().message());
  } else {
    say = "No valid choice received. The incident stays open.";
  }
  return absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Say>", XmlEscape(say),
      "</Say></Response>");
}

Outbox::Counters EscalationService::outbox_counters() const {
  Outbox::Counters pages = outbox_->counters();
  const Outbox::Counters actions = action_outbox_->counters();
  pages.pending += actions.pending;
  pages.delivered += actions.delivered;
  pages.failed += actions.failed;
  pages.attempts += actions.attempts;
  pages.persist_errors += actions.persist_errors;
  pages.unstored_enqueues += actions.unstored_enqueues;
  pages.unstored += actions.unstored;
  pages.delete_errors += actions.delete_errors;
  return pages;
}

void EscalationService::TickLoop(double first_tick) {
  Clock& clock = *options_.clock;
  std::unique_lock<std::mutex> lock(tick_mu_);
  double next = first_tick;
  while (!stopping_) {
    clock.WaitUntil(lock, tick_cv_, next);
    if (stopping_) break;
    const double now = clock.Now();
    lock.unlock();
    // A bug in one tick must not end the thread that re-pages everyone.
    if (std::string error = CatchAll([&] {
          if (now >= next) {
            next = now + options_.tick_seconds;
            std::lock_guard<std::mutex> l(mu_);
            Handle(escalator_.Tick(now));
            if (dirty_) (void)SaveState();
          }
          OpenHaltIncidents();
        });
        !error.empty()) {
      next = now + options_.tick_seconds;
      std::fprintf(stderr, "vigil-server: escalation tick threw %s\n",
                   error.c_str());
    }
    lock.lock();
  }
}

}  // namespace vigil
