#include "server/delivery/outbox.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "notify/notify.h"
#include "notify/signing.h"
#include "storage/rocksdb_store.h"
#include "storage/series_store.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Polls `condition` until it holds or `seconds` of real time pass. The
// dispatcher runs on its own thread; this is how tests wait for it.
bool WaitFor(const std::function<bool()>& condition, double seconds = 20) {
  const double deadline = RealClock()->Now() + seconds;
  while (!condition()) {
    if (RealClock()->Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TransportResult Http(int status, std::string body = "nope") {
  TransportResult result;
  result.http_status = status;
  result.body = std::move(body);
  return result;
}
TransportResult Ok() { return Http(200, "ok"); }
TransportResult Refused() {
  TransportResult result;
  result.error = "connection refused";
  return result;
}

std::string IdempotencyKey(const OutboundRequest& request) {
  for (const auto& [name, value] : request.headers) {
    if (absl::EqualsIgnoreCase(name, "Idempotency-Key")) return value;
  }
  return "";
}

// A scripted receiver behind a fake transport. Each URL answers its
// scripted results in order, then 200; while down, nothing answers.
// Counts every request, and successful receipts per Idempotency-Key.
class FakeReceiver : public Transport {
 public:
  TransportResult Send(const OutboundRequest& request,
                       double timeout_seconds) override {
    std::unique_lock<std::mutex> lock(mu_);
    timeouts_.push_back(timeout_seconds);
    sent_[request.url].push_back(request);
    // A held URL hangs, as a receiver that never answers, until released.
    ++in_flight_[request.url];
    released_.wait(lock, [&] { return !held_.contains(request.url); });
    --in_flight_[request.url];
    if (throws_ > 0) {
      --throws_;
      throw std::runtime_error("transport bug");
    }
    TransportResult result = Ok();
    if (down_ || accept_left_ == 0) {
      result = Refused();
    } else if (auto& script = scripts_[request.url]; !script.empty()) {
      result = script.front();
      script.pop_front();
    }
    if (result.http_status >= 200 && result.http_status < 300) {
      ++receipts_[IdempotencyKey(request)];
      if (accept_left_ > 0) --accept_left_;
    }
    return result;
  }

  void Script(const std::string& url, std::vector<TransportResult> results) {
    std::lock_guard<std::mutex> lock(mu_);
    scripts_[url].insert(scripts_[url].end(), results.begin(), results.end());
  }
  // The next `n` sends throw, as a buggy transport would.
  void Throw(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    throws_ = n;
  }
  void SetDown(bool down) {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = down;
  }
  // Requests to `url` hang until Release(url).
  void Hold(const std::string& url) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.insert(url);
  }
  void Release(const std::string& url) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_.erase(url);
    }
    released_.notify_all();
  }
  // Requests to `url` being sent now.
  int InFlight(const std::string& url) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_flight_.find(url);
    return it == in_flight_.end() ? 0 : it->second;
  }
  // Accepts `n` more requests, then refuses all.
  void AcceptOnly(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    accept_left_ = n;
  }
  // The requests sent to `url`, in order.
  std::vector<OutboundRequest> Sent(const std::string& url) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sent_.find(url);
    return it == sent_.end() ? std::vector<OutboundRequest>{} : it->second;
  }
  // Their Idempotency keys.
  std::vector<std::string> Keys(const std::string& url) const {
    std::vector<std::string> keys;
    for (const OutboundRequest& r : Sent(url)) keys.push_back(IdempotencyKey(r));
    return keys;
  }
  size_t Requests(const std::string& url) const { return Sent(url).size(); }
  int Receipts(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = receipts_.find(key);
    return it == receipts_.end() ? 0 : it->second;
  }
  std::vector<double> Timeouts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return timeouts_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable released_;
  std::set<std::string> held_;
  std::map<std::string, int> in_flight_;
  bool down_ = false;
  int throws_ = 0;
  int accept_left_ = -1;  // -1: no limit
  std::map<std::string, std::deque<TransportResult>> scripts_;
  std::map<std::string, std::vector<OutboundRequest>> sent_;
  std::map<std::string, int> receipts_;
  std::vector<double> timeouts_;
};

std::string Url(const std::string& receiver, const std::string& path = "hook") {
  return absl::StrCat("http://", receiver, "/", path);
}

// What the test renderer turns into one request (Render below).
Json RequestSpec(const std::string& url) {
  return Json{{"url", url}, {"body", R"({"text":"hi"})"}};
}

// A route whose payload lists its requests.
OutboxRoute Route(const std::string& receiver, std::vector<Json> requests) {
  return {.receiver = receiver,
          .receiver_type = "webhook",
          .payload = Json{{"requests", requests}}};
}

// An item with one webhook route per receiver, one request each.
OutboxItem Item(const std::string& key, std::vector<std::string> receivers,
                const std::string& incident_id = "inc-1", int priority = 0) {
  OutboxItem item;
  item.key = key;
  item.incident_id = incident_id;
  item.kind = "page";
  item.description = "P0 trigger to alice";
  item.priority = priority;
  for (const std::string& r : receivers)
    item.routes.push_back(Route(r, {RequestSpec(Url(r))}));
  return item;
}

StoreOptions StoreOptionsFor(Clock* clock) {
  StoreOptions options;
  options.clock = clock;
  return options;
}

std::vector<Json> StoredEvents(const SeriesStore& store) {
  std::vector<Json> out;
  for (const Event& e :
       store.ListEvents("outbox", -kInf, kInf, std::numeric_limits<size_t>::max()))
    out.push_back(Json::parse(e.payload, nullptr, false));
  return out;
}

class OutboxTest : public ::testing::Test {
 protected:
  OutboxOptions Options() {
    OutboxOptions options;
    options.store = store_.get();
    options.transport = &receiver_;
    options.clock = &clock_;
    options.render = [this](const std::string& receiver, const Json& payload,
                            double now) { return Render(receiver, payload, now); };
    options.base_backoff_seconds = 2;
    options.max_backoff_seconds = 300;
    return options;
  }

  // A started outbox that records what its listener reports.
  std::unique_ptr<Outbox> Start(OutboxOptions options) {
    auto outbox = std::make_unique<Outbox>(
        std::move(options), [this](const DeliveryStatus& status) {
          std::lock_guard<std::mutex> lock(mu_);
          reported_.push_back(status);
        });
    EXPECT_TRUE(outbox->Start().ok());
    return outbox;
  }
  std::unique_ptr<Outbox> Start() { return Start(Options()); }

  // The test's receiver configuration: receivers in `configs_` render
  // with notify/ (their settings hold the credentials) from a payload
  // {"summary"}; others render payload {"requests": [{"url", "body",
  // "headers"}]} as given. A name in `removed_` is not configured.
  absl::StatusOr<std::vector<OutboundRequest>> Render(
      const std::string& receiver, const Json& payload, double now) {
    std::lock_guard<std::mutex> lock(mu_);
    if (removed_.contains(receiver))
      return absl::NotFoundError(
          absl::StrCat("no receiver ", receiver, " is configured"));
    if (auto config = configs_.find(receiver); config != configs_.end()) {
      Notice notice;
      notice.key = payload.value("key", "page");
      notice.event = "trigger";
      notice.incident_id = "inc-1";
      notice.severity = "P0";
      notice.summary = payload.value("summary", "");
      notice.recipients = {{"alice", "+15550001", "alice@example.com", ""}};
      return RenderNotice(config->second, notice, now);
    }
    std::vector<OutboundRequest> out;
    for (const Json& spec : payload.value("requests", Json::array())) {
      OutboundRequest request;
      request.url = spec.value("url", "");
      request.body = spec.value("body", "");
      for (const Json& h : spec.value("headers", Json::array()))
        request.headers.emplace_back(h[0].get<std::string>(),
                                     h[1].get<std::string>());
      out.push_back(std::move(request));
    }
    return out;
  }
  void Configure(ReceiverConfig config) {
    std::lock_guard<std::mutex> lock(mu_);
    configs_[config.name] = std::move(config);
  }
  void Remove(const std::string& receiver) {
    std::lock_guard<std::mutex> lock(mu_);
    removed_.insert(receiver);
  }

