// EscalationService's share of the fleet's safety state in cluster mode
// (docs/SCALING.md "Safety state"): silences and the remediation circuit
// breaker, stored by every server as entries through FleetSafety::share and
// applied from the entries the others stored.
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/escalation/escalation_service.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

constexpr char kSilencePrefix[] = "silences/";

}  // namespace

void EscalationService::QueueFleetEntry(std::string name, Json value, double keep_seconds) {
  if (!options_.fleet.has_value()) return;
  value["from"] = options_.fleet->self;
  fleet_outgoing_[std::move(name)] = FleetEntry{value.dump(), keep_seconds};
  tick_cv_.notify_all();
}

void EscalationService::ShareFleetEntries() {
  std::map<std::string, FleetEntry> outgoing;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (fleet_outgoing_.empty()) return;
    outgoing.swap(fleet_outgoing_);
  }
  std::map<std::string, FleetEntry> failed;
  for (auto& [name, entry] : outgoing) {
    if (absl::Status s = options_.fleet->share(name, entry.value, entry.keep_seconds); !s.ok()) {
      std::fprintf(stderr, "vigil-server: cluster: cannot share %s with the fleet (will retry): %s\n",
                   name.c_str(), std::string(s.message()).c_str());
      failed.emplace(name, std::move(entry));
    }
  }
  if (failed.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  // A newer value queued meanwhile wins over the one that failed.
  for (auto& [name, entry] : failed) fleet_outgoing_.try_emplace(name, std::move(entry));
}

void EscalationService::ApplyFleetState(
    const std::vector<std::pair<std::string, std::string>>& entries) {
  if (!options_.fleet.has_value()) return;
  std::string halt_to_resolve;
  std::string reset_by;
  for (const auto& [name, text] : entries) {
    const Json entry = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!entry.is_object() || !entry.contains("ts") || !entry["ts"].is_number()) continue;
    const std::string from = entry.value("from", "");
    if (from == options_.fleet->self) continue;  // made here
    const double ts = entry["ts"].get<double>();
    std::lock_guard<std::mutex> l(mu_);
    const double now = options_.clock->Now();
    if (name == "breaker") {
      if (ts <= breaker_ts_ || !entry.contains("tripped") || !entry["tripped"].is_boolean())
        continue;
      breaker_ts_ = ts;
      const bool tripped = entry["tripped"].get<bool>();
      if (tripped && !gate_.tripped()) {
        gate_.Trip(absl::StrCat(entry.value("reason", "circuit breaker"), " (on ", from, ")"));
        dirty_ = true;
        std::fprintf(stderr, "vigil-server: cluster: remediation halted fleet-wide by %s\n",
                     from.c_str());
      } else if (!tripped && gate_.tripped()) {
        halt_to_resolve = ResetBreaker(now);
        reset_by = absl::StrCat(entry.value("by", "someone"), " (via ", from, ")");
      }
      continue;
    }
    if (!absl::StartsWith(name, kSilencePrefix)) continue;
    const std::string id = name.substr(sizeof(kSilencePrefix) - 1);
    const Json body = entry.value("silence", Json());
    if (!body.is_object() || body.value("id", "") != id) continue;
    if (auto it = applied_silences_.find(id); it != applied_silences_.end() && it->second >= ts)
      continue;
    applied_silences_[id] = ts;
    bool active_here = false;
    for (const Silence& s : escalator_.ActiveSilences(now)) active_here |= s.id == id;
    const double ends_at = body.value("ends_at", 0.0);
    if (ends_at > now && !active_here) {
      Json fields = {{"matchers", body.value("matchers", Json::array())},
                     {"starts_at", body.value("starts_at", now)},
                     {"ends_at", ends_at},
                     {"comment", body.value("comment", "")}};
      absl::StatusOr<Silence> silence = ParseSilence(fields, now);
      if (!silence.ok()) continue;
      silence->id = id;
      silence->author = absl::StrCat(body.value("author", "someone"), " (via ", from, ")");
      absl::StatusOr<EscalationOutput> out = escalator_.AddSilence(*silence, now);
      if (out.ok()) Handle(*out);
      dirty_ = true;
    } else if (ends_at <= now && active_here) {
      absl::StatusOr<EscalationOutput> out = escalator_.ExpireSilence(
          id, absl::StrCat(entry.value("by", "someone"), " (via ", from, ")"), now);
      if (out.ok()) Handle(*out);
      dirty_ = true;
    }
  }
  if (!reset_by.empty()) {
    ResolveHaltIncident(halt_to_resolve);
    RecordAudit(Identity{reset_by, Role::kAdmin}, "reset_remediation", halt_to_resolve,
             "reset on another server of the fleet", absl::OkStatus());
  }
}

}  // namespace vigil
