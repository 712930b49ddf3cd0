// Detection split into shards by job family, run by the frame workers:
// routing is stable and keeps families together, incident ids stay unique
// across shards, snapshots are per shard, a node that moves to a job of
// another shard is not silent in the one it left, and the ack of a batch
// waits until its frames were detected.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/detection/detection_service.h"
#include "storage/series_store.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace vigil::testing {
namespace {

using Json = nlohmann::json;

constexpr double kT0 = 1764000000;

// Two jobs (not of one family) that a service of `shards` shards watches
// in different shards.
std::pair<std::string, std::string> JobsOnTwoShards(const DetectionService& d) {
  const std::string first = "alpha";
  for (int i = 0; i < 100; ++i) {
    const std::string other = absl::StrCat("job", i);
    if (d.ShardOf(other) != d.ShardOf(first)) return {first, other};
  }
  ADD_FAILURE() << "no two jobs on different shards";
  return {first, first};
}

// Another job than `of` that `d` watches in the shard of `of`.
std::string AnotherJobInShardOf(const DetectionService& d, const std::string& of) {
  for (int i = 100;; ++i) {
    const std::string job = absl::StrCat("job", i);
    if (d.ShardOf(job) == d.ShardOf(of) && job != of) return job;
  }
}

class DetectionShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions so;
    so.clock = &clock_;
    store_ = NewMemoryStore(so);
  }

  std::unique_ptr<DetectionService> Service(int shards) {
    DetectionOptions o;
    o.store = store_.get();
    o.clock = &clock_;
    o.snapshot_seconds = 0;
    o.shards = shards;
    auto d = std::make_unique<DetectionService>(o);
    EXPECT_TRUE(d->Start().ok());
    return d;
  }

  // Options of a service that shares its implications, as the etcd hop
  // carries them (JSON), into `shared`.
  DetectionOptions Sharing(std::vector<Json>* shared) {
    DetectionOptions o;
    o.store = store_.get();
    o.clock = &clock_;
    o.snapshot_seconds = 0;
    o.share_implication = [shared](const IncidentEngine::NodeImplication& i) {
      shared->push_back(ImplicationToJson(i));
    };
    return o;
  }

  // One frame of `node` in `job` holding only series `key` (its job and
  // node labels added) at `value`.
  void OneSeriesFrame(DetectionService& d, SeriesKey key, const std::string& job,
                      const std::string& node, int64_t step, double value) {
    key.labels.push_back({"job", job});
    key.labels.push_back({"node", node});
    absl::StatusOr<SeriesId> id = store_->Resolve(key);
    ASSERT_TRUE(id.ok()) << id.status();
    const uint32_t ids[] = {*id};
    const double values[] = {value};
    FrameView f;
    f.node = node;
    f.job = job;
    f.step = step;
    f.ts = clock_.Now();
    f.ids = ids;
    f.values = values;
    d.OnFrame(f);
  }

  // One frame of `node` in `job` with GPU 0's DBE counter at `dbe`.
  void Frame(DetectionService& d, const std::string& job,
             const std::string& node, int64_t step, double dbe) {
    OneSeriesFrame(d, SeriesKey{"gpu_ecc_dbe_total", {{"gpu", "0"}}}, job, node, step, dbe);
  }

  // One frame of `node` in `job` with NIC mlx5_0's drop counter at `drops`.
  void NetFrame(DetectionService& d, const std::string& job,
                const std::string& node, int64_t step, double drops) {
    OneSeriesFrame(d, SeriesKey{"net_drops_total", {{"dev", "mlx5_0"}}}, job, node, step, drops);
  }

  // Five clean seconds of `job` on `node`, then packets dropped.
  void PacketLoss(DetectionService& d, const std::string& job,
                  const std::string& node) {
    for (int s = 0; s < 5; ++s) {
      NetFrame(d, job, node, s, 0);
      clock_.Advance(1);
    }
    NetFrame(d, job, node, 5, 40);
    clock_.Advance(1);
  }

  // Five healthy seconds: node n1 in job `a`, n2 in job `b`.
  void HealthyFrames(DetectionService& d, const std::string& a,
                     const std::string& b) {
    for (int s = 0; s < 5; ++s) {
      Frame(d, a, "n1", s, 0);
      Frame(d, b, "n2", s, 0);
      clock_.Advance(1);
    }
  }

  FakeClock clock_{kT0};
  std::unique_ptr<SeriesStore> store_;
};