  std::vector<DeliveryStatus> Reported() {
    std::lock_guard<std::mutex> lock(mu_);
    return reported_;
  }

  static DeliveryStatus StatusOf(const Outbox& outbox, const std::string& key) {
    for (const DeliveryStatus& s : outbox.List("", 1000)) {
      if (s.key == key) return s;
    }
    ADD_FAILURE() << "no item " << key;
    return {};
  }
  static bool IsState(const Outbox& outbox, const std::string& key,
                      const std::string& state) {
    for (const DeliveryStatus& s : outbox.List("", 1000)) {
      if (s.key == key) return s.state == state;
    }
    return false;
  }
  static bool AttemptsReach(const Outbox& outbox, uint64_t n) {
    return outbox.counters().attempts >= n;
  }

  // Returns once a probe (its own receiver, unlimited) was delivered. Each
  // receiver has its own sender threads, so this shows the outbox is
  // alive, not that another receiver's queue was looked at: a check after
  // it that something was not sent can pass early, never fail wrongly.
  void Barrier(Outbox& outbox) {
    const std::string key = absl::StrCat("probe-", probes_++);
    ASSERT_TRUE(outbox.Enqueue(Item(key, {"probe"}, "probes")).ok());
    ASSERT_TRUE(WaitFor([&] { return IsState(outbox, key, "delivered"); }));
  }

  FakeClock clock_;
  std::unique_ptr<SeriesStore> store_ = NewMemoryStore(StoreOptionsFor(&clock_));
  FakeReceiver receiver_;
  std::mutex mu_;
  std::vector<DeliveryStatus> reported_;
  std::map<std::string, ReceiverConfig> configs_;
  std::set<std::string> removed_;
  int probes_ = 0;
};

TEST_F(OutboxTest, DeliversFirstTime) {
  OutboxOptions options = Options();
  options.request_timeout_seconds = 7;
  auto outbox = Start(options);
  const double t0 = clock_.Now();
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"slack"})).ok());
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 1; }));

  EXPECT_EQ(receiver_.Keys(Url("slack")), std::vector<std::string>{"k1"});
  EXPECT_EQ(receiver_.Timeouts(), std::vector<double>{7});
  const DeliveryStatus s = StatusOf(*outbox, "k1");
  EXPECT_EQ(s.state, "delivered");
  EXPECT_EQ(s.receiver, "slack");
  EXPECT_EQ(s.attempts, 1);
  EXPECT_EQ(s.incident_id, "inc-1");
  EXPECT_EQ(s.kind, "page");
  EXPECT_EQ(s.created_ts, t0);
  EXPECT_EQ(s.next_attempt_ts, 0);
  const Outbox::Counters c = outbox->counters();
  EXPECT_EQ(c.pending, 0u);
  EXPECT_EQ(c.attempts, 1u);
  EXPECT_EQ(c.failed, 0u);
  ASSERT_TRUE(WaitFor([&] { return Reported().size() == 1; }));
  EXPECT_EQ(Reported()[0].state, "delivered");

  // Stored: the item, the attempt and its end.
  std::vector<Json> events = StoredEvents(*store_);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["op"], "enqueue");
  EXPECT_EQ(events[0]["item"]["routes"][0]["payload"]["requests"][0]["url"],
            Url("slack"));
  EXPECT_EQ(events[0]["item"]["priority"], 0);
  EXPECT_EQ(events[1]["op"], "attempt");
  EXPECT_EQ(events[1]["verdict"], "delivered");
  EXPECT_EQ(events[1]["http_status"], 200);
  EXPECT_EQ(events[1]["receiver"], "slack");
  EXPECT_EQ(events[2]["op"], "done");
  EXPECT_EQ(events[2]["state"], "delivered");
}

// An exception from a transport or a listener is a bug, but it must not end
// the dispatcher thread (which would end the server): the page is retried
// and later pages still go out.
TEST_F(OutboxTest, ExceptionsDoNotStopDelivery) {
  receiver_.Throw(1);
  bool throw_in_listener = true;
  std::mutex listener_mu;
  auto outbox = std::make_unique<Outbox>(
      Options(), [&](const DeliveryStatus& status) {
        {
          std::lock_guard<std::mutex> lock(listener_mu);
          if (throw_in_listener) {
            throw_in_listener = false;
            throw std::logic_error("listener bug");
          }
        }
        std::lock_guard<std::mutex> lock(mu_);
        reported_.push_back(status);
      });
  ASSERT_TRUE(outbox->Start().ok());
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"slack"})).ok());
  ASSERT_TRUE(WaitFor([&] { return StatusOf(*outbox, "k1").attempts == 1; }));
  EXPECT_NE(StatusOf(*outbox, "k1").last_detail.find("transport bug"),
            std::string::npos);
  clock_.Advance(400);
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 1; }));
  ASSERT_TRUE(outbox->Enqueue(Item("k2", {"slack"})).ok());
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 2; }));
}

TEST_F(OutboxTest, RetriesAfter503WithBoundedBackoff) {
  auto outbox = Start();
  receiver_.Script(Url("hook"), {Http(503)});
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"})).ok());
  ASSERT_TRUE(WaitFor([&] { return Reported().size() == 1; }));

  // First retry: full jitter within [0, base].
  const DeliveryStatus after_503 = Reported()[0];
  EXPECT_EQ(after_503.state, "pending");
  EXPECT_EQ(after_503.attempts, 1);
  EXPECT_THAT(after_503.last_detail, HasSubstr("503"));
  const double delay = after_503.next_attempt_ts - after_503.updated_ts;
  EXPECT_GE(delay, 0);
  EXPECT_LE(delay, 2);

  clock_.Advance(delay);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  EXPECT_EQ(receiver_.Requests(Url("hook")), 2u);
  EXPECT_EQ(receiver_.Receipts("k1"), 1);
  EXPECT_EQ(StatusOf(*outbox, "k1").attempts, 2);
}

TEST_F(OutboxTest, Honours429RetryAfter) {
  auto outbox = Start();
  TransportResult too_many = Http(429);
  too_many.retry_after_seconds = 120;
  receiver_.Script(Url("hook"), {too_many});
  // A P2 waits up to 600 s for a receiver.
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"}, "inc-1", 2)).ok());
  ASSERT_TRUE(WaitFor([&] { return Reported().size() == 1; }));
  const DeliveryStatus after_429 = Reported()[0];
  EXPECT_EQ(after_429.next_attempt_ts, after_429.updated_ts + 120);

  clock_.Advance(119);
  Barrier(*outbox);
  EXPECT_EQ(receiver_.Requests(Url("hook")), 1u);
  clock_.Advance(1);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  EXPECT_EQ(receiver_.Requests(Url("hook")), 2u);
}

TEST_F(OutboxTest, PermanentFailureFailsOverToNextRoute) {
  auto outbox = Start();
  receiver_.Script(Url("twilio"), {Http(400)});
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"twilio", "aliyun"})).ok());
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  const DeliveryStatus s = StatusOf(*outbox, "k1");
  EXPECT_EQ(s.receiver, "aliyun");
  EXPECT_EQ(s.attempts, 2);
  EXPECT_EQ(receiver_.Requests(Url("twilio")), 1u);
  EXPECT_EQ(receiver_.Requests(Url("aliyun")), 1u);
  ASSERT_TRUE(WaitFor([&] { return Reported().size() == 2; }));
  EXPECT_EQ(Reported()[0].state, "pending");
  EXPECT_EQ(Reported()[0].receiver, "aliyun");  // the route now in use
}

