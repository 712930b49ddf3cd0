// ClusterMember and EtcdClient against a real etcd on loopback.
#include "server/cluster/cluster_member.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/cluster/etcd_client.h"
#include "tests/server/cluster/etcd_process.h"

namespace vigil::cluster {
namespace {

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdProcess::Available()) GTEST_SKIP() << "etcd is not installed";
    etcd_ = std::make_unique<EtcdProcess>();
    ASSERT_FALSE(etcd_->url().empty()) << "etcd did not start";
    absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create({etcd_->url()});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  ClusterOptions Options(std::string shard, std::string replica) {
    ClusterOptions options;
    options.etcd_endpoints = {etcd_->url()};
    options.prefix = "/test";
    options.shard = shard;
    options.replica = replica;
    options.advertise_grpc = absl::StrCat(shard, replica, ":50051");
    options.advertise_http = absl::StrCat("http://", shard, replica, ":8080");
    options.lease_seconds = 3;
    options.poll_seconds = 0.2;
    return options;
  }

  std::unique_ptr<ClusterMember> StartMember(std::string shard, std::string replica) {
    absl::StatusOr<std::unique_ptr<ClusterMember>> member =
        ClusterMember::Create(Options(shard, replica));
    EXPECT_TRUE(member.ok()) << member.status();
    if (!member.ok()) return nullptr;
    (*member)->Start();
    return std::move(*member);
  }

  // Waits up to `seconds` for `condition`.
  static bool WaitFor(double seconds, const std::function<bool()>& condition) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (condition()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return condition();
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<EtcdClient> client_;
};

TEST_F(EtcdTest, KeysPrefixesAndConditionalWrites) {
  ASSERT_TRUE(client_->Put("/a/1", "one").ok());
  ASSERT_TRUE(client_->Put("/a/2", "two").ok());
  ASSERT_TRUE(client_->Put("/b", "other").ok());
  absl::StatusOr<std::vector<KeyValue>> a = client_->GetPrefix("/a/");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[1].key, "/a/2");
  EXPECT_EQ((*a)[1].value, "two");

  absl::StatusOr<bool> created = client_->CreateIfAbsent("/lead", "me", 0);
  ASSERT_TRUE(created.ok());
  EXPECT_TRUE(*created);
  created = client_->CreateIfAbsent("/lead", "you", 0);
  ASSERT_TRUE(created.ok());
  EXPECT_FALSE(*created);
  absl::StatusOr<bool> deleted = client_->DeleteIfValue("/lead", "you");
  ASSERT_TRUE(deleted.ok());
  EXPECT_FALSE(*deleted);
  deleted = client_->DeleteIfValue("/lead", "me");
  ASSERT_TRUE(deleted.ok());
  EXPECT_TRUE(*deleted);
  absl::StatusOr<std::optional<KeyValue>> gone = client_->Get("/lead");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
}

TEST_F(EtcdTest, KeysOfAnExpiredLeaseVanish) {
  absl::StatusOr<int64_t> lease = client_->GrantLease(1);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(client_->Put("/leased", "x", *lease).ok());
  absl::StatusOr<std::optional<KeyValue>> kv = client_->Get("/leased");
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_EQ((*kv)->lease, *lease);
  EXPECT_TRUE(client_->KeepAlive(*lease).ok());
  ASSERT_TRUE(WaitFor(5, [&] {
    absl::StatusOr<std::optional<KeyValue>> now = client_->Get("/leased");
    return now.ok() && !now->has_value();
  }));
  EXPECT_TRUE(absl::IsNotFound(client_->KeepAlive(*lease).status()));
  absl::Status revoked = client_->RevokeLease(*lease);
  EXPECT_TRUE(revoked.ok()) << revoked;  // unknown lease: fine
}

TEST_F(EtcdTest, ADeadEndpointIsSkippedAndNoneIsUnavailable) {
  const std::string dead = absl::StrCat("http://127.0.0.1:", FreePort());
  absl::StatusOr<std::unique_ptr<EtcdClient>> both = EtcdClient::Create({dead, etcd_->url()}, 0.5);
  ASSERT_TRUE(both.ok());
  EXPECT_TRUE((*both)->Put("/x", "y").ok());
  absl::StatusOr<std::unique_ptr<EtcdClient>> none = EtcdClient::Create({dead}, 0.5);
  ASSERT_TRUE(none.ok());
  absl::Status put = (*none)->Put("/x", "y");
  EXPECT_TRUE(absl::IsUnavailable(put)) << put;
  EXPECT_NE(put.message().find(dead), std::string::npos) << put;
  EXPECT_FALSE(EtcdClient::Create(std::vector<std::string>{}).ok());
  EXPECT_FALSE(EtcdClient::Create({"ftp://etcd:2379"}).ok());
}

