#include "server/health/store_watch.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/catch_all.h"

namespace vigil {

StoreWatch::StoreWatch(StoreWatchOptions options)
    : options_(std::move(options)) {}

StoreWatch::~StoreWatch() { Stop(); }

void StoreWatch::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable()) return;
  if (options_.claim && !incident_) {
    if (std::optional<Incident> left = options_.claim()) {
      incident_ = left->id;
      published_ = *std::move(left);
    }
  }
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void StoreWatch::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StoreWatch::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    const double deadline = options_.clock->Now() + options_.check_seconds;
    while (!stopping_ && options_.clock->Now() < deadline)
      options_.clock->WaitUntil(l, wake_, deadline);
    if (stopping_) break;
    l.unlock();
    if (std::string error = CatchAll([this] { Check(); }); !error.empty())
      std::fprintf(stderr, "vigil-server: store watch threw %s\n", error.c_str());
    l.lock();
  }
}

void StoreWatch::Check() {
  const absl::Status health = options_.store->Health();
  const double now = options_.clock->Now();
  IncidentUpdate update;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!health.ok()) {
      if (!unhealthy_since_) unhealthy_since_ = now;
      if (incident_ || !options_.publish ||
          now - *unhealthy_since_ < options_.incident_after_seconds)
        return;
      update.type = UpdateType::kOpened;
      Incident& incident = update.incident;
      incident.severity = Severity::kP1;
      incident.kind = "storage_degraded";
      incident.job = "cluster";
      incident.ts = *unhealthy_since_;
      incident.last_update_ts = now;
      incident.summary = absl::StrCat(
          "Vigil's store refuses writes: ", std::string(health.message()));
      incident.hint_category = HintCategory::kGeneral;
      incident.hint =
          "Free space or fix the data dir's mount (see /readyz and "
          "vigil_storage_* in /metrics). Agents keep their frames in their "
          "spools and resend them; the server resumes by itself, without a "
          "restart, once writes succeed again.";
      incident.responses = {Response::kNotifySre};
      incident.severity_history = {{Severity::kP1, now, "storage_degraded"}};
    } else {
      unhealthy_since_.reset();
      if (!incident_) return;
      update.type = UpdateType::kResolved;
      update.incident = published_;
      update.incident.id = *incident_;
      update.incident.state = IncidentState::kResolved;
      update.incident.resolved_ts = now;
      update.incident.last_update_ts = now;
    }
  }
  update.ts = now;
  const bool opening = update.type == UpdateType::kOpened;
  absl::StatusOr<std::string> id = options_.publish(update);
  std::lock_guard<std::mutex> l(mu_);
  if (opening) {
    if (!id.ok()) return;  // tried again at the next check
    incident_ = *id;
    published_ = update.incident;
  } else {
    incident_.reset();
  }
}

std::optional<std::string> StoreWatch::open_incident() const {
  std::lock_guard<std::mutex> l(mu_);
  return incident_;
}

std::optional<double> StoreWatch::unhealthy_since() const {
  std::lock_guard<std::mutex> l(mu_);
  return unhealthy_since_;
}

}  // namespace vigil