TEST_F(OutboxTest, RetryableFailuresFailOverAfterConfiguredCount) {
  OutboxOptions options = Options();
  options.failover_after_attempts = 2;
  options.max_backoff_seconds = 1;
  auto outbox = Start(options);
  receiver_.Script(Url("twilio"), {Http(503), Http(503)});
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"twilio", "aliyun"})).ok());
  ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 1); }));
  clock_.Advance(1);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  EXPECT_EQ(receiver_.Requests(Url("twilio")), 2u);
  EXPECT_EQ(receiver_.Requests(Url("aliyun")), 1u);
  EXPECT_EQ(StatusOf(*outbox, "k1").receiver, "aliyun");
}

TEST_F(OutboxTest, AllRoutesFailingFailsTheItem) {
  auto outbox = Start();
  receiver_.Script(Url("twilio"), {Http(400)});
  receiver_.Script(Url("aliyun"), {Http(403)});
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"twilio", "aliyun"})).ok());
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().failed == 1; }));
  const DeliveryStatus s = StatusOf(*outbox, "k1");
  EXPECT_EQ(s.state, "failed");
  EXPECT_EQ(s.receiver, "aliyun");
  EXPECT_EQ(s.attempts, 2);
  EXPECT_THAT(s.last_detail, HasSubstr("no receiver left"));
  EXPECT_EQ(outbox->counters().pending, 0u);
  const std::vector<Json> events = StoredEvents(*store_);
  EXPECT_EQ(events.back()["op"], "done");
  EXPECT_EQ(events.back()["state"], "failed");
}

TEST_F(OutboxTest, LastRouteKeepsRetryingUntilMaxAttempts) {
  OutboxOptions options = Options();
  options.failover_after_attempts = 1;
  options.max_attempts = 3;
  options.max_backoff_seconds = 1;
  auto outbox = Start(options);
  receiver_.SetDown(true);
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"})).ok());
  for (uint64_t n = 1; n < 3; ++n) {
    ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, n); }));
    EXPECT_TRUE(IsState(*outbox, "k1", "pending"));
    clock_.Advance(1);
  }
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().failed == 1; }));
  const DeliveryStatus s = StatusOf(*outbox, "k1");
  EXPECT_EQ(s.attempts, 3);
  EXPECT_THAT(s.last_detail, HasSubstr("gave up after 3 attempts"));
}

// With a short retry cap an outage of minutes is hundreds of sends; by
// default only time gives up on an item, so the page goes out when the
// receiver returns (the full receivers drill, 10 min at a 4-s cap, lost
// pages to a 50-send limit).
TEST_F(OutboxTest, AnOutageOfManyShortRetriesDoesNotGiveUp) {
  OutboxOptions options = Options();
  options.base_backoff_seconds = 1;
  options.max_backoff_seconds = 1;
  auto outbox = Start(options);
  receiver_.SetDown(true);
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"}, "inc-1", 0)).ok());
  for (uint64_t n = 1; n <= 80; ++n) {
    ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, n); })) << n;
    clock_.Advance(1);
  }
  EXPECT_TRUE(IsState(*outbox, "k1", "pending"));
  receiver_.SetDown(false);
  clock_.Advance(1);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  EXPECT_EQ(outbox->counters().failed, 0u);
}

TEST_F(OutboxTest, GivesUpWhenRetryWouldPassTheDeadline) {
  OutboxOptions options = Options();
  options.give_up_after_seconds = 100;
  auto outbox = Start(options);
  TransportResult busy = Http(503);
  busy.retry_after_seconds = 200;
  receiver_.Script(Url("hook"), {busy});
  // A P3 waits up to 1800 s for a receiver.
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"}, "inc-1", 3)).ok());
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().failed == 1; }));
  EXPECT_THAT(StatusOf(*outbox, "k1").last_detail,
              HasSubstr("not delivered within 100 s"));
}

TEST_F(OutboxTest, GivesUpOnItemStillWaitingAtTheDeadline) {
  OutboxOptions options = Options();
  options.give_up_after_seconds = 30;
  options.rate_per_minute = {{"hook", 1}};
  auto outbox = Start(options);
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"})).ok());
  ASSERT_TRUE(outbox->Enqueue(Item("k2", {"hook"})).ok());
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  clock_.Advance(30);  // k2's token comes only after 60 s
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k2", "failed"); }));
  EXPECT_EQ(receiver_.Requests(Url("hook")), 1u);
  EXPECT_EQ(StatusOf(*outbox, "k2").attempts, 0);
  ASSERT_TRUE(WaitFor([&] { return Reported().size() == 2; }));
  EXPECT_EQ(Reported()[1].key, "k2");
  EXPECT_EQ(Reported()[1].state, "failed");
}

TEST_F(OutboxTest, RateLimitDelaysThirdItemUntilATokenRefills) {
  OutboxOptions options = Options();
  options.rate_per_minute = {{"dingtalk", 2}};
  auto outbox = Start(options);
  for (const char* key : {"k1", "k2", "k3"})
    ASSERT_TRUE(outbox->Enqueue(Item(key, {"dingtalk"})).ok());
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k2", "delivered"); }));
  Barrier(*outbox);
  EXPECT_TRUE(IsState(*outbox, "k3", "pending"));
  EXPECT_EQ(StatusOf(*outbox, "k3").attempts, 0);  // waiting burns nothing

  clock_.Advance(29);  // 2/min: one token per 30 s
  Barrier(*outbox);
  EXPECT_TRUE(IsState(*outbox, "k3", "pending"));
  clock_.Advance(1);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k3", "delivered"); }));
  EXPECT_EQ(receiver_.Keys(Url("dingtalk")),
            (std::vector<std::string>{"k1", "k2", "k3"}));
}

// A config reload replaces the receivers' limits and secrets: an item held
// back by a rate that was lifted goes at once, and the next attempt is
// signed with the new secret.
TEST_F(OutboxTest, ReloadedLimitsAndSecretsApplyToWaitingItems) {
  OutboxOptions options = Options();
  options.rate_per_minute = {{"hook", 1}};
  options.signing_secrets = {{"hook", "old"}};
  auto outbox = Start(options);
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"})).ok());
  ASSERT_TRUE(outbox->Enqueue(Item("k2", {"hook"})).ok());
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  Barrier(*outbox);
  EXPECT_TRUE(IsState(*outbox, "k2", "pending"));  // its token is 60 s away

  outbox->SetReceiverLimits({}, {{"hook", "new"}});
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k2", "delivered"); }));
  const std::vector<OutboundRequest> sent = receiver_.Sent(Url("hook"));
  ASSERT_EQ(sent.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    std::map<std::string, std::string> headers;
    for (const auto& [name, value] : sent[i].headers)
      headers[absl::AsciiStrToLower(name)] += value;
    EXPECT_TRUE(VerifyWebhook(i == 0 ? "old" : "new", headers["x-vigil-timestamp"],
                              headers["x-vigil-signature"], sent[i].body, clock_.Now(), 1)
                    .ok())
        << i;
  }
}

