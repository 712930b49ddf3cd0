#include "server/delivery/outbox.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/catch_all.h"
#include "common/stable_hash.h"
#include "common/status_macros.h"
#include "notify/signing.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

// Items kept in memory only, at most, while the store refuses them.
constexpr size_t kMaxUnstoredItems = 10'000;
// How often storing them is retried.
constexpr double kStoreRetrySeconds = 1;
constexpr char kIdempotencyHeader[] = "Idempotency-Key";
constexpr char kTimestampHeader[] = "X-Vigil-Timestamp";
constexpr char kSignatureHeader[] = "X-Vigil-Signature";
// DeliveryStatus::last_response keeps at most this much of a body.
constexpr size_t kMaxResponseBytes = 4096;
constexpr double kInf = std::numeric_limits<double>::infinity();
// With nothing due a thread still looks again this often, so a wait on the
// real clock is never unbounded.
constexpr double kMaxIdleSeconds = 60;
// How often ended items past the retention are looked for.
constexpr double kPruneIntervalSeconds = 60;
// Rounding slack when a refilled bucket should hold exactly one token.
constexpr double kTokenSlack = 1e-9;

// Where an item stands on its routes.
struct Cursor {
  size_t route = 0;        // the route in use
  size_t request = 0;      // the next request of that route to send
  int route_failures = 0;  // retryable failures on that route so far
};

// What follows one judged send.
enum class Next { kSendNow, kRetryLater, kDelivered, kFailed };

// Moves `cursor` past one send of its current request, judged `verdict`;
// `requests` is how many requests the route rendered to, and `attempts`
// counts all sends of the item including this one. A permanent failure,
// or failover_after_attempts retryable ones, moves to the next route (sent
// at once). On kFailed `reason` says why the item is given up, and the
// cursor stays on the last route tried.
Next Advance(const OutboxItem& item, DeliveryVerdict verdict, size_t requests,
             int attempts, const OutboxOptions& options, Cursor* cursor,
             std::string* reason) {
  Next next = Next::kSendNow;
  bool failover = false;
  switch (verdict) {
    case DeliveryVerdict::kDelivered:
      if (++cursor->request >= requests) return Next::kDelivered;
      break;
    case DeliveryVerdict::kRetry:
      // The last route keeps retrying: a short outage of the only
      // receiver left must not lose the item.
      if (++cursor->route_failures >= options.failover_after_attempts &&
          cursor->route + 1 < item.routes.size()) {
        failover = true;
      } else {
        next = Next::kRetryLater;
      }
      break;
    case DeliveryVerdict::kFailed:
      failover = true;
      break;
  }
  if (failover) {
    if (cursor->route + 1 >= item.routes.size()) {
      *reason = "no receiver left";
      return Next::kFailed;
    }
    *cursor = Cursor{.route = cursor->route + 1};
  }
  if (options.max_attempts > 0 && attempts >= options.max_attempts) {
    *reason = absl::StrCat("gave up after ", attempts, " attempts");
    return Next::kFailed;
  }
  return next;
}

const char* VerdictName(DeliveryVerdict verdict) {
  switch (verdict) {
    case DeliveryVerdict::kDelivered:
      return "delivered";
    case DeliveryVerdict::kRetry:
      return "retry";
    case DeliveryVerdict::kFailed:
      return "failed";
  }
  return "failed";
}

std::optional<DeliveryVerdict> ParseVerdict(const std::string& name) {
  if (name == "delivered") return DeliveryVerdict::kDelivered;
  if (name == "retry") return DeliveryVerdict::kRetry;
  if (name == "failed") return DeliveryVerdict::kFailed;
  return std::nullopt;
}


// `j` as text; nullopt if a string in it is not valid UTF-8 (dumping with
// "replace" then differs from dumping with "ignore").
std::optional<std::string> DumpValidUtf8(const Json& j) {
  std::string replaced =
      j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (replaced != j.dump(-1, ' ', false, Json::error_handler_t::ignore))
    return std::nullopt;
  return replaced;
}

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json ItemToJson(const OutboxItem& item) {
  Json routes = Json::array();
  for (const OutboxRoute& route : item.routes) {
    routes.push_back(Json{{"receiver", route.receiver},
                          {"receiver_type", route.receiver_type},
                          {"payload", route.payload}});
  }
  return Json{{"key", item.key},
              {"incident_id", item.incident_id},
              {"kind", item.kind},
              {"description", item.description},
              {"priority", item.priority},
              {"routes", routes},
              {"created_ts", item.created_ts}};
}

// Readers of one field of a stored object; false if missing or mistyped.
bool Read(const Json& j, const char* name, std::string* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string()) return false;
  *out = it->get<std::string>();
  return true;
}
bool Read(const Json& j, const char* name, double* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number()) return false;
  *out = it->get<double>();
  return true;
}
bool Read(const Json& j, const char* name, size_t* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *out = it->get<size_t>();
  return true;
}
bool Read(const Json& j, const char* name, bool* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_boolean()) return false;
  *out = it->get<bool>();
  return true;
}
bool Read(const Json& j, const char* name, int* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) return false;
  *out = it->get<int>();
  return true;
}

std::optional<OutboundRequest> RequestFromJson(const Json& j) {
  OutboundRequest r;
  if (!j.is_object() || !Read(j, "method", &r.method) ||
      !Read(j, "url", &r.url) || !Read(j, "body", &r.body) ||
      !Read(j, "smtp", &r.smtp) || !Read(j, "mail_from", &r.mail_from) ||
      !Read(j, "username", &r.username) || !Read(j, "password", &r.password))
    return std::nullopt;
  auto headers = j.find("headers");
  auto rcpt = j.find("mail_rcpt");
  if (headers == j.end() || !headers->is_array() || rcpt == j.end() ||
      !rcpt->is_array())
    return std::nullopt;
  for (const Json& h : *headers) {
    if (!h.is_array() || h.size() != 2 || !h[0].is_string() ||
        !h[1].is_string())
      return std::nullopt;
    r.headers.emplace_back(h[0].get<std::string>(), h[1].get<std::string>());
  }
  for (const Json& to : *rcpt) {
    if (!to.is_string()) return std::nullopt;
    r.mail_rcpt.push_back(to.get<std::string>());
  }
  return r;
}

