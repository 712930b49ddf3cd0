#include "server/alertmanager/alertmanager.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/series_key.h"
#include "promcompat/metric_mapping.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

constexpr char kPath[] = "alertmanager";
constexpr char kStateKey[] = "alert_intake";

// Unix seconds of an RFC 3339 time; 0 for Go's zero time or "" (unset);
// nullopt when it does not parse.
std::optional<double> ParseTime(const std::string& text) {
  if (text.empty() || absl::StartsWith(text, "0001-01-01")) return 0.0;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return std::nullopt;
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

bool IsAction(Response r) {
  return r == Response::kCheckpointThenPauseJob || r == Response::kPauseJob ||
         r == Response::kCordonNode;
}

// "critical" -> P1 and so on; nullopt when not understood.
std::optional<Severity> SeverityOfLabel(std::string value) {
  value = absl::AsciiStrToLower(value);
  if (value == "page" || value == "critical") return Severity::kP1;
  if (value == "warning" || value == "warn") return Severity::kP2;
  if (value == "info" || value == "none") return Severity::kP3;
  return ParseSeverity(absl::AsciiStrToUpper(value));
}

std::string LabelOf(const Json& labels, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    auto it = labels.find(name);
    if (it == labels.end() || !it->is_string() || it->get<std::string>().empty()) continue;
    const std::string& value = it->get_ref<const std::string&>();
    return name == "instance" ? std::string(promcompat::HostOfInstance(value)) : value;
  }
  return "";
}

// Every response name (rules/incident.h; kLog is the last), comma-separated.
std::string ResponseNames() {
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(Response::kLog); ++i)
    names.push_back(std::string(ResponseName(static_cast<Response>(i))));
  return absl::StrJoin(names, ", ");
}

}  // namespace