TEST_F(OutboxTest, DuplicateKeyIsRejectedWithoutChanges) {
  auto outbox = Start();
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"})).ok());
  EXPECT_EQ(outbox->Enqueue(Item("k1", {"other"})).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  EXPECT_EQ(outbox->Enqueue(Item("k1", {"hook"})).code(),
            absl::StatusCode::kAlreadyExists);
  Barrier(*outbox);
  EXPECT_EQ(receiver_.Requests(Url("hook")), 1u);
  EXPECT_EQ(receiver_.Requests(Url("other")), 0u);
  int enqueues = 0;
  for (const Json& e : StoredEvents(*store_))
    enqueues += e["op"] == "enqueue" && e["item"]["key"] == "k1";
  EXPECT_EQ(enqueues, 1);
}

// A receiver that is down is probed at the pace of the failed item's
// backoff, one request at a time - not once per queued item -, and gets
// everything exactly once when it is back.
TEST_F(OutboxTest, ReceiverDownThenBackDeliversEveryKeyExactlyOnce) {
  auto outbox = Start();
  receiver_.SetDown(true);
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(outbox->Enqueue(Item(absl::StrCat("k", i), {"hook"})).ok());
  // Every receiver is down, probes included: give the senders a moment
  // instead of a barrier (a check that can pass early, never fail wrongly).
  ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 1); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(receiver_.Requests(Url("hook")), 1u);
  clock_.Advance(300);  // one more probe, still down
  ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 2); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(receiver_.Requests(Url("hook")), 2u);
  EXPECT_EQ(outbox->counters().pending, 20u);

  receiver_.SetDown(false);
  clock_.Advance(300);
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 20; }));
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(receiver_.Receipts(absl::StrCat("k", i)), 1) << i;
  EXPECT_EQ(receiver_.Requests(Url("hook")), 22u);
  EXPECT_EQ(outbox->counters().pending, 0u);
}

TEST_F(OutboxTest, MultiRequestRouteResumesAtTheUndeliveredRequest) {
  OutboxItem item = Item("k1", {});
  item.routes.push_back(Route("twilio", {RequestSpec(Url("twilio", "a")),
                                         RequestSpec(Url("twilio", "b")),
                                         RequestSpec(Url("twilio", "c"))}));
  receiver_.Script(Url("twilio", "b"), {Http(503)});
  {
    auto outbox = Start();
    ASSERT_TRUE(outbox->Enqueue(item).ok());
    ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 2); }));
    const DeliveryStatus s = StatusOf(*outbox, "k1");
    EXPECT_EQ(s.state, "pending");
    outbox->Stop();
  }
  // A new outbox on the same store resumes at request b.
  auto outbox = Start();
  clock_.Advance(300);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  EXPECT_EQ(receiver_.Keys(Url("twilio", "a")), std::vector<std::string>{"k1/0"});
  EXPECT_EQ(receiver_.Keys(Url("twilio", "b")),
            (std::vector<std::string>{"k1/1", "k1/1"}));
  EXPECT_EQ(receiver_.Keys(Url("twilio", "c")), std::vector<std::string>{"k1/2"});
  EXPECT_EQ(StatusOf(*outbox, "k1").attempts, 4);
}

TEST_F(OutboxTest, KeepsAnIdempotencyKeyTheCallerSet) {
  auto outbox = Start();
  OutboxItem item = Item("k1", {"hook"});
  item.routes[0].payload["requests"][0]["headers"] =
      Json::array({Json::array({"idempotency-key", "own"})});
  ASSERT_TRUE(outbox->Enqueue(item).ok());
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  EXPECT_EQ(receiver_.Receipts("own"), 1);
  const std::vector<OutboundRequest> sent = receiver_.Sent(Url("hook"));
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].headers.size(), 1u);
  EXPECT_EQ(sent[0].headers[0].second, "own");
}

TEST_F(OutboxTest, SignsAtSendTimeWithoutPersistingTheSecret) {
  OutboxOptions options = Options();
  options.signing_secrets = {{"actuator", "s3cret"}};
  auto outbox = Start(options);
  receiver_.Script(Url("actuator"), {Http(503)});
  OutboxItem item = Item("k1", {"actuator", "plain"});
  item.routes[0].payload["requests"][0]["headers"] =
      Json::array({Json::array({"x-vigil-signature", "v1=stale"}),
                   Json::array({"X-Vigil-Timestamp", "1"})});
  ASSERT_TRUE(outbox->Enqueue(item).ok());
  ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 1); }));
  clock_.Advance(100.5);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));

  const std::vector<OutboundRequest> sent = receiver_.Sent(Url("actuator"));
  ASSERT_EQ(sent.size(), 2u);
  const double send_times[] = {clock_.Now() - 100.5, clock_.Now()};
  for (int i = 0; i < 2; ++i) {
    std::map<std::string, std::string> headers;
    for (const auto& [name, value] : sent[i].headers)
      headers[absl::AsciiStrToLower(name)] += value;  // a repeat would show
    EXPECT_EQ(headers["x-vigil-timestamp"],
              absl::StrCat(static_cast<int64_t>(send_times[i])));
    EXPECT_TRUE(VerifyWebhook("s3cret", headers["x-vigil-timestamp"],
                              headers["x-vigil-signature"], sent[i].body,
                              send_times[i], 1)
                    .ok())
        << i;
  }
  for (const Event& e : store_->ListEvents("outbox", -kInf, kInf, 100))
    EXPECT_THAT(e.payload, Not(HasSubstr("s3cret")));
  EXPECT_EQ(receiver_.Requests(Url("plain")), 0u);
}

TEST_F(OutboxTest, KeepsTheLastResponseCutTo4KiB) {
  receiver_.Script(Url("actuator"), {Http(200, R"({"paused":"job-1"})")});
  receiver_.Script(Url("big"), {Http(200, std::string(5000, 'x'))});
  {
    auto outbox = Start();
    ASSERT_TRUE(outbox->Enqueue(Item("k1", {"actuator"})).ok());
    ASSERT_TRUE(outbox->Enqueue(Item("k2", {"big"})).ok());
    ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 2; }));
    EXPECT_EQ(StatusOf(*outbox, "k1").last_response, R"({"paused":"job-1"})");
    EXPECT_EQ(StatusOf(*outbox, "k2").last_response, std::string(4096, 'x'));
    EXPECT_EQ(DeliveryStatusToJson(StatusOf(*outbox, "k1"))["last_response"],
              R"({"paused":"job-1"})");
  }
  auto replayed = Start();  // the same store: kept across restarts
  EXPECT_EQ(StatusOf(*replayed, "k1").last_response, R"({"paused":"job-1"})");
  EXPECT_EQ(StatusOf(*replayed, "k2").last_response.size(), 4096u);
}

// Hole 7: a receiver that hangs for its whole request timeout holds only
// its own queue; another receiver's P0 page goes out meanwhile.
TEST_F(OutboxTest, HangingReceiverDoesNotDelayAnotherReceiversPage) {
  auto outbox = Start();
  receiver_.Hold(Url("stuck"));
  ASSERT_TRUE(outbox->Enqueue(Item("slow1", {"stuck"}, "inc-1", 3)).ok());
  ASSERT_TRUE(outbox->Enqueue(Item("slow2", {"stuck"}, "inc-1", 3)).ok());
  ASSERT_TRUE(WaitFor([&] { return receiver_.InFlight(Url("stuck")) == 1; }));
  ASSERT_TRUE(outbox->Enqueue(Item("page", {"pager"})).ok());
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "page", "delivered"); }));
  // One request at a time per receiver by default: slow2 waits for slow1.
  EXPECT_EQ(receiver_.Requests(Url("stuck")), 1u);
  EXPECT_TRUE(IsState(*outbox, "slow1", "pending"));

  receiver_.Release(Url("stuck"));
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 3; }));
  EXPECT_EQ(receiver_.Keys(Url("stuck")),
            (std::vector<std::string>{"slow1", "slow2"}));
}