TEST_F(DetectionShardsTest, JobsKeepTheirShardAndFamiliesStayTogether) {
  auto d = Service(4);
  auto again = Service(4);
  std::set<int> used;
  for (int i = 0; i < 40; ++i) {
    const std::string job = absl::StrCat("job", i);
    ASSERT_GE(d->ShardOf(job), 0);
    ASSERT_LT(d->ShardOf(job), 4);
    EXPECT_EQ(d->ShardOf(job), again->ShardOf(job)) << job;
    used.insert(d->ShardOf(job));
    // Every run of a family, in one shard (their profiles are shared).
    EXPECT_EQ(d->ShardOf(job + "-run2"), d->ShardOf(job + "-r7")) << job;
  }
  EXPECT_GE(used.size(), 3u);
  EXPECT_EQ(Service(1)->ShardOf("anything"), 0);
}

TEST_F(DetectionShardsTest, IncidentsOfDifferentShardsGetDistinctIds) {
  auto d = Service(2);
  const auto [a, b] = JobsOnTwoShards(*d);
  HealthyFrames(*d, a, b);
  // Each shard's engine opens its first incident: both are inc-000001
  // inside their engines, and must not share the server's id.
  Frame(*d, a, "n1", 5, 1);
  Frame(*d, b, "n2", 5, 1);
  IncidentFilter all;
  std::vector<Json> list = d->ListIncidents(all);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_NE(list[0]["id"], list[1]["id"]);
  std::set<std::string> jobs = {list[0]["job"].get<std::string>(),
                                list[1]["job"].get<std::string>()};
  EXPECT_EQ(jobs, (std::set<std::string>{a, b}));
  d->Stop();
}

TEST_F(DetectionShardsTest, SnapshotsArePerShardAndNeedTheSameCount) {
  {
    auto d = Service(2);
    const auto [a, b] = JobsOnTwoShards(*d);
    HealthyFrames(*d, a, b);
    ASSERT_TRUE(d->Snapshot().ok());
    d->Stop();
  }
  EXPECT_TRUE(store_->GetState("detection/0-of-2").ok());
  EXPECT_TRUE(store_->GetState("detection/1-of-2").ok());
  EXPECT_TRUE(Service(2)->counters().restored);
  // Another count splits jobs differently: it learns afresh.
  EXPECT_FALSE(Service(3)->counters().restored);
}

// A node implicated in faults of three jobs is a repeat offender even when
// the jobs are watched by different shards: one lemon, raised by the first
// shard (at its next tick when another shard's job completed it).
TEST_F(DetectionShardsTest, RepeatOffendersAreFoundAcrossShards) {
  auto d = Service(2);
  const auto [a, b] = JobsOnTwoShards(*d);
  const std::string c = AnotherJobInShardOf(*d, a);
  int64_t step = 0;
  for (const std::string& job : {a, b, c}) {
    for (int s = 0; s < 5; ++s, ++step) {
      Frame(*d, job, "n9", step, 0);
      clock_.Advance(1);
    }
    Frame(*d, job, "n9", step++, 1);  // an ECC double-bit error
    clock_.Advance(1);
  }
  d->AdvanceTime(clock_.Now());
  d->AdvanceTime(clock_.Now() + 1);  // a second tick raises nothing more
  IncidentFilter all;
  int offenders = 0;
  for (const Json& i : d->ListIncidents(all)) offenders += i["kind"] == "lemon_node";
  EXPECT_EQ(offenders, 1) << "incidents: " << Json(d->ListIncidents(all)).dump(1);
  d->Stop();
}

// The number of incidents of `kind` that `d` lists.
int CountKind(DetectionService& d, const std::string& kind) {
  int n = 0;
  for (const Json& i : d.ListIncidents(IncidentFilter{})) n += i["kind"] == kind;
  return n;
}

