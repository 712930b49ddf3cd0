// The core of EscalationService: incident updates become pages, operators
// acknowledge, resolve and silence, the state is kept across restarts, and
// the tick thread re-pages. Actions and their gate: escalation_actions.cc;
// timelines, audit log and delivery listings: escalation_journal.cc; the
// phone keypress callback: twilio_callback.cc.
#include "server/escalation/escalation_service.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_join.h"
#include "common/catch_all.h"
#include "common/status_macros.h"
#include "server/escalation/diagnostic_report.h"
#include "server/escalation/escalation_internal.h"
#include "server/escalation/page_notice.h"

namespace vigil {
namespace {

using Json = nlohmann::json;
using escalation_internal::kActuatorReceiver;
using escalation_internal::RenderAction;
using escalation_internal::StringAt;

constexpr char kStateKey[] = "escalation";
// How long a silence's fleet entry outlives the silence: a server that was
// down for less still learns it ended; then etcd drops the entry.
constexpr double kSilenceEntryAfterEndSeconds = 24 * 3600;

// The receivers' send rates and webhook signing secrets (OutboxOptions).
void ReceiverLimits(const NotificationOptions& notifications,
                    std::map<std::string, int>* rate_per_minute,
                    std::map<std::string, std::string>* signing_secrets) {
  for (const ReceiverConfig& r : notifications.receivers) {
    if (int rate = EffectiveRatePerMinute(r); rate > 0) (*rate_per_minute)[r.name] = rate;
    if (r.type == "webhook" && r.settings.contains("secret") &&
        r.settings["secret"].is_string())
      (*signing_secrets)[r.name] = r.settings["secret"].get<std::string>();
  }
}

}  // namespace

EscalationService::EscalationService(EscalationServiceOptions options)
    : options_(std::move(options)),
      settings_(std::make_shared<const Settings>(
          Settings{options_.escalation, options_.notifications})),
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
    return RenderPage(settings()->notifications, receiver, payload, now);
  };
  actions.render = [this](const std::string& receiver, const Json& payload,
                          double) {
    return RenderAction(options_.actuator, receiver, payload);
  };
  ReceiverLimits(options_.notifications, &o.rate_per_minute, &o.signing_secrets);
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

std::shared_ptr<const EscalationService::Settings> EscalationService::settings() const {
  absl::MutexLock l(&settings_mu_);
  return settings_;
}

void EscalationService::Reconfigure(EscalationConfig escalation,
                                    NotificationOptions notifications) {
  std::map<std::string, int> rates;
  std::map<std::string, std::string> secrets;
  ReceiverLimits(notifications, &rates, &secrets);
  auto next = std::make_shared<const Settings>(Settings{escalation, std::move(notifications)});
  std::lock_guard<std::mutex> l(mu_);
  {
    absl::MutexLock s(&settings_mu_);
    settings_.swap(next);
  }
  outbox_->SetReceiverLimits(std::move(rates), std::move(secrets));
  gate_.Reconfigure(escalation.interlocks);
  escalator_.Reconfigure(std::move(escalation), options_.clock->Now());
  dirty_ = true;
}

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

std::string PairIncidentKey(const Incident& incident) {
  const std::string culprit =
      !incident.node.empty() ? incident.node
      : incident.nodes.empty() ? std::string("-")
                               : absl::StrJoin(incident.nodes, "+");
  return absl::StrCat(incident.job.empty() ? "-" : incident.job, ":", culprit, ":",
                      incident.gpu ? absl::StrCat("g", *incident.gpu) : "-", ":",
                      static_cast<int64_t>(std::llround(incident.ts * 1000)));
}

std::string PairPageKey(const Incident& incident, std::string_view page_key) {
  std::string_view rest = page_key;
  if (rest.substr(0, incident.id.size()) == incident.id) rest.remove_prefix(incident.id.size());
  return PairIncidentKey(incident) + std::string(rest);
}