TEST_F(OutboxTest, InFlightRequestsPerReceiverAreCapped) {
  OutboxOptions options = Options();
  options.max_in_flight_per_receiver = 2;
  auto outbox = Start(options);
  receiver_.Hold(Url("stuck"));
  for (const char* key : {"k1", "k2", "k3"})
    ASSERT_TRUE(outbox->Enqueue(Item(key, {"stuck"})).ok());
  ASSERT_TRUE(WaitFor([&] { return receiver_.InFlight(Url("stuck")) == 2; }));
  EXPECT_EQ(receiver_.Requests(Url("stuck")), 2u);
  receiver_.Release(Url("stuck"));
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 3; }));
  EXPECT_EQ(receiver_.Requests(Url("stuck")), 3u);
}

// Within one receiver the most urgent goes first, then the oldest.
TEST_F(OutboxTest, HigherPriorityGoesFirstWithinAReceiver) {
  auto outbox = Start();
  receiver_.Hold(Url("hook"));
  ASSERT_TRUE(outbox->Enqueue(Item("first", {"hook"}, "inc-1", 3)).ok());
  ASSERT_TRUE(WaitFor([&] { return receiver_.InFlight(Url("hook")) == 1; }));
  ASSERT_TRUE(outbox->Enqueue(Item("p3-old", {"hook"}, "inc-1", 3)).ok());
  ASSERT_TRUE(outbox->Enqueue(Item("p1", {"hook"}, "inc-1", 1)).ok());
  ASSERT_TRUE(outbox->Enqueue(Item("p3-new", {"hook"}, "inc-1", 3)).ok());
  ASSERT_TRUE(outbox->Enqueue(Item("p0", {"hook"}, "inc-1", 0)).ok());
  receiver_.Release(Url("hook"));
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 5; }));
  EXPECT_EQ(receiver_.Keys(Url("hook")),
            (std::vector<std::string>{"first", "p0", "p1", "p3-old", "p3-new"}));
}

// After an outage the receiver gets the P0 first, even though the P3 was
// queued earlier and its retry timer ran out first.
TEST_F(OutboxTest, AReceiverBackFromAnOutageGetsP0First) {
  auto outbox = Start();
  receiver_.SetDown(true);
  ASSERT_TRUE(outbox->Enqueue(Item("p3", {"hook"}, "inc-1", 3)).ok());
  ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 1); }));
  clock_.Advance(1);
  ASSERT_TRUE(outbox->Enqueue(Item("p0", {"hook"}, "inc-2", 0)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(receiver_.Requests(Url("hook")), 1u);  // paced: p0 waits too
  receiver_.SetDown(false);
  clock_.Advance(600);
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 2; }));
  // The refused probe, then the P0 first.
  EXPECT_EQ(receiver_.Keys(Url("hook")), (std::vector<std::string>{"p3", "p0", "p3"}));
}

// The order survives a restart: priorities are stored with the items.
TEST_F(OutboxTest, PriorityOrderSurvivesARestart) {
  {
    auto outbox = Start();
    outbox->Stop();  // items are stored, not sent
    ASSERT_TRUE(outbox->Enqueue(Item("p3", {"hook"}, "inc-1", 3)).ok());
    ASSERT_TRUE(outbox->Enqueue(Item("p0", {"hook"}, "inc-1", 0)).ok());
  }
  auto outbox = Start();
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 2; }));
  EXPECT_EQ(receiver_.Keys(Url("hook")), (std::vector<std::string>{"p0", "p3"}));
}

// A receiver asking a P0 to wait longer than its cap is treated as down:
// the page fails over at once.
TEST_F(OutboxTest, RetryAfterOverTheP0CapFailsOverAtOnce) {
  auto outbox = Start();
  TransportResult too_many = Http(429);
  too_many.retry_after_seconds = 300;
  receiver_.Script(Url("twilio"), {too_many});
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"twilio", "aliyun"})).ok());
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  const DeliveryStatus s = StatusOf(*outbox, "k1");
  EXPECT_EQ(s.receiver, "aliyun");
  EXPECT_EQ(s.attempts, 2);
  ASSERT_TRUE(WaitFor([&] { return Reported().size() == 2; }));
  EXPECT_THAT(Reported()[0].last_detail,
              HasSubstr("Retry-After 300 s is over the P0 cap of 30 s: "
                        "failing over"));
  // Replayed, the failover is where it was.
  auto replayed = Start();
  EXPECT_EQ(StatusOf(*replayed, "k1").receiver, "aliyun");
  EXPECT_EQ(replayed->counters().unreadable_events, 0u);
}

// With no route left, a P0 is tried again after its cap, while a P3 for
// the same receiver waits for the receiver's whole Retry-After (unless the
// P0's try shows the receiver takes requests again).
TEST_F(OutboxTest, RetryAfterIsCappedByPriorityOnTheLastRoute) {
  auto outbox = Start();
  TransportResult too_many = Http(429);
  too_many.retry_after_seconds = 300;
  receiver_.Script(Url("hook"), {too_many});
  ASSERT_TRUE(outbox->Enqueue(Item("p0", {"hook"})).ok());
  ASSERT_TRUE(WaitFor([&] { return Reported().size() == 1; }));
  const DeliveryStatus after_429 = Reported()[0];
  EXPECT_EQ(after_429.next_attempt_ts, after_429.updated_ts + 30);
  EXPECT_THAT(after_429.last_detail, HasSubstr("trying again after the cap"));

  ASSERT_TRUE(outbox->Enqueue(Item("p3", {"hook"}, "inc-1", 3)).ok());
  clock_.Advance(29);
  Barrier(*outbox);
  EXPECT_EQ(receiver_.Requests(Url("hook")), 1u);
  EXPECT_TRUE(IsState(*outbox, "p3", "pending"));
  clock_.Advance(1);
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 3; }));
  EXPECT_EQ(receiver_.Keys(Url("hook")),
            (std::vector<std::string>{"p0", "p0", "p3"}));
}

// Hole 9: what is stored holds no credential. Requests are rendered from
// the receivers' configuration at send time.
TEST_F(OutboxTest, StoredItemsHoldNoCredentials) {
  Configure({"sms", "twilio_sms",
             {{"account_sid", "AC1"},
              {"auth_token", "twilio-auth-secret"},
              {"from", "+15550000"},
              {"base_url", "http://twilio.test"}},
             0});
  Configure({"mail", "email",
             {{"smtp_url", "smtp://mail.test"},
              {"from", "vigil@test"},
              {"username", "vigil"},
              {"password", "smtp-password-secret"}},
             0});
  Configure({"slack", "slack",
             {{"url", "http://slack.test/services/T0/B0/url-path-secret"}},
             0});
  auto outbox = Start();
  for (const char* receiver : {"sms", "mail", "slack"}) {
    OutboxItem item;
    item.key = absl::StrCat("page@", receiver);
    item.kind = "page";
    item.routes.push_back({.receiver = receiver,
                           .receiver_type = receiver == std::string("sms")
                                                ? "twilio_sms"
                                                : receiver,
                           .payload = {{"summary", "GPU 3 fell off the bus"}}});
    const absl::Status enqueued = outbox->Enqueue(item);
    ASSERT_TRUE(enqueued.ok()) << enqueued;
  }
  ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 3); }));
  // The receivers got their credentials...
  ASSERT_EQ(receiver_.Sent("http://twilio.test/2010-04-01/Accounts/AC1/Messages.json").size(), 1u);
  EXPECT_EQ(receiver_.Sent("http://twilio.test/2010-04-01/Accounts/AC1/Messages.json")[0].password,
            "twilio-auth-secret");
  ASSERT_EQ(receiver_.Sent("smtp://mail.test").size(), 1u);
  EXPECT_EQ(receiver_.Sent("smtp://mail.test")[0].password, "smtp-password-secret");
  EXPECT_EQ(receiver_.Requests("http://slack.test/services/T0/B0/url-path-secret"), 1u);
  // ...the store did not.
  const std::vector<Event> events =
      store_->ListEvents("outbox", -kInf, kInf, 1000);
  EXPECT_EQ(events.size(), 3u * 3);  // enqueue, attempt, done
  for (const Event& e : events) {
    EXPECT_THAT(e.payload, Not(HasSubstr("twilio-auth-secret")));
    EXPECT_THAT(e.payload, Not(HasSubstr("smtp-password-secret")));
    EXPECT_THAT(e.payload, Not(HasSubstr("url-path-secret")));
  }
}

