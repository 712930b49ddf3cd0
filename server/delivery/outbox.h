// The durable outbox: every notification and action webhook the server
// sends goes through it. An item is persisted (store events, stream
// "outbox") before Enqueue returns, then sent by its receiver's own sender
// threads, retrying with exponential backoff and jitter, honouring 429
// Retry-After (capped by the item's priority) and per-receiver rate
// limits, and failing over to the item's next alternative receiver (e.g.
// Twilio SMS -> Aliyun SMS) when one fails for good. Each attempt's result
// is persisted, so after a restart delivered items are never sent again
// and pending ones resume. Every request carries the item's idempotency
// key (Idempotency-Key header), so a receiver that saw a send whose answer
// was lost can drop the repeat.
//
// Credentials: an item holds, per route, the receiver's name and a
// credential-free payload (what to say); OutboxOptions::render turns them
// into requests (URL, auth, body) from the receiver's configuration at
// every send, after a restart too, and signing secrets are applied then.
// So the store never holds a token, password or secret URL, and a rotated
// credential applies to pending items. A route whose receiver can no
// longer be rendered (gone from the configuration) fails for good and the
// item fails over.
//
// Delivery guarantee: at least once on the wire, exactly once for
// receivers that honour Idempotency-Key. A send's result is persisted
// after the send, so if the process dies between a successful send and
// that write, the request is sent again after the restart (same key).
// Requests whose delivery was persisted are never sent again. An item the
// store refuses is sent anyway and stored once the store accepts again; a
// crash before that loses it (it was never acknowledged as stored).
//
// Ordering: each receiver has its own queue and its own sender threads
// (OutboxOptions::max_in_flight_per_receiver, each one request at a
// time, each request limited to request_timeout_seconds), so a receiver
// that hangs or throttles never delays another receiver's items. Within a
// receiver, whenever an item is due the most urgent pending one goes
// (P0 before P1 ..., then the oldest enqueued), even if its own retry
// timer has not run out: after a send fails, the receiver is tried again
// only when the failed item's backoff has passed, and then with its most
// urgent item, so a receiver that comes back after an outage gets its P0
// pages first. An item that fails over joins the next receiver's queue at
// its priority and enqueue position.
//
// Retry-After: a receiver's ask to wait W seconds holds back all its items
// (a receiver-wide pause, in memory only), but an item of priority p waits
// at most max_retry_after_seconds[p]. When W is over the item's cap and it
// has another route, it fails over at once; on its last route it is tried
// again after the cap (one probe per cap period while the receiver is
// paused; less urgent items keep waiting up to their own, longer caps, and
// the token bucket still applies). A paging receiver that asks a P0 to
// wait minutes is treated as down, not obeyed.
//
// Retention: items delivered or failed more than retention_seconds ago
// are dropped from memory (List forgets them, and their key may be
// enqueued again), and Start() does not load them. Their events are then
// deleted from the store (every event older than both the retention and
// the oldest item still remembered), so old payloads and receivers'
// answers do not stay on disk and a restart reads a bounded stream.
//
// Stored events (stream "outbox", kept by the store):
//   {"op": "enqueue", "item": {"key", "incident_id", "kind",
//    "description", "priority", "created_ts",
//    "routes": [{"receiver", "receiver_type", "payload"}]}}
//                                             the item as enqueued (no
//                                             credentials); items stored
//                                             by older versions have
//                                             rendered "requests" instead
//                                             of "payload" (sent as
//                                             stored) and no "priority"
//                                             (P0)
//   {"op": "attempt", "key", "receiver", "route", "request_index",
//    "requests", "http_status", "verdict", "failover", "detail",
//    "response", "next_attempt_ts"}
//                                             one send (request
//                                             `request_index` of the
//                                             `requests` route `route`
//                                             rendered to; 0 when it could
//                                             not be rendered) and its
//                                             judgement; "failover" when a
//                                             Retry-After over the cap
//                                             moved it on
//   {"op": "done", "key", "state": "delivered"|"failed", "receiver",
//    "detail"}
#ifndef VIGIL_SERVER_DELIVERY_OUTBOX_H_
#define VIGIL_SERVER_DELIVERY_OUTBOX_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"
#include "storage/series_store.h"