// The stored item, or nullopt if `j` is not one Enqueue would accept.
// Items stored by versions that persisted rendered requests have them
// instead of a payload: then `legacy` gets them, one list per route.
std::optional<OutboxItem> ItemFromJson(
    const Json& j, std::vector<std::vector<OutboundRequest>>* legacy) {
  OutboxItem item;
  if (!j.is_object() || !Read(j, "key", &item.key) || item.key.empty() ||
      !Read(j, "incident_id", &item.incident_id) ||
      !Read(j, "kind", &item.kind) ||
      !Read(j, "description", &item.description) ||
      !Read(j, "created_ts", &item.created_ts))
    return std::nullopt;
  // Stored before priorities existed: the most urgent, as the default.
  if (j.contains("priority") && !Read(j, "priority", &item.priority))
    return std::nullopt;
  if (item.priority < 0 || item.priority >= kOutboxPriorities)
    return std::nullopt;
  auto routes = j.find("routes");
  if (routes == j.end() || !routes->is_array() || routes->empty())
    return std::nullopt;
  legacy->clear();
  for (const Json& rj : *routes) {
    OutboxRoute route;
    if (!rj.is_object() || !Read(rj, "receiver", &route.receiver) ||
        route.receiver.empty() ||
        !Read(rj, "receiver_type", &route.receiver_type))
      return std::nullopt;
    auto payload = rj.find("payload");
    auto requests = rj.find("requests");
    if (payload != rj.end()) {
      route.payload = *payload;
    } else if (requests != rj.end() && requests->is_array() &&
               !requests->empty()) {
      legacy->resize(routes->size());
      for (const Json& qj : *requests) {
        std::optional<OutboundRequest> request = RequestFromJson(qj);
        if (!request) return std::nullopt;
        (*legacy)[item.routes.size()].push_back(std::move(*request));
      }
    } else {
      return std::nullopt;
    }
    item.routes.push_back(std::move(route));
  }
  // An item is either all payloads or all stored requests.
  if (!legacy->empty()) {
    for (const std::vector<OutboundRequest>& requests : *legacy) {
      if (requests.empty()) return std::nullopt;
    }
  }
  return item;
}

absl::Status ValidateItem(const OutboxItem& item) {
  if (item.key.empty())
    return absl::InvalidArgumentError("outbox item: key is empty");
  if (item.priority < 0 || item.priority >= kOutboxPriorities)
    return absl::InvalidArgumentError(
        absl::StrCat("outbox item ", item.key, ": priority ", item.priority,
                     " is not in 0..", kOutboxPriorities - 1));
  if (item.routes.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("outbox item ", item.key, ": no route"));
  for (size_t i = 0; i < item.routes.size(); ++i) {
    if (item.routes[i].receiver.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          "outbox item ", item.key, ": routes[", i, "].receiver is empty"));
  }
  return absl::OkStatus();
}

// Checks a rendering: at least one request, each with a URL.
absl::Status ValidateRendered(
    const absl::StatusOr<std::vector<OutboundRequest>>& rendered) {
  if (!rendered.ok()) return rendered.status();
  if (rendered->empty())
    return absl::InvalidArgumentError("renders no request");
  for (size_t r = 0; r < rendered->size(); ++r) {
    if ((*rendered)[r].url.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("requests[", r, "].url is empty"));
  }
  return absl::OkStatus();
}

// `request` with its Vigil signature headers (signing.h) for time `now`,
// replacing any it had.
OutboundRequest Signed(const OutboundRequest& request,
                       const std::string& secret, double now) {
  OutboundRequest out = request;
  std::erase_if(out.headers, [](const auto& h) {
    return absl::EqualsIgnoreCase(h.first, kTimestampHeader) ||
           absl::EqualsIgnoreCase(h.first, kSignatureHeader);
  });
  const int64_t timestamp = static_cast<int64_t>(std::floor(now));
  out.headers.emplace_back(kTimestampHeader, absl::StrCat(timestamp));
  out.headers.emplace_back(kSignatureHeader,
                           SignWebhook(secret, timestamp, out.body));
  return out;
}

// `body` cut to kMaxResponseBytes, not inside a UTF-8 sequence.
std::string CutResponse(const std::string& body) {
  if (body.size() <= kMaxResponseBytes) return body;
  size_t end = kMaxResponseBytes;
  while (end > 0 && (static_cast<unsigned char>(body[end]) & 0xC0) == 0x80)
    --end;
  return body.substr(0, end);
}

// Adds the Idempotency-Key header to request `index` of `count` of item
// `key` if it lacks one: the key, suffixed "/<index>" when count > 1.
void AddIdempotencyKey(const std::string& key, size_t index, size_t count,
                       OutboundRequest* request) {
  const bool has_key = std::any_of(
      request->headers.begin(), request->headers.end(), [](const auto& h) {
        return absl::EqualsIgnoreCase(h.first, kIdempotencyHeader);
      });
  if (has_key) return;
  request->headers.emplace_back(
      kIdempotencyHeader, count == 1 ? key : absl::StrCat(key, "/", index));
}

}  // namespace

nlohmann::json DeliveryStatusToJson(const DeliveryStatus& status) {
  return Json{{"key", status.key},
              {"incident_id", status.incident_id},
              {"kind", status.kind},
              {"description", status.description},
              {"state", status.state},
              {"receiver", status.receiver},
              {"attempts", status.attempts},
              {"last_detail", status.last_detail},
              {"last_response", status.last_response},
              {"created_ts", status.created_ts},
              {"updated_ts", status.updated_ts},
              {"next_attempt_ts", status.next_attempt_ts}};
}

