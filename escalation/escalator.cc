// Escalator: the per-incident escalation state machine.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "escalation/channels.h"
#include "escalation/escalation.h"

namespace vigil {
namespace {

using escalation_internal::IsPersonalChannel;
using json = nlohmann::json;

constexpr double kNever = std::numeric_limits<double>::infinity();

void AddUnique(std::vector<std::string>& list, const std::string& item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) {
    list.push_back(item);
  }
}

EscalationEvent Event(const std::string& incident_id, std::string type,
                      double ts, std::string who, std::string detail) {
  return EscalationEvent{incident_id, std::move(type), ts, std::move(who),
                         std::move(detail)};
}

// The incident's id and the labels silences match.
Incident Labels(const Incident& incident) {
  Incident labels;
  labels.id = incident.id;
  labels.severity = incident.severity;
  labels.kind = incident.kind;
  labels.job = incident.job;
  labels.node = incident.node;
  labels.gpu = incident.gpu;
  return labels;
}

// Who `targets` name at `ts`, in order, each once. A schedule that is not
// configured, or has nobody on call, names nobody.
std::vector<std::string> ResolveTargets(const std::vector<std::string>& targets,
                                        const std::vector<Schedule>& schedules,
                                        double ts) {
  constexpr std::string_view kSchedule = "schedule:";
  constexpr std::string_view kUser = "user:";
  std::vector<std::string> users;
  for (const std::string& target : targets) {
    const std::string_view t = target;
    if (t.substr(0, kUser.size()) == kUser) {
      AddUnique(users, std::string(t.substr(kUser.size())));
    } else if (t.substr(0, kSchedule.size()) == kSchedule) {
      const std::string_view name = t.substr(kSchedule.size());
      for (const Schedule& s : schedules) {
        if (s.name != name) continue;
        if (absl::StatusOr<std::string> user = OnCallAt(s, ts); user.ok()) {
          AddUnique(users, *user);
        }
      }
    }
  }
  return users;
}

// Orders pages and events by time, keeping the order of equal times.
void SortByTime(EscalationOutput* out) {
  std::stable_sort(out->pages.begin(), out->pages.end(),
                   [](const Page& a, const Page& b) { return a.ts < b.ts; });
  std::stable_sort(out->events.begin(), out->events.end(),
                   [](const EscalationEvent& a, const EscalationEvent& b) {
                     return a.ts < b.ts;
                   });
}

}  // namespace

std::string_view LifecycleName(Lifecycle lifecycle) {
  switch (lifecycle) {
    case Lifecycle::kFiring:
      return "firing";
    case Lifecycle::kAcknowledged:
      return "acknowledged";
    case Lifecycle::kSilenced:
      return "silenced";
    case Lifecycle::kResolved:
      return "resolved";
  }
  return "unknown";
}

std::string_view PageEventName(PageEvent event) {
  switch (event) {
    case PageEvent::kTrigger:
      return "trigger";
    case PageEvent::kRepage:
      return "repage";
    case PageEvent::kEscalate:
      return "escalate";
    case PageEvent::kAcknowledged:
      return "acknowledged";
    case PageEvent::kResolved:
      return "resolved";
  }
  return "unknown";
}

Escalator::Escalator(EscalationConfig config) : config_(std::move(config)) {}

void Escalator::Reconfigure(EscalationConfig config, double now) {
  now = Clamp(now);
  config_ = std::move(config);
  for (auto& [id, t] : incidents_) {
    if (t.resolved) continue;
    const std::vector<EscalationStep>& steps = PolicyOf(t).steps;
    if (steps.empty()) {
      t.escalating = false;
    } else if (t.escalating && static_cast<size_t>(t.step) >= steps.size()) {
      t.step = static_cast<int>(steps.size()) - 1;
      t.attempt = 0;
    } else if (!t.escalating && !t.exhausted) {
      // Its policy had no steps: start the new one (MayPage still holds
      // back an acknowledged or silenced incident).
      Restart(t, now);
    }
  }
}

double Escalator::Clamp(double now) const { return std::max(now, now_); }

const EscalationPolicy& Escalator::PolicyOf(const Tracked& t) const {
  return config_.policies[static_cast<int>(t.policy)];
}