void ParseAlertmanagerSection(const Json& section, JsonConfigReader& r,
                              AlertmanagerOptions* out) {
  if (!r.CheckObject(section, kPath,
                     {"forward_urls", "resolve_timeout_seconds", "min_severity", "check_seconds",
                      "timeout_seconds", "intake"}))
    return;
  AlertmanagerOptions o = *out;
  r.StringList(section, kPath, "forward_urls", &o.forward_urls,
               {"Alertmanagers that get Vigil's incidents as alerts (POST "
                "/api/v2/alerts); empty: none",
                "http:// or https:// URLs"});
  for (const std::string& url : o.forward_urls) {
    if (!absl::StartsWith(url, "http://") && !absl::StartsWith(url, "https://"))
      r.Error(absl::StrCat(kPath, ".forward_urls"),
              absl::StrCat("\"", url, "\" must start with http:// or https://"));
  }
  r.Positive(section, kPath, "resolve_timeout_seconds", 1, 86400, &o.resolve_timeout_seconds,
             "Alertmanager's resolve_timeout, in seconds: a firing alert is re-sent every "
             "half of it and says it ends that long after each send");
  r.Positive(section, kPath, "check_seconds", 1, 3600, &o.check_seconds,
             "Seconds between looks for new and resolved incidents to send");
  r.Positive(section, kPath, "timeout_seconds", 1, 600, &o.timeout_seconds,
             "Seconds one request to an Alertmanager may take");
  std::string min = std::string(SeverityName(o.min_severity));
  r.String(section, kPath, "min_severity", &min,
           {"Incidents of this severity or higher are forwarded", "P0, P1, P2, P3"});
  if (std::optional<Severity> s = ParseSeverity(min)) {
    o.min_severity = *s;
  } else {
    r.Error(absl::StrCat(kPath, ".min_severity"), "must be P0, P1, P2 or P3");
  }
  if (const Json* it = r.Object(section, kPath, "intake",
                               "Alerts of Prometheus rules in, as incidents (POST "
                               "/api/v1/alerts and /api/v2/alerts); present (even {}): on "
                               "unless enabled is false");
      it != nullptr) {
    const std::string path = absl::StrCat(kPath, ".intake");
    if (r.CheckObject(*it, path,
                      {"enabled", "default_severity", "node_labels", "job_labels", "rules"})) {
      o.intake = true;
      r.Bool(*it, path, "enabled", &o.intake,
             "Take alerts in; the section's presence already turns intake on");
      std::string def = std::string(SeverityName(o.default_severity));
      r.String(*it, path, "default_severity", &def,
               {"Severity of an alert whose rule sets none and whose severity label is "
                "not understood (critical -> P1, warning -> P2, info -> P3, P0-P3 as "
                "they are)",
                "P0, P1, P2, P3"});
      if (std::optional<Severity> s = ParseSeverity(def)) {
        o.default_severity = *s;
      } else {
        r.Error(absl::StrCat(path, ".default_severity"), "must be P0, P1, P2 or P3");
      }
      r.StringList(*it, path, "node_labels", &o.node_labels,
                   "Labels naming an alert's node, first present wins (\"instance\" "
                   "loses its :port)");
      r.StringList(*it, path, "job_labels", &o.job_labels,
                   "Labels naming an alert's job, first present wins; none: job "
                   "\"cluster\"");
      if (const Json* rules = r.ObjectArray(*it, path, "rules", Json::array(),
                                            "How alerts of given alertnames become "
                                            "incidents; other alerts only page "
                                            "(notify_sre)");
          rules != nullptr) {
        if (!rules->is_array()) {
          r.Error(absl::StrCat(path, ".rules"), "must be an array");
        } else {
          o.rules.clear();
          const std::string response_names = ResponseNames();
          for (size_t i = 0; i < rules->size(); ++i) {
            const Json& entry = (*rules)[i];
            const std::string at = absl::StrCat(path, ".rules[", i, "]");
            if (!r.CheckObject(entry, at, {"alertname", "severity", "responses", "allow_actions"}))
              continue;
            AlertIntakeRule rule;
            r.String(entry, at, "alertname", &rule.alertname,
                     KeyDoc::Required("The alertname the rule applies to"));
            r.String(entry, at, "severity", &rule.severity,
                     {"Severity of its incidents; empty: from the alert's severity "
                      "label",
                      "P0, P1, P2, P3"});
            r.Bool(entry, at, "allow_actions", &rule.allow_actions,
                   "Let responses include automatic actions; without it a rule listing "
                   "one stops the server at start");
            if (rule.alertname.empty()) r.Error(at + ".alertname", "required");
            if (!rule.severity.empty() && !ParseSeverity(rule.severity))
              r.Error(at + ".severity", "must be P0, P1, P2 or P3");
            std::vector<std::string> names;
            for (Response response : rule.responses)
              names.push_back(std::string(ResponseName(response)));
            r.StringList(entry, at, "responses", &names,
                         {"What its incidents do; actions (cordon_node, pause_job, "
                          "checkpoint_then_pause_job) need allow_actions and still pass "
                          "the action gate",
                          response_names.c_str()});
            rule.responses.clear();
            for (const std::string& name : names) {
              std::optional<Response> response = ParseResponse(name);
              if (!response) {
                r.Error(at + ".responses", absl::StrCat("unknown response \"", name, "\""));
              } else if (IsAction(*response) && !rule.allow_actions) {
                r.Error(at + ".responses",
                        absl::StrCat("\"", name,
                                     "\" acts automatically: set \"allow_actions\": true to "
                                     "let this alert do so"));
              } else {
                rule.responses.push_back(*response);
              }
            }
            o.rules.push_back(std::move(rule));
          }
        }
      }
    }
  }
  *out = std::move(o);
}