// Packet loss in three jobs within minutes, watched by different detection
// shards of one server, is one fleet-wide fault: every shard counts, the
// first raises (here at the next tick: the third job is another shard's).
TEST_F(DetectionShardsTest, FleetWideFaultsAreRaisedOnceAcrossShards) {
  auto d = Service(2);
  const auto [a, b] = JobsOnTwoShards(*d);
  const std::string c = AnotherJobInShardOf(*d, b);
  PacketLoss(*d, a, "n1");
  PacketLoss(*d, b, "n2");
  EXPECT_EQ(CountKind(*d, "fleet_wide_fault"), 0);
  PacketLoss(*d, c, "n3");
  d->AdvanceTime(clock_.Now());
  EXPECT_EQ(CountKind(*d, "network_packet_loss"), 3);
  EXPECT_EQ(CountKind(*d, "fleet_wide_fault"), 1)
      << Json(d->ListIncidents(IncidentFilter{})).dump(1);
  d->AdvanceTime(clock_.Now() + 1);
  EXPECT_EQ(CountKind(*d, "fleet_wide_fault"), 1);
  d->Stop();
}

// Cluster mode: each server counts the fleet-wide faults the others share
// (the same JSON hop as repeat offenders); only the server told to raise
// them (the fleet leader's pair) opens one, and another that is told later
// (the fleet leader moved) opens it at its next tick.
TEST_F(DetectionShardsTest, FleetWideFaultsAreCountedAcrossServersAndRaisedByOne) {
  std::vector<Json> shared_by_a, shared_by_b;
  DetectionOptions oa = Sharing(&shared_by_a);
  oa.raises_fleet_incidents = false;
  DetectionService a(oa);
  ASSERT_TRUE(a.Start().ok());
  DetectionOptions ob = Sharing(&shared_by_b);
  ob.raises_fleet_incidents = false;
  DetectionService b(ob);
  ASSERT_TRUE(b.Start().ok());
  b.SetRaisesFleetIncidents(true);

  auto tell = [](std::vector<Json>& shared, DetectionService& to) {
    std::vector<IncidentEngine::NodeImplication> told;
    for (const Json& j : shared) {
      absl::StatusOr<IncidentEngine::NodeImplication> i = ImplicationFromJson(j);
      ASSERT_TRUE(i.ok()) << i.status() << " " << j.dump();
      told.push_back(*i);
    }
    to.AddImplications(told);
  };
  PacketLoss(a, "alpha", "n1");
  PacketLoss(a, "beta", "n2");
  // Each packet loss implicates its node (repeat offenders) and is a
  // fault of the network class.
  std::vector<Json> network;
  for (const Json& j : shared_by_a) {
    if (j.value("cause", "") == "network") network.push_back(j);
  }
  ASSERT_EQ(network.size(), 2u) << Json(shared_by_a).dump();
  EXPECT_EQ(network[0]["node"], "");
  tell(shared_by_a, b);
  PacketLoss(b, "gamma", "n3");  // the same store: the test's servers share it
  EXPECT_EQ(CountKind(b, "fleet_wide_fault"), 1) << Json(b.ListIncidents(IncidentFilter{})).dump(1);
  tell(shared_by_b, a);
  a.AdvanceTime(clock_.Now());
  EXPECT_EQ(CountKind(a, "fleet_wide_fault"), 0) << "a counts but does not raise";
  a.SetRaisesFleetIncidents(true);
  a.AdvanceTime(clock_.Now() + 1);
  EXPECT_EQ(CountKind(a, "fleet_wide_fault"), 1);
  // A document with both or neither of node and cause is refused.
  Json both = network[0];
  both["node"] = "n1";
  EXPECT_FALSE(ImplicationFromJson(both).ok());
  Json neither = network[0];
  neither.erase("cause");
  EXPECT_FALSE(ImplicationFromJson(neither).ok());
  a.Stop();
  b.Stop();
}