bool Escalator::MayPage(const Tracked& t) {
  return t.escalating && !t.resolved && !t.acknowledged &&
         t.silenced_by.empty();
}

bool Escalator::AckHolds(const Tracked& t, double now) const {
  if (!t.acknowledged) return false;
  const double timeout = PolicyOf(t).ack_timeout_seconds;
  return timeout <= 0 || now < t.acknowledged_at + timeout;
}

const Silence* Escalator::SilenceAt(const Tracked& t, double ts) const {
  const Silence* best = nullptr;
  for (const auto& [id, silence] : silences_) {
    if (silence.start_ts <= ts && ts < silence.end_ts &&
        SilenceMatches(silence, t.labels) &&
        (best == nullptr || silence.end_ts > best->end_ts)) {
      best = &silence;
    }
  }
  return best;
}

void Escalator::Restart(Tracked& t, double ts) const {
  t.step = 0;
  t.attempt = 0;
  t.next_at = ts;
  t.escalating = !PolicyOf(t).steps.empty();
  t.exhausted = false;
}

void Escalator::Start(Tracked& t, double now, EscalationOutput* out) {
  t.resolved = false;
  t.acknowledged = false;
  t.acknowledged_by.clear();
  t.acknowledged_at = 0;
  t.silenced_by.clear();
  Restart(t, now);
  UpdateSilence(t, now, "", out);
  AdvanceIncident(t, now, now, out);
}

void Escalator::UpdateSilence(Tracked& t, double ts, std::string_view who,
                              EscalationOutput* out) {
  const Silence* silence = SilenceAt(t, ts);
  if ((silence == nullptr ? std::string() : silence->id) == t.silenced_by) {
    return;
  }
  if (silence != nullptr) {
    t.silenced_by = silence->id;
    out->events.push_back(
        Event(t.labels.id, "silenced", ts, silence->author, silence->id));
    return;
  }
  std::string ended = std::exchange(t.silenced_by, "");
  out->events.push_back(
      Event(t.labels.id, "unsilenced", ts, std::string(who), std::move(ended)));
  // Alertmanager #3367: a fault that outlived its silence must page.
  if (!t.acknowledged) Restart(t, ts);
}

void Escalator::AdvanceIncident(Tracked& t, double from, double to,
                                EscalationOutput* out) {
  double cursor = from;
  while (!t.resolved) {
    double next = kNever;
    for (const auto& [id, silence] : silences_) {
      if (!SilenceMatches(silence, t.labels)) continue;
      for (double boundary : {silence.start_ts, silence.end_ts}) {
        if (boundary > cursor) next = std::min(next, boundary);
      }
    }
    const double ack_timeout = PolicyOf(t).ack_timeout_seconds;
    if (t.acknowledged && ack_timeout > 0) {
      next = std::min(next, std::max(cursor, t.acknowledged_at + ack_timeout));
    }
    if (MayPage(t)) next = std::min(next, std::max(cursor, t.next_at));
    if (next > to) return;

    UpdateSilence(t, next, "", out);
    if (t.acknowledged && ack_timeout > 0 &&
        t.acknowledged_at + ack_timeout <= next) {
      out->events.push_back(
          Event(t.labels.id, "ack_expired", next, "",
                absl::StrCat("acknowledged by ", t.acknowledged_by, " at ",
                             t.acknowledged_at, ", still firing after ",
                             ack_timeout / 60, " min")));
      t.acknowledged = false;
      t.acknowledged_by.clear();
      t.acknowledged_at = 0;
      Restart(t, next);
    }
    while (MayPage(t) && t.next_at <= next) StepRun(t, next, out);
    cursor = next;
  }
}

void Escalator::StepRun(Tracked& t, double ts, EscalationOutput* out) {
  const std::vector<EscalationStep>& steps = PolicyOf(t).steps;
  if (static_cast<size_t>(t.step) < steps.size()) {
    const EscalationStep& step = steps[t.step];
    if (t.attempt < std::max(1, step.repeat)) {
      ++t.attempt;
      PageRound(t, ts, out);
      t.next_at = ts + step.wait_seconds;
      return;
    }
    if (static_cast<size_t>(t.step) + 1 < steps.size()) {
      ++t.step;
      t.attempt = 0;
      t.next_at = ts;
      return;
    }
  }
  t.escalating = false;
  t.exhausted = true;
  out->events.push_back(Event(
      t.labels.id, "escalation_exhausted", ts, "",
      absl::StrCat("no acknowledgement after ", steps.size(),
                   " step(s) of the ", std::string(SeverityName(t.policy)),
                   " policy; paging stopped")));
}