TEST_F(EtcdTest, OneLeaderPerShardAndTheStandbyTakesOverWhenItLeaves) {
  std::unique_ptr<ClusterMember> a = StartMember("s0", "a");
  std::unique_ptr<ClusterMember> b = StartMember("s0", "b");
  std::unique_ptr<ClusterMember> c = StartMember("s1", "a");
  ASSERT_TRUE(WaitFor(5, [&] {
    return a->view().map.members().size() == 3 && b->view().map.members().size() == 3 &&
           c->IsShardLeader() && (a->IsShardLeader() || b->IsShardLeader());
  }));
  EXPECT_NE(a->IsShardLeader(), b->IsShardLeader());
  EXPECT_EQ(a->view().map.shards(), (std::vector<std::string>{"s0", "s1"}));
  // Exactly one fleet leader.
  EXPECT_EQ(int{a->IsFleetLeader()} + int{b->IsFleetLeader()} + int{c->IsFleetLeader()}, 1);
  // Every member knows the fleet leader's shard (its pair raises
  // fleet-wide faults).
  const std::string fleet_shard = c->IsFleetLeader() ? "s1" : "s0";
  EXPECT_TRUE(WaitFor(3, [&] {
    return a->view().fleet_leader_shard == fleet_shard &&
           b->view().fleet_leader_shard == fleet_shard &&
           c->view().fleet_leader_shard == fleet_shard;
  }));

  std::unique_ptr<ClusterMember>& leader = a->IsShardLeader() ? a : b;
  std::unique_ptr<ClusterMember>& standby = a->IsShardLeader() ? b : a;
  const auto stepped_down = std::chrono::steady_clock::now();
  leader.reset();  // Stop(): claims deleted, lease revoked
  ASSERT_TRUE(WaitFor(3, [&] { return standby->IsShardLeader(); }));
  EXPECT_LT(std::chrono::steady_clock::now() - stepped_down, std::chrono::seconds(2));
  ASSERT_TRUE(WaitFor(3, [&] { return standby->view().map.members().size() == 2; }));
}

TEST_F(EtcdTest, ALeaderWhoseLeaseIsLostStopsLeadingAndRegistersAgain) {
  std::unique_ptr<ClusterMember> a = StartMember("s0", "a");
  ASSERT_TRUE(WaitFor(5, [&] { return a->IsShardLeader(); }));
  std::unique_ptr<ClusterMember> b = StartMember("s0", "b");
  ASSERT_TRUE(WaitFor(5, [&] { return b->view().map.members().size() == 2; }));
  EXPECT_FALSE(b->IsShardLeader());
  // Take a's lease away behind its back (as an expiry would).
  absl::StatusOr<std::optional<KeyValue>> record = client_->Get("/test/members/s0/a");
  ASSERT_TRUE(record.ok() && record->has_value());
  ASSERT_TRUE(client_->RevokeLease((*record)->lease).ok());
  ASSERT_TRUE(WaitFor(5, [&] { return b->IsShardLeader(); }));
  // a finds out at its next renewal, steps down and comes back as standby.
  ASSERT_TRUE(WaitFor(5, [&] { return !a->IsShardLeader() && a->view().registered; }));
  ASSERT_TRUE(WaitFor(5, [&] { return a->view().shard_leader_replica == "b"; }));
}