Json IncidentAlert(const Json& incident, double ends_at, const std::string& public_url) {
  Json labels = {{"alertname", incident.value("kind", "vigil")},
                 {"severity", incident.value("severity", "P3")},
                 {kVigilIncidentLabel, incident.value("id", "")}};
  if (incident.contains("job") && incident["job"].is_string() &&
      !incident["job"].get<std::string>().empty())
    labels["job"] = incident["job"];
  if (incident.contains("node") && incident["node"].is_string())
    labels["node"] = incident["node"];
  if (incident.contains("gpu") && incident["gpu"].is_number_integer())
    labels["gpu"] = std::to_string(incident["gpu"].get<int>());
  Json alert = {{"labels", std::move(labels)},
                {"annotations",
                 {{"summary", incident.value("summary", "")},
                  {"description", incident.value("hint", "")}}},
                {"startsAt", AlertmanagerTime(incident.value("ts", 0.0))},
                {"endsAt", AlertmanagerTime(ends_at)}};
  if (!public_url.empty()) {
    std::string base = public_url;
    while (absl::EndsWith(base, "/")) base.pop_back();
    alert["generatorURL"] =
        absl::StrCat(base, "/#/incidents/", incident.value("id", ""));
  }
  return alert;
}

// ---------------------------------------------------------------- forward

AlertForwarder::AlertForwarder(const AlertmanagerOptions& options, Transport* transport,
                               Clock* clock, FiringIncidents firing, Leads leads)
    : options_(options),
      transport_(transport),
      clock_(clock),
      firing_(std::move(firing)),
      leads_(std::move(leads)) {}

AlertForwarder::~AlertForwarder() { Stop(); }

void AlertForwarder::Start() {
  if (thread_ != nullptr || options_.forward_urls.empty()) return;
  thread_ = std::make_unique<PeriodicThread>(
      clock_, options_.check_seconds, [this] { Round(); },
      [](const std::string& what) {
        std::fprintf(stderr, "vigil-server: alertmanager forwarding: %s\n", what.c_str());
      });
  thread_->Start();
}

void AlertForwarder::Stop() {
  if (thread_ != nullptr) thread_->Stop();
}

bool AlertForwarder::Post(const Json& alerts) {
  bool all = true;
  for (const std::string& url : options_.forward_urls) {
    OutboundRequest request;
    request.url = AlertmanagerAlertsUrl(url);
    request.headers = {{"Content-Type", "application/json"}};
    request.body = alerts.dump();
    const TransportResult result = transport_->Send(request, options_.timeout_seconds);
    const bool ok = result.http_status >= 200 && result.http_status < 300;
    if (!ok) {
      all = false;
      posts_failed_.fetch_add(1, std::memory_order_relaxed);
      std::fprintf(stderr, "vigil-server: alertmanager %s: %s\n", request.url.c_str(),
                   result.error.empty() ? absl::StrCat("HTTP ", result.http_status).c_str()
                                        : result.error.c_str());
    }
  }
  if (all) alerts_sent_.fetch_add(alerts.size(), std::memory_order_relaxed);
  return all;
}

void AlertForwarder::Round() {
  std::lock_guard<std::mutex> l(mu_);
  if (leads_ != nullptr && !leads_()) {
    sent_.clear();
    ending_.clear();
    return;
  }
  const double now = clock_->Now();
  const double refresh = options_.resolve_timeout_seconds / 2;
  std::set<std::string> firing_ids;
  Json batch = Json::array();
  std::vector<std::string> in_batch;
  for (const Json& incident : firing_()) {
    const std::string id = incident.value("id", "");
    std::optional<Severity> severity = ParseSeverity(incident.value("severity", "P3"));
    if (id.empty() || !severity || *severity > options_.min_severity) continue;
    // Alerts that came from Alertmanager go back to it only as they came.
    if (absl::StartsWith(incident.value("kind", ""), kAlertKindPrefix)) continue;
    firing_ids.insert(id);
    Sent& sent = sent_[id];
    Json alert = IncidentAlert(incident, now + options_.resolve_timeout_seconds,
                               options_.public_url);
    const bool changed = sent.alert.is_null() || sent.alert["labels"] != alert["labels"] ||
                         sent.alert["annotations"] != alert["annotations"];
    if (changed || sent.sent_at == 0 || now - sent.sent_at >= refresh) {
      sent.alert = alert;
      batch.push_back(std::move(alert));
      in_batch.push_back(id);
    }
  }
  for (auto it = sent_.begin(); it != sent_.end();) {
    if (firing_ids.contains(it->first)) {
      ++it;
      continue;
    }
    Json ended = it->second.alert;
    ended["endsAt"] = AlertmanagerTime(now);
    ending_[it->first] = std::move(ended);
    it = sent_.erase(it);
  }
  for (const auto& [id, alert] : ending_) batch.push_back(alert);
  if (batch.empty()) return;
  if (Post(batch)) {
    for (const std::string& id : in_batch) sent_[id].sent_at = now;
    ending_.clear();
  }
}

