// Safety state shared by the servers of a cluster (docs/SCALING.md "Safety
// state"): two EscalationServices of two shards, each with its own
// ClusterMember, on a real etcd started by the test (skipped without
// etcd). Together they never exceed the circuit breaker's cordon limit;
// the breaker opens and is reset for both; a silence made on one holds on
// the other.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/cluster/cluster_member.h"
#include "server/cluster/etcd_client.h"
#include "server/detection/detection_service.h"
#include "server/escalation/cluster_link.h"
#include "server/escalation/escalation_service.h"
#include "tests/server/cluster/etcd_process.h"

namespace vigil {
namespace {

using Json = nlohmann::json;

// Records every request; the actuator answers that it ran the action.
class RecordingTransport : public Transport {
 public:
  TransportResult Send(const OutboundRequest& request, double) override {
    std::lock_guard<std::mutex> l(mu_);
    requests_.push_back(request);
    if (absl::StrContains(request.url, "/actuator")) {
      Json body = Json::parse(request.body, nullptr, false);
      return {200, Json{{"id", body.value("id", "")}, {"status", "done"}}.dump(),
              std::nullopt, ""};
    }
    return {200, "ok", std::nullopt, ""};
  }
  // Requests whose URL contains `url_part` and whose body `body_part`.
  size_t Count(const std::string& url_part, const std::string& body_part = "") {
    std::lock_guard<std::mutex> l(mu_);
    size_t n = 0;
    for (const OutboundRequest& r : requests_)
      n += absl::StrContains(r.url, url_part) && absl::StrContains(r.body, body_part);
    return n;
  }

 private:
  std::mutex mu_;
  std::vector<OutboundRequest> requests_;
};

bool Eventually(const std::function<bool()>& done, int seconds = 10) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// One server of the fleet: store, detection, escalation, cluster member.
struct Server {
  std::unique_ptr<SeriesStore> store;
  std::unique_ptr<DetectionService> detection;
  RecordingTransport transport;
  std::unique_ptr<cluster::ClusterMember> member;
  std::unique_ptr<EscalationService> escalation;

  ~Server() {
    if (member) member->Stop();
    if (detection) detection->Stop();
    if (escalation) escalation->Stop();
  }

  std::string Open(const std::string& job, const std::string& node, std::vector<Response> responses) {
    IncidentUpdate u;
    u.type = UpdateType::kOpened;
    u.ts = RealClock()->Now();
    u.incident.severity = Severity::kP0;
    u.incident.kind = "xid_fatal";
    u.incident.job = job;
    u.incident.node = node;
    u.incident.ts = u.ts;
    u.incident.summary = "xid_fatal on " + node;
    u.incident.responses = std::move(responses);
    absl::StatusOr<std::string> id = detection->PublishExternal(u);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }
  bool Tripped() { return escalation->Remediation()["tripped"].get<bool>(); }
};

class FleetSafetyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cluster::EtcdProcess::Available()) GTEST_SKIP() << "etcd is not installed";
    etcd_ = std::make_unique<cluster::EtcdProcess>();
    ASSERT_FALSE(etcd_->url().empty()) << "etcd did not start";
    for (const char* shard : {"s0", "s1"}) servers_.push_back(Start(shard));
    for (auto& s : servers_)
      ASSERT_TRUE(Eventually([&] { return s->member->IsShardLeader(); })) << "no shard leader";
  }

  std::unique_ptr<Server> Start(const std::string& shard) {
    auto s = std::make_unique<Server>();
    StoreOptions store_options;
    store_options.clock = RealClock();
    s->store = NewMemoryStore(store_options);
    DetectionOptions d;
    d.store = s->store.get();
    d.clock = RealClock();
    d.live = false;
    s->detection = std::make_unique<DetectionService>(d);
    cluster::ClusterOptions c;
    c.etcd_endpoints = {etcd_->url()};
    c.prefix = "/fleet-test";
    c.shard = shard;
    c.replica = "a";
    c.advertise_grpc = shard + ":50051";
    c.advertise_http = "http://" + shard + ":8080";
    c.lease_seconds = 3;
    c.poll_seconds = 0.2;
    absl::StatusOr<std::unique_ptr<cluster::ClusterMember>> member =
        cluster::ClusterMember::Create(c);
    EXPECT_TRUE(member.ok()) << member.status();
    s->member = std::move(*member);

    EscalationServiceOptions o;
    o.store = s->store.get();
    o.clock = RealClock();
    o.detection = s->detection.get();
    o.transport = &s->transport;
    absl::StatusOr<EscalationConfig> config = ParseEscalationConfig(Json::parse(R"({
      "users": [{"name": "alice", "im": "U1"}],
      "schedules": [{"name": "primary", "layers": [{"name": "l", "rotation": "weekly",
        "start": 1700000000, "users": ["alice"]}]}],
      "interlocks": {"max_cordons": 3, "max_pauses": 5, "approval_severities": []}
    })"));
    EXPECT_TRUE(config.ok()) << config.status();
    o.escalation = *config;
    o.notifications.public_url = "http://vigil.test";
    o.notifications.receivers = {{"slack", "slack", {{"url", "http://slack.test/hook"}}, 0}};
    o.notifications.channels = {{"im", {{"slack"}, false}}};
    o.actuator.url = "http://127.0.0.1:1/actuator";
    o.actuator.secret = "secret";
    o.pair = PairGateOf(s->member.get());
    o.fleet = FleetSafetyOf(s->member.get());
    s->escalation = std::make_unique<EscalationService>(o);
    s->detection->set_listener(s->escalation.get());
    EXPECT_TRUE(s->escalation->Start().ok());
    EXPECT_TRUE(s->detection->Start().ok());
    ConnectToMember(s->member.get(), s->escalation.get());
    s->member->Start();
    return s;
  }

  size_t Cordons() {
    size_t n = 0;
    for (auto& s : servers_) n += s->transport.Count("/actuator", "cordon_node");
    return n;
  }

  // The TTL of the lease of fleet entry `name`; 0 without a lease, -1
  // when absent or etcd cannot say.
  int64_t EntryTtl(const std::string& name) {
    absl::StatusOr<std::unique_ptr<cluster::EtcdClient>> etcd =
        cluster::EtcdClient::Create({etcd_->url()});
    if (!etcd.ok()) return -1;
    absl::StatusOr<std::optional<cluster::KeyValue>> kv =
        (*etcd)->Get("/fleet-test/safety/fleet/" + name);
    if (!kv.ok() || !kv->has_value()) return -1;
    if ((*kv)->lease == 0) return 0;
    absl::StatusOr<int64_t> ttl = (*etcd)->KeepAlive((*kv)->lease);
    return ttl.ok() ? *ttl : -1;
  }

  std::unique_ptr<cluster::EtcdProcess> etcd_;
  std::vector<std::unique_ptr<Server>> servers_;
};

