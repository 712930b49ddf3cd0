// The durable outbox: every notification and action webhook the server
// sends goes through it. An item is persisted (store events, stream
// "outbox") before Enqueue returns, then a dispatcher thread sends it,
// retrying with exponential backoff and jitter, honouring 429 Retry-After
// and per-receiver rate limits, and failing over to the item's next
// alternative receiver (e.g. Twilio SMS -> Aliyun SMS) when one fails for
// good. Each attempt's result is persisted, so after a restart delivered
// items are never sent again and pending ones resume. Every request
// carries the item's idempotency key (Idempotency-Key header), so a
// receiver that saw a send whose answer was lost can drop the repeat.
//
// Delivery guarantee: at least once on the wire, exactly once for
// receivers that honour Idempotency-Key. A send's result is persisted
// after the send, so if the process dies between a successful send and
// that write, the request is sent again after the restart (same key).
// Requests whose delivery was persisted are never sent again. An item the
// store refuses is sent anyway and stored once the store accepts again; a
// crash before that loses it (it was never acknowledged as stored).
//
// Ordering: one dispatcher thread sends one request at a time. Among the
// items that are due it picks the oldest enqueued first, so each receiver
// gets its items in enqueue order while they succeed first time. A
// retrying item does not hold back anything: it waits for its backoff
// while later items (of any receiver) go out before it.
//
// Stored events (stream "outbox", kept forever):
//   {"op": "enqueue", "item": {...}}          the item as enqueued,
//                                             requests and credentials
//                                             included (needed to resend)
//   {"op": "attempt", "key", "receiver", "route", "request_index",
//    "http_status", "verdict", "detail", "response", "next_attempt_ts"}
//                                             one send (request
//                                             `request_index` of route
//                                             `route`) and its judgement
//   {"op": "done", "key", "state": "delivered"|"failed", "receiver",
//    "detail"}
#ifndef VIGIL_SERVER_OUTBOX_H_
#define VIGIL_SERVER_OUTBOX_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"
#include "storage/series_store.h"

namespace vigil {

// One way to deliver an item: a receiver and the request(s) rendered for
// it (all must succeed; they are sent in order and a delivered request is
// not sent again).
struct OutboxRoute {
  std::string receiver;       // ReceiverConfig::name
  std::string receiver_type;  // ReceiverConfig::type, for JudgeResponse
  std::vector<OutboundRequest> requests;
};

// One thing to deliver.
struct OutboxItem {
  // Unique idempotency key; enqueueing a key again is a no-op.
  std::string key;
  std::string incident_id;  // may be empty
  // "page" or "action" (for listing), and a short description for humans
  // ("P0 trigger via phone to alice").
  std::string kind;
  std::string description;
  // Tried in order; the next one after the current fails for good or
  // after OutboxOptions::failover_after_attempts retryable failures.
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
  int attempts = 0;      // sends so far, over all routes
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

struct OutboxOptions {
  SeriesStore* store = nullptr;    // required, not owned
  Transport* transport = nullptr;  // required, not owned
  Clock* clock = nullptr;          // required, not owned
  // Per-receiver sends per minute (token bucket, burst = the rate); a
  // receiver not listed is unlimited.
  std::map<std::string, int> rate_per_minute;
  // Retry delays (BackoffSeconds): exponential from the base, capped at
  // the max, full jitter; a longer Retry-After wins.
  double base_backoff_seconds = 2;
  double max_backoff_seconds = 300;
  // Retryable failures on one route before moving to the next route (a
  // permanent failure moves at once). The last route keeps retrying,
  // within max_attempts and give_up_after_seconds.
  int failover_after_attempts = 3;
  // An item not delivered after this many sends in all is failed.
  int max_attempts = 50;
  // ...or this long after it was enqueued.
  double give_up_after_seconds = 24 * 3600.0;
  // Limit on one send, connection included.
  double request_timeout_seconds = 10;
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
  // Called (from the dispatcher thread, no lock held) after every send
  // with the item's new status, and when an item is given up without a
  // send (give_up_after_seconds passed); for incident timelines. It must
  // not call Stop().
  using Listener = std::function<void(const DeliveryStatus&)>;

  explicit Outbox(OutboxOptions options, Listener listener = nullptr);
  // Stops the dispatcher.
  ~Outbox();

  // Rebuilds pending items from the store and starts the dispatcher.
  // kFailedPrecondition if already started; kInvalidArgument for a
  // missing store/transport/clock or a limit below 1 (attempts) or 0
  // (seconds). Pending items resume at their persisted next
  // attempt time (at once if that has passed). Malformed stored events
  // are skipped and counted (Counters::unreadable_events).
  absl::Status Start();
  // Stops the dispatcher (an in-flight send finishes first and its result
  // is persisted). Idempotent. An Outbox cannot be started again.
  void Stop();

  // Persists `item` and queues it. kAlreadyExists when the key was
  // enqueued before (nothing changes); kInvalidArgument for an empty key,
  // no route, a route without receiver or requests, or text that is not
  // valid UTF-8; kFailedPrecondition before Start() (the stored keys are
  // not known yet). When the store refuses the item it is queued and sent
  // all the same, and storing it is retried every second (its attempts
  // are stored after it); the store's error is returned only when 10,000
  // such items already wait (then nothing is queued). A request without an Idempotency-Key header gets
  // one: the item key, suffixed "/<index>" on routes of several requests.
  // After Stop() items are still persisted; the next Outbox sends them.
  absl::Status Enqueue(OutboxItem item);

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
  };
  Counters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_OUTBOX_H_
