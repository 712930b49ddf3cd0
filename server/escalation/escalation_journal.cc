// EscalationService's journal: each incident's escalation timeline
// (stream "timeline/<id>"), the audit log of operator calls (stream
// "audit"), and the delivery listings of both outboxes.
#include "server/escalation/escalation_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/escalation/escalation_internal.h"

namespace vigil {
namespace {

using Json = nlohmann::json;
using escalation_internal::kInf;

constexpr char kAuditStream[] = "audit";

std::string TimelineStream(std::string_view id) {
  return absl::StrCat("timeline/", std::string(id));
}

Json StatusJson(const absl::Status& s) {
  return s.ok() ? Json("ok") : Json(std::string(s.ToString()));
}

}  // namespace

void EscalationService::AddTimeline(std::string_view id, Json event) {
  const double ts = event.value("ts", options_.clock->Now());
  (void)options_.store->AppendEvent(Event{TimelineStream(id), ts, 0, event.dump()});
  if (options_.changes != nullptr)
    options_.changes->Publish({{"topic", "incident"},
                               {"id", std::string(id)},
                               {"type", event.value("type", "")},
                               {"ts", ts}});
}

void EscalationService::RecordAudit(const Identity& who, std::string_view action,
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

std::vector<Json> EscalationService::Timeline(std::string_view id) const {
  std::vector<Json> out;
  for (const Event& e : options_.store->ListEvents(TimelineStream(id), -kInf,
                                                   kInf, 100'000)) {
    Json j = Json::parse(e.payload, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
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

}  // namespace vigil
