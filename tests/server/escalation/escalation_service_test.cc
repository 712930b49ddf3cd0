// EscalationService against a scripted transport: pages per policy,
// re-pages and acknowledgement, signed action webhooks, approval, the
// circuit breaker's "remediation halted" incident, and state that survives
// a restart. Detection is real (memory store); incidents are fed in as the
// engine would publish them.
#include "server/escalation/escalation_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <mutex>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "notify/signing.h"
#include "server/detection/detection_service.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

constexpr char kSecret[] = "actuator-secret";
// Receiver credentials, distinct enough to search the store for.
constexpr char kTwilioToken[] = "twilio-token-4f1c";
constexpr char kSmtpPassword[] = "smtp-password-9b2e";
constexpr char kSlackPath[] = "url-path-secret-77d0";

// Records every request; answers 200 "ok" unless `answer` says otherwise.
class RecordingTransport : public Transport {
 public:
  TransportResult Send(const OutboundRequest& request, double) override {
    std::lock_guard<std::mutex> l(mu_);
    requests_.push_back(request);
    if (absl::StrContains(request.url, "/actuator")) {
      if (!actuator_answer_.empty()) return {200, actuator_answer_, std::nullopt, ""};
      Json body = Json::parse(request.body, nullptr, false);
      return {200, Json{{"id", body.value("id", "")}, {"status", "done"},
                        {"detail", "ran " + body.value("action", "")}}.dump(),
              std::nullopt, ""};
    }
    return {200, "ok", std::nullopt, ""};
  }
  // Makes the actuator answer `body` (200) instead of a well-formed answer.
  void SetActuatorAnswer(std::string body) {
    std::lock_guard<std::mutex> l(mu_);
    actuator_answer_ = std::move(body);
  }
  std::vector<OutboundRequest> Matching(std::string_view url_part) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<OutboundRequest> out;
    for (const OutboundRequest& r : requests_) {
      if (r.url.find(url_part) != std::string::npos) out.push_back(r);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<OutboundRequest> requests_;
  std::string actuator_answer_;
};

// Waits (real time, up to 10 s) until `done` holds.
bool Eventually(const std::function<bool()>& done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

EscalationConfig TestEscalation() {
  Json section = Json::parse(R"({
    "users": [{"name": "alice", "phone": "+15550001", "email": "alice@example.com"},
              {"name": "bob", "phone": "+15550002"}],
    "schedules": [
      {"name": "primary", "layers": [{"name": "l", "rotation": "weekly",
        "start": 1700000000, "users": ["alice"]}]},
      {"name": "secondary", "layers": [{"name": "l", "rotation": "weekly",
        "start": 1700000000, "users": ["bob"]}]}],
    "interlocks": {"max_cordons": 5, "max_job_node_percent": 20}
  })");
  absl::StatusOr<EscalationConfig> config = ParseEscalationConfig(section);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

NotificationOptions TestNotifications() {
  NotificationOptions n;
  n.public_url = "http://vigil.test";
  n.receivers = {
      {"voice", "twilio_voice",
       {{"account_sid", "AC1"}, {"auth_token", kTwilioToken}, {"from", "+1555"},
        {"callback_url", "http://vigil.test/api/v1/callbacks/twilio/voice"},
        {"base_url", "http://twilio.test"}}, 0},
      {"sms", "twilio_sms",
       {{"account_sid", "AC1"}, {"auth_token", kTwilioToken}, {"from", "+1555"},
        {"base_url", "http://twilio.test"}}, 0},
      {"slack", "slack", {{"url", absl::StrCat("http://slack.test/hook/", kSlackPath)}}, 0},
      {"mail", "email", {{"smtp_url", "smtp://mail.test"}, {"from", "vigil@test"},
                         {"username", "vigil"}, {"password", kSmtpPassword}}, 0}};
  n.channels = {{"phone", {{"voice"}, false}},
                {"sms", {{"sms"}, true}},
                {"im", {{"slack"}, false}},
                {"email", {{"mail"}, false}}};
  return n;
}

class EscalationServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions store_options;
    store_options.clock = &clock_;
    store_ = NewMemoryStore(store_options);
    detection_ = NewDetection();
    StartService();
    ASSERT_TRUE(detection_->Start().ok());
  }
  void TearDown() override {
    detection_->Stop();
    if (service_) service_->Stop();
  }

  // A detection service (serving stored incidents only) on the store.
  std::unique_ptr<DetectionService> NewDetection() {
    DetectionOptions d;
    d.store = store_.get();
    d.clock = &clock_;
    d.live = false;
    return std::make_unique<DetectionService>(d);
  }