std::string AlertForwarder::MetricsText() const {
  return absl::StrCat(
      "# HELP vigil_alertmanager_forward_alerts_total Alerts (firing or ending) every "
      "Alertmanager took.\n"
      "# TYPE vigil_alertmanager_forward_alerts_total counter\n"
      "vigil_alertmanager_forward_alerts_total ",
      alerts_sent_.load(), "\n",
      "# HELP vigil_alertmanager_forward_failures_total Posts to an Alertmanager that "
      "failed (sent again next round).\n"
      "# TYPE vigil_alertmanager_forward_failures_total counter\n"
      "vigil_alertmanager_forward_failures_total ",
      posts_failed_.load(), "\n");
}

// ---------------------------------------------------------------- intake

AlertIntake::AlertIntake(const AlertmanagerOptions& options, SeriesStore* store, Clock* clock,
                         Publish publish)
    : options_(options), store_(store), clock_(clock), publish_(std::move(publish)) {}

absl::Status AlertIntake::Load() {
  absl::StatusOr<std::string> state = store_->GetState(kStateKey);
  if (absl::IsNotFound(state.status())) return absl::OkStatus();
  if (!state.ok()) return state.status();
  Json j = Json::parse(*state, nullptr, false);
  if (!j.is_object()) return absl::DataLossError("alert_intake state does not parse");
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [key, value] : j.items()) {
    Tracked t;
    t.id = value.value("id", "");
    t.ends_at = value.value("ends_at", 0.0);
    t.incident.id = t.id;
    t.incident.kind = value.value("kind", "");
    t.incident.job = value.value("job", "");
    t.incident.node = value.value("node", "");
    t.incident.summary = value.value("summary", "");
    t.incident.ts = value.value("ts", 0.0);
    t.incident.severity =
        ParseSeverity(value.value("severity", "P2")).value_or(Severity::kP2);
    if (!t.id.empty()) alerts_[key] = std::move(t);
  }
  return absl::OkStatus();
}

absl::Status AlertIntake::Save() {
  Json j = Json::object();
  for (const auto& [key, t] : alerts_) {
    j[key] = {{"id", t.id},
              {"ends_at", t.ends_at},
              {"kind", t.incident.kind},
              {"job", t.incident.job},
              {"node", t.incident.node},
              {"summary", t.incident.summary},
              {"ts", t.incident.ts},
              {"severity", std::string(SeverityName(t.incident.severity))}};
  }
  return store_->PutState(kStateKey, j.dump());
}

void AlertIntake::Resolve(const std::string& key, double now) {
  auto it = alerts_.find(key);
  if (it == alerts_.end()) return;
  IncidentUpdate update;
  update.type = UpdateType::kResolved;
  update.ts = now;
  update.incident = it->second.incident;
  update.incident.id = it->second.id;
  update.incident.state = IncidentState::kResolved;
  update.incident.resolved_ts = now;
  update.incident.last_update_ts = now;
  (void)publish_(std::move(update));
  ++resolved_;
  alerts_.erase(it);
}