// A route whose receiver left the configuration fails at once and the item
// fails over, saying why.
TEST_F(OutboxTest, RouteOfARemovedReceiverFailsOver) {
  receiver_.SetDown(true);
  {
    auto outbox = Start();
    ASSERT_TRUE(outbox->Enqueue(Item("k1", {"old", "backup"})).ok());
    ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 1); }));
    outbox->Stop();
  }
  Remove("old");
  receiver_.SetDown(false);
  auto outbox = Start();
  clock_.Advance(300);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  EXPECT_EQ(StatusOf(*outbox, "k1").receiver, "backup");
  EXPECT_EQ(receiver_.Requests(Url("old")), 1u);  // before the restart
  bool said_why = false;
  for (const Json& e : StoredEvents(*store_))
    said_why |= absl::StrContains(e.value("detail", ""),
                                  "cannot render for receiver old: no receiver "
                                  "old is configured");
  EXPECT_TRUE(said_why);
}

// Ended items are forgotten after the retention, in memory and at Start;
// their key may then be used again.
TEST_F(OutboxTest, ForgetsEndedItemsAfterTheRetention) {
  OutboxOptions options = Options();
  options.retention_seconds = 100;
  {
    auto outbox = Start(options);
    ASSERT_TRUE(outbox->Enqueue(Item("old", {"hook"})).ok());
    ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "old", "delivered"); }));
    clock_.Advance(50);
    ASSERT_TRUE(outbox->Enqueue(Item("new", {"hook"})).ok());
    ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "new", "delivered"); }));
    clock_.Advance(70);  // old ended 120 s ago, new 70 s ago
    ASSERT_TRUE(WaitFor([&] { return outbox->List("", 10).size() == 1; }));
    EXPECT_EQ(outbox->List("", 10)[0].key, "new");
    EXPECT_TRUE(outbox->List("inc-none", 10).empty());
    ASSERT_TRUE(outbox->Enqueue(Item("old", {"hook"})).ok());
    ASSERT_TRUE(WaitFor([&] { return receiver_.Receipts("old") == 2; }));
  }
  clock_.Advance(40);  // new ended 110 s ago, the second old 40 s ago
  auto outbox = Start(options);
  const std::vector<DeliveryStatus> listed = outbox->List("", 10);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].key, "old");
  EXPECT_EQ(listed[0].state, "delivered");
  EXPECT_EQ(outbox->counters().unreadable_events, 0u);
}

// The keys the stored outbox events are about.
std::set<std::string> StoredKeys(const SeriesStore& store) {
  std::set<std::string> keys;
  for (const Json& e : StoredEvents(store)) {
    if (e.contains("item")) keys.insert(e["item"].value("key", ""));
    if (e.contains("key")) keys.insert(e.value("key", ""));
  }
  return keys;
}

// The stored events of forgotten items are deleted (their payloads and
// the receivers' answers do not stay on disk), those of remembered items
// stay, and a restart reads only what is left.
TEST_F(OutboxTest, DeletesTheStoredEventsOfForgottenItems) {
  OutboxOptions options = Options();
  options.retention_seconds = 100;
  {
    auto outbox = Start(options);
    ASSERT_TRUE(outbox->Enqueue(Item("old", {"hook"})).ok());
    ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "old", "delivered"); }));
    clock_.Advance(50);
    ASSERT_TRUE(outbox->Enqueue(Item("new", {"hook"})).ok());
    ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "new", "delivered"); }));
    EXPECT_EQ(StoredKeys(*store_), (std::set<std::string>{"old", "new"}));
    clock_.Advance(70);  // old ended 120 s ago, new 70 s ago
    ASSERT_TRUE(WaitFor([&] { return StoredKeys(*store_).size() == 1; }));
    EXPECT_EQ(StoredKeys(*store_), std::set<std::string>{"new"});
  }
  auto outbox = Start(options);
  ASSERT_EQ(outbox->List("", 10).size(), 1u);
  EXPECT_EQ(outbox->counters().unreadable_events, 0u);
  clock_.Advance(100);
  ASSERT_TRUE(WaitFor([&] { return StoredEvents(*store_).empty(); }));
  EXPECT_EQ(outbox->counters().delete_errors, 0u);
}

// Items stored by a version that kept rendered requests (and had no
// priorities) are still sent, as stored.
TEST_F(OutboxTest, SendsItemsStoredWithRenderedRequests) {
  const Json legacy = {
      {"op", "enqueue"},
      {"item",
       {{"key", "legacy"},
        {"incident_id", "inc-1"},
        {"kind", "page"},
        {"description", "P1 trigger"},
        {"created_ts", clock_.Now()},
        {"routes",
         Json::array({{{"receiver", "hook"},
                       {"receiver_type", "webhook"},
                       {"requests",
                        Json::array({{{"method", "POST"},
                                      {"url", Url("hook")},
                                      {"headers", Json::array({Json::array(
                                                      {"Idempotency-Key",
                                                       "legacy"})})},
                                      {"body", "{}"},
                                      {"smtp", false},
                                      {"mail_from", ""},
                                      {"mail_rcpt", Json::array()},
                                      {"username", ""},
                                      {"password", ""}}})}}})}}}};
  ASSERT_TRUE(
      store_->AppendEvent(Event{"outbox", clock_.Now(), 0, legacy.dump()}).ok());
  auto outbox = Start();
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "legacy", "delivered"); }));
  EXPECT_EQ(receiver_.Receipts("legacy"), 1);
  EXPECT_EQ(outbox->counters().unreadable_events, 0u);
  auto replayed = Start();
  EXPECT_TRUE(IsState(*replayed, "legacy", "delivered"));
  EXPECT_EQ(replayed->counters().unreadable_events, 0u);
}