namespace vigil {

// One way to deliver an item: a receiver and what to tell it. The requests
// are rendered from `payload` by OutboxOptions::render at send time (all
// must succeed; they are sent in order and a delivered request is not sent
// again).
struct OutboxRoute {
  std::string receiver;       // ReceiverConfig::name
  std::string receiver_type;  // ReceiverConfig::type, for JudgeResponse
  // What the renderer needs besides the receiver's configuration. It is
  // stored, so it must not hold credentials.
  nlohmann::json payload = nlohmann::json::object();
};

// Priorities: 0 = P0 (most urgent) .. 3 = P3.
inline constexpr int kOutboxPriorities = 4;

// One thing to deliver.
struct OutboxItem {
  // Unique idempotency key; enqueueing a key again is a no-op (for
  // OutboxOptions::retention_seconds after the item ended).
  std::string key;
  std::string incident_id;  // may be empty
  // "page" or "action" (for listing), and a short description for humans
  // ("P0 trigger via phone to alice").
  std::string kind;
  std::string description;
  // 0 (P0) .. 3 (P3): the order within a receiver's queue and the cap on
  // Retry-After. Unknown urgency is treated as the most urgent, so nothing
  // is delayed for lack of a label.
  int priority = 0;
  // Tried in order; the next one after the current fails for good, after
  // OutboxOptions::failover_after_attempts retryable failures, or when the
  // receiver asks to wait longer than the priority's Retry-After cap.
  std::vector<OutboxRoute> routes;
  double created_ts = 0;  // set by Enqueue
};

// Current state of one item, as ListDeliveries reports it.
struct DeliveryStatus {
  std::string key;
  std::string incident_id;
  std::string kind;
  std::string description;
  std::string state;     // "pending", "delivered", "failed"
  std::string receiver;  // the route in use (or that delivered it)
  // Sends so far over all routes, counting a route that could not be
  // rendered as one.
  int attempts = 0;
  std::string last_detail;
  // The body of the last response, cut to 4 KiB (e.g. what vigil-actuator
  // did).
  std::string last_response;
  double created_ts = 0;
  double updated_ts = 0;
  double next_attempt_ts = 0;  // pending only
};
// {"key", "incident_id", "kind", "description", "state", "receiver",
//  "attempts", "last_detail", "last_response", "created_ts", "updated_ts",
//  "next_attempt_ts"}.
nlohmann::json DeliveryStatusToJson(const DeliveryStatus& status);

// The requests for `payload` to `receiver` at unix time `now`, from the
// receiver's current configuration; an error (e.g. kNotFound: no such
// receiver any more) fails the route for good. Called from Enqueue (to
// check the item) and from sender threads, concurrently; must not call
// into the Outbox.
using OutboxRenderer =
    std::function<absl::StatusOr<std::vector<OutboundRequest>>(
        const std::string& receiver, const nlohmann::json& payload,
        double now)>;

struct OutboxOptions {
  SeriesStore* store = nullptr;    // required, not owned
  Transport* transport = nullptr;  // required, not owned
  Clock* clock = nullptr;          // required, not owned
  OutboxRenderer render;           // required
  // Per-receiver sends per minute (token bucket, burst = the rate); a
  // receiver not listed is unlimited.
  std::map<std::string, int> rate_per_minute;
  // Retry delays (BackoffSeconds): exponential from the base, capped at
  // the max, full jitter; a longer Retry-After wins, up to its cap below.
  double base_backoff_seconds = 2;
  double max_backoff_seconds = 300;
  // Retryable failures on one route before moving to the next route (a
  // permanent failure moves at once). The last route keeps retrying,
  // within max_attempts and give_up_after_seconds.
  int failover_after_attempts = 3;
  // An item not delivered this long after it was enqueued is failed.
  double give_up_after_seconds = 24 * 3600.0;
  // ...or after this many sends in all; 0 (the default): no count, time
  // alone. A count is no measure of an outage: at a 4-s retry cap, 50
  // sends were three minutes, and the full receivers drill lost pages and
  // actions to it.
  int max_attempts = 0;
  // Limit on one send, connection included.
  double request_timeout_seconds = 10;
  // Sender threads per receiver: at most this many of its requests are in
  // flight at once (>= 1). A receiver that hangs holds only its own.
  int max_in_flight_per_receiver = 1;
  // The longest a receiver's Retry-After may hold back an item, by
  // priority (P0..P3); see the top of the file. Each > 0.
  std::array<double, kOutboxPriorities> max_retry_after_seconds = {
      30, 120, 600, 1800};
  // Delivered and failed items are forgotten this long after they ended
  // (> 0).
  double retention_seconds = 7 * 24 * 3600.0;
  // Receivers whose requests are signed at send time (signing.h: headers
  // X-Vigil-Timestamp and X-Vigil-Signature set or replaced with the
  // clock's time on every attempt), so a retry after an outage is still
  // inside the receiver's replay window. Secrets are never persisted.
  std::map<std::string, std::string> signing_secrets;
  // The store stream of this outbox (one stream per outbox instance; the
  // server keeps action webhooks, which may wait minutes for a checkpoint,
  // in their own outbox so they never hold up pages).
  std::string stream = "outbox";
};

// The durable outbox. Thread-safe.
class Outbox {
 public:
  // Called (from a sender thread, no lock held) after every send with the
  // item's new status, and when an item is given up without a send
  // (give_up_after_seconds passed); for incident timelines. Calls for one
  // item come one at a time and in order; calls for different items may
  // run concurrently. It must not call Stop().
  using Listener = std::function<void(const DeliveryStatus&)>;