struct Outbox::Impl {
  // One item and where it stands.
  struct Entry {
    OutboxItem item;  // routes are dropped once the item is done
    // Requests an older version stored instead of payloads, one list per
    // route, sent as stored; empty for items rendered at send time.
    std::vector<std::vector<OutboundRequest>> legacy;
    uint64_t order = 0;
    Cursor cursor;
    DeliveryStatus status;
    // The item's enqueue record while the store refuses it (the item is
    // sent all the same); empty once stored. Until then its attempt and
    // done records are not stored either, so a replay never sees them
    // before the item.
    std::string unstored;
    // Set while one thread works on the entry without the lock (a send
    // and its listener call, or storing it); no other thread touches the
    // entry's item, cursor or status meanwhile.
    bool busy = false;
    // Its place in Impl::ended once it ended.
    std::multimap<double, Entry*>::iterator ended_at;
  };

  // The result of one send (or give-up), applied to its entry under the
  // lock.
  struct Outcome {
    Cursor cursor;
    DeliveryStatus status;
    bool sent = false;
    int persist_errors = 0;
    // The receiver took the request / asked to wait this long: clears or
    // sets its lane's pause.
    bool accepted = false;
    std::optional<double> retry_after = std::nullopt;
  };

  struct TokenBucket {
    double tokens = 0;
    double updated_ts = 0;
  };

  // One receiver's queue and its sender threads. All fields but `cv` and
  // `senders` are guarded by Impl::mu; `senders` is only changed with mu
  // held and joined by Stop().
  struct Lane {
    // Pending items whose current route is this receiver, by (priority,
    // enqueue order): most urgent first, then oldest.
    std::map<std::pair<int, uint64_t>, Entry*> queue;
    std::optional<TokenBucket> bucket;
    // The receiver's last Retry-After: asked at pause_ts to wait
    // pause_seconds (0: not paused).
    double pause_ts = 0;
    double pause_seconds = 0;
    // After a send that failed, the receiver is not tried again before the
    // failed item's next attempt (a send it accepts clears it); then the
    // most urgent pending item goes, whoever's timer ran out, so a
    // receiver that comes back gets P0 first.
    double retry_ts = 0;
    std::condition_variable cv;  // wakes the sender threads
    std::vector<std::thread> senders;
  };

  Impl(OutboxOptions options, Listener listener)
      : options(std::move(options)),
        listener(std::move(listener)),
        rate_per_minute(this->options.rate_per_minute),
        signing_secrets(this->options.signing_secrets) {}

