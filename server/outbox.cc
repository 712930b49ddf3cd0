#include "server/outbox.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/catch_all.h"
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
// With nothing due the dispatcher still looks again this often, so a wait
// on the real clock is never unbounded.
constexpr double kMaxIdleSeconds = 60;
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
// `attempts` counts all sends of the item including this one. A permanent
// failure, or failover_after_attempts retryable ones, moves to the next
// route (sent at once). On kFailed `reason` says why the item is given up,
// and the cursor stays on the last route tried.
Next Advance(const OutboxItem& item, DeliveryVerdict verdict, int attempts,
             const OutboxOptions& options, Cursor* cursor,
             std::string* reason) {
  Next next = Next::kSendNow;
  bool failover = false;
  switch (verdict) {
    case DeliveryVerdict::kDelivered:
      if (++cursor->request >= item.routes[cursor->route].requests.size())
        return Next::kDelivered;
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
  if (attempts >= options.max_attempts) {
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

// FNV-1a: a jitter seed that stays the same across restarts and builds.
uint64_t StableHash(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
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

Json RequestToJson(const OutboundRequest& request) {
  Json headers = Json::array();
  for (const auto& [name, value] : request.headers)
    headers.push_back(Json::array({name, value}));
  return Json{{"method", request.method},       {"url", request.url},
              {"headers", headers},             {"body", request.body},
              {"smtp", request.smtp},           {"mail_from", request.mail_from},
              {"mail_rcpt", request.mail_rcpt}, {"username", request.username},
              {"password", request.password}};
}

Json ItemToJson(const OutboxItem& item) {
  Json routes = Json::array();
  for (const OutboxRoute& route : item.routes) {
    Json requests = Json::array();
    for (const OutboundRequest& r : route.requests)
      requests.push_back(RequestToJson(r));
    routes.push_back(Json{{"receiver", route.receiver},
                          {"receiver_type", route.receiver_type},
                          {"requests", requests}});
  }
  return Json{{"key", item.key},
              {"incident_id", item.incident_id},
              {"kind", item.kind},
              {"description", item.description},
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
std::optional<OutboxItem> ItemFromJson(const Json& j) {
  OutboxItem item;
  if (!j.is_object() || !Read(j, "key", &item.key) || item.key.empty() ||
      !Read(j, "incident_id", &item.incident_id) ||
      !Read(j, "kind", &item.kind) ||
      !Read(j, "description", &item.description) ||
      !Read(j, "created_ts", &item.created_ts))
    return std::nullopt;
  auto routes = j.find("routes");
  if (routes == j.end() || !routes->is_array() || routes->empty())
    return std::nullopt;
  for (const Json& rj : *routes) {
    OutboxRoute route;
    if (!rj.is_object() || !Read(rj, "receiver", &route.receiver) ||
        !Read(rj, "receiver_type", &route.receiver_type))
      return std::nullopt;
    auto requests = rj.find("requests");
    if (requests == rj.end() || !requests->is_array() || requests->empty())
      return std::nullopt;
    for (const Json& qj : *requests) {
      std::optional<OutboundRequest> request = RequestFromJson(qj);
      if (!request) return std::nullopt;
      route.requests.push_back(std::move(*request));
    }
    item.routes.push_back(std::move(route));
  }
  return item;
}

absl::Status ValidateItem(const OutboxItem& item) {
  if (item.key.empty())
    return absl::InvalidArgumentError("outbox item: key is empty");
  if (item.routes.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("outbox item ", item.key, ": no route"));
  for (size_t i = 0; i < item.routes.size(); ++i) {
    const OutboxRoute& route = item.routes[i];
    const std::string where =
        absl::StrCat("outbox item ", item.key, ": routes[", i, "]");
    if (route.receiver.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".receiver is empty"));
    if (route.requests.empty())
      return absl::InvalidArgumentError(absl::StrCat(where, ": no request"));
    for (size_t r = 0; r < route.requests.size(); ++r) {
      if (route.requests[r].url.empty())
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".requests[", r, "].url is empty"));
    }
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

// Adds the Idempotency-Key header to requests that lack one.
void AddIdempotencyKeys(OutboxItem* item) {
  for (OutboxRoute& route : item->routes) {
    for (size_t i = 0; i < route.requests.size(); ++i) {
      OutboundRequest& request = route.requests[i];
      const bool has_key = std::any_of(
          request.headers.begin(), request.headers.end(), [](const auto& h) {
            return absl::EqualsIgnoreCase(h.first, kIdempotencyHeader);
          });
      if (has_key) continue;
      request.headers.emplace_back(
          kIdempotencyHeader, route.requests.size() == 1
                                  ? item->key
                                  : absl::StrCat(item->key, "/", i));
    }
  }
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
    uint64_t order = 0;
    Cursor cursor;
    DeliveryStatus status;
    // The item's enqueue record while the store refuses it (the item is
    // sent all the same); empty once stored. Until then its attempt and
    // done records are not stored either, so a replay never sees them
    // before the item.
    std::string unstored;
  };

  // The result of one dispatcher step, applied to its entry under the lock.
  struct Outcome {
    Cursor cursor;
    DeliveryStatus status;
    bool sent = false;
    int persist_errors = 0;
  };

  struct TokenBucket {
    double tokens = 0;
    double updated_ts = 0;
  };

  Impl(OutboxOptions options, Listener listener)
      : options(std::move(options)), listener(std::move(listener)) {}

  absl::Status ValidateOptions() const;
  // Rebuilds every item from the stored stream.
  void Replay() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void ReplayEvent(const Event& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Adds a new (or replayed) item as pending.
  void Insert(OutboxItem item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Marks `entry` done with `state` and drops its requests.
  void Finish(Entry* entry, const std::string& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  void Run();
  // The first pending item (in enqueue order) that is due and whose
  // receiver has a token (taken), or nullptr; lowers `wake` to the
  // earliest time something can change. `give_up` is set when the item
  // returned is past give_up_after_seconds.
  Entry* PickLocked(double now, double* wake, bool* give_up)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Takes a send token of `receiver`; false and the refill time if none.
  bool TakeToken(const std::string& receiver, double now, double* ready_ts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Sends the entry's next request, judges and persists it. The entry's
  // routes and progress are only written by the dispatcher thread, so
  // reading them here without the lock is safe.
  Outcome SendNext(const Entry& entry);
  // Fails the entry for having been pending too long, and persists that.
  Outcome GiveUp(const Entry& entry, double now);
  // Tries again to store the oldest unstored enqueue record (then the
  // item's end, if it has ended). Called by the dispatcher with `lock` held;
  // releases it meanwhile.
  void StoreUnstored(std::unique_lock<std::mutex>& lock, double now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Apply(Entry* entry, const Outcome& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status Persist(const Json& payload, double ts);

  const OutboxOptions options;
  const Listener listener;

  // Serializes Enqueue (duplicate check, persist, insert) and Start.
  std::mutex enqueue_mu;
  // Serializes joining the dispatcher.
  std::mutex stop_mu;
  mutable std::mutex mu;
  std::condition_variable cv;  // wakes the dispatcher
  bool started ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  std::unordered_map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
  std::vector<Entry*> by_order ABSL_GUARDED_BY(mu);
  std::unordered_map<std::string, std::vector<Entry*>> by_incident
      ABSL_GUARDED_BY(mu);
  std::map<uint64_t, Entry*> pending ABSL_GUARDED_BY(mu);
  std::map<std::string, TokenBucket> buckets ABSL_GUARDED_BY(mu);
  // Entries whose enqueue record is not stored yet, oldest first, and when
  // storing the first is tried next.
  std::deque<Entry*> unstored ABSL_GUARDED_BY(mu);
  double next_store_retry ABSL_GUARDED_BY(mu) = 0;
  Counters totals ABSL_GUARDED_BY(mu);  // all but `pending`
  std::thread dispatcher;
};

absl::Status Outbox::Impl::ValidateOptions() const {
  if (options.store == nullptr || options.transport == nullptr ||
      options.clock == nullptr)
    return absl::InvalidArgumentError(
        "outbox: store, transport and clock are required");
  if (options.failover_after_attempts < 1 || options.max_attempts < 1)
    return absl::InvalidArgumentError(
        "outbox: failover_after_attempts and max_attempts must be >= 1");
  if (!(options.base_backoff_seconds >= 0) ||
      !(options.max_backoff_seconds >= 0) ||
      !(options.give_up_after_seconds > 0) ||
      !(options.request_timeout_seconds > 0))
    return absl::InvalidArgumentError(
        "outbox: backoff seconds must be >= 0, give-up and timeout > 0");
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
    if (item_json != j.end()) item = ItemFromJson(*item_json);
    if (!item || entries.contains(item->key)) {
      ++totals.unreadable_events;
      return;
    }
    Insert(std::move(*item));
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
  if (op != "attempt" || done || !Read(j, "route", &sent.route) ||
      !Read(j, "request_index", &sent.request) ||
      !Read(j, "verdict", &verdict_name) ||
      !Read(j, "next_attempt_ts", &next_attempt_ts) ||
      !ParseVerdict(verdict_name) || sent.route >= entry.item.routes.size() ||
      sent.request >= entry.item.routes[sent.route].requests.size()) {
    ++totals.unreadable_events;
    return;
  }
  // The stored position wins over the replayed one (options such as
  // failover_after_attempts may have changed since).
  if (sent.route == entry.cursor.route)
    sent.route_failures = entry.cursor.route_failures;
  entry.cursor = sent;
  ++totals.attempts;
  ++entry.status.attempts;
  std::string reason;
  const Next next = Advance(entry.item, *ParseVerdict(verdict_name),
                            entry.status.attempts, options, &entry.cursor,
                            &reason);
  entry.status.last_detail.clear();
  Read(j, "detail", &entry.status.last_detail);
  entry.status.last_response.clear();
  Read(j, "response", &entry.status.last_response);
  entry.status.receiver = entry.item.routes[entry.cursor.route].receiver;
  entry.status.updated_ts = event.ts;
  entry.status.next_attempt_ts = next_attempt_ts;
  if (next == Next::kDelivered) Finish(&entry, "delivered");
  if (next == Next::kFailed) Finish(&entry, "failed");
}

void Outbox::Impl::Insert(OutboxItem item) {
  const std::string key = item.key;
  Entry& entry = entries[key];
  entry.order = by_order.size();
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
  by_order.push_back(&entry);
  if (!entry.item.incident_id.empty())
    by_incident[entry.item.incident_id].push_back(&entry);
  pending[entry.order] = &entry;
}

void Outbox::Impl::Finish(Entry* entry, const std::string& state) {
  entry->status.state = state;
  entry->status.next_attempt_ts = 0;
  ++(state == "delivered" ? totals.delivered : totals.failed);
  pending.erase(entry->order);
  entry->item.routes.clear();
  entry->item.routes.shrink_to_fit();
}

bool Outbox::Impl::TakeToken(const std::string& receiver, double now,
                             double* ready_ts) {
  auto rate_it = options.rate_per_minute.find(receiver);
  if (rate_it == options.rate_per_minute.end() || rate_it->second <= 0)
    return true;
  const double capacity = rate_it->second;
  const double per_second = capacity / 60;
  TokenBucket& bucket =
      buckets.try_emplace(receiver, TokenBucket{capacity, now}).first->second;
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

Outbox::Impl::Entry* Outbox::Impl::PickLocked(double now, double* wake,
                                              bool* give_up) {
  for (auto& [order, entry] : pending) {
    const double deadline =
        entry->item.created_ts + options.give_up_after_seconds;
    if (now >= deadline) {
      *give_up = true;
      return entry;
    }
    *wake = std::min(*wake, deadline);
    if (entry->status.next_attempt_ts > now) {
      *wake = std::min(*wake, entry->status.next_attempt_ts);
      continue;
    }
    double ready_ts;
    if (!TakeToken(entry->item.routes[entry->cursor.route].receiver, now,
                   &ready_ts)) {
      *wake = std::min(*wake, ready_ts);
      continue;
    }
    return entry;
  }
  return nullptr;
}

absl::Status Outbox::Impl::Persist(const Json& payload, double ts) {
  return options.store->AppendEvent(Event{options.stream, ts, 0, Dump(payload)})
      .status();
}

Outbox::Impl::Outcome Outbox::Impl::SendNext(const Entry& entry) {
  const OutboxRoute& route = entry.item.routes[entry.cursor.route];
  const OutboundRequest& request = route.requests[entry.cursor.request];
  auto secret = options.signing_secrets.find(route.receiver);
  TransportResult result;
  DeliveryJudgement judgement;
  if (std::string error = CatchAll([&] {
        result =
            secret == options.signing_secrets.end()
                ? options.transport->Send(request,
                                          options.request_timeout_seconds)
                : options.transport->Send(
                      Signed(request, secret->second, options.clock->Now()),
                      options.request_timeout_seconds);
        judgement = JudgeResponse(route.receiver_type, result);
      });
      !error.empty()) {
    // A bug here or in a transport, not the receiver's answer: retried like
    // an unreachable receiver instead of ending the dispatcher thread.
    std::fprintf(stderr, "vigil-server: outbox: sending %s threw %s\n",
                 entry.item.key.c_str(), error.c_str());
    result = TransportResult{};
    judgement.verdict = DeliveryVerdict::kRetry;
    judgement.retry_after_seconds.reset();
    judgement.detail = "internal error: " + error;
  }
  const double now = options.clock->Now();

  Outcome out{.cursor = entry.cursor, .status = entry.status, .sent = true};
  ++out.status.attempts;
  std::string reason;
  Next next = Advance(entry.item, judgement.verdict, out.status.attempts,
                      options, &out.cursor, &reason);
  double next_attempt_ts = 0;
  if (next == Next::kSendNow) next_attempt_ts = now;
  if (next == Next::kRetryLater) {
    double delay = BackoffSeconds(
        out.cursor.route_failures, options.base_backoff_seconds,
        options.max_backoff_seconds,
        StableHash(entry.item.key) + out.status.attempts);
    if (judgement.retry_after_seconds)
      delay = std::max(delay, *judgement.retry_after_seconds);
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
      reason.empty() ? judgement.detail
                     : absl::StrCat(judgement.detail, "; ", reason);
  out.status.last_response = CutResponse(result.body);
  out.status.updated_ts = now;
  out.status.next_attempt_ts = next_attempt_ts;
  if (next == Next::kDelivered) out.status.state = "delivered";
  if (next == Next::kFailed) out.status.state = "failed";

  const Json attempt = {{"op", "attempt"},
                        {"key", entry.item.key},
                        {"receiver", route.receiver},
                        {"route", entry.cursor.route},
                        {"request_index", entry.cursor.request},
                        {"http_status", result.http_status},
                        {"verdict", VerdictName(judgement.verdict)},
                        {"detail", judgement.detail},
                        {"response", out.status.last_response},
                        {"next_attempt_ts", next_attempt_ts}};
  if (!entry.unstored.empty()) return out;  // StoreUnstored records the end
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

Outbox::Impl::Outcome Outbox::Impl::GiveUp(const Entry& entry, double now) {
  Outcome out{.cursor = entry.cursor, .status = entry.status};
  const std::string reason =
      absl::StrCat("not delivered within ", options.give_up_after_seconds, " s");
  out.status.last_detail =
      out.status.last_detail.empty()
          ? reason
          : absl::StrCat(out.status.last_detail, "; ", reason);
  out.status.state = "failed";
  out.status.updated_ts = now;
  if (!entry.unstored.empty()) return out;  // StoreUnstored records the end
  const Json done = {{"op", "done"},
                     {"key", entry.item.key},
                     {"state", "failed"},
                     {"receiver", out.status.receiver},
                     {"detail", out.status.last_detail}};
  if (!Persist(done, now).ok()) ++out.persist_errors;
  return out;
}

void Outbox::Impl::Apply(Entry* entry, const Outcome& outcome) {
  entry->cursor = outcome.cursor;
  const std::string state = outcome.status.state;
  entry->status = outcome.status;
  entry->status.state = "pending";
  if (state != "pending") Finish(entry, state);
  if (outcome.sent) ++totals.attempts;
  totals.persist_errors += outcome.persist_errors;
}

void Outbox::Impl::StoreUnstored(std::unique_lock<std::mutex>& lock,
                                 double now) {
  Entry* entry = unstored.front();
  const std::string payload = entry->unstored;
  const double created = entry->item.created_ts;
  lock.unlock();
  const bool stored = Persist(Json::parse(payload), created).ok();
  lock.lock();
  if (!stored) {
    next_store_retry = now + kStoreRetrySeconds;
    return;
  }
  entry->unstored.clear();
  unstored.pop_front();
  if (entry->status.state == "pending") return;
  const Json done = {{"op", "done"},
                     {"key", entry->item.key},
                     {"state", entry->status.state},
                     {"receiver", entry->status.receiver},
                     {"detail", entry->status.last_detail}};
  lock.unlock();
  const bool ended = Persist(done, now).ok();
  lock.lock();
  if (!ended) ++totals.persist_errors;
}

void Outbox::Impl::Run() {
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    const double now = options.clock->Now();
    double wake = now + kMaxIdleSeconds;
    if (!unstored.empty()) {
      if (now >= next_store_retry) {
        StoreUnstored(lock, now);
        continue;
      }
      wake = std::min(wake, next_store_retry);
    }
    bool give_up = false;
    Entry* entry = PickLocked(now, &wake, &give_up);
    if (entry == nullptr) {
      options.clock->WaitUntil(lock, cv, wake);
      continue;
    }
    lock.unlock();
    const Outcome outcome = give_up ? GiveUp(*entry, now) : SendNext(*entry);
    lock.lock();
    Apply(entry, outcome);
    const DeliveryStatus status = entry->status;
    lock.unlock();
    if (listener) {
      if (std::string error = CatchAll([&] { listener(status); });
          !error.empty())
        std::fprintf(stderr, "vigil-server: outbox: the listener of %s threw %s\n",
                     status.key.c_str(), error.c_str());
    }
    lock.lock();
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
  impl_->Replay();
  impl_->dispatcher = std::thread([impl = impl_.get()] { impl->Run(); });
  return absl::OkStatus();
}

void Outbox::Stop() {
  std::lock_guard<std::mutex> stop_lock(impl_->stop_mu);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->dispatcher.joinable()) impl_->dispatcher.join();
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
  AddIdempotencyKeys(&item);
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
    impl_->Insert(std::move(item));
    if (!stored.ok()) {
      Impl::Entry& entry = impl_->entries[key];
      entry.unstored = std::move(*payload);
      impl_->unstored.push_back(&entry);
    }
  }
  impl_->cv.notify_all();
  return absl::OkStatus();
}

std::vector<DeliveryStatus> Outbox::List(std::string_view incident_id,
                                         size_t limit) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::vector<Impl::Entry*>* entries = &impl_->by_order;
  if (!incident_id.empty()) {
    auto it = impl_->by_incident.find(std::string(incident_id));
    if (it == impl_->by_incident.end()) return {};
    entries = &it->second;
  }
  std::vector<DeliveryStatus> out;
  for (auto it = entries->rbegin(); it != entries->rend() && out.size() < limit;
       ++it)
    out.push_back((*it)->status);
  return out;
}

Outbox::Counters Outbox::counters() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Counters counters = impl_->totals;
  counters.pending = impl_->pending.size();
  counters.unstored = impl_->unstored.size();
  return counters;
}

}  // namespace vigil