  void StartService() {
    EscalationServiceOptions o;
    o.store = store_.get();
    o.clock = &clock_;
    o.detection = detection_.get();
    o.transport = &transport_;
    o.escalation = escalation_;
    o.notifications = TestNotifications();
    o.actuator.url = "http://127.0.0.1:1/actuator";
    o.actuator.secret = kSecret;
    o.verified_job = [this](const std::string& job, const std::string& node)
        -> std::optional<VerifiedJob> {
      std::lock_guard<std::mutex> lock(verified_mu_);
      auto it = verified_.find(job);
      if (it == verified_.end()) return std::nullopt;
      const auto& [job_id, nodes] = it->second;
      if (std::find(nodes.begin(), nodes.end(), node) != nodes.end())
        return VerifiedJob{job_id, node};
      return VerifiedJob{job_id, nodes.front()};
    };
    o.claimed_node = [this](const std::string& node) {
      std::lock_guard<std::mutex> lock(verified_mu_);
      return claimed_.contains(node);
    };
    if (pair_) {
      EscalationServiceOptions::PairGate gate;
      gate.leading = [this] { return leading_.load(); };
      gate.delivered = [this](const std::string& key) {
        std::lock_guard<std::mutex> lock(marks_mu_);
        marks_.insert(key);
      };
      gate.delivered_keys = [this]() -> absl::StatusOr<absl::flat_hash_set<std::string>> {
        std::lock_guard<std::mutex> lock(marks_mu_);
        return marks_;
      };
      gate.share_operation = [this](const std::string& key, const Json& op) {
        std::lock_guard<std::mutex> lock(marks_mu_);
        shared_.emplace_back(key, op.dump());
      };
      gate.action_started = [this](const std::string& key) {
        std::lock_guard<std::mutex> lock(marks_mu_);
        action_marks_.insert(key);
      };
      gate.started_actions = [this]() -> absl::StatusOr<absl::flat_hash_set<std::string>> {
        std::lock_guard<std::mutex> lock(marks_mu_);
        return action_marks_;
      };
      gate.self = "s0/a";
      o.pair = std::move(gate);
    }
    service_ = std::make_unique<EscalationService>(o);
    detection_->set_listener(service_.get());
    ASSERT_TRUE(service_->Start().ok());
  }

  // Publishes an opened incident the way the engine would.
  std::string Open(Severity severity, const std::string& kind,
                   const std::string& job, const std::string& node,
                   std::vector<Response> responses) {
    IncidentUpdate u;
    u.type = UpdateType::kOpened;
    u.ts = clock_.Now();
    u.incident.severity = severity;
    u.incident.kind = kind;
    u.incident.job = job;
    u.incident.node = node;
    u.incident.ts = u.ts;
    u.incident.summary = kind + " on " + node;
    u.incident.responses = std::move(responses);
    absl::StatusOr<std::string> id = detection_->PublishExternal(u);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }

  // Registers `nodes` nodes of `job` in the store (the gate counts them).
  void AddJobNodes(const std::string& job, int nodes) {
    for (int i = 0; i < nodes; ++i) {
      SeriesKey key{"gpu_power_watts",
                    {{"job", job}, {"node", absl::StrCat("n", i)}, {"gpu", "0"}}};
      ASSERT_TRUE(NormalizeSeriesKey(&key).ok());
      ASSERT_TRUE(store_->Resolve(key).ok());
    }
  }

  size_t Calls() { return transport_.Matching("Calls.json").size(); }

  // The ids of an automatic action decided before a crash that lost the
  // id counter (the last state snapshot predates the action) and of one
  // decided after the restart.
  std::pair<std::string, std::string> ActionIdsAcrossACrash() {
    AddJobNodes("llm", 8);
    const std::string first =
        Open(Severity::kP0, "ecc_double_bit", "llm", "n1", {Response::kCordonNode});
    const std::string before = service_->ListActions(first)["actions"][0]["id"];
    service_->Stop();
    service_.reset();
    Json state = Json::parse(*store_->GetState("escalation"));
    state["next_action"] = 1;
    EXPECT_TRUE(store_->PutState("escalation", state.dump()).ok());
    StartService();
    const std::string second =
        Open(Severity::kP0, "ecc_double_bit", "llm", "n2", {Response::kCordonNode});
    return {before, service_->ListActions(second)["actions"][0]["id"]};
  }

  // Makes `job` verified as scheduler job `job_id` on `nodes` (what the
  // fleet view learns from Frame.verified_job_id).
  void Verify(const std::string& job, const std::string& job_id,
              std::vector<std::string> nodes) {
    std::lock_guard<std::mutex> lock(verified_mu_);
    verified_[job] = {job_id, std::move(nodes)};
  }

  std::mutex verified_mu_;
  std::set<std::string> claimed_;  // guarded by verified_mu_
  std::map<std::string, std::pair<std::string, std::vector<std::string>>>
      verified_;
  // Cluster pair (EscalationServiceOptions::pair), when pair_ is set.
  bool pair_ = false;
  std::atomic<bool> leading_{true};
  std::mutex marks_mu_;
  absl::flat_hash_set<std::string> marks_;
  std::vector<std::pair<std::string, std::string>> shared_;  // share_operation's
  absl::flat_hash_set<std::string> action_marks_;            // action_started's

  FakeClock clock_;
  RecordingTransport transport_;
  EscalationConfig escalation_ = TestEscalation();
  std::unique_ptr<SeriesStore> store_;
  std::unique_ptr<DetectionService> detection_;
  std::unique_ptr<EscalationService> service_;
};