  explicit Outbox(OutboxOptions options, Listener listener = nullptr);
  // Stops the sender threads.
  ~Outbox();

  // Rebuilds pending items from the store (not those that ended more than
  // retention_seconds ago) and starts the sender threads.
  // kFailedPrecondition if already started; kInvalidArgument for a
  // missing store/transport/clock/render or a limit below 1 (attempts,
  // in flight) or 0 (seconds). Pending items resume at their persisted
  // next attempt time (at once if that has passed). Malformed stored
  // events are skipped and counted (Counters::unreadable_events).
  absl::Status Start();
  // Stops the sender threads (in-flight sends finish first and their
  // results are persisted). Idempotent. An Outbox cannot be started again.
  void Stop();

  // Persists `item` and queues it. kAlreadyExists when the key is known
  // (nothing changes); kInvalidArgument for an empty key, a priority out
  // of 0..3, no route, a route without receiver, a route that does not
  // render (now) to at least one request with a URL, or text that is not
  // valid UTF-8; kFailedPrecondition before Start() (the stored keys are
  // not known yet). When the store refuses the item it is queued and sent
  // all the same, and storing it is retried every second (its attempts
  // are stored after it); the store's error is returned only when 10,000
  // such items already wait (then nothing is queued). A rendered request
  // without an Idempotency-Key header gets one: the item key, suffixed
  // "/<index>" on routes of several requests. After Stop() items are still
  // persisted; the next Outbox sends them.
  absl::Status Enqueue(OutboxItem item);

  // Replaces OutboxOptions::rate_per_minute and signing_secrets (a config
  // reload): sends from then on follow the new ones (a token bucket keeps
  // its tokens, capped at the new rate). Thread-safe.
  void SetReceiverLimits(std::map<std::string, int> rate_per_minute,
                         std::map<std::string, std::string> signing_secrets);

  // Items of `incident_id` (all when empty), newest first, at most `limit`.
  std::vector<DeliveryStatus> List(std::string_view incident_id,
                                   size_t limit) const;

  // Counts for /metrics.
  struct Counters {
    uint64_t pending = 0, delivered = 0, failed = 0, attempts = 0;
    // Attempt/done events the store refused (the send still counts).
    uint64_t persist_errors = 0;
    // Stored events Start() skipped as malformed or out of place.
    uint64_t unreadable_events = 0;
    // Items the store refused at Enqueue: sent anyway, stored later.
    uint64_t unstored_enqueues = 0;
    // Of those, how many still wait to be stored.
    uint64_t unstored = 0;
    // Failed deletions of events no remembered item needs (retried every
    // pruning round).
    uint64_t delete_errors = 0;
  };
  Counters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_DELIVERY_OUTBOX_H_