void EscalationService::EnqueuePage(const Page& asked) {
  auto incident_it = incidents_.find(asked.incident_id);
  Page page = asked;
  if (options_.pair.has_value() && incident_it != incidents_.end())
    page.key = PairPageKey(incident_it->second, asked.key);
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
  const std::shared_ptr<const Settings> settings = this->settings();
  auto route_it = settings->notifications.channels.find(page.channel);
  if (route_it == settings->notifications.channels.end() ||
      route_it->second.receivers.empty())
    return timeline("page_skipped",
                    absl::StrCat("no receiver configured for channel ", page.channel));

  Notice notice;
  notice.event = std::string(PageEventName(page.event));
  notice.incident_id = incident.id;
  if (options_.pair.has_value()) notice.group_key = PairIncidentKey(incident);
  notice.severity = std::string(SeverityName(incident.severity));
  notice.kind = incident.kind;
  notice.job = incident.job;
  notice.node = incident.node;
  notice.gpu = incident.gpu;
  notice.summary = incident.summary;
  notice.hint = incident.hint;
  notice.incident_ts = incident.ts;
  notice.url = absl::StrCat(settings->notifications.public_url, "/#/incidents/",
                            incident.id);
  if (absl::StatusOr<Json> status = escalator_.StatusOf(incident.id); status.ok()) {
    notice.state = status->value("lifecycle", "firing");
    notice.acknowledged_by = status->value("acknowledged_by", "");
  }
  for (const std::string& name : page.users) {
    Recipient r;
    r.name = name;
    for (const User& u : settings->escalation.users) {
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
    for (const ReceiverConfig& r : settings->notifications.receivers) {
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
  const double now = options_.clock->Now();
  const bool hold = options_.pair.has_value() && !options_.pair->leading();
  if (options_.pair.has_value()) {
    std::erase_if(held_pages_, [&](const HeldPage& held) {
      return now - held.since > options_.pair->hold_seconds;
    });
  }
  for (OutboxItem& item : items) {
    const std::string receivers = [&] {
      std::vector<std::string> names;
      for (const OutboxRoute& r : item.routes) names.push_back(r.receiver);
      return absl::StrJoin(names, " -> ");
    }();
    if (hold) {
      timeline("page_held", absl::StrCat(page_name, " (", receivers,
                                         "): held by the standby; the pair's leader sends it"));
      held_pages_.push_back({now, std::move(item), page_name, incident.id});
      continue;
    }
    absl::Status s = outbox_->Enqueue(std::move(item));
    if (absl::IsAlreadyExists(s)) continue;  // restored state re-asked for it
    timeline(s.ok() ? "page_queued" : "page_failed",
             s.ok() ? absl::StrCat(page_name, " (", receivers, ")")
                    : std::string(s.message()));
  }
}

void EscalationService::OnLeadershipChange(bool leading) {
  if (!options_.pair.has_value()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    const bool became_leader = leading && !was_leading_;
    was_leading_ = leading;
    if (!became_leader) return;
  }
  TakeOverActions();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (held_pages_.empty()) return;
  }
  // Read the marks before taking the lock: etcd may be slow.
  absl::StatusOr<absl::flat_hash_set<std::string>> delivered = options_.pair->delivered_keys();
  std::lock_guard<std::mutex> l(mu_);
  const double now = options_.clock->Now();
  int sent = 0;
  int skipped = 0;
  for (HeldPage& held : held_pages_) {
    if (now - held.since > options_.pair->hold_seconds) continue;
    if (delivered.ok() && delivered->contains(held.item.key)) {
      ++skipped;
      continue;
    }
    const std::string key = held.item.key;
    absl::Status s = outbox_->Enqueue(std::move(held.item));
    if (absl::IsAlreadyExists(s)) continue;
    ++sent;
    AddTimeline(held.incident_id,
                {{"type", s.ok() ? "page_queued" : "page_failed"},
                 {"ts", now},
                 {"key", key},
                 {"detail", s.ok() ? absl::StrCat(held.page_name,
                                                  " (held as standby; sent on taking the lead)")
                                   : std::string(s.message())}});
  }
  held_pages_.clear();
  std::fprintf(stderr,
               "vigil-server: leading the pair now: %d held page(s) sent, %d the old leader "
               "had delivered%s\n",
               sent, skipped,
               delivered.ok() ? ""
                              : absl::StrCat(" (marks unreadable: ",
                                             delivered.status().message(), ")")
                                    .c_str());
}

void EscalationService::OnDelivery(const DeliveryStatus& status) {
  if (options_.pair.has_value() && status.kind == "page" && status.state == "delivered")
    options_.pair->delivered(status.key);
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

absl::StatusOr<Json> EscalationService::Operate(std::string_view verb,
                                                std::string_view id,
                                                const Identity& who,
                                                std::string_view comment,
                                                bool shared_in) {
  absl::StatusOr<Json> status;
  std::string incident_key;  // to share with the pair's other member
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
      if (auto it = incidents_.find(id);
          options_.pair.has_value() && !shared_in && it != incidents_.end())
        incident_key = PairIncidentKey(it->second);
    } else {
      status = out.status();
    }
  }
  RecordAudit(who, verb, id, comment, status.status());
  if (!incident_key.empty() && options_.pair->share_operation != nullptr) {
    options_.pair->share_operation(incident_key, Json{{"verb", std::string(verb)},
                                                      {"who", who.name},
                                                      {"comment", std::string(comment)},
                                                      {"ts", options_.clock->Now()},
                                                      {"from", options_.pair->self}});
  }
  return status;
}

void EscalationService::ApplySharedOperations(
    const std::vector<std::pair<std::string, std::string>>& operations) {
  if (!options_.pair.has_value()) return;
  for (const auto& [key, text] : operations) {
    const Json op = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!op.is_object() || !op.contains("verb") || !op["verb"].is_string() ||
        !op.contains("ts") || !op["ts"].is_number())
      continue;
    const std::string verb = op["verb"].get<std::string>();
    const double ts = op["ts"].get<double>();
    if (verb == "pending_approval" || verb == "approve") {
      NotePairApproval(key, op);
      continue;
    }
    if (verb != "acknowledge" && verb != "unacknowledge" && verb != "resolve") continue;
    std::string id;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto applied = applied_operations_.find(key);
      if (applied != applied_operations_.end() && applied->second >= ts) continue;
      if (op.value("from", "") != options_.pair->self) {  // else made here
        for (const auto& [incident_id, incident] : incidents_) {
          if (PairIncidentKey(incident) == key) id = incident_id;
        }
        // Not escalated here (yet): tried again at the next change.
        if (id.empty()) continue;
      }
      applied_operations_[key] = ts;
    }
    if (id.empty()) continue;  // not (or no longer) escalated here
    const std::string who =
        absl::StrCat(op.value("who", "someone"), " (via ", op.value("from", "the pair"), ")");
    (void)Operate(verb, id, Identity{who, Role::kOperator}, op.value("comment", ""),
                  /*shared_in=*/true);
  }
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
      // In a cluster, ids name the server, so that two never collide.
      silence->id = options_.fleet.has_value()
                        ? absl::StrFormat("sil-%s-%06d",
                                          absl::StrReplaceAll(options_.fleet->self, {{"/", "~"}}),
                                          next_silence_++)
                        : absl::StrFormat("sil-%06d", next_silence_++);
      silence->author = who.name;
      id = silence->id;
      absl::StatusOr<EscalationOutput> out = escalator_.AddSilence(*silence, now);
      if (out.ok()) {
        Handle(*out);
        dirty_ = true;
        result = SilenceToJson(*silence);
        QueueFleetEntry(absl::StrCat("silences/", id), {{"silence", *result}, {"ts", now}},
                        silence->end_ts - now + kSilenceEntryAfterEndSeconds);
      } else {
        result = out.status();
      }
    } else {
      result = silence.status();
    }
  }
  RecordAudit(who, "silence", id, body.dump(), result.status());
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
      if (found.is_object()) {
        found["ends_at"] = now;
        QueueFleetEntry(absl::StrCat("silences/", std::string(id)),
                        {{"silence", found}, {"by", who.name}, {"ts", now}},
                        kSilenceEntryAfterEndSeconds);
      }
      result = found.is_object() ? found : Json{{"id", std::string(id)}};
    } else {
      result = out.status();
    }
  }
  RecordAudit(who, "expire_silence", id, "", result.status());
  return result;
}

Json EscalationService::ListSilences() const {
  std::lock_guard<std::mutex> l(mu_);
  Json list = Json::array();
  for (const Silence& s : escalator_.ActiveSilences(options_.clock->Now()))
    list.push_back(SilenceToJson(s));
  return {{"silences", std::move(list)}};
}

Json EscalationService::OnCall() const {
  const double now = options_.clock->Now();
  Json list = Json::array();
  for (const Schedule& s : settings()->escalation.schedules) {
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
          if (options_.fleet.has_value()) ShareFleetEntries();
          if (options_.pair.has_value()) MarkStartedActions();
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