TEST_F(EscalationServiceTest, P0PagesPhoneSmsImAtOnceAndAckStopsRepaging) {
  const std::string id = Open(Severity::kP0, "ecc_double_bit", "llm", "n1", {});
  ASSERT_TRUE(Eventually([&] { return Calls() == 1; }))
      << Json(service_->Timeline(id)).dump(1);
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("Messages.json").size() == 1; }));
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("slack.test").size() == 1; }));
  OutboundRequest call = transport_.Matching("Calls.json")[0];
  EXPECT_TRUE(absl::StrContains(call.body, "To=%2B15550001")) << call.body;
  EXPECT_EQ(call.username, "AC1");

  // Unacknowledged: the primary is paged again after 5 minutes.
  clock_.Advance(301);
  ASSERT_TRUE(Eventually([&] { return Calls() == 2; }))
      << "calls " << Calls() << "\n"
      << Json(service_->Timeline(id)).dump(1) << "\n"
      << service_->ListDeliveries("", 100).dump(1);

  absl::StatusOr<Json> acked =
      service_->Acknowledge(id, Identity{"alice", Role::kOperator}, "on it");
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_EQ(acked->value("lifecycle", ""), "acknowledged");
  // Slack hears who took it.
  ASSERT_TRUE(Eventually([&] {
    for (const OutboundRequest& r : transport_.Matching("slack.test"))
      if (absl::StrContains(r.body, "alice")) return true;
    return false;
  }));
  clock_.Advance(1200);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Calls(), 2u);

  // A second ack is refused; the timeline holds pages, deliveries and the
  // ack; the audit log names alice.
  EXPECT_EQ(service_->Acknowledge(id, Identity{"bob", Role::kOperator}, "").status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<Json> timeline = service_->Timeline(id);
  auto has = [&](const std::string& type) {
    for (const Json& e : timeline)
      if (e.value("type", "") == type) return true;
    return false;
  };
  EXPECT_TRUE(has("page_queued"));
  EXPECT_TRUE(has("delivery"));
  EXPECT_TRUE(has("acknowledged"));
  EXPECT_TRUE(has("comment"));
  Json audit = service_->Audit(10)["entries"];
  ASSERT_GE(audit.size(), 2u);
  EXPECT_EQ(audit[0]["who"], "bob");
  EXPECT_EQ(audit[1]["who"], "alice");
  EXPECT_EQ(audit[1]["result"], "ok");
}

// A config reload mid-incident: the re-page goes to whoever the new
// schedule names, on the receiver the new route names, and /oncall says
// so; the old receiver hears nothing more.
TEST_F(EscalationServiceTest, AReloadReroutesTheNextPagesOfAnOpenIncident) {
  const std::string id = Open(Severity::kP0, "ecc_double_bit", "llm", "n1", {});
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("slack.test").size() == 1; }));
  ASSERT_TRUE(Eventually([&] { return Calls() == 1; }));

  EscalationConfig escalation = TestEscalation();
  escalation.schedules[0].layers[0].users = {"bob"};
  NotificationOptions notifications = TestNotifications();
  notifications.receivers.push_back({"chat", "slack", {{"url", "http://chat.test/hook"}}, 0});
  notifications.channels["im"] = {{"chat"}, false};
  service_->Reconfigure(escalation, notifications);
  EXPECT_EQ(service_->OnCall()["schedules"][0]["user"], "bob");

  clock_.Advance(301);
  ASSERT_TRUE(Eventually([&] { return Calls() == 2; })) << Json(service_->Timeline(id)).dump(1);
  EXPECT_TRUE(absl::StrContains(transport_.Matching("Calls.json")[1].body, "To=%2B15550002"))
      << "the re-page calls bob";
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("chat.test").size() == 1; }));
  EXPECT_EQ(transport_.Matching("slack.test").size(), 1u);
}

// In a pair (docs/SCALING.md) the standby escalates alike but holds its
// pages; when it comes to lead it sends those the old leader did not
// deliver, under keys both members derive alike. The leader marks what it
// delivered; a standby starts no action until it leads.
TEST_F(EscalationServiceTest, AStandbyHoldsPagesAndSendsWhatTheLeaderDidNotDeliver) {
  service_->Stop();
  pair_ = true;
  leading_ = false;
  StartService();
  Verify("llm", "4242", {"n1"});
  const std::string id =
      Open(Severity::kP0, "ecc_double_bit", "llm", "n1", {Response::kPauseJob});
  auto held = [&] {
    std::vector<std::string> keys;
    for (const Json& e : service_->Timeline(id))
      if (e.value("type", "") == "page_held") keys.push_back(e.value("key", ""));
    return keys;
  };
  ASSERT_TRUE(Eventually([&] { return held().size() == 3; })) << Json(service_->Timeline(id)).dump(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(transport_.Matching("").size(), 0u) << "a standby sends nothing";
  const std::string prefix = absl::StrCat("llm:n1:-:", static_cast<int64_t>(clock_.Now() * 1000), "/1/");
  std::string phone_key;
  for (const std::string& key : held()) {
    EXPECT_TRUE(absl::StartsWith(key, prefix)) << key;
    if (absl::StrContains(key, "/phone/")) phone_key = key;
  }
  ASSERT_FALSE(phone_key.empty());
  {
    // The old leader had called before it died.
    std::lock_guard<std::mutex> lock(marks_mu_);
    marks_.insert(phone_key + "@voice");
  }
  leading_ = true;
  service_->OnLeadershipChange(true);
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("Messages.json").size() == 1; }));
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("slack.test").size() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Calls(), 0u) << "the call the old leader made is not made again";
  // The pause the old leader had not marked is started now (and only now:
  // nothing reached the actuator while this member was the standby).
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("actuator").size() == 1; }));
  // As leader it marks what it delivers.
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(marks_mu_);
    return marks_.size() == 3;
  }));
}