TEST_F(EtcdTest, PageMarksAreSharedByThePair) {
  std::unique_ptr<ClusterMember> a = StartMember("s0", "a");
  std::unique_ptr<ClusterMember> b = StartMember("s0", "b");
  ASSERT_TRUE(a->MarkPaged("job/n1/1764000000000/1/pager/alice").ok());
  ASSERT_TRUE(a->MarkPaged("job/n1/1764000000000/2/pager/alice").ok());
  absl::StatusOr<absl::flat_hash_set<std::string>> seen = b->PagedKeys();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->size(), 2u);
  EXPECT_TRUE(seen->contains("job/n1/1764000000000/2/pager/alice"));
  std::unique_ptr<ClusterMember> other = StartMember("s1", "a");
  absl::StatusOr<absl::flat_hash_set<std::string>> none = other->PagedKeys();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  // Action marks likewise, apart from the page marks.
  ASSERT_TRUE(a->MarkActionStarted("job:n1:-:1764000000000/cordon_node/n1").ok());
  absl::StatusOr<absl::flat_hash_set<std::string>> actions = b->StartedActions();
  ASSERT_TRUE(actions.ok()) << actions.status();
  EXPECT_EQ(*actions, absl::flat_hash_set<std::string>{"job:n1:-:1764000000000/cordon_node/n1"});
  EXPECT_EQ(b->PagedKeys()->size(), 2u);
  EXPECT_TRUE(other->StartedActions()->empty());
}

TEST_F(EtcdTest, OperationsAreSharedWithThePairOnly) {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> seen_b, seen_other;
  absl::StatusOr<std::unique_ptr<ClusterMember>> a = ClusterMember::Create(Options("s0", "a"));
  absl::StatusOr<std::unique_ptr<ClusterMember>> b = ClusterMember::Create(Options("s0", "b"));
  absl::StatusOr<std::unique_ptr<ClusterMember>> other =
      ClusterMember::Create(Options("s1", "a"));
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  (*b)->OnSharedOperations([&](const std::vector<std::pair<std::string, std::string>>& ops) {
    std::lock_guard<std::mutex> lock(mu);
    seen_b = ops;
  });
  (*other)->OnSharedOperations([&](const std::vector<std::pair<std::string, std::string>>& ops) {
    std::lock_guard<std::mutex> lock(mu);
    seen_other = ops;
  });
  (*b)->Start();
  (*other)->Start();
  ASSERT_TRUE((*a)->ShareOperation("llm:n1:-:1764000000000", R"({"verb":"acknowledge"})").ok());
  ASSERT_TRUE(WaitFor(5, [&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen_b.size() == 1;
  }));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen_b[0].first, "llm:n1:-:1764000000000");
  EXPECT_EQ(seen_b[0].second, R"({"verb":"acknowledge"})");
  EXPECT_TRUE(seen_other.empty());
}

TEST(ClusterOptionsTest, BadOptionsNameTheField) {
  ClusterOptions options;
  options.etcd_endpoints = {"http://127.0.0.1:2379"};
  options.shard = "s0";
  options.replica = "a";
  options.advertise_grpc = "h:1";
  options.advertise_http = "http://h:2";
  EXPECT_TRUE(ValidateClusterOptions(options).ok());
  auto broken = [&](auto change) {
    ClusterOptions copy = options;
    change(copy);
    return ValidateClusterOptions(copy);
  };
  EXPECT_NE(broken([](ClusterOptions& o) { o.etcd_endpoints.clear(); }).message().find(
                "etcd_endpoints"),
            std::string::npos);
  EXPECT_NE(broken([](ClusterOptions& o) { o.shard = "s/0"; }).message().find("shard"),
            std::string::npos);
  EXPECT_NE(broken([](ClusterOptions& o) { o.shard = "_fleet"; }).message().find("shard"),
            std::string::npos);
  EXPECT_NE(broken([](ClusterOptions& o) { o.replica = ""; }).message().find("replica"),
            std::string::npos);
  EXPECT_NE(broken([](ClusterOptions& o) { o.advertise_grpc = "h"; }).message().find(
                "advertise_grpc"),
            std::string::npos);
  EXPECT_NE(broken([](ClusterOptions& o) { o.lease_seconds = 1; }).message().find(
                "lease_seconds"),
            std::string::npos);
}

}  // namespace
}  // namespace vigil::cluster