TEST_F(OutboxTest, RejectsBadInput) {
  {
    Outbox not_started(Options());
    EXPECT_EQ(not_started.Enqueue(Item("k1", {"hook"})).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  OutboxOptions no_store = Options();
  no_store.store = nullptr;
  EXPECT_EQ(Outbox(no_store).Start().code(),
            absl::StatusCode::kInvalidArgument);
  OutboxOptions no_attempts = Options();
  no_attempts.max_attempts = -1;
  EXPECT_EQ(Outbox(no_attempts).Start().code(),
            absl::StatusCode::kInvalidArgument);
  OutboxOptions no_render = Options();
  no_render.render = nullptr;
  EXPECT_EQ(Outbox(no_render).Start().code(),
            absl::StatusCode::kInvalidArgument);
  OutboxOptions no_in_flight = Options();
  no_in_flight.max_in_flight_per_receiver = 0;
  EXPECT_EQ(Outbox(no_in_flight).Start().code(),
            absl::StatusCode::kInvalidArgument);
  OutboxOptions no_cap = Options();
  no_cap.max_retry_after_seconds[2] = 0;
  EXPECT_EQ(Outbox(no_cap).Start().code(), absl::StatusCode::kInvalidArgument);

  auto outbox = Start();
  EXPECT_EQ(outbox->Start().code(), absl::StatusCode::kFailedPrecondition);

  struct Case {
    const char* name;
    OutboxItem item;
    const char* message;
  };
  OutboxItem no_receiver = Item("k", {"hook"});
  no_receiver.routes[0].receiver = "";
  OutboxItem no_request = Item("k", {"hook"});
  no_request.routes[0].payload["requests"] = Json::array();
  OutboxItem no_url = Item("k", {"hook"});
  no_url.routes[0].payload["requests"][0]["url"] = "";
  OutboxItem bad_utf8 = Item("k", {"hook"});
  bad_utf8.routes[0].payload["requests"][0]["body"] = "caf\xe9";
  Remove("gone");
  const std::vector<Case> cases = {
      {"empty key", Item("", {"hook"}), "key is empty"},
      {"no route", Item("k", {}), "no route"},
      {"no receiver", no_receiver, "routes[0].receiver is empty"},
      {"no request", no_request, "routes[0] (hook): renders no request"},
      {"no url", no_url, "routes[0] (hook): requests[0].url is empty"},
      {"unknown receiver", Item("k", {"hook", "gone"}),
       "routes[1] (gone): no receiver gone is configured"},
      {"priority", Item("k", {"hook"}, "inc-1", 4), "priority 4 is not in 0..3"},
      {"bad utf-8", bad_utf8, "not valid UTF-8"},
  };
  for (const Case& c : cases) {
    const absl::Status status = outbox->Enqueue(c.item);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.name;
  }
  EXPECT_TRUE(StoredEvents(*store_).empty());
  EXPECT_TRUE(outbox->List("", 10).empty());
}

TEST_F(OutboxTest, ListsNewestFirstByIncident) {
  auto outbox = Start();
  ASSERT_TRUE(outbox->Enqueue(Item("a1", {"hook"}, "inc-a")).ok());
  clock_.Advance(1);
  ASSERT_TRUE(outbox->Enqueue(Item("b1", {"hook"}, "inc-b")).ok());
  clock_.Advance(1);
  ASSERT_TRUE(outbox->Enqueue(Item("a2", {"hook"}, "inc-a")).ok());
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 3; }));

  std::vector<std::string> keys;
  for (const DeliveryStatus& s : outbox->List("inc-a", 10)) keys.push_back(s.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a2", "a1"}));
  keys.clear();
  for (const DeliveryStatus& s : outbox->List("", 2)) keys.push_back(s.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a2", "b1"}));
  EXPECT_TRUE(outbox->List("inc-none", 10).empty());

  const Json j = DeliveryStatusToJson(outbox->List("inc-b", 1)[0]);
  EXPECT_EQ(j["key"], "b1");
  EXPECT_EQ(j["incident_id"], "inc-b");
  EXPECT_EQ(j["state"], "delivered");
  EXPECT_EQ(j["receiver"], "hook");
  EXPECT_EQ(j["attempts"], 1);
  for (const char* field : {"kind", "description", "last_detail", "created_ts",
                            "updated_ts", "next_attempt_ts"})
    EXPECT_TRUE(j.contains(field)) << field;
}

TEST_F(OutboxTest, StartSkipsMalformedStoredEvents) {
  const double now = clock_.Now();
  for (const char* payload :
       {"not json", R"({"op":"enqueue","item":{"key":""}})",
        R"({"op":"attempt","key":"ghost","route":0,"request_index":0,)"
        R"("verdict":"delivered","next_attempt_ts":0})",
        R"({"op":"frobnicate","key":"x"})"})
    ASSERT_TRUE(store_->AppendEvent(Event{"outbox", now, 0, payload}).ok());
  auto outbox = Start();
  EXPECT_EQ(outbox->counters().unreadable_events, 4u);
  ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"})).ok());
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
}

// A store that refuses event writes while `refuse` is set.
class RefusingStore : public SeriesStore {
 public:
  explicit RefusingStore(SeriesStore* base) : base_(base) {}
  std::atomic<bool> refuse{false};

  absl::StatusOr<SeriesId> Resolve(const SeriesKey& key) override {
    return base_->Resolve(key);
  }
  absl::StatusOr<SeriesId> Find(const SeriesKey& key) const override {
    return base_->Find(key);
  }
  absl::StatusOr<SeriesKey> Key(SeriesId id) const override {
    return base_->Key(id);
  }
  std::vector<SeriesInfo> ListSeries(const SeriesFilter& f) const override {
    return base_->ListSeries(f);
  }
  absl::Status Append(std::span<const FrameColumns> frames,
                      AppendResult* result) override {
    return base_->Append(frames, result);
  }
  absl::StatusOr<std::vector<Sample>> Query(SeriesId id, double from,
                                            double to) const override {
    return base_->Query(id, from, to);
  }
  absl::StatusOr<std::vector<Aggregate>> QueryAggregate(
      SeriesId id, double from, double to, double step) const override {
    return base_->QueryAggregate(id, from, to, step);
  }
  absl::StatusOr<uint64_t> AppendEvent(const Event& event) override {
    if (refuse) return absl::UnavailableError("disk full");
    return base_->AppendEvent(event);
  }
  std::vector<Event> ListEvents(std::string_view stream, double from,
                                double to, size_t limit) const override {
    return base_->ListEvents(stream, from, to, limit);
  }
  absl::Status DeleteEventsBefore(std::string_view stream, double ts) override {
    if (refuse) return absl::UnavailableError("disk full");
    return base_->DeleteEventsBefore(stream, ts);
  }
  absl::Status PutState(std::string_view key,
                        std::string_view value) override {
    return base_->PutState(key, value);
  }
  absl::StatusOr<std::string> GetState(std::string_view key) const override {
    return base_->GetState(key);
  }
  absl::Status Flush() override { return base_->Flush(); }
  absl::Status EnforceRetention() override { return base_->EnforceRetention(); }
  absl::Status Health() const override { return base_->Health(); }
  StoreStats Stats() const override { return base_->Stats(); }

 private:
  SeriesStore* base_;
};

// A page the store refuses (disk full) is still sent, never dropped; it is
// stored, with its end, once the store accepts again, so a restart after
// that does not send it twice.
TEST_F(OutboxTest, PagesTheStoreRefusesAreStillSentAndStoredLater) {
  RefusingStore refusing(store_.get());
  OutboxOptions options = Options();
  options.store = &refusing;
  {
    auto outbox = Start(options);
    refusing.refuse = true;
    ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"})).ok());
    ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 1; }));
    EXPECT_EQ(receiver_.Receipts("k1"), 1);
    EXPECT_EQ(outbox->counters().unstored_enqueues, 1u);
    EXPECT_EQ(outbox->counters().unstored, 1u);
    EXPECT_TRUE(StoredEvents(*store_).empty());
    refusing.refuse = false;
    clock_.Advance(2);
    ASSERT_TRUE(WaitFor([&] { return outbox->counters().unstored == 0; }));
    std::vector<Json> events = StoredEvents(*store_);
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0]["op"], "enqueue");
    EXPECT_EQ(events[1]["op"], "done");
    EXPECT_EQ(events[1]["state"], "delivered");
  }
  auto outbox = Start(options);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  clock_.Advance(600);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(receiver_.Receipts("k1"), 1) << "not sent again after a restart";
}

// At least once on the wire: a send whose result could not be persisted
// is sent again after a restart, with the same Idempotency-Key.
TEST_F(OutboxTest, SendWhoseResultWasNotPersistedIsResentWithTheSameKey) {
  RefusingStore refusing(store_.get());
  OutboxOptions options = Options();
  options.store = &refusing;
  {
    receiver_.SetDown(true);
    auto outbox = Start(options);
    ASSERT_TRUE(outbox->Enqueue(Item("k1", {"hook"})).ok());
    ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 1); }));
    refusing.refuse = true;
    receiver_.SetDown(false);
    clock_.Advance(300);
    ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 1; }));
    EXPECT_EQ(outbox->counters().persist_errors, 2u);  // attempt and done
  }
  refusing.refuse = false;
  auto outbox = Start(options);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "k1", "delivered"); }));
  EXPECT_EQ(receiver_.Receipts("k1"), 2);
  EXPECT_EQ(receiver_.Keys(Url("hook")),
            (std::vector<std::string>{"k1", "k1", "k1"}));
}