// A fault storm on both shards at once: each server's own breaker would
// allow 3 cordons (6 together); the fleet's allows 3 in all, and then both
// halt. A reset on one server closes the breaker of both.
TEST_F(FleetSafetyTest, TwoShardsTogetherNeverExceedTheCordonLimit) {
  Server& a = *servers_[0];
  Server& b = *servers_[1];
  for (int i = 0; i < 3; ++i) {
    a.Open(absl::StrCat("ja", i), absl::StrCat("a", i), {Response::kCordonNode});
    b.Open(absl::StrCat("jb", i), absl::StrCat("b", i), {Response::kCordonNode});
  }
  ASSERT_TRUE(Eventually([&] { return a.Tripped() && b.Tripped(); }))
      << a.escalation->ListActions("").dump(1) << b.escalation->ListActions("").dump(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(Cordons(), 3u) << a.escalation->ListActions("").dump(1)
                           << b.escalation->ListActions("").dump(1);
  int halted = 0;
  for (auto& s : servers_) {
    const Json actions = s->escalation->ListActions("")["actions"];
    for (const Json& action : actions) halted += action["state"] == "halted";
  }
  EXPECT_EQ(halted, 3);
  // Later cordons on either server stay halted.
  a.Open("jc", "c1", {Response::kCordonNode});
  b.Open("jd", "d1", {Response::kCordonNode});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(Cordons(), 3u);

  // An admin resets the breaker through b: a's closes too, and the fleet's
  // count starts again.
  b.escalation->ResetRemediation(Identity{"root", Role::kAdmin});
  EXPECT_FALSE(b.Tripped());
  ASSERT_TRUE(Eventually([&] { return !a.Tripped(); }));
  Json audit = a.escalation->Audit(10)["entries"];
  ASSERT_FALSE(audit.empty());
  EXPECT_EQ(audit[0]["action"], "reset_remediation");
  EXPECT_EQ(audit[0]["who"], "root (via s1/a)");
  a.Open("je", "e1", {Response::kCordonNode});
  ASSERT_TRUE(Eventually([&] { return Cordons() == 4; }));
}

// A silence made through one server holds on the other: an incident of
// the silenced job there pages nobody; expired on the first, it is gone on
// the second.
TEST_F(FleetSafetyTest, ASilenceMadeOnOneServerHoldsOnAnother) {
  Server& a = *servers_[0];
  Server& b = *servers_[1];
  absl::StatusOr<Json> silence = a.escalation->AddSilence(
      {{"matchers", {{{"name", "job"}, {"value", "maint"}}}},
       {"duration_minutes", 60},
       {"comment", "rack 7 maintenance"}},
      Identity{"alice", Role::kOperator});
  ASSERT_TRUE(silence.ok()) << silence.status();
  const std::string id = (*silence)["id"].get<std::string>();
  EXPECT_EQ(id, "sil-s0~a-000001");
  ASSERT_TRUE(Eventually([&] {
    const Json silences = b.escalation->ListSilences()["silences"];
    for (const Json& s : silences)
      if (s["id"] == id) return true;
    return false;
  }));
  Json listed = b.escalation->ListSilences()["silences"][0];
  EXPECT_EQ(listed["author"], "alice (via s0/a)");
  EXPECT_EQ(listed["comment"], "rack 7 maintenance");
  // etcd keeps the entry for the silence's hour and a day after it.
  EXPECT_NEAR(EntryTtl("silences/" + id), 3600 + 86400, 10);

  b.Open("maint", "m1", {});
  b.Open("prod", "p1", {});
  ASSERT_TRUE(Eventually([&] { return b.transport.Count("slack.test", "p1") > 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(b.transport.Count("slack.test", "m1"), 0u) << "the silenced job paged";

  ASSERT_TRUE(a.escalation->ExpireSilence(id, Identity{"alice", Role::kOperator}).ok());
  ASSERT_TRUE(Eventually([&] { return b.escalation->ListSilences()["silences"].empty(); }));
  // Ended: a day more, for servers that were away to learn it, then gone.
  EXPECT_NEAR(EntryTtl("silences/" + id), 86400, 10);
  // The silence ended: the incident it held now pages.
  ASSERT_TRUE(Eventually([&] { return b.transport.Count("slack.test", "m1") > 0; }));
}

}  // namespace
}  // namespace vigil