namespace vigil::cluster {
namespace {

// The breaker's fleet-wide count: members of different shards racing for
// slots take exactly the limit between them, and a reset frees them.
TEST_F(EtcdTest, RemediationSlotsNeverExceedTheLimitAcrossShards) {
  std::unique_ptr<ClusterMember> a = StartMember("s0", "a");
  std::unique_ptr<ClusterMember> b = StartMember("s1", "a");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::atomic<int> taken{0};
  std::atomic<int> errors{0};
  auto race = [&](ClusterMember* member) {
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<bool> slot = member->TakeRemediationSlot("cordon", 3, 60);
      if (!slot.ok()) ++errors;
      else if (*slot) ++taken;
    }
  };
  std::thread ta(race, a.get());
  std::thread tb(race, b.get());
  ta.join();
  tb.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(taken.load(), 3);
  // Pauses are counted apart.
  EXPECT_EQ(a->TakeRemediationSlot("pause", 1, 60).value_or(false), true);
  EXPECT_EQ(b->TakeRemediationSlot("pause", 1, 60).value_or(true), false);
  ASSERT_TRUE(b->ClearRemediationSlots().ok());
  EXPECT_EQ(a->TakeRemediationSlot("cordon", 3, 60).value_or(false), true);
  EXPECT_EQ(a->TakeRemediationSlot("pause", 1, 60).value_or(false), true);
  // A slot lasts the window only (etcd expires its lease).
  ASSERT_TRUE(a->ClearRemediationSlots().ok());
  EXPECT_EQ(a->TakeRemediationSlot("pause", 1, 1).value_or(false), true);
  EXPECT_TRUE(WaitFor(8, [&] { return b->TakeRemediationSlot("pause", 1, 1).value_or(false); }));
}

// Entries one member shares reach every member's callback, again when one
// changes, and not again when nothing did.
TEST_F(EtcdTest, FleetStateReachesEveryMember) {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> seen;
  int calls = 0;
  absl::StatusOr<std::unique_ptr<ClusterMember>> b = ClusterMember::Create(Options("s1", "a"));
  ASSERT_TRUE(b.ok());
  (*b)->OnFleetState([&](const std::vector<std::pair<std::string, std::string>>& entries) {
    std::lock_guard<std::mutex> lock(mu);
    seen = entries;
    ++calls;
  });
  (*b)->Start();
  std::unique_ptr<ClusterMember> a = StartMember("s0", "a");
  ASSERT_TRUE(a->ShareFleetState("breaker", R"({"tripped": true})").ok());
  ASSERT_TRUE(a->ShareFleetState("silences/sil-1", "{}").ok());
  auto has = [&](const std::string& name, const std::string& value) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [n, v] : seen)
      if (n == name && v == value) return true;
    return false;
  };
  ASSERT_TRUE(WaitFor(5, [&] { return has("breaker", R"({"tripped": true})") && has("silences/sil-1", "{}"); }));
  ASSERT_TRUE(a->ShareFleetState("breaker", R"({"tripped": false})").ok());
  ASSERT_TRUE(WaitFor(5, [&] { return has("breaker", R"({"tripped": false})"); }));
  int settled = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    settled = calls;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(calls, settled) << "no change, no call";
}

// PutSoon writes at the member's next round, under a lease of its TTL;
// another member's WatchPrefix sees it (repeat-offender implications
// travel this way).
TEST_F(EtcdTest, PutSoonReachesWatchersAndExpires) {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> seen;
  absl::StatusOr<std::unique_ptr<ClusterMember>> b = ClusterMember::Create(Options("s1", "a"));
  ASSERT_TRUE(b.ok());
  (*b)->WatchPrefix("implications/", [&](const std::vector<std::pair<std::string, std::string>>& e) {
    std::lock_guard<std::mutex> lock(mu);
    seen = e;
  });
  (*b)->Start();
  std::unique_ptr<ClusterMember> a = StartMember("s0", "a");
  a->PutSoon("implications/n9/job1:g0:1000", R"({"node": "n9"})", 2);
  a->PutSoon("implications/n9/job2:-:2000", R"({"node": "n9", "job": "job2"})", 60);
  ASSERT_TRUE(WaitFor(5, [&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen.size() == 2;
  }));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(seen[0].first, "n9/job1:g0:1000");
    EXPECT_EQ(seen[1].second, R"({"node": "n9", "job": "job2"})");
  }
  // The 2 s one expires with its lease.
  EXPECT_TRUE(WaitFor(10, [&] {
    absl::StatusOr<std::vector<KeyValue>> left = client_->GetPrefix("/test/implications/");
    return left.ok() && left->size() == 1;
  }));
}

}  // namespace
}  // namespace vigil::cluster