// A standby that comes to lead starts the automatic actions of open
// incidents that the old leader did not send (and only those), and marks
// what it sends for the next one.
TEST_F(EscalationServiceTest, ANewLeaderStartsTheActionsTheOldOneDidNot) {
  service_->Stop();
  pair_ = true;
  leading_ = false;
  StartService();
  AddJobNodes("llm", 10);
  Verify("llm", "4242", {"n1"});
  const std::string open_id = Open(Severity::kP0, "ecc_double_bit", "llm", "n1",
                                   {Response::kPauseJob, Response::kCordonNode});
  const double opened = clock_.Now();
  clock_.Advance(1);
  const std::string resolved_id =
      Open(Severity::kP0, "xid_fatal", "llm", "n2", {Response::kCordonNode});
  ASSERT_TRUE(service_->Resolve(resolved_id, Identity{"alice", Role::kOperator}, "fixed").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(transport_.Matching("/actuator").empty()) << "a standby starts no action";
  {
    // The old leader had cordoned n1 before it died.
    std::lock_guard<std::mutex> lock(marks_mu_);
    action_marks_.insert(absl::StrCat("llm:n1:-:", static_cast<int64_t>(opened * 1000),
                                      "/cordon_node/n1"));
  }
  leading_ = true;
  service_->OnLeadershipChange(true);
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("/actuator").size() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::vector<OutboundRequest> sent = transport_.Matching("/actuator");
  ASSERT_EQ(sent.size(), 1u) << "neither the marked cordon nor the resolved incident's";
  const Json body = Json::parse(sent[0].body);
  EXPECT_EQ(body["action"], "pause_job");
  EXPECT_EQ(body["incident_id"], open_id);
  // In a pair, action ids name the shard (any server routes an approval).
  EXPECT_TRUE(absl::StartsWith(body["id"].get<std::string>(), "act-s0~a-")) << body["id"];
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(marks_mu_);
    return action_marks_.contains(absl::StrCat(
        "llm:n1:-:", static_cast<int64_t>(opened * 1000), "/pause_job/n1"));
  })) << "the new leader marks what it sent";
  // Leading on (more calls as the map changes) starts nothing again.
  service_->OnLeadershipChange(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(transport_.Matching("/actuator").size(), 1u);
}

// An acknowledgement made on one member of a pair stops the re-pages of the
// other; this member's own operations go to the pair, and come back
// without being applied twice.
TEST_F(EscalationServiceTest, AnAckOnTheOtherMemberStopsOurRepages) {
  service_->Stop();
  pair_ = true;
  leading_ = true;
  StartService();
  const std::string id = Open(Severity::kP0, "ecc_double_bit", "llm", "n1", {});
  ASSERT_TRUE(Eventually([&] { return Calls() == 1; }));
  const std::string key = absl::StrCat("llm:n1:-:", static_cast<int64_t>(clock_.Now() * 1000));
  auto lifecycle = [&] {
    Json incident = {{"id", id}};
    service_->Decorate(&incident);
    return incident.value("lifecycle", "");
  };
  // Unknown incidents and malformed operations are skipped.
  service_->ApplySharedOperations({{"other:n9:-:1", R"({"verb": "acknowledge", "ts": 1})"},
                                   {key, "not json"},
                                   {key, R"({"verb": "explode", "ts": 1})"}});
  EXPECT_EQ(lifecycle(), "firing");
  // Bob acknowledged on member b.
  service_->ApplySharedOperations(
      {{key, Json{{"verb", "acknowledge"}, {"who", "bob"}, {"comment", "mine"},
                  {"ts", clock_.Now()}, {"from", "s0/b"}}.dump()}});
  EXPECT_EQ(lifecycle(), "acknowledged");
  clock_.Advance(1200);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Calls(), 1u) << "no re-page after the pair's ack";
  Json audit = service_->Audit(10)["entries"];
  ASSERT_FALSE(audit.empty());
  EXPECT_EQ(audit[0]["who"], "bob (via s0/b)");
  {
    std::lock_guard<std::mutex> lock(marks_mu_);
    EXPECT_TRUE(shared_.empty()) << "an operation from the pair is not shared back";
  }
  // Alice unacknowledges here: shared, and not applied again on read-back.
  ASSERT_TRUE(service_->Unacknowledge(id, Identity{"alice", Role::kOperator}).ok());
  std::vector<std::pair<std::string, std::string>> shared;
  {
    std::lock_guard<std::mutex> lock(marks_mu_);
    shared = shared_;
  }
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].first, key);
  EXPECT_EQ(Json::parse(shared[0].second)["verb"], "unacknowledge");
  const size_t audits = service_->Audit(100)["entries"].size();
  service_->ApplySharedOperations(shared);
  EXPECT_EQ(service_->Audit(100)["entries"].size(), audits);
}