void Escalator::PageRound(Tracked& t, double ts, EscalationOutput* out) {
  const EscalationStep& step = PolicyOf(t).steps[t.step];
  const PageEvent event = t.attempt > 1 ? PageEvent::kRepage
                          : t.step == 0 ? PageEvent::kTrigger
                                        : PageEvent::kEscalate;
  const std::vector<std::string> users =
      ResolveTargets(step.targets, config_.schedules, ts);
  const int round = ++t.rounds;
  const std::string prefix = absl::StrCat(t.labels.id, "/", round, "/");
  std::vector<std::string> sent;
  for (const std::string& channel : step.channels) {
    Page page;
    page.incident_id = t.labels.id;
    page.event = event;
    page.channel = channel;
    page.step = t.step;
    page.attempt = t.attempt;
    page.ts = ts;
    if (IsPersonalChannel(channel)) {
      if (users.empty()) continue;
      for (const std::string& user : users) {
        page.key = absl::StrCat(prefix, channel, "/", user);
        page.users = {user};
        out->pages.push_back(page);
        AddUnique(t.personally_paged, user);
      }
    } else {
      page.key = prefix + channel;
      page.users = users;
      out->pages.push_back(std::move(page));
      AddUnique(t.group_channels, channel);
    }
    sent.push_back(channel);
  }
  if (!sent.empty()) {
    for (const std::string& user : users) AddUnique(t.paged_users, user);
  }
  std::string detail =
      absl::StrCat(std::string(PageEventName(event)), ": step ", t.step,
                   " attempt ", t.attempt, " of ", std::max(1, step.repeat));
  if (!users.empty()) {
    absl::StrAppend(&detail, " to ", absl::StrJoin(users, ", "), " on ",
                    absl::StrJoin(sent, ", "));
  } else if (!sent.empty()) {
    absl::StrAppend(&detail, ": nobody on call; sent on ",
                    absl::StrJoin(sent, ", "), " only");
  } else {
    absl::StrAppend(&detail, ": nobody on call; nothing sent");
  }
  out->events.push_back(Event(t.labels.id, "paged", ts, "", detail));
}

void Escalator::Notify(Tracked& t, PageEvent event, double ts,
                       EscalationOutput* out) {
  if (t.group_channels.empty() && t.personally_paged.empty()) return;
  const int round = ++t.rounds;
  const std::string prefix = absl::StrCat(t.labels.id, "/", round, "/");
  Page page;
  page.incident_id = t.labels.id;
  page.event = event;
  page.step = t.step;
  page.attempt = t.attempt;
  page.ts = ts;
  for (const std::string& channel : t.group_channels) {
    page.key = prefix + channel;
    page.channel = channel;
    page.users = t.paged_users;
    out->pages.push_back(page);
  }
  for (const std::string& user : t.personally_paged) {
    page.key = absl::StrCat(prefix, "email/", user);
    page.channel = "email";
    page.users = {user};
    out->pages.push_back(page);
  }
}

void Escalator::Close(Tracked& t, double now, EscalationOutput* out) {
  t.resolved = true;
  t.resolved_at = now;
  t.escalating = false;
  if (PolicyOf(t).notify_resolved) Notify(t, PageEvent::kResolved, now, out);
}

void Escalator::Advance(double now, EscalationOutput* out) {
  for (auto& [id, t] : incidents_) AdvanceIncident(t, now_, now, out);
  now_ = now;
  std::erase_if(silences_, [now](const auto& entry) {
    return entry.second.end_ts <= now;
  });
  std::erase_if(incidents_, [now](const auto& entry) {
    return entry.second.resolved &&
           now - entry.second.resolved_at >= kForgetResolvedAfterSeconds;
  });
}