// Restart mid-way, against both stores: the RocksDB one is closed and
// reopened from disk, the memory one outlives the first outbox.
class OutboxRestartTest : public OutboxTest,
                          public ::testing::WithParamInterface<bool> {
 protected:
  bool rocksdb() const { return GetParam(); }

  void SetUp() override {
    if (!rocksdb()) return;
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("vigil_outbox_test_", getpid());
    std::filesystem::remove_all(dir_);
    Reopen();
  }
  void TearDown() override {
    if (rocksdb()) {
      store_.reset();
      std::filesystem::remove_all(dir_);
    }
  }
  void Reopen() {
    if (!rocksdb()) return;
    store_.reset();
    RocksDbStoreOptions options;
    options.store = StoreOptionsFor(&clock_);
    options.data_dir = dir_.string();
    auto store = OpenRocksDbStore(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  std::filesystem::path dir_;
};

TEST_P(OutboxRestartTest, ResumesPendingAndNeverResendsDelivered) {
  receiver_.AcceptOnly(8);
  {
    auto outbox = Start();
    for (int i = 0; i < 20; ++i)
      ASSERT_TRUE(outbox->Enqueue(Item(absl::StrCat("k", i), {"hook"})).ok());
    // 8 accepted, then the 9th fails and the receiver is paced.
    ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 9); }));
    EXPECT_EQ(outbox->counters().delivered, 8u);
    outbox->Stop();
  }
  Reopen();
  receiver_.AcceptOnly(-1);
  auto outbox = Start();
  // Replayed: delivered ones stay delivered, attempts are kept.
  EXPECT_GE(outbox->counters().delivered, 8u);
  EXPECT_GE(outbox->counters().attempts, 9u);
  clock_.Advance(300);
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 20; }));
  for (int i = 0; i < 20; ++i) {
    const std::string key = absl::StrCat("k", i);
    EXPECT_EQ(receiver_.Receipts(key), 1) << key;
    const DeliveryStatus s = StatusOf(*outbox, key);
    EXPECT_EQ(s.state, "delivered") << key;
    EXPECT_EQ(s.attempts, i == 8 ? 2 : 1) << key;  // k8 was the refused probe
  }
  EXPECT_EQ(receiver_.Requests(Url("hook")), 21u);  // 8 + 1 refused + 12
  EXPECT_EQ(outbox->List("", 100).size(), 20u);
  EXPECT_EQ(outbox->counters().attempts, 21u);
}

// A pending item is rendered from the configuration of the day after a
// restart: a rotated token applies, and neither token reaches the disk.
TEST_P(OutboxRestartTest, PendingItemsAreRenderedFromTheConfigAfterARestart) {
  const std::string url =
      "http://twilio.test/2010-04-01/Accounts/AC1/Messages.json";
  auto sms = [](const std::string& token) {
    return ReceiverConfig{"sms", "twilio_sms",
                          {{"account_sid", "AC1"},
                           {"auth_token", token},
                           {"from", "+15550000"},
                           {"base_url", "http://twilio.test"}},
                          0};
  };
  Configure(sms("token-before-rotation"));
  receiver_.SetDown(true);
  {
    auto outbox = Start();
    OutboxItem item;
    item.key = "page@sms";
    item.kind = "page";
    item.routes.push_back({.receiver = "sms",
                           .receiver_type = "twilio_sms",
                           .payload = {{"key", "page@sms"},
                                       {"summary", "GPU 3 fell off the bus"}}});
    ASSERT_TRUE(outbox->Enqueue(item).ok());
    ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 1); }));
    outbox->Stop();
  }
  Reopen();
  Configure(sms("token-after-rotation"));
  receiver_.SetDown(false);
  auto outbox = Start();
  clock_.Advance(300);
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "page@sms", "delivered"); }));
  const std::vector<OutboundRequest> sent = receiver_.Sent(url);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].password, "token-before-rotation");
  EXPECT_EQ(sent[1].password, "token-after-rotation");
  EXPECT_EQ(sent[1].body, sent[0].body);
  EXPECT_EQ(IdempotencyKey(sent[1]), IdempotencyKey(sent[0]));
  EXPECT_EQ(receiver_.Receipts(IdempotencyKey(sent[0])), 1);
  for (const Event& e : store_->ListEvents("outbox", -kInf, kInf, 100)) {
    EXPECT_THAT(e.payload, Not(HasSubstr("token-before-rotation")));
    EXPECT_THAT(e.payload, Not(HasSubstr("token-after-rotation")));
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, OutboxRestartTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "RocksDb" : "Memory";
                         });

// The real libcurl transport against a local receiver that goes down and
// comes back on the same port.
class LocalReceiver {
 public:
  explicit LocalReceiver(int port = 0) {
    server_.Post("/hook", [this](const httplib::Request& req,
                                 httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++receipts_[req.get_header_value("Idempotency-Key")];
      res.set_content("{}", "application/json");
    });
    port_ = port == 0 ? server_.bind_to_any_port("127.0.0.1")
                      : (server_.bind_to_port("127.0.0.1", port) ? port : -1);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    EXPECT_TRUE(WaitFor([this] { return server_.is_running(); }));
  }
  ~LocalReceiver() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::map<std::string, int> receipts() {
    std::lock_guard<std::mutex> lock(mu_);
    return receipts_;
  }

 private:
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, int> receipts_;
};

TEST_F(OutboxTest, CurlTransportDeliversAfterReceiverComesBack) {
  std::unique_ptr<Transport> curl = NewCurlTransport();
  OutboxOptions options = Options();
  options.transport = curl.get();
  options.request_timeout_seconds = 5;
  auto outbox = Start(options);
  auto item = [&](const std::string& key, int port) {
    OutboxItem it = Item(key, {"hook"});
    Json& spec = it.routes[0].payload["requests"][0];
    spec["url"] = absl::StrCat("http://127.0.0.1:", port, "/hook");
    spec["headers"] =
        Json::array({Json::array({"Content-Type", "application/json"})});
    return it;
  };

  auto receiver = std::make_unique<LocalReceiver>();
  const int port = receiver->port();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(outbox->Enqueue(item("up", port)).ok());
  ASSERT_TRUE(WaitFor([&] { return IsState(*outbox, "up", "delivered"); }));
  EXPECT_EQ(receiver->receipts(), (std::map<std::string, int>{{"up", 1}}));

  receiver.reset();  // down
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(outbox->Enqueue(item(absl::StrCat("k", i), port)).ok());
  ASSERT_TRUE(WaitFor([&] { return AttemptsReach(*outbox, 2); }));  // one probe
  EXPECT_EQ(outbox->counters().pending, 5u);
  EXPECT_FALSE(StatusOf(*outbox, "k0").last_detail.empty());

  receiver = std::make_unique<LocalReceiver>(port);  // back
  ASSERT_EQ(receiver->port(), port);
  clock_.Advance(300);
  ASSERT_TRUE(WaitFor([&] { return outbox->counters().delivered == 6; }));
  std::map<std::string, int> expected;
  for (int i = 0; i < 5; ++i) expected[absl::StrCat("k", i)] = 1;
  EXPECT_EQ(receiver->receipts(), expected);
}

}  // namespace
}  // namespace vigil