TEST_F(EscalationServiceTest, P0ActionsGoToTheActuatorSignedAndRecordTheAnswer) {
  AddJobNodes("llm", 8);
  Verify("llm", "4242", {"n0", "n1"});
  const std::string id = Open(Severity::kP0, "ecc_double_bit", "llm", "n1",
                              {Response::kCheckpointThenPauseJob, Response::kCordonNode});
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("/actuator").size() == 2; }));
  const double now = clock_.Now();
  std::vector<std::string> actions;
  for (const OutboundRequest& r : transport_.Matching("/actuator")) {
    std::string ts, sig;
    for (const auto& [name, value] : r.headers) {
      if (name == "X-Vigil-Timestamp") ts = value;
      if (name == "X-Vigil-Signature") sig = value;
    }
    EXPECT_TRUE(VerifyWebhook(kSecret, ts, sig, r.body, now, 300).ok()) << r.body;
    Json body = Json::parse(r.body);
    EXPECT_EQ(body["incident_id"], id);
    if (body["action"] == "cordon_node") {
      EXPECT_EQ(body["job"], "llm");
    } else {
      // The job as the node's agent verified it, on that node: the
      // actuator checks with the scheduler that it runs there.
      EXPECT_EQ(body["job"], "4242");
      EXPECT_EQ(body["node"], "n1");
    }
    actions.push_back(body["action"]);
  }
  EXPECT_EQ(actions, (std::vector<std::string>{"checkpoint_then_pause_job", "cordon_node"}));
  ASSERT_TRUE(Eventually([&] {
    Json list = service_->ListActions(id)["actions"];
    if (list.size() != 2) return false;
    for (const Json& a : list)
      if (a["state"] != "done") return false;
    return true;
  }));
  Json cordon = service_->ListActions(id)["actions"][0];
  EXPECT_EQ(cordon["node"], "n1");
  EXPECT_EQ(cordon["detail"], "ran cordon_node");
}

// A node named only by remote-written labels: even a P0 with a verified
// job waits for a human before anything is done to it.
TEST_F(EscalationServiceTest, ActionsOnAClaimedNodeWaitForApproval) {
  AddJobNodes("llm", 8);
  Verify("llm", "4242", {"n0", "n1"});
  {
    std::lock_guard<std::mutex> lock(verified_mu_);
    claimed_.insert("n1");
  }
  const std::string id = Open(Severity::kP0, "ecc_double_bit", "llm", "n1",
                              {Response::kCheckpointThenPauseJob, Response::kCordonNode});
  ASSERT_TRUE(Eventually([&] { return service_->ListActions(id)["actions"].size() == 2; }));
  // Kept: a range-for over a member of the temporary would dangle.
  const Json actions = service_->ListActions(id);
  for (const Json& a : actions["actions"]) {
    EXPECT_EQ(a["state"], "pending_approval") << a.dump();
    EXPECT_NE(a.value("decision", "").find("remote-written"), std::string::npos) << a.dump();
  }
  EXPECT_TRUE(transport_.Matching("/actuator").empty());
}

// Issue 13, hole 9: the outboxes store what to say and to whom, never the
// receivers' or the actuator's credentials; requests are rendered from the
// configuration at send time. Pages carry their incident's priority.
TEST_F(EscalationServiceTest, OutboxesStoreNoCredentials) {
  AddJobNodes("llm", 8);
  Verify("llm", "4242", {"n0", "n1"});
  Open(Severity::kP0, "ecc_double_bit", "llm", "n1",
       {Response::kCheckpointThenPauseJob});
  Open(Severity::kP2, "thermal_throttle", "llm", "n2", {});
  ASSERT_TRUE(Eventually([&] {
    return Calls() == 1 && transport_.Matching("Messages.json").size() == 1 &&
           transport_.Matching("slack.test").size() == 1 &&
           transport_.Matching("mail.test").size() == 1 &&
           transport_.Matching("/actuator").size() == 1;
  }));
  // The receivers got their credentials...
  EXPECT_EQ(transport_.Matching("Calls.json")[0].password, kTwilioToken);
  EXPECT_EQ(transport_.Matching("mail.test")[0].password, kSmtpPassword);
  EXPECT_TRUE(absl::StrContains(transport_.Matching("slack.test")[0].url, kSlackPath));
  // ...the store did not.
  std::set<int> priorities;
  for (const char* stream : {"outbox", "outbox/actions"}) {
    const std::vector<Event> events = store_->ListEvents(
        stream, -std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::infinity(), 1000);
    EXPECT_FALSE(events.empty()) << stream;
    for (const Event& e : events) {
      for (const char* secret : {kTwilioToken, kSmtpPassword, kSlackPath, kSecret})
        EXPECT_FALSE(absl::StrContains(e.payload, secret)) << stream << ": " << e.payload;
      Json j = Json::parse(e.payload);
      if (j["op"] == "enqueue") priorities.insert(j["item"]["priority"].get<int>());
    }
  }
  EXPECT_EQ(priorities, (std::set<int>{0, 2}));
}

// An actuator answer is external input: fields of the wrong type (a number
// for "status", an object for "detail") are ignored, never thrown on in the
// delivery thread (which would terminate the server).
TEST_F(EscalationServiceTest, MalformedActuatorAnswersAreRecordedNotThrownOn) {
  transport_.SetActuatorAnswer(R"({"status": 5, "detail": {"x": 1}, "id": []})");
  AddJobNodes("llm", 8);
  const std::string id = Open(Severity::kP0, "ecc_double_bit", "llm", "n1",
                              {Response::kCordonNode});
  ASSERT_TRUE(Eventually([&] {
    Json list = service_->ListActions(id)["actions"];
    return list.size() == 1 && list[0]["state"] == "done";
  })) << service_->ListActions(id).dump();
  const Json action = service_->ListActions(id)["actions"][0];
  EXPECT_TRUE(action["detail"].is_string()) << action.dump();
  EXPECT_EQ(action["result"]["status"], 5);
  // Viewers get neither the actuator's answer nor receivers' bodies.
  const Json for_viewer =
      EscalationService::WithoutRawAnswers(service_->ListActions(id));
  EXPECT_FALSE(for_viewer["actions"][0].contains("result"));
  EXPECT_TRUE(for_viewer["actions"][0]["detail"].is_string());
  const Json deliveries = service_->ListDeliveries(id, 100);
  ASSERT_FALSE(deliveries["deliveries"].empty());
  EXPECT_TRUE(deliveries["deliveries"][0].contains("last_response"));
  EXPECT_FALSE(EscalationService::WithoutRawAnswers(deliveries)["deliveries"][0]
                   .contains("last_response"));
}