// Cluster mode: a node implicated in faults of jobs watched by different
// servers is a repeat offender. Server A shares what implicated a node
// (options.share_implication, through JSON as the etcd hop carries it);
// server B counts it (AddImplications), so B's own third job makes it a
// lemon. Implications told twice count once.
TEST_F(DetectionShardsTest, RepeatOffendersAreFoundAcrossServers) {
  std::vector<Json> shared;
  DetectionService a(Sharing(&shared));
  ASSERT_TRUE(a.Start().ok());
  StoreOptions so;
  so.clock = &clock_;
  std::unique_ptr<SeriesStore> b_store = NewMemoryStore(so);
  DetectionOptions ob;
  ob.store = b_store.get();
  ob.clock = &clock_;
  ob.snapshot_seconds = 0;
  DetectionService b(ob);
  ASSERT_TRUE(b.Start().ok());

  int64_t step = 0;
  auto fault = [&](DetectionService& d, const std::string& job) {
    for (int s = 0; s < 5; ++s, ++step) {
      Frame(d, job, "n9", step, 0);
      clock_.Advance(1);
    }
    Frame(d, job, "n9", step++, 1);  // an ECC double-bit error
    clock_.Advance(1);
  };
  fault(a, "alpha");
  fault(a, "beta");
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(shared[0]["node"], "n9");
  EXPECT_EQ(shared[0]["job"], "alpha");
  std::vector<IncidentEngine::NodeImplication> told;
  for (const Json& j : shared) {
    absl::StatusOr<IncidentEngine::NodeImplication> i = ImplicationFromJson(j);
    ASSERT_TRUE(i.ok()) << i.status();
    told.push_back(*i);
  }
  b.AddImplications(told);
  b.AddImplications(told);  // the next poll tells them again
  // Bad documents are refused with a reason.
  EXPECT_FALSE(ImplicationFromJson(Json{{"node", "n9"}}).ok());
  EXPECT_FALSE(ImplicationFromJson(Json{{"node", "n9"}, {"ts", "x"}, {"job", "j"},
                                        {"id", "i"}, {"kind", "k"}}).ok());
  // Before B's own fault: no lemon anywhere.
  IncidentFilter all;
  auto lemons = [&](DetectionService& d) {
    int n = 0;
    for (const Json& i : d.ListIncidents(all)) n += i["kind"] == "lemon_node";
    return n;
  };
  EXPECT_EQ(lemons(a), 0);
  EXPECT_EQ(lemons(b), 0);
  // Swap the stores' roles: B's frames go to its own store.
  std::swap(store_, b_store);
  fault(b, "gamma");
  std::swap(store_, b_store);
  EXPECT_EQ(lemons(b), 1) << Json(b.ListIncidents(all)).dump(1);
  a.Stop();
  b.Stop();
}

// End to end through vigil-server with two frame workers.
class Node {
 public:
  Node(TestServer& t, const std::string& name) : t_(t), client_(t.server.grpc_port()) {
    client_.Open();
    v1::FrameBatch hello = Batch(++seq_, name, "a");
    *hello.add_series() = Def(1, "gpu_power_watts", {{"gpu", "0"}});
    *hello.add_series() = Def(2, "train_loss", {});
    EXPECT_TRUE(client_.Send(hello).has_value());
  }
  // One training frame of `job`; acked only once detection has seen it.
  void Send(const std::string& job) {
    v1::FrameBatch batch = Batch(++seq_);
    v1::Frame frame = Frame(job, t_.clock.Now(), {1, 2}, {400, 2.5});
    frame.set_step(step_++);
    *batch.add_frames() = frame;
    EXPECT_TRUE(client_.Send(batch).has_value());
  }

 private:
  TestServer& t_;
  IngestClient client_;
  uint64_t seq_ = 0;
  int64_t step_ = 0;
};

TEST(DetectionShardsServerTest, ANodeMovingToAnotherShardsJobIsNotSilent) {
  ServerOptions options = TestOptions();
  options.detection_workers = 2;
  TestServer t(options);
  const auto [a, b] = JobsOnTwoShards(*t.server.detection());
  Node n1(t, "n1"), n2(t, "n2");
  for (int i = 0; i < 20; ++i) {
    n1.Send(a);
    n2.Send(a);
    t.clock.Advance(1);
  }
  // n1 goes on in job b (another shard, another worker); n2 stays in a.
  for (int i = 0; i < 60; ++i) {
    n1.Send(b);
    n2.Send(a);
    t.clock.Advance(1);
  }
  t.server.detection()->AdvanceTime(t.clock.Now());
  const HttpResult r = HttpGet(t.server.http_port(), "/api/v1/incidents?severity=P0");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Json::parse(r.body)["incidents"].size(), 0u)
      << "job " << a << " shard took n1 for silent: " << r.body;
  EXPECT_GT(t.server.detection()->counters().frames, 0u);
}

}  // namespace
}  // namespace vigil::testing