EscalationOutput Escalator::OnIncidentUpdate(const IncidentUpdate& update,
                                             double now) {
  now = Clamp(now);
  EscalationOutput out;
  Advance(now, &out);
  const Incident& incident = update.incident;
  if (incident.id.empty()) return out;
  auto it = incidents_.find(incident.id);
  if (update.type == UpdateType::kResolved) {
    if (it != incidents_.end()) {
      it->second.labels = Labels(incident);
      if (!it->second.resolved) Close(it->second, now, &out);
    }
  } else if (it == incidents_.end()) {
    // Also an update of an incident opened before this state began.
    if (incident.state == IncidentState::kFiring) {
      Tracked& t = incidents_[incident.id];
      t.labels = Labels(incident);
      t.policy = incident.severity;
      Start(t, now, &out);
    }
  } else {
    Tracked& t = it->second;
    t.labels = Labels(incident);
    if (update.type == UpdateType::kReopened ||
        (update.type == UpdateType::kOpened && t.resolved)) {
      t.policy = incident.severity;
      Start(t, now, &out);
    } else if (!t.resolved) {
      // An operator-resolved incident waits for the engine to reopen it.
      if (update.type == UpdateType::kSeverityRaised &&
          incident.severity < t.policy) {
        t.policy = incident.severity;
        Restart(t, now);
      }
      // New labels may enter or leave a silence.
      UpdateSilence(t, now, "", &out);
      AdvanceIncident(t, now, now, &out);
    }
  }
  SortByTime(&out);
  return out;
}

absl::StatusOr<Escalator::Tracked*> Escalator::Find(std::string_view id) {
  auto it = incidents_.find(std::string(id));
  if (it == incidents_.end())
    return absl::NotFoundError(absl::StrCat("no incident \"", std::string(id), "\""));
  return &it->second;
}

absl::StatusOr<const Escalator::Tracked*> Escalator::Find(std::string_view id) const {
  auto it = incidents_.find(std::string(id));
  if (it == incidents_.end())
    return absl::NotFoundError(absl::StrCat("no incident \"", std::string(id), "\""));
  return &it->second;
}

absl::StatusOr<EscalationOutput> Escalator::Acknowledge(
    std::string_view incident_id, std::string_view who, double now) {
  now = Clamp(now);
  absl::StatusOr<Tracked*> found = Find(incident_id);
  if (!found.ok()) return found.status();
  Tracked& t = **found;
  if (t.resolved) {
    return absl::FailedPreconditionError(
        absl::StrCat("incident ", std::string(incident_id), " is resolved"));
  }
  if (AckHolds(t, now)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "incident ", std::string(incident_id), " is already acknowledged by ",
        t.acknowledged_by));
  }
  EscalationOutput out;
  Advance(now, &out);
  t.acknowledged = true;
  t.acknowledged_by = std::string(who);
  t.acknowledged_at = now;
  out.events.push_back(
      Event(t.labels.id, "acknowledged", now, std::string(who), ""));
  Notify(t, PageEvent::kAcknowledged, now, &out);
  SortByTime(&out);
  return out;
}

absl::StatusOr<EscalationOutput> Escalator::Unacknowledge(
    std::string_view incident_id, std::string_view who, double now) {
  now = Clamp(now);
  absl::StatusOr<Tracked*> found = Find(incident_id);
  if (!found.ok()) return found.status();
  Tracked& t = **found;
  if (t.resolved || !AckHolds(t, now)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "incident ", std::string(incident_id), " is not acknowledged"));
  }
  EscalationOutput out;
  Advance(now, &out);
  t.acknowledged = false;
  t.acknowledged_by.clear();
  t.acknowledged_at = 0;
  out.events.push_back(
      Event(t.labels.id, "unacknowledged", now, std::string(who), ""));
  Restart(t, now);
  AdvanceIncident(t, now, now, &out);
  SortByTime(&out);
  return out;
}

absl::StatusOr<EscalationOutput> Escalator::Resolve(
    std::string_view incident_id, std::string_view who, double now) {
  now = Clamp(now);
  absl::StatusOr<Tracked*> found = Find(incident_id);
  if (!found.ok()) return found.status();
  Tracked& t = **found;
  if (t.resolved) {
    return absl::FailedPreconditionError(absl::StrCat(
        "incident ", std::string(incident_id), " is already resolved"));
  }
  EscalationOutput out;
  Advance(now, &out);
  out.events.push_back(
      Event(t.labels.id, "resolved_by_operator", now, std::string(who), ""));
  Close(t, now, &out);
  SortByTime(&out);
  return out;
}