  absl::Status ValidateOptions() const;
  // Rebuilds every item from the stored stream.
  void Replay() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void ReplayEvent(const Event& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Adds a new (or replayed) item as pending and queues it.
  void Insert(OutboxItem item, std::vector<std::vector<OutboundRequest>> legacy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Marks `entry` done with `state`, takes it off its queue and drops its
  // routes.
  void Finish(Entry* entry, const std::string& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The lane of `receiver`, created (with its sender threads, unless
  // stopping) on first use.
  Lane& LaneFor(const std::string& receiver) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Puts a pending entry on / takes it off the queue of its current route.
  void Queue(Entry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Unqueue(Entry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Forgets items that ended more than retention_seconds before `now`.
  void Prune(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Deletes the stored events no remembered item needs: those older than
  // both the retention and the oldest remembered item (every event of an
  // item is at or after its creation). Releases `lock` meanwhile.
  void DeleteForgotten(std::unique_lock<std::mutex>& lock, double now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Forgets one ended item.
  void Forget(Entry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // A sender thread of `lane`.
  void Send(Lane* lane);
  // The store retries and pruning.
  void Maintain();
  // The first item of `lane` (priority, then enqueue order) that is due,
  // not busy and for which the receiver has a token (taken), or nullptr;
  // lowers `wake` to the earliest time something can change. `give_up` is
  // set when the item returned is past give_up_after_seconds.
  Entry* PickLocked(Lane& lane, double now, double* wake, bool* give_up)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Takes a send token of `receiver`; false and the refill time if none.
  bool TakeToken(const std::string& receiver, Lane& lane, double now,
                 double* ready_ts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The requests of `route` rendered at `now`, or why there are none
  // (the renderer's error, or a rendering without requests or URLs).
  absl::StatusOr<std::vector<OutboundRequest>> RenderRoute(
      const OutboxRoute& route, double now) const;
  // The requests of the entry's current route, rendered at `now` (or as
  // stored by an older version), or why its next request cannot be sent.
  absl::StatusOr<std::vector<OutboundRequest>> Render(const Entry& entry,
                                                      double now) const;
  // Sends the (busy) entry's next request, judges it and persists the
  // result unless the item itself is not stored yet (`stored` false).
  Outcome SendNext(const Entry& entry, bool stored);
  // Fails the entry for having been pending too long, and persists that.
  Outcome GiveUp(const Entry& entry, double now, bool stored);
  // Tries again to store the oldest unstored enqueue record (then the
  // item's end, if it has ended). Releases `lock` meanwhile.
  void StoreUnstored(std::unique_lock<std::mutex>& lock, double now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Applies the outcome of a send by `lane` to `entry`.
  void Apply(Entry* entry, const Outcome& outcome, Lane& lane)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status Persist(const Json& payload, double ts);

  static const std::string& ReceiverOf(const Entry& entry) {
    return entry.item.routes[entry.cursor.route].receiver;
  }

  const OutboxOptions options;
  const Listener listener;

  // Serializes Enqueue (duplicate check, persist, insert) and Start.
  std::mutex enqueue_mu;
  // Serializes joining the threads.
  std::mutex stop_mu;
  mutable std::mutex mu;
  std::condition_variable maintenance_cv;  // wakes the maintenance thread
  bool started ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::unordered_map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
  uint64_t next_order ABSL_GUARDED_BY(mu) = 0;
  std::map<uint64_t, Entry*> by_order ABSL_GUARDED_BY(mu);
  std::unordered_map<std::string, std::map<uint64_t, Entry*>> by_incident
      ABSL_GUARDED_BY(mu);
  // Ended items by the time they ended, for Prune.
  std::multimap<double, Entry*> ended ABSL_GUARDED_BY(mu);
  std::map<std::string, std::unique_ptr<Lane>> lanes ABSL_GUARDED_BY(mu);
  // Entries whose enqueue record is not stored yet, oldest first, and when
  // storing the first is tried next.
  std::deque<Entry*> unstored ABSL_GUARDED_BY(mu);
  double next_store_retry ABSL_GUARDED_BY(mu) = 0;
  double next_prune ABSL_GUARDED_BY(mu) = 0;
  // Stored events before this time are deleted (DeleteForgotten).
  double deleted_before ABSL_GUARDED_BY(mu) = -kInf;
  Counters totals ABSL_GUARDED_BY(mu);  // all but `pending`, `unstored`
  // The receivers' limits and secrets as configured now (from options,
  // then SetReceiverLimits).
  std::map<std::string, int> rate_per_minute ABSL_GUARDED_BY(mu);
  std::map<std::string, std::string> signing_secrets ABSL_GUARDED_BY(mu);
  std::thread maintenance;
};

absl::Status Outbox::Impl::ValidateOptions() const {
  if (options.store == nullptr || options.transport == nullptr ||
      options.clock == nullptr || !options.render)
    return absl::InvalidArgumentError(
        "outbox: store, transport, clock and render are required");
  if (options.failover_after_attempts < 1 || options.max_attempts < 0 ||
      options.max_in_flight_per_receiver < 1)
    return absl::InvalidArgumentError(
        "outbox: failover_after_attempts and max_in_flight_per_receiver "
        "must be >= 1, max_attempts >= 0");
  if (!(options.base_backoff_seconds >= 0) ||
      !(options.max_backoff_seconds >= 0) ||
      !(options.give_up_after_seconds > 0) ||
      !(options.request_timeout_seconds > 0) ||
      !(options.retention_seconds > 0))
    return absl::InvalidArgumentError(
        "outbox: backoff seconds must be >= 0, give-up, timeout and "
        "retention > 0");
  for (double cap : options.max_retry_after_seconds) {
    if (!(cap > 0))
      return absl::InvalidArgumentError(
          "outbox: max_retry_after_seconds must be > 0");
  }
  if (options.stream.empty())
    return absl::InvalidArgumentError("outbox: stream must not be empty");
  return absl::OkStatus();
}

void Outbox::Impl::Replay() {
  std::vector<Event> events = options.store->ListEvents(
      options.stream, -kInf, kInf, std::numeric_limits<size_t>::max());
  // Stores list by timestamp; the append order is the seq order.
  std::stable_sort(
      events.begin(), events.end(),
      [](const Event& a, const Event& b) { return a.seq < b.seq; });
  for (const Event& event : events) ReplayEvent(event);
}

void Outbox::Impl::ReplayEvent(const Event& event) {
  const Json j = Json::parse(event.payload, nullptr, false);
  std::string op, key;
  if (j.is_discarded() || !j.is_object() || !Read(j, "op", &op)) {
    ++totals.unreadable_events;
    return;
  }
  if (op == "enqueue") {
    auto item_json = j.find("item");
    std::optional<OutboxItem> item;
    std::vector<std::vector<OutboundRequest>> legacy;
    if (item_json != j.end()) item = ItemFromJson(*item_json, &legacy);
    auto known = item ? entries.find(item->key) : entries.end();
    // A key enqueued again after its item ended and was forgotten.
    if (known != entries.end() && known->second.status.state != "pending") {
      Forget(&known->second);
      known = entries.end();
    }
    if (!item || known != entries.end()) {
      ++totals.unreadable_events;
      return;
    }
    Insert(std::move(*item), std::move(legacy));
    return;
  }
  auto it = Read(j, "key", &key) ? entries.find(key) : entries.end();
  if (it == entries.end()) {
    ++totals.unreadable_events;
    return;
  }
  Entry& entry = it->second;
  const bool done = entry.status.state != "pending";
  if (op == "done") {
    std::string state;
    if (!Read(j, "state", &state) ||
        (state != "delivered" && state != "failed")) {
      ++totals.unreadable_events;
      return;
    }
    Read(j, "detail", &entry.status.last_detail);
    Read(j, "receiver", &entry.status.receiver);
    entry.status.updated_ts = event.ts;
    // An attempt event may have finished it already (same outcome).
    if (!done) Finish(&entry, state);
    return;
  }
  std::string verdict_name;
  Cursor sent;
  double next_attempt_ts = 0;
  size_t requests = 0;
  bool failover = false;
  if (op != "attempt" || done || !Read(j, "route", &sent.route) ||
      !Read(j, "request_index", &sent.request) ||
      !Read(j, "verdict", &verdict_name) ||
      !Read(j, "next_attempt_ts", &next_attempt_ts) ||
      !ParseVerdict(verdict_name) || sent.route >= entry.item.routes.size() ||
      (j.contains("failover") && !Read(j, "failover", &failover))) {
    ++totals.unreadable_events;
    return;
  }
  // How many requests the route rendered to; older versions did not say,
  // and stored the requests instead.
  if (!Read(j, "requests", &requests)) {
    if (entry.legacy.empty()) {
      ++totals.unreadable_events;
      return;
    }
    requests = entry.legacy[sent.route].size();
  }
  const DeliveryVerdict verdict =
      failover ? DeliveryVerdict::kFailed : *ParseVerdict(verdict_name);
  // Nothing rendered: only a failure of the route can follow.
  if (requests == 0 ? verdict != DeliveryVerdict::kFailed
                    : sent.request >= requests) {
    ++totals.unreadable_events;
    return;
  }
  // The stored position wins over the replayed one (options such as
  // failover_after_attempts may have changed since).
  if (sent.route == entry.cursor.route)
    sent.route_failures = entry.cursor.route_failures;
  Unqueue(&entry);
  entry.cursor = sent;
  ++totals.attempts;
  ++entry.status.attempts;
  std::string reason;
  const Next next = Advance(entry.item, verdict, requests,
                            entry.status.attempts, options, &entry.cursor,
                            &reason);
  entry.status.last_detail.clear();
  Read(j, "detail", &entry.status.last_detail);
  entry.status.last_response.clear();
  Read(j, "response", &entry.status.last_response);
  entry.status.receiver = ReceiverOf(entry);
  entry.status.updated_ts = event.ts;
  entry.status.next_attempt_ts = next_attempt_ts;
  if (next == Next::kDelivered) {
    Finish(&entry, "delivered");
  } else if (next == Next::kFailed) {
    Finish(&entry, "failed");
  } else {
    Queue(&entry);
  }
}

void Outbox::Impl::Insert(OutboxItem item,
                          std::vector<std::vector<OutboundRequest>> legacy) {
  const std::string key = item.key;
  Entry& entry = entries[key];
  entry.order = next_order++;
  entry.status.key = item.key;
  entry.status.incident_id = item.incident_id;
  entry.status.kind = item.kind;
  entry.status.description = item.description;
  entry.status.state = "pending";
  entry.status.receiver = item.routes.front().receiver;
  entry.status.created_ts = item.created_ts;
  entry.status.updated_ts = item.created_ts;
  entry.status.next_attempt_ts = item.created_ts;
  entry.item = std::move(item);
  entry.legacy = std::move(legacy);
  by_order[entry.order] = &entry;
  if (!entry.item.incident_id.empty())
    by_incident[entry.item.incident_id][entry.order] = &entry;
  Queue(&entry);
}

void Outbox::Impl::Finish(Entry* entry, const std::string& state) {
  Unqueue(entry);
  entry->status.state = state;
  entry->status.next_attempt_ts = 0;
  ++(state == "delivered" ? totals.delivered : totals.failed);
  entry->ended_at = ended.emplace(entry->status.updated_ts, entry);
  entry->item.routes.clear();
  entry->item.routes.shrink_to_fit();
  entry->legacy.clear();
  entry->legacy.shrink_to_fit();
}

Outbox::Impl::Lane& Outbox::Impl::LaneFor(const std::string& receiver) {
  std::unique_ptr<Lane>& lane = lanes[receiver];
  if (lane != nullptr) return *lane;
  lane = std::make_unique<Lane>();
  if (started && !stopping) {
    for (int i = 0; i < options.max_in_flight_per_receiver; ++i)
      lane->senders.emplace_back([this, l = lane.get()] { Send(l); });
  }
  return *lane;
}

void Outbox::Impl::Queue(Entry* entry) {
  Lane& lane = LaneFor(ReceiverOf(*entry));
  lane.queue[{entry->item.priority, entry->order}] = entry;
  lane.cv.notify_all();
}

void Outbox::Impl::Unqueue(Entry* entry) {
  if (entry->item.routes.empty()) return;  // ended
  auto lane = lanes.find(ReceiverOf(*entry));
  if (lane != lanes.end())
    lane->second->queue.erase({entry->item.priority, entry->order});
}

void Outbox::Impl::Prune(double now) {
  const double cutoff = now - options.retention_seconds;
  for (auto it = ended.begin(); it != ended.end() && it->first < cutoff;) {
    Entry* entry = (it++)->second;
    // Still being reported or stored: a later round takes it.
    if (!entry->busy && entry->unstored.empty()) Forget(entry);
  }
}

void Outbox::Impl::DeleteForgotten(std::unique_lock<std::mutex>& lock,
                                   double now) {
  double cutoff = now - options.retention_seconds;
  for (const auto& [key, entry] : entries)
    cutoff = std::min(cutoff, entry.item.created_ts);
  if (!(cutoff > deleted_before)) return;
  lock.unlock();
  const absl::Status deleted =
      options.store->DeleteEventsBefore(options.stream, cutoff);
  lock.lock();
  if (deleted.ok()) {
    deleted_before = std::max(deleted_before, cutoff);
  } else {
    // Tried again at the next pruning round.
    ++totals.delete_errors;
    std::fprintf(stderr, "vigil-server: outbox: cannot delete old events: %s\n",
                 std::string(deleted.message()).c_str());
  }
}

void Outbox::Impl::Forget(Entry* entry) {
  by_order.erase(entry->order);
  if (auto incident = by_incident.find(entry->item.incident_id);
      incident != by_incident.end()) {
    incident->second.erase(entry->order);
    if (incident->second.empty()) by_incident.erase(incident);
  }
  ended.erase(entry->ended_at);
  const std::string key = entry->item.key;  // outlives the erased entry
  entries.erase(key);
}

bool Outbox::Impl::TakeToken(const std::string& receiver, Lane& lane,
                             double now, double* ready_ts) {
  auto rate_it = rate_per_minute.find(receiver);
  if (rate_it == rate_per_minute.end() || rate_it->second <= 0)
    return true;
  const double capacity = rate_it->second;
  const double per_second = capacity / 60;
  if (!lane.bucket) lane.bucket = TokenBucket{capacity, now};
  TokenBucket& bucket = *lane.bucket;
  bucket.tokens = std::min(
      capacity,
      bucket.tokens + std::max(0.0, now - bucket.updated_ts) * per_second);
  bucket.updated_ts = now;
  if (bucket.tokens + kTokenSlack >= 1) {
    bucket.tokens = std::max(0.0, bucket.tokens - 1);
    return true;
  }
  *ready_ts = now + (1 - bucket.tokens) / per_second;
  return false;
}

Outbox::Impl::Entry* Outbox::Impl::PickLocked(Lane& lane, double now,
                                              double* wake, bool* give_up) {
  // The most urgent item the receiver's pause lets go, and whether any
  // item (its own timer, and the receiver's since its last failure) is due.
  Entry* urgent = nullptr;
  bool any_due = false;
  for (auto& [position, entry] : lane.queue) {
    if (entry->busy) continue;
    const double deadline =
        entry->item.created_ts + options.give_up_after_seconds;
    if (now >= deadline) {
      *give_up = true;
      return entry;
    }
    *wake = std::min(*wake, deadline);
    // The receiver's pause holds the item back up to its priority's cap.
    const double released =
        lane.pause_ts +
        std::min(lane.pause_seconds,
                 options.max_retry_after_seconds[entry->item.priority]);
    if (released > now) {
      *wake = std::min(*wake, released);
      continue;
    }
    if (urgent == nullptr) urgent = entry;
    const double due = std::max(entry->status.next_attempt_ts, lane.retry_ts);
    if (due <= now) {
      any_due = true;
    } else {
      *wake = std::min(*wake, due);
    }
  }
  if (urgent == nullptr || !any_due) return nullptr;
  double ready_ts;
  if (!TakeToken(ReceiverOf(*urgent), lane, now, &ready_ts)) {
    *wake = std::min(*wake, ready_ts);
    return nullptr;
  }
  return urgent;
}

absl::Status Outbox::Impl::Persist(const Json& payload, double ts) {
  return options.store->AppendEvent(Event{options.stream, ts, 0, Dump(payload)})
      .status();
}

absl::StatusOr<std::vector<OutboundRequest>> Outbox::Impl::RenderRoute(
    const OutboxRoute& route, double now) const {
  absl::StatusOr<std::vector<OutboundRequest>> rendered =
      absl::InternalError("not rendered");
  if (std::string error = CatchAll([&] {
        rendered = options.render(route.receiver, route.payload, now);
      });
      !error.empty())
    return absl::InternalError(absl::StrCat("the renderer threw ", error));
  VIGIL_RETURN_IF_ERROR(ValidateRendered(rendered));
  return rendered;
}

absl::StatusOr<std::vector<OutboundRequest>> Outbox::Impl::Render(
    const Entry& entry, double now) const {
  if (!entry.legacy.empty()) return entry.legacy[entry.cursor.route];
  absl::StatusOr<std::vector<OutboundRequest>> rendered =
      RenderRoute(entry.item.routes[entry.cursor.route], now);
  if (rendered.ok() && entry.cursor.request >= rendered->size())
    return absl::FailedPreconditionError(absl::StrCat(
        "it now renders ", rendered->size(), " requests and request ",
        entry.cursor.request, " was next (its configuration changed)"));
  return rendered;
}

Outbox::Impl::Outcome Outbox::Impl::SendNext(const Entry& entry, bool stored) {
  const OutboxRoute& route = entry.item.routes[entry.cursor.route];
  const absl::StatusOr<std::vector<OutboundRequest>> rendered =
      Render(entry, options.clock->Now());
  const size_t request_count = rendered.ok() ? rendered->size() : 0;
  TransportResult result;
  DeliveryJudgement judgement;
  if (!rendered.ok()) {
    // Nothing to send on this route (receiver removed or changed): fail
    // over, as for a receiver that refuses for good.
    judgement.verdict = DeliveryVerdict::kFailed;
    judgement.detail = absl::StrCat("cannot render for receiver ",
                                    route.receiver, ": ",
                                    std::string(rendered.status().message()));
  } else {
    OutboundRequest request = (*rendered)[entry.cursor.request];
    AddIdempotencyKey(entry.item.key, entry.cursor.request, request_count,
                      &request);
    std::optional<std::string> secret;
    {
      std::lock_guard<std::mutex> l(mu);
      auto it = signing_secrets.find(route.receiver);
      if (it != signing_secrets.end()) secret = it->second;
    }
    if (secret.has_value()) request = Signed(request, *secret, options.clock->Now());
    if (std::string error = CatchAll([&] {
          result =
              options.transport->Send(request, options.request_timeout_seconds);
          judgement = JudgeResponse(route.receiver_type, result);
        });
        !error.empty()) {
      // A bug here or in a transport, not the receiver's answer: retried
      // like an unreachable receiver instead of ending the sender thread.
      std::fprintf(stderr, "vigil-server: outbox: sending %s threw %s\n",
                   entry.item.key.c_str(), error.c_str());
      result = TransportResult{};
      judgement.verdict = DeliveryVerdict::kRetry;
      judgement.retry_after_seconds.reset();
      judgement.detail = "internal error: " + error;
    }
  }
  const double now = options.clock->Now();

  Outcome out{.cursor = entry.cursor,
              .status = entry.status,
              .sent = true,
              .accepted = judgement.verdict == DeliveryVerdict::kDelivered};
  ++out.status.attempts;
  // A Retry-After over the priority's cap: fail over at once if there is
  // another route, else try again after the cap.
  const int priority = entry.item.priority;
  const double cap = options.max_retry_after_seconds[priority];
  std::optional<double> retry_after;
  if (judgement.verdict == DeliveryVerdict::kRetry)
    retry_after = judgement.retry_after_seconds;
  out.retry_after = retry_after;
  bool failover = false;
  std::string detail = judgement.detail;
  if (retry_after && *retry_after > cap) {
    failover = entry.cursor.route + 1 < entry.item.routes.size();
    absl::StrAppend(&detail, "; Retry-After ", *retry_after,
                    " s is over the P", priority, " cap of ", cap, " s: ",
                    failover ? "failing over" : "trying again after the cap");
  }
  std::string reason;
  Next next = Advance(entry.item,
                      failover ? DeliveryVerdict::kFailed : judgement.verdict,
                      request_count, out.status.attempts, options, &out.cursor,
                      &reason);
  double next_attempt_ts = 0;
  if (next == Next::kSendNow) next_attempt_ts = now;
  if (next == Next::kRetryLater) {
    double delay = BackoffSeconds(
        out.cursor.route_failures, options.base_backoff_seconds,
        options.max_backoff_seconds,
        StableHash(entry.item.key) + out.status.attempts);
    if (retry_after) delay = std::max(delay, std::min(*retry_after, cap));
    next_attempt_ts = now + delay;
  }
  if ((next == Next::kSendNow || next == Next::kRetryLater) &&
      next_attempt_ts >=
          entry.item.created_ts + options.give_up_after_seconds) {
    next = Next::kFailed;
    reason = absl::StrCat("not delivered within ",
                          options.give_up_after_seconds, " s");
  }

  out.status.receiver = entry.item.routes[out.cursor.route].receiver;
  out.status.last_detail =
      reason.empty() ? detail : absl::StrCat(detail, "; ", reason);
  out.status.last_response = CutResponse(result.body);
  out.status.updated_ts = now;
  out.status.next_attempt_ts = next_attempt_ts;
  if (next == Next::kDelivered) out.status.state = "delivered";
  if (next == Next::kFailed) out.status.state = "failed";

  if (!stored) return out;  // StoreUnstored records the end
  const Json attempt = {{"op", "attempt"},
                        {"key", entry.item.key},
                        {"receiver", route.receiver},
                        {"route", entry.cursor.route},
                        {"request_index", entry.cursor.request},
                        {"requests", request_count},
                        {"http_status", result.http_status},
                        {"verdict", VerdictName(judgement.verdict)},
                        {"failover", failover},
                        {"detail", detail},
                        {"response", out.status.last_response},
                        {"next_attempt_ts", next_attempt_ts}};
  if (!Persist(attempt, now).ok()) ++out.persist_errors;
  if (out.status.state != "pending") {
    const Json done = {{"op", "done"},
                       {"key", entry.item.key},
                       {"state", out.status.state},
                       {"receiver", out.status.receiver},
                       {"detail", out.status.last_detail}};
    if (!Persist(done, now).ok()) ++out.persist_errors;
  }
  return out;
}

Outbox::Impl::Outcome Outbox::Impl::GiveUp(const Entry& entry, double now,
                                           bool stored) {
  Outcome out{.cursor = entry.cursor, .status = entry.status};
  const std::string reason =
      absl::StrCat("not delivered within ", options.give_up_after_seconds, " s");
  out.status.last_detail =
      out.status.last_detail.empty()
          ? reason
          : absl::StrCat(out.status.last_detail, "; ", reason);
  out.status.state = "failed";
  out.status.updated_ts = now;
  if (!stored) return out;  // StoreUnstored records the end
  const Json done = {{"op", "done"},
                     {"key", entry.item.key},
                     {"state", "failed"},
                     {"receiver", out.status.receiver},
                     {"detail", out.status.last_detail}};
  if (!Persist(done, now).ok()) ++out.persist_errors;
  return out;
}

void Outbox::Impl::Apply(Entry* entry, const Outcome& outcome, Lane& lane) {
  const std::string receiver = ReceiverOf(*entry);
  Unqueue(entry);
  entry->cursor = outcome.cursor;
  const std::string state = outcome.status.state;
  entry->status = outcome.status;
  entry->status.state = "pending";
  if (outcome.retry_after) {
    lane.pause_ts = outcome.status.updated_ts;
    lane.pause_seconds = *outcome.retry_after;
  } else if (outcome.accepted) {
    lane.pause_seconds = 0;
  }
  if (outcome.accepted) {
    lane.retry_ts = 0;
  } else if (outcome.sent) {
    // Paced by the failed item's backoff, or the base one when it moved
    // on to another receiver.
    lane.retry_ts = ReceiverOf(*entry) == receiver && state == "pending"
                        ? outcome.status.next_attempt_ts
                        : outcome.status.updated_ts + options.base_backoff_seconds;
  }
  if (state == "pending") {
    Queue(entry);
  } else {
    Finish(entry, state);
  }
  if (outcome.sent) ++totals.attempts;
  totals.persist_errors += outcome.persist_errors;
}

void Outbox::Impl::StoreUnstored(std::unique_lock<std::mutex>& lock,
                                 double now) {
  Entry* entry = unstored.front();
  const std::string payload = entry->unstored;
  const double created = entry->item.created_ts;
  entry->busy = true;
  lock.unlock();
  const bool stored = Persist(Json::parse(payload), created).ok();
  lock.lock();
  entry->busy = false;
  if (!stored) {
    next_store_retry = now + kStoreRetrySeconds;
    return;
  }
  entry->unstored.clear();
  unstored.pop_front();
  if (entry->status.state == "pending") {
    LaneFor(ReceiverOf(*entry)).cv.notify_all();
    return;
  }
  const Json done = {{"op", "done"},
                     {"key", entry->item.key},
                     {"state", entry->status.state},
                     {"receiver", entry->status.receiver},
                     {"detail", entry->status.last_detail}};
  lock.unlock();
  const bool ended_stored = Persist(done, now).ok();
  lock.lock();
  if (!ended_stored) ++totals.persist_errors;
}

void Outbox::Impl::Send(Lane* lane) {
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    const double now = options.clock->Now();
    double wake = now + kMaxIdleSeconds;
    bool give_up = false;
    Entry* entry = PickLocked(*lane, now, &wake, &give_up);
    if (entry == nullptr) {
      options.clock->WaitUntil(lock, lane->cv, wake);
      continue;
    }
    entry->busy = true;
    const bool stored = entry->unstored.empty();
    lock.unlock();
    const Outcome outcome =
        give_up ? GiveUp(*entry, now, stored) : SendNext(*entry, stored);
    lock.lock();
    Apply(entry, outcome, *lane);
    const DeliveryStatus status = entry->status;
    lock.unlock();
    if (listener) {
      if (std::string error = CatchAll([&] { listener(status); });
          !error.empty())
        std::fprintf(stderr, "vigil-server: outbox: the listener of %s threw %s\n",
                     status.key.c_str(), error.c_str());
    }
    lock.lock();
    entry->busy = false;
    if (entry->status.state == "pending")
      LaneFor(ReceiverOf(*entry)).cv.notify_all();
    if (!entry->unstored.empty()) maintenance_cv.notify_all();
  }
}

void Outbox::Impl::Maintain() {
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    const double now = options.clock->Now();
    double wake = now + kMaxIdleSeconds;
    // A busy first entry is being sent; its sender wakes us when done.
    if (!unstored.empty() && !unstored.front()->busy) {
      if (now >= next_store_retry) {
        StoreUnstored(lock, now);
        continue;
      }
      wake = std::min(wake, next_store_retry);
    }
    if (now >= next_prune) {
      Prune(now);
      next_prune = now + kPruneIntervalSeconds;
      DeleteForgotten(lock, now);
      continue;  // the lock was released: look again
    }
    wake = std::min(wake, next_prune);
    options.clock->WaitUntil(lock, maintenance_cv, wake);
  }
}

Outbox::Outbox(OutboxOptions options, Listener listener)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(listener))) {}

Outbox::~Outbox() { Stop(); }

absl::Status Outbox::Start() {
  VIGIL_RETURN_IF_ERROR(impl_->ValidateOptions());
  std::lock_guard<std::mutex> enqueue_lock(impl_->enqueue_mu);
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->started || impl_->stopping)
    return absl::FailedPreconditionError("outbox already started or stopped");
  impl_->started = true;
  // Lanes created from here on start their sender threads; they wait for
  // the lock until the replay is done.
  impl_->Replay();
  impl_->Prune(impl_->options.clock->Now());
  impl_->maintenance = std::thread([impl = impl_.get()] { impl->Maintain(); });
  return absl::OkStatus();
}

void Outbox::Stop() {
  std::lock_guard<std::mutex> stop_lock(impl_->stop_mu);
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    for (auto& [receiver, lane] : impl_->lanes) {
      for (std::thread& t : lane->senders) threads.push_back(std::move(t));
      lane->senders.clear();
      lane->cv.notify_all();
    }
  }
  impl_->maintenance_cv.notify_all();
  for (std::thread& t : threads) t.join();
  if (impl_->maintenance.joinable()) impl_->maintenance.join();
}

absl::Status Outbox::Enqueue(OutboxItem item) {
  VIGIL_RETURN_IF_ERROR(ValidateItem(item));
  std::lock_guard<std::mutex> enqueue_lock(impl_->enqueue_mu);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->started)
      return absl::FailedPreconditionError("outbox not started");
    if (impl_->entries.contains(item.key))
      return absl::AlreadyExistsError(
          absl::StrCat("outbox item ", item.key, " already enqueued"));
  }
  item.created_ts = impl_->options.clock->Now();
  // Each route must render now; it is rendered again at every send.
  for (size_t i = 0; i < item.routes.size(); ++i) {
    if (absl::Status s =
            impl_->RenderRoute(item.routes[i], item.created_ts).status();
        !s.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("outbox item ", item.key, ": routes[", i, "] (",
                       item.routes[i].receiver, "): ", s.message()));
  }
  std::optional<std::string> payload =
      DumpValidUtf8(Json{{"op", "enqueue"}, {"item", ItemToJson(item)}});
  if (!payload)
    return absl::InvalidArgumentError(absl::StrCat(
        "outbox item ", item.key, ": text is not valid UTF-8"));
  absl::Status stored =
      impl_->options.store
          ->AppendEvent(Event{impl_->options.stream, item.created_ts, 0,
                              *payload})
          .status();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!stored.ok()) {
      // A page that cannot be stored is still sent; storing it is retried.
      if (impl_->unstored.size() >= kMaxUnstoredItems)
        return absl::Status(
            stored.code(),
            absl::StrCat("outbox item ", item.key, ": cannot store it (",
                         stored.message(), ") and ", kMaxUnstoredItems,
                         " items already wait to be stored"));
      std::fprintf(stderr,
                   "vigil-server: outbox: cannot store %s (%s); sending it "
                   "anyway and retrying the store\n",
                   item.key.c_str(), std::string(stored.message()).c_str());
      ++impl_->totals.unstored_enqueues;
    }
    const std::string key = item.key;
    impl_->Insert(std::move(item), {});
    if (!stored.ok()) {
      Impl::Entry& entry = impl_->entries[key];
      entry.unstored = std::move(*payload);
      impl_->unstored.push_back(&entry);
      impl_->maintenance_cv.notify_all();
    }
  }
  return absl::OkStatus();
}

std::vector<DeliveryStatus> Outbox::List(std::string_view incident_id,
                                         size_t limit) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::map<uint64_t, Impl::Entry*>* entries = &impl_->by_order;
  if (!incident_id.empty()) {
    auto it = impl_->by_incident.find(std::string(incident_id));
    if (it == impl_->by_incident.end()) return {};
    entries = &it->second;
  }
  std::vector<DeliveryStatus> out;
  for (auto it = entries->rbegin(); it != entries->rend() && out.size() < limit;
       ++it)
    out.push_back(it->second->status);
  return out;
}

void Outbox::SetReceiverLimits(std::map<std::string, int> rate_per_minute,
                               std::map<std::string, std::string> signing_secrets) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->rate_per_minute = std::move(rate_per_minute);
  impl_->signing_secrets = std::move(signing_secrets);
  // A sender waiting for a token of a receiver whose limit rose or went
  // looks again.
  for (auto& [receiver, lane] : impl_->lanes) lane->cv.notify_all();
}

Outbox::Counters Outbox::counters() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Counters counters = impl_->totals;
  counters.pending = 0;
  for (const auto& [receiver, lane] : impl_->lanes)
    counters.pending += lane->queue.size();
  counters.unstored = impl_->unstored.size();
  return counters;
}

}  // namespace vigil