// A job no node verified with the scheduler (its ranks only claimed it,
// e.g. a local user's process naming another user's job) is never paused
// automatically, however severe the incident; an operator may approve.
TEST_F(EscalationServiceTest, UnverifiedJobsAreNeverPausedAutomatically) {
  AddJobNodes("llm", 8);
  const std::string id = Open(Severity::kP0, "nan_loss", "llm", "n1",
                              {Response::kCheckpointThenPauseJob});
  Json action = service_->ListActions(id)["actions"][0];
  EXPECT_EQ(action["state"], "pending_approval") << action.dump();
  EXPECT_THAT(action["decision"].get<std::string>(),
              ::testing::HasSubstr("verified it with the scheduler"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(transport_.Matching("/actuator").empty());
  absl::StatusOr<Json> approved = service_->ApproveAction(
      action["id"].get<std::string>(), Identity{"carol", Role::kOperator});
  ASSERT_TRUE(approved.ok()) << approved.status();
  EXPECT_EQ((*approved)["state"], "sent");
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("/actuator").size() == 1; }));
  Json body = Json::parse(transport_.Matching("/actuator")[0].body);
  EXPECT_EQ(body["job"], "llm");
  EXPECT_EQ(body["requested_by"], "carol");
}

TEST_F(EscalationServiceTest, P1ActionsWaitForApproval) {
  AddJobNodes("llm", 8);
  const std::string id =
      Open(Severity::kP1, "nic_link_flap", "llm", "n2", {Response::kCordonNode});
  Json action = service_->ListActions(id)["actions"][0];
  EXPECT_EQ(action["state"], "pending_approval");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(transport_.Matching("/actuator").empty());
  absl::StatusOr<Json> approved = service_->ApproveAction(
      action["id"].get<std::string>(), Identity{"carol", Role::kOperator});
  ASSERT_TRUE(approved.ok()) << approved.status();
  EXPECT_EQ((*approved)["state"], "sent");
  EXPECT_EQ((*approved)["approved_by"], "carol");
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("/actuator").size() == 1; }));
  EXPECT_EQ(service_->ApproveAction(action["id"].get<std::string>(),
                                    Identity{"carol", Role::kOperator})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(EscalationServiceTest, FaultStormOnThirtyPercentOfNodesTripsTheBreaker) {
  AddJobNodes("big", 10);
  // Three of ten nodes (30 %) fail at once; at most 20 % may be cordoned.
  for (int i = 0; i < 3; ++i)
    Open(Severity::kP0, "xid_fatal", "big", absl::StrCat("n", i), {Response::kCordonNode});
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("/actuator").size() == 2; }));
  Json actions = service_->ListActions("")["actions"];
  int halted = 0;
  for (const Json& a : actions) halted += a["state"] == "halted";
  EXPECT_EQ(halted, 1);
  EXPECT_TRUE(service_->Remediation()["tripped"].get<bool>());
  // A human is paged about it.
  IncidentFilter filter;
  ASSERT_TRUE(Eventually([&] {
    for (const Json& i : detection_->ListIncidents(filter))
      if (i["kind"] == "remediation_halted" && i["severity"] == "P1") return true;
    return false;
  }));
  ASSERT_TRUE(Eventually([&] {
    for (const OutboundRequest& r : transport_.Matching("slack.test"))
      if (absl::StrContains(r.body, "remediation_halted")) return true;
    return false;
  }));
  // Later cordons stay halted until an admin resets the breaker.
  Open(Severity::kP0, "xid_fatal", "other", "m1", {Response::kCordonNode});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(transport_.Matching("/actuator").size(), 2u);
  service_->ResetRemediation(Identity{"root", Role::kAdmin});
  EXPECT_FALSE(service_->Remediation()["tripped"].get<bool>());
  bool resolved = false;
  for (const Json& i : detection_->ListIncidents(filter))
    if (i["kind"] == "remediation_halted") resolved = i["state"] == "resolved";
  EXPECT_TRUE(resolved);
}

// A tripped breaker outlives a restart, and so does its incident: the
// reset after the restart resolves it (detection's new process hands it
// back to the interlocks instead of leaving it firing forever).
TEST_F(EscalationServiceTest, TheHaltIncidentResolvesWhenTheBreakerIsResetAfterARestart) {
  AddJobNodes("big", 10);
  for (int i = 0; i < 3; ++i)
    Open(Severity::kP0, "xid_fatal", "big", absl::StrCat("n", i), {Response::kCordonNode});
  IncidentFilter filter;
  std::string halt;
  ASSERT_TRUE(Eventually([&] {
    for (const Json& i : detection_->ListIncidents(filter))
      if (i["kind"] == "remediation_halted") halt = i["id"].get<std::string>();
    return !halt.empty();
  }));
  service_->Stop();
  service_.reset();
  detection_->Stop();
  detection_ = NewDetection();
  StartService();
  ASSERT_TRUE(detection_->Start().ok());
  service_->ClaimHaltIncident();
  EXPECT_TRUE(service_->Remediation()["tripped"].get<bool>());
  service_->ResetRemediation(Identity{"root", Role::kAdmin});
  Json incident = detection_->GetIncident(halt).value_or(Json());
  EXPECT_EQ(incident["state"], "resolved") << incident.dump(1);
}