absl::StatusOr<AlertIntake::Counts> AlertIntake::Receive(std::string_view body, bool webhook) {
  Json parsed = Json::parse(body, nullptr, false);
  if (parsed.is_discarded())
    return absl::InvalidArgumentError("body is not JSON");
  const Json* alerts = &parsed;
  if (webhook) {
    if (!parsed.is_object() || !parsed.contains("alerts") || !parsed["alerts"].is_array())
      return absl::InvalidArgumentError(
          "an Alertmanager webhook body ({\"version\": \"4\", \"alerts\": [...]}) was expected");
    alerts = &parsed["alerts"];
  } else if (!parsed.is_array()) {
    return absl::InvalidArgumentError("an array of alerts (the /api/v2/alerts shape) was expected");
  }
  // Check every alert before taking any.
  struct Incoming {
    std::string key;
    Json labels;
    Json annotations;
    double starts_at = 0;
    double ends_at = 0;
    bool resolved = false;
  };
  std::vector<Incoming> incoming;
  const double now = clock_->Now();
  for (size_t i = 0; i < alerts->size(); ++i) {
    const Json& a = (*alerts)[i];
    const std::string where = absl::StrCat("alert ", i, ": ");
    if (!a.is_object() || !a.contains("labels") || !a["labels"].is_object())
      return absl::InvalidArgumentError(absl::StrCat(where, "needs an object \"labels\""));
    Incoming in;
    in.labels = a["labels"];
    for (const auto& [name, value] : in.labels.items()) {
      if (!value.is_string())
        return absl::InvalidArgumentError(
            absl::StrCat(where, "label \"", name, "\" must be a string"));
    }
    if (!in.labels.contains("alertname"))
      return absl::InvalidArgumentError(absl::StrCat(where, "no alertname label"));
    in.annotations = a.value("annotations", Json::object());
    if (!in.annotations.is_object()) in.annotations = Json::object();
    for (const auto& annotation : in.annotations.items()) {
      if (!annotation.value().is_string())
        return absl::InvalidArgumentError(
            absl::StrCat(where, "annotation \"", annotation.key(), "\" must be a string"));
    }
    if (webhook && a.contains("status") && !a["status"].is_string())
      return absl::InvalidArgumentError(absl::StrCat(where, "status must be a string"));
    for (const char* field : {"startsAt", "endsAt"}) {
      if (!a.contains(field)) continue;
      if (!a[field].is_string())
        return absl::InvalidArgumentError(absl::StrCat(where, field, " must be a string"));
      std::optional<double> t = ParseTime(a[field].get<std::string>());
      if (!t)
        return absl::InvalidArgumentError(
            absl::StrCat(where, field, " \"", a[field].get<std::string>(),
                         "\" is not an RFC 3339 time"));
      (std::string_view(field) == "startsAt" ? in.starts_at : in.ends_at) = *t;
    }
    in.resolved = webhook ? a.value("status", "firing") == "resolved"
                          : (in.ends_at > 0 && in.ends_at <= now);
    in.key = in.labels.dump();  // objects dump with sorted keys
    incoming.push_back(std::move(in));
  }

  Counts counts;
  std::lock_guard<std::mutex> l(mu_);
  for (Incoming& in : incoming) {
    ++received_;
    if (in.labels.contains(kVigilIncidentLabel)) {
      ++looped_;
      ++counts.looped;
      continue;
    }
    if (in.resolved) {
      if (alerts_.contains(in.key)) {
        Resolve(in.key, now);
        ++counts.resolved;
      }
      continue;
    }
    const std::string alertname = in.labels["alertname"].get<std::string>();
    const AlertIntakeRule* rule = nullptr;
    for (const AlertIntakeRule& r : options_.rules) {
      if (r.alertname == alertname) rule = &r;
    }
    Severity severity = options_.default_severity;
    if (rule != nullptr && !rule->severity.empty()) {
      severity = ParseSeverity(rule->severity).value_or(severity);
    } else if (in.labels.contains("severity")) {
      severity = SeverityOfLabel(in.labels["severity"].get<std::string>()).value_or(severity);
    }
    Incident incident;
    incident.severity = severity;
    incident.kind = absl::StrCat(kAlertKindPrefix, alertname);
    incident.job = LabelOf(in.labels, options_.job_labels);
    if (incident.job.empty() || !ValidateLabelValue("job", incident.job).ok())
      incident.job = "cluster";
    incident.node = LabelOf(in.labels, options_.node_labels);
    if (!incident.node.empty() && !ValidateLabelValue("node", incident.node).ok())
      incident.node.clear();
    if (in.labels.contains("gpu")) {
      const std::string text = in.labels["gpu"].get<std::string>();
      if (!text.empty() && text.size() < 4 &&
          std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
        incident.gpu = std::stoi(text);
    }
    const std::string summary = in.annotations.value("summary", "");
    incident.summary = summary.empty() ? absl::StrCat("Alert ", alertname) : summary;
    incident.hint = in.annotations.value("description", "");
    incident.hint_category = HintCategory::kGeneral;
    incident.responses = rule != nullptr ? rule->responses
                                         : std::vector<Response>{Response::kNotifySre};
    if (incident.node.empty())
      std::erase(incident.responses, Response::kCordonNode);
    incident.ts = in.starts_at > 0 ? in.starts_at : now;
    incident.last_update_ts = now;
    auto it = alerts_.find(in.key);
    if (it != alerts_.end()) {
      it->second.ends_at = in.ends_at;
      const Incident& before = it->second.incident;
      if (before.severity == incident.severity && before.summary == incident.summary) {
        ++counts.updated;
        continue;  // still firing, nothing new
      }
      IncidentUpdate update;
      update.type = incident.severity < before.severity ? UpdateType::kSeverityRaised
                                                        : UpdateType::kEvidenceAdded;
      update.ts = now;
      incident.id = it->second.id;
      incident.severity_history = before.severity_history;
      if (before.severity != incident.severity)
        incident.severity_history.push_back({incident.severity, now, alertname});
      update.incident = incident;
      (void)publish_(std::move(update));
      it->second.incident = std::move(incident);
      ++counts.updated;
      continue;
    }
    incident.severity_history = {{incident.severity, now, alertname}};
    IncidentUpdate update;
    update.type = UpdateType::kOpened;
    update.ts = now;
    update.incident = incident;
    absl::StatusOr<std::string> id = publish_(std::move(update));
    if (!id.ok()) return id.status();
    incident.id = *id;
    alerts_[in.key] = Tracked{*id, in.ends_at, std::move(incident)};
    ++opened_;
    ++counts.opened;
  }
  if (absl::Status s = Save(); !s.ok()) return s;
  return counts;
}

void AlertIntake::Expire() {
  std::lock_guard<std::mutex> l(mu_);
  const double now = clock_->Now();
  std::vector<std::string> due;
  for (const auto& [key, t] : alerts_) {
    if (t.ends_at > 0 && t.ends_at <= now) due.push_back(key);
  }
  for (const std::string& key : due) Resolve(key, now);
  if (!due.empty()) (void)Save();
}

std::string AlertIntake::MetricsText() const {
  std::lock_guard<std::mutex> l(mu_);
  return absl::StrCat(
      "# HELP vigil_alert_intake_alerts_total Alerts received from Prometheus or "
      "Alertmanager, by what became of them.\n"
      "# TYPE vigil_alert_intake_alerts_total counter\n"
      "vigil_alert_intake_alerts_total{outcome=\"opened\"} ", opened_, "\n",
      "vigil_alert_intake_alerts_total{outcome=\"resolved\"} ", resolved_, "\n",
      "vigil_alert_intake_alerts_total{outcome=\"looped\"} ", looped_, "\n",
      "vigil_alert_intake_alerts_total{outcome=\"received\"} ", received_, "\n",
      "# HELP vigil_alert_intake_firing Incoming alerts firing now.\n"
      "# TYPE vigil_alert_intake_firing gauge\n"
      "vigil_alert_intake_firing ", alerts_.size(), "\n");
}

}  // namespace vigil