absl::StatusOr<EscalationOutput> Escalator::AddSilence(const Silence& silence,
                                                       double now) {
  now = Clamp(now);
  if (silence.id.empty() || silence.matchers.empty() ||
      silence.end_ts <= silence.start_ts) {
    return absl::InvalidArgumentError(
        "a silence needs an id, at least one matcher and an end after its "
        "start");
  }
  if (silence.end_ts <= now) {
    return absl::InvalidArgumentError(absl::StrCat(
        "silence ", silence.id, " has already ended (", silence.end_ts, ")"));
  }
  if (auto it = silences_.find(silence.id);
      it != silences_.end() && it->second.end_ts > now) {
    return absl::AlreadyExistsError(
        absl::StrCat("silence ", silence.id, " already exists"));
  }
  EscalationOutput out;
  Advance(now, &out);
  silences_[silence.id] = silence;
  for (auto& [id, t] : incidents_) {
    if (!t.resolved) UpdateSilence(t, now, "", &out);
  }
  SortByTime(&out);
  return out;
}

absl::StatusOr<EscalationOutput> Escalator::ExpireSilence(std::string_view id,
                                                          std::string_view who,
                                                          double now) {
  now = Clamp(now);
  auto it = silences_.find(std::string(id));
  if (it == silences_.end() || it->second.end_ts <= now) {
    return absl::NotFoundError(
        absl::StrCat("no active silence \"", std::string(id), "\""));
  }
  EscalationOutput out;
  Advance(now, &out);
  silences_.erase(std::string(id));
  for (auto& [incident_id, t] : incidents_) {
    if (t.resolved) continue;
    UpdateSilence(t, now, who, &out);
    AdvanceIncident(t, now, now, &out);
  }
  SortByTime(&out);
  return out;
}

std::vector<Silence> Escalator::ActiveSilences(double now) const {
  std::vector<Silence> active;
  for (const auto& [id, silence] : silences_) {
    if (silence.end_ts > now) active.push_back(silence);
  }
  std::stable_sort(active.begin(), active.end(),
                   [](const Silence& a, const Silence& b) {
                     return a.start_ts < b.start_ts;
                   });
  return active;
}

EscalationOutput Escalator::Tick(double now) {
  EscalationOutput out;
  Advance(Clamp(now), &out);
  SortByTime(&out);
  return out;
}

absl::StatusOr<Lifecycle> Escalator::LifecycleOf(
    std::string_view incident_id) const {
  absl::StatusOr<const Tracked*> found = Find(incident_id);
  if (!found.ok()) return found.status();
  const Tracked& t = **found;
  if (t.resolved) return Lifecycle::kResolved;
  if (t.acknowledged) return Lifecycle::kAcknowledged;
  if (!t.silenced_by.empty()) return Lifecycle::kSilenced;
  return Lifecycle::kFiring;
}

absl::StatusOr<nlohmann::json> Escalator::StatusOf(
    std::string_view incident_id) const {
  absl::StatusOr<Lifecycle> lifecycle = LifecycleOf(incident_id);
  if (!lifecycle.ok()) return lifecycle.status();
  const Tracked& t = **Find(incident_id);
  json status = {{"lifecycle", LifecycleName(*lifecycle)},
                 {"policy", SeverityName(t.policy)}};
  if (t.acknowledged) {
    status["acknowledged_by"] = t.acknowledged_by;
    status["acknowledged_at"] = t.acknowledged_at;
  }
  if (!t.silenced_by.empty()) status["silenced_by"] = t.silenced_by;
  if ((t.escalating || t.exhausted) && (t.step > 0 || t.attempt > 0)) {
    status["step"] = t.step;
    status["attempt"] = t.attempt;
  }
  if (MayPage(t)) status["next_page_at"] = t.next_at;
  if (t.exhausted) status["exhausted"] = true;
  if (t.resolved) status["resolved_at"] = t.resolved_at;
  return status;
}

}  // namespace vigil