TEST_F(EscalationServiceTest, AcknowledgementSurvivesARestart) {
  const std::string id = Open(Severity::kP0, "loss_nan", "llm", "", {});
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("slack.test").size() == 1; }));
  ASSERT_TRUE(service_->Acknowledge(id, Identity{"alice", Role::kOperator}, "").ok());
  service_->Stop();
  service_.reset();
  StartService();
  Json incident = {{"id", id}};
  service_->Decorate(&incident);
  EXPECT_EQ(incident["lifecycle"], "acknowledged");
  const size_t calls = Calls();
  clock_.Advance(1800);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Calls(), calls);
}

// Actions are persisted as they are decided, the id counter only with the
// next state snapshot: after a crash in between, a new action must not
// reuse an id (the actuator would answer it with the old action's result).
TEST_F(EscalationServiceTest, ActionIdsAreNotReusedAfterACrash) {
  const auto [before, after] = ActionIdsAcrossACrash();
  EXPECT_EQ(before, "act-000001");
  EXPECT_EQ(after, "act-000002");
}

// The same with the shard and the member in the ids (cluster mode).
TEST_F(EscalationServiceTest, ActionIdsNamingTheShardAreNotReusedAfterACrash) {
  service_->Stop();
  pair_ = true;
  StartService();
  const auto [before, after] = ActionIdsAcrossACrash();
  EXPECT_EQ(before, "act-s0~a-000001");
  EXPECT_EQ(after, "act-s0~a-000002");
}

// The leader of a pair tells the other member which automatic actions
// wait for an approval, under which id, and who approved them.
TEST_F(EscalationServiceTest, TheLeaderSharesWhatWaitsForApprovalAndWhoApproved) {
  service_->Stop();
  pair_ = true;
  leading_ = true;
  StartService();
  AddJobNodes("llm", 8);
  const std::string key =
      absl::StrCat("llm:n2:-:", static_cast<int64_t>(clock_.Now() * 1000), "/cordon_node/n2");
  const std::string id =
      Open(Severity::kP1, "nic_link_flap", "llm", "n2", {Response::kCordonNode});
  const std::string action_id = service_->ListActions(id)["actions"][0]["id"];
  EXPECT_EQ(action_id, "act-s0~a-000001");
  auto shared = [&] {
    std::lock_guard<std::mutex> lock(marks_mu_);
    return shared_;
  };
  ASSERT_TRUE(Eventually([&] { return shared().size() == 1; }));
  EXPECT_EQ(shared()[0].first, key);
  Json op = Json::parse(shared()[0].second);
  EXPECT_EQ(op["verb"], "pending_approval");
  EXPECT_EQ(op["action_id"], action_id);
  EXPECT_EQ(op["from"], "s0/a");
  ASSERT_TRUE(service_->ApproveAction(action_id, Identity{"carol", Role::kOperator}).ok());
  ASSERT_TRUE(Eventually([&] { return shared().size() == 2; }));
  op = Json::parse(shared()[1].second);
  EXPECT_EQ(op["verb"], "approve");
  EXPECT_EQ(op["who"], "carol");
  // Its own operations read back from etcd change nothing.
  const size_t audits = service_->Audit(100)["entries"].size();
  service_->ApplySharedOperations(shared());
  EXPECT_EQ(service_->Audit(100)["entries"].size(), audits);
}

// A member that comes to lead asks for the approval the old leader was
// waiting for under the same id (an operator's link still works), and runs
// what a human approved there, before the old leader could send it,
// without asking again.
TEST_F(EscalationServiceTest, ApprovalsGivenOnTheOldLeaderHoldOnTheNewOne) {
  service_->Stop();
  pair_ = true;
  leading_ = false;
  StartService();
  AddJobNodes("llm", 20);  // two cordons stay under max_job_node_percent
  const int64_t opened_ms = static_cast<int64_t>(clock_.Now() * 1000);
  const std::string approved_incident =
      Open(Severity::kP1, "nic_link_flap", "llm", "n2", {Response::kCordonNode});
  const std::string waiting_incident =
      Open(Severity::kP1, "nic_link_flap", "llm", "n3", {Response::kCordonNode});
  const double ts = clock_.Now();
  auto op = [&](const char* verb, const char* action_id, const char* who, double at) {
    return Json{{"verb", verb}, {"action_id", action_id}, {"who", who},
                {"ts", at}, {"from", "s0/b"}}.dump();
  };
  const std::string n2 = absl::StrCat("llm:n2:-:", opened_ms, "/cordon_node/n2");
  const std::string n3 = absl::StrCat("llm:n3:-:", opened_ms, "/cordon_node/n3");
  service_->ApplySharedOperations({{n2, op("pending_approval", "act-s0~b-000004", "", ts)},
                                   {n3, op("pending_approval", "act-s0~b-000005", "", ts)}});
  service_->ApplySharedOperations({{n2, op("approve", "act-s0~b-000004", "bob", ts + 1)},
                                   // An older operation does not undo a newer one.
                                   {n2, op("pending_approval", "act-s0~b-000004", "", ts)}});
  // What is not an action id of ours, or not an operation, changes nothing.
  service_->ApplySharedOperations(
      {{n3, op("approve", "../../actions/x", "mallory", ts + 2)},
       {n3, op("approve", "act-s0~b-000005", "mallory", ts + 3).replace(0, 1, "[")},
       {n3, Json{{"verb", "approve"}, {"action_id", "act-s0~b-000005"}, {"who", 7},
                 {"ts", "soon"}, {"from", "s0/b"}}.dump()}});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(transport_.Matching("/actuator").empty()) << "a standby starts no action";

  leading_ = true;
  service_->OnLeadershipChange(true);
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("/actuator").size() == 1; }));
  const Json body = Json::parse(transport_.Matching("/actuator")[0].body);
  EXPECT_EQ(body["id"], "act-s0~b-000004");
  EXPECT_EQ(body["incident_id"], approved_incident);
  EXPECT_EQ(body["requested_by"], "bob (via s0/b)");
  const Json waiting = service_->ListActions(waiting_incident)["actions"][0];
  EXPECT_EQ(waiting["id"], "act-s0~b-000005");
  EXPECT_EQ(waiting["state"], "pending_approval");
  absl::StatusOr<Json> approved =
      service_->ApproveAction("act-s0~b-000005", Identity{"carol", Role::kOperator});
  ASSERT_TRUE(approved.ok()) << approved.status();
  EXPECT_EQ((*approved)["state"], "sent");
  ASSERT_TRUE(Eventually([&] { return transport_.Matching("/actuator").size() == 2; }));
  // New actions of this member carry its own name: no id of the other's.
  const std::string later = Open(Severity::kP1, "nic_link_flap", "llm", "n4",
                                 {Response::kCordonNode});
  EXPECT_TRUE(absl::StartsWith(
      service_->ListActions(later)["actions"][0]["id"].get<std::string>(), "act-s0~a-"));
}

TEST_F(EscalationServiceTest, SilencedIncidentsAreNotPaged) {
  absl::StatusOr<Json> silence = service_->AddSilence(
      Json{{"matchers", {{{"name", "node"}, {"value", "n9*"}}}},
           {"duration_minutes", 60},
           {"comment", "maintenance"}},
      Identity{"alice", Role::kOperator});
  ASSERT_TRUE(silence.ok()) << silence.status();
  EXPECT_EQ((*silence)["author"], "alice");
  const std::string id = Open(Severity::kP0, "ecc_double_bit", "llm", "n90", {});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Calls(), 0u);
  Json incident = {{"id", id}};
  service_->Decorate(&incident);
  EXPECT_EQ(incident["lifecycle"], "silenced");
  EXPECT_EQ(service_->AddSilence(Json{{"matchers", Json::array()}},
                                 Identity{"alice", Role::kOperator})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Expiring the silence pages what still fires.
  ASSERT_TRUE(service_->ExpireSilence((*silence)["id"].get<std::string>(),
                                      Identity{"alice", Role::kOperator})
                  .ok());
  ASSERT_TRUE(Eventually([&] { return Calls() == 1; }));
}

TEST_F(EscalationServiceTest, TwilioKeypressAcknowledgesWithAValidSignatureOnly) {
  const std::string id = Open(Severity::kP0, "ecc_double_bit", "llm", "n1", {});
  const std::string query = absl::StrCat("incident=", id, "&key=", id, "%2F1%2Fphone%2Falice");
  std::multimap<std::string, std::string> form = {{"CallSid", "CA1"}, {"Digits", "1"}};
  std::string signed_text =
      absl::StrCat("http://vigil.test/api/v1/callbacks/twilio/voice?", query);
  for (const auto& [k, v] : form) absl::StrAppend(&signed_text, k, v);
  const std::string good = Base64Encode(HmacSha1(kTwilioToken, signed_text));
  EXPECT_EQ(service_->TwilioCallback(query, form, "bad").status().code(),
            absl::StatusCode::kUnauthenticated);
  absl::StatusOr<std::string> twiml = service_->TwilioCallback(query, form, good);
  ASSERT_TRUE(twiml.ok()) << twiml.status();
  EXPECT_TRUE(absl::StrContains(*twiml, "acknowledged")) << *twiml;
  Json incident = {{"id", id}};
  service_->Decorate(&incident);
  EXPECT_EQ(incident["lifecycle"], "acknowledged");
  EXPECT_EQ(incident["escalation"]["acknowledged_by"], "phone:alice");

  // Twilio's signature has no timestamp: a captured callback replayed
  // later (here after the incident was unacknowledged) must not act again.
  ASSERT_TRUE(service_->Unacknowledge(id, Identity{"bob", Role::kOperator}).ok());
  absl::StatusOr<std::string> replayed = service_->TwilioCallback(query, form, good);
  EXPECT_EQ(replayed.status().code(), absl::StatusCode::kAlreadyExists)
      << replayed.status();
  incident = {{"id", id}};
  service_->Decorate(&incident);
  EXPECT_NE(incident["lifecycle"], "acknowledged");
}

}  // namespace
}  // namespace vigil
