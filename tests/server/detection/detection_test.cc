// Online detection in the server: faults fed over gRPC become incidents at
// /api/v1/incidents, node silence is found by the clock tick, rule files
// are checked at Start(), and incidents survive a restart.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "notify/signing.h"
#include "nlohmann/json.hpp"
#include "server/detection/detection_service.h"
#include "tests/server/http_client.h"
#include "tests/server/test_server.h"

namespace vigil::testing {
namespace {

using Json = nlohmann::json;

// Feeds node `node` of job "llm" frames one clock second apart, each
// stamped with the server's (fake) clock, and waits for detection to have
// seen them.
class Agent {
 public:
  Agent(TestServer& t, const std::string& node)
      : t_(t), node_(node), client_(t.server.grpc_port()) {
    client_.Open();
    v1::FrameBatch hello = Batch(++seq_, node, "a");
    *hello.add_series() = Def(1, "gpu_ecc_dbe_total", {{"gpu", "3"}});
    *hello.add_series() = Def(2, "gpu_power_watts", {{"gpu", "3"}});
    *hello.add_series() = Def(3, "train_loss", {});
    EXPECT_TRUE(client_.Send(hello).has_value());
  }

  // One frame: ECC DBE counter, power, loss.
  void Send(double dbe, double loss) {
    v1::FrameBatch batch = Batch(++seq_);
    v1::Frame frame = Frame("llm", t_.clock.Now(), {1, 2, 3}, {dbe, 400, loss});
    frame.set_step(step_++);
    *batch.add_frames() = frame;
    EXPECT_TRUE(client_.Send(batch).has_value());
    t_.clock.Advance(1);
  }

  // Returns once the observer has run for every frame sent: the server
  // notifies it after acking a batch and before reading the next one.
  void Sync() { EXPECT_TRUE(client_.Send(Batch(++seq_)).has_value()); }

 private:
  TestServer& t_;
  std::string node_;
  IngestClient client_;
  uint64_t seq_ = 0;
  int64_t step_ = 0;
};

Json GetJson(int port, const std::string& path, int want_status = 200) {
  HttpResult r = HttpGet(port, path);
  EXPECT_EQ(r.status, want_status) << path << ": " << r.body;
  Json j = Json::parse(r.body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.body;
  return j;
}

// The ids of the incidents /api/v1/incidents`query` lists, in order.
std::vector<std::string> ListIds(int port, const std::string& query = "") {
  std::vector<std::string> ids;
  const Json list = GetJson(port, "/api/v1/incidents" + query);
  for (const Json& i : list["incidents"]) ids.push_back(i["id"].get<std::string>());
  return ids;
}

// Five healthy frames, then the DBE counter of gpu 3 on `node` increases.
void RaiseEccFault(TestServer& t, const std::string& node) {
  Agent agent(t, node);
  for (int i = 0; i < 5; ++i) agent.Send(0, 2.5);
  agent.Send(1, 2.5);
  agent.Sync();
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/detection_test_" + name;
}

// Options of a server on a fresh RocksDB data dir `dir`, which a second
// server with the same options opens again (a restart).
ServerOptions PersistentOptions(const std::string& dir) {
  std::filesystem::remove_all(dir);
  ServerOptions options = TestOptions();
  options.memory = false;
  options.data_dir = dir;
  return options;
}

TEST(DetectionTest, RedLineBecomesP0IncidentWithEvidenceAndTimeline) {
  TestServer t;
  RaiseEccFault(t, "n1");
  const int port = t.server.http_port();

  Json list = GetJson(port, "/api/v1/incidents");
  ASSERT_EQ(list["incidents"].size(), 1u) << list.dump(2);
  const Json& item = list["incidents"][0];
  EXPECT_EQ(item["id"], "inc-000001");
  EXPECT_EQ(item["severity"], "P0");
  EXPECT_EQ(item["kind"], "ecc_double_bit");
  EXPECT_EQ(item["state"], "firing");
  EXPECT_EQ(item["job"], "llm");
  EXPECT_EQ(item["node"], "n1");
  EXPECT_EQ(item["gpu"], 3);
  EXPECT_EQ(item["evidence_total"], 1);

  Json detail = GetJson(port, "/api/v1/incidents/inc-000001");
  EXPECT_EQ(detail["severity"], "P0");
  EXPECT_FALSE(detail["hint"].get<std::string>().empty());
  ASSERT_EQ(detail["evidence"].size(), 1u);
  const Json& evidence = detail["evidence"][0];
  std::vector<SeriesInfo> dbe =
      t.server.store()->ListSeries({"llm", "n1", "gpu_ecc_dbe_total"});
  ASSERT_EQ(dbe.size(), 1u);
  EXPECT_EQ(evidence["series"], dbe[0].id);
  EXPECT_EQ(evidence["metric"], "gpu_ecc_dbe_total");
  EXPECT_EQ(evidence["gpu"], 3);
  EXPECT_TRUE(evidence.contains("baseline_mean"));
  EXPECT_TRUE(evidence.contains("baseline_sigma"));
  // Detection's "opened" comes first; escalation's entries follow.
  ASSERT_GE(detail["timeline"].size(), 1u);
  EXPECT_EQ(detail["timeline"][0]["type"], "opened");
  EXPECT_EQ(detail["timeline"][0]["severity"], "P0");
  EXPECT_EQ(detail["timeline"][0]["ts"], detail["ts"]);

  HttpResult metrics = HttpGet(port, "/metrics");
  EXPECT_NE(metrics.body.find("vigil_detector_frames_total 6\n"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("vigil_incidents_open{severity=\"P0\"} 1\n"),
            std::string::npos);
  EXPECT_NE(metrics.body.find("vigil_incident_updates_total{type=\"opened\"} 1\n"),
            std::string::npos);
}

TEST(DetectionTest, ListFiltersAndRejectsBadParameters) {
  TestServer t;
  RaiseEccFault(t, "n1");
  const int port = t.server.http_port();
  const std::vector<std::string> one = {"inc-000001"};
  EXPECT_EQ(ListIds(port, "?state=firing&severity=P0&job=llm&node=n1"), one);
  EXPECT_EQ(ListIds(port, "?state=all&severity=P1,P0&limit=1"), one);
  EXPECT_TRUE(ListIds(port, "?state=resolved").empty());
  EXPECT_TRUE(ListIds(port, "?severity=P1,P2,P3").empty());
  EXPECT_TRUE(ListIds(port, "?job=other").empty());
  EXPECT_TRUE(ListIds(port, "?node=n2").empty());

  for (const char* bad : {"?state=open", "?severity=P4", "?severity=P0,",
                          "?limit=0", "?limit=x", "?limit=10001"}) {
    Json error = GetJson(port, std::string("/api/v1/incidents") + bad, 400);
    EXPECT_TRUE(error.contains("error")) << bad;
  }
  Json missing = GetJson(port, "/api/v1/incidents/inc-999999", 404);
  EXPECT_EQ(missing["error"], "incident 'inc-999999' not found");
}

// The tick thread alone (no frames) notices that the job's only node
// stopped at its step: the job's end, a P3 lifecycle incident, no page.
TEST(DetectionTest, JobEndIsFoundByTheClockTick) {
  TestServer t;
  {
    Agent agent(t, "n1");
    for (int i = 0; i < 10; ++i) agent.Send(0, 2.5);
    agent.Sync();
  }
  EXPECT_TRUE(ListIds(t.server.http_port()).empty());
  // No frames from here on: only the tick thread moves detection time.
  t.clock.Advance(60);
  Json incidents;
  for (int i = 0; i < 1000 && incidents.empty(); ++i) {
    incidents =
        GetJson(t.server.http_port(), "/api/v1/incidents?state=all")["incidents"];
    if (incidents.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(incidents.size(), 1u);
  EXPECT_EQ(incidents[0]["kind"], "job_ended");
  EXPECT_EQ(incidents[0]["severity"], "P3");
}

// A node that stops while its peer goes on is a P0 on that node.
TEST(DetectionTest, NodeSilenceInARunningJobIsP0) {
  TestServer t;
  Agent n1(t, "n1");
  Agent n2(t, "n2");
  for (int i = 0; i < 10; ++i) {
    n1.Send(0, 2.5);
    n2.Send(0, 2.5);
  }
  for (int i = 0; i < 40; ++i) n2.Send(0, 2.5);
  n1.Sync();
  n2.Sync();
  t.server.detection()->AdvanceTime(t.clock.Now());
  Json incidents =
      GetJson(t.server.http_port(), "/api/v1/incidents?severity=P0")["incidents"];
  ASSERT_EQ(incidents.size(), 1u);
  EXPECT_EQ(incidents[0]["kind"], "node_down");
  EXPECT_EQ(incidents[0]["node"], "n1");
}

TEST(DetectionTest, BackfilledFramesDoNotLookSilent) {
  TestServer t;
  const double now = t.clock.Now();
  {
    // Frames from 200 s ago, sent now (an agent catching up).
    IngestClient client(t.server.grpc_port());
    client.Open();
    v1::FrameBatch batch = Batch(1, "n1", "a");
    *batch.add_series() = Def(1, "gpu_power_watts", {{"gpu", "0"}});
    for (int i = 0; i < 20; ++i) {
      *batch.add_frames() = Frame("llm", now - 200 + i, {1}, {400});
    }
    ASSERT_TRUE(client.Send(batch).has_value());
    ASSERT_TRUE(client.Send(Batch(2)).has_value());
  }
  DetectionService& detection = *t.server.detection();
  detection.AdvanceTime(now);
  EXPECT_TRUE(ListIds(t.server.http_port()).empty());
  detection.AdvanceTime(now + 60);
  Json list = GetJson(t.server.http_port(), "/api/v1/incidents");
  ASSERT_EQ(list["incidents"].size(), 1u);
  // Its frames carry no step: a node without a training job, a ticket.
  EXPECT_EQ(list["incidents"][0]["kind"], "idle_node_down");
}

TEST(DetectionTest, DisabledDetectionRaisesNothing) {
  ServerOptions options = TestOptions();
  options.detection_enabled = false;
  TestServer t(options);
  RaiseEccFault(t, "n1");
  EXPECT_TRUE(ListIds(t.server.http_port()).empty());
  EXPECT_EQ(t.server.detection()->counters().frames, 0u);
}

TEST(DetectionTest, RuleFileOverridesTheCatalogue) {
  const std::string path = TempPath("override.json");
  std::ofstream(path) << R"({"rules": [{"name": "ecc_double_bit", "severity": "P1"}]})";
  ServerOptions options = TestOptions();
  options.rules_file = path;
  TestServer t(options);
  RaiseEccFault(t, "n1");
  Json list = GetJson(t.server.http_port(), "/api/v1/incidents");
  ASSERT_EQ(list["incidents"].size(), 1u);
  EXPECT_EQ(list["incidents"][0]["severity"], "P1");
  std::filesystem::remove(path);
}

TEST(DetectionTest, BadRuleFileFailsStartListingEveryError) {
  const std::string path = TempPath("bad.json");
  std::ofstream(path) << R"({
  "rules": [{"name": "ecc_double_bit", "severity": "P9"},
            {"name": "brand_new", "match": {"kind": "no_such_kind"},
             "severity": "P1"}],
  "settings": {"resolve_after_s": -1}
})";
  ServerOptions options = TestOptions();
  options.rules_file = path;
  FakeClock clock;
  VigilServer server(options, &clock);
  absl::Status s = server.Start();
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  std::vector<std::string> lines = absl::StrSplit(s.message(), '\n');
  EXPECT_EQ(lines.size(), 3u) << s.message();
  for (const std::string& line : lines) EXPECT_EQ(line.rfind(path + ": ", 0), 0u) << line;
  EXPECT_NE(s.message().find("rules[0].severity"), std::string::npos) << s;
  EXPECT_NE(s.message().find("rules[1].match.kind"), std::string::npos) << s;
  EXPECT_NE(s.message().find("settings.resolve_after_s"), std::string::npos) << s;
  EXPECT_EQ(server.grpc_port(), 0);

  std::ofstream(path) << "{\"rules\": [\n  {\"name\": }]}";
  s = server.Start();
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(path + ": line 2, column"), std::string::npos) << s;
  std::filesystem::remove(path);

  s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

// Waits for detection's tick thread to have ticked at `t`'s clock time:
// once it has, every earlier tick's snapshot is written.
void WaitForTick(TestServer& t) {
  const double now = t.clock.Now();
  for (int i = 0; i < 1000 && t.server.detection()->last_tick() < now; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_GE(t.server.detection()->last_tick(), now);
}

// Moves `t`'s clock to `until` a second at a time, waiting for each tick.
void TickTo(TestServer& t, double until) {
  while (t.clock.Now() < until) {
    t.clock.Advance(1);
    WaitForTick(t);
  }
}

// Snapshots come every detection.snapshot_seconds while a job's baselines
// learn, then every learned_snapshot_seconds once the last one held none
// still learning.
TEST(DetectionTest, SnapshotsSlowDownOnceEveryBaselineIsLearned) {
  const std::string dir = TempPath("snapshot_learned");
  ServerOptions options = PersistentOptions(dir);
  options.detection_snapshot_seconds = 60;
  options.detection_learned_snapshot_seconds = 300;
  options.detector.baseline.warmup_steps = 5;
  options.detector.baseline.learn_steps = 80;
  options.detector.lifecycle.rewarm_s = 0;  // learning from step 5
  options.detector.lifecycle.rewarm_steps = 0;
  {
    TestServer t(options);
    const double start = t.clock.Now();
    const auto counters = [&] { return t.server.detection()->counters(); };
    {
      Agent agent(t, "n1");
      for (int i = 0; i < 100; ++i) {  // learned at ~85 s
        agent.Send(0, 2.5);
        WaitForTick(t);
      }
      agent.Sync();
    }
    TickTo(t, start + 101);
    EXPECT_EQ(counters().snapshots, 1u);  // at 60 s, power and loss learning
    EXPECT_GT(counters().snapshot_learning_series, 0u);
    TickTo(t, start + 122);
    EXPECT_EQ(counters().snapshots, 2u);  // at 120 s, all learned
    EXPECT_EQ(counters().snapshot_learning_series, 0u);
    TickTo(t, start + 419);
    EXPECT_EQ(counters().snapshots, 2u);
    TickTo(t, start + 422);
    EXPECT_EQ(counters().snapshots, 3u);
  }
  std::filesystem::remove_all(dir);
}

// With nothing learning from the start, snapshots come every
// learned_snapshot_seconds from the first on; with that key at 60, every
// minute. (That a snapshot counts the series still learning:
// DetectorStateTest.ASnapshotCountsTheSeriesStillToLearn.)
TEST(DetectionTest, SnapshotsSlowDownWhenNothingLearns) {
  for (const double learned_seconds : {300.0, 60.0}) {
    const std::string dir = TempPath("snapshot_cadence");
    ServerOptions options = PersistentOptions(dir);
    options.detection_snapshot_seconds = 60;
    options.detection_learned_snapshot_seconds = learned_seconds;
    {
      TestServer t(options);
      const double start = t.clock.Now();
      const auto snapshots = [&] { return t.server.detection()->counters().snapshots; };
      TickTo(t, start + 62);
      EXPECT_EQ(snapshots(), 1u);
      EXPECT_EQ(t.server.detection()->counters().snapshot_learning_series, 0u);
      TickTo(t, start + 302);
      EXPECT_EQ(snapshots(), learned_seconds == 60 ? 5u : 1u) << learned_seconds;
      TickTo(t, start + 362);
      EXPECT_EQ(snapshots(), learned_seconds == 60 ? 6u : 2u) << learned_seconds;
    }
    std::filesystem::remove_all(dir);
  }
}

TEST(DetectionTest, IncidentsSurviveRestartWithoutReusingIds) {
  const std::string dir = TempPath("restart");
  ServerOptions options = PersistentOptions(dir);
  {
    TestServer t(options);
    RaiseEccFault(t, "n1");
    EXPECT_EQ(ListIds(t.server.http_port()),
              std::vector<std::string>{"inc-000001"});
  }
  {
    TestServer t(options);
    // Start-up's account of itself (vigil-server logs it): the store's
    // open and the state's restore are parts of the whole.
    const VigilServer::StartupTimes& took = t.server.startup_times();
    EXPECT_GT(took.store_s, 0);
    EXPECT_GT(took.state_s, 0);
    EXPECT_GE(took.total_s, took.store_s + took.state_s);
    const int port = t.server.http_port();
    Json restored = GetJson(port, "/api/v1/incidents/inc-000001");
    EXPECT_EQ(restored["severity"], "P0");
    EXPECT_EQ(restored["state"], "firing");
    EXPECT_EQ(restored["timeline"][0]["type"], "opened");
    // Later than the first run's frames, on another node.
    t.clock.Advance(100);
    RaiseEccFault(t, "n2");
    EXPECT_EQ(ListIds(port), (std::vector<std::string>{"inc-000002", "inc-000001"}));
    EXPECT_EQ(GetJson(port, "/api/v1/incidents/inc-000002")["node"], "n2");
  }
  std::filesystem::remove_all(dir);
}

// A fault still there after a restart (kill -9 included) is raised again by
// the fresh engine; it is the same incident, not a new one: no new id, no
// "opened" (so no new page and no repeated automatic action).
TEST(DetectionTest, AFaultStillThereAfterARestartIsTheSameIncident) {
  const std::string dir = TempPath("adopt");
  ServerOptions options = PersistentOptions(dir);
  options.detection_snapshot_seconds = 0;  // as after a kill: nothing learned kept
  {
    TestServer t(options);
    RaiseEccFault(t, "n1");
    ASSERT_EQ(ListIds(t.server.http_port()), std::vector<std::string>{"inc-000001"});
  }
  TestServer t(options);
  const int port = t.server.http_port();
  t.clock.Advance(100);
  RaiseEccFault(t, "n1");  // the same GPU's counters, seen anew
  EXPECT_EQ(ListIds(port), std::vector<std::string>{"inc-000001"});
  EXPECT_EQ(t.server.detection()->counters().adopted, 1u);
  Json detail = GetJson(port, "/api/v1/incidents/inc-000001");
  EXPECT_EQ(detail["state"], "firing");
  EXPECT_EQ(detail["severity"], "P0");  // never milder for the restart
  EXPECT_EQ(detail["kind"], "ecc_double_bit");
  int opened = 0;
  for (const Json& e : detail["timeline"]) opened += e["type"] == "opened";
  EXPECT_EQ(opened, 1) << detail["timeline"].dump(1);
  // Another node's fault is still a new incident.
  RaiseEccFault(t, "n2");
  EXPECT_EQ(ListIds(port), (std::vector<std::string>{"inc-000002", "inc-000001"}));
  std::filesystem::remove_all(dir);
}

// An error counter that moves while the server is down (killed before its
// next snapshot) is seen to move: the new process starts the series from
// its last stored sample, so the first frame it sees - already carrying
// the raised value - is an increase. A stored sample from another run
// (older than prime_counters_seconds) is not used.
TEST(DetectionTest, ACounterThatMovedAcrossARestartIsSeen) {
  const std::string dir = TempPath("prime");
  ServerOptions options = PersistentOptions(dir);
  options.detection_snapshot_seconds = 0;  // as after a kill: nothing learned kept
  {
    TestServer t(options);
    Agent agent(t, "n1");
    for (int i = 0; i < 5; ++i) agent.Send(0, 2.5);
    Agent other(t, "n2");
    for (int i = 0; i < 5; ++i) other.Send(0, 2.5);
    other.Sync();
    ASSERT_TRUE(ListIds(t.server.http_port()).empty());
  }
  TestServer t(options);
  const int port = t.server.http_port();
  t.clock.Advance(10);  // just after the first process's last frames
  {
    Agent agent(t, "n1");
    agent.Send(1, 2.5);
    agent.Sync();
  }
  EXPECT_EQ(ListIds(port), std::vector<std::string>{"inc-000001"});
  EXPECT_EQ(GetJson(port, "/api/v1/incidents/inc-000001")["kind"], "ecc_double_bit");
  EXPECT_GE(t.server.detection()->counters().counters_primed, 1u);
  // n2 comes back long after: its stored counter is another run's.
  t.clock.Advance(1000);
  {
    Agent agent(t, "n2");
    agent.Send(1, 2.5);
    agent.Sync();
  }
  EXPECT_EQ(ListIds(port), std::vector<std::string>{"inc-000001"});
  std::filesystem::remove_all(dir);
}

// An incident firing before a restart that the fresh engine does not raise
// again resolves once its node has reported for restart_resolve_seconds
// (its ECC counter did not move again: in one process it would have
// resolved); one whose node stays silent stays firing.
TEST(DetectionTest, AnIncidentNotRaisedAgainAfterARestartResolves) {
  const std::string dir = TempPath("restart_resolve");
  ServerOptions options = PersistentOptions(dir);
  options.detection_snapshot_seconds = 0;
  options.restart_resolve_seconds = 60;
  {
    TestServer t(options);
    RaiseEccFault(t, "n1");
    RaiseEccFault(t, "n2");
    ASSERT_EQ(ListIds(t.server.http_port()).size(), 2u);
  }
  TestServer t(options);
  const int port = t.server.http_port();
  t.clock.Advance(20);
  Agent agent(t, "n1");
  for (int i = 0; i < 59; ++i) agent.Send(1, 2.5);  // the counter stays put
  agent.Sync();
  t.server.detection()->AdvanceTime(t.clock.Now());
  EXPECT_EQ(GetJson(port, "/api/v1/incidents?state=firing")["incidents"].size(), 2u);
  agent.Send(1, 2.5);
  agent.Sync();
  t.server.detection()->AdvanceTime(t.clock.Now());
  const Json firing = GetJson(port, "/api/v1/incidents?state=firing")["incidents"];
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0]["node"], "n2");
  const Json resolved = GetJson(port, "/api/v1/incidents/inc-000001");
  EXPECT_EQ(resolved["state"], "resolved");
  EXPECT_EQ(resolved["kind"], "ecc_double_bit");
  EXPECT_EQ(resolved["evidence"].size(), 1u);  // the stored evidence stays
  int resolved_entries = 0;
  for (const Json& e : resolved["timeline"]) resolved_entries += e["type"] == "resolved";
  EXPECT_EQ(resolved_entries, 1) << resolved["timeline"].dump(1);
  EXPECT_EQ(t.server.detection()->counters().restart_resolved, 1u);
  std::filesystem::remove_all(dir);
}

// A storage incident firing when the server stopped is resolved by the
// next process once its store is healthy (the store watch takes it over),
// not left firing forever.
TEST(DetectionTest, AStorageIncidentLeftFiringResolvesAfterARestart) {
  const std::string dir = TempPath("storage_restart");
  ServerOptions options = PersistentOptions(dir);
  std::string id;
  {
    TestServer t(options);
    IncidentUpdate opened;
    opened.ts = t.clock.Now();
    opened.incident.kind = "storage_degraded";
    opened.incident.severity = Severity::kP1;
    opened.incident.job = "cluster";
    opened.incident.ts = opened.ts;
    opened.incident.summary = "Vigil's store refuses writes: disk full";
    absl::StatusOr<std::string> published =
        t.server.detection()->PublishExternal(opened);
    ASSERT_TRUE(published.ok()) << published.status();
    id = *published;
  }
  TestServer t(options);
  const int port = t.server.http_port();
  Json state;
  for (int i = 0; i < 1000; ++i) {
    t.clock.Advance(1);  // the watch checks every clock second
    state = GetJson(port, "/api/v1/incidents/" + id)["state"];
    if (state == "resolved") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(state, "resolved");
  std::filesystem::remove_all(dir);
}

// The operator API over HTTP: tokens and roles, ack, silences, audit.
TEST(DetectionTest, OperatorApiNeedsTheRightTokenAndChangesTheLifecycle) {
  ServerOptions options = TestOptions();
  auto sha = [](const std::string& token) { return HexEncode(Sha256(token)); };
  options.auth.tokens = {{"vic", Role::kViewer, sha("viewer-token")},
                         {"olga", Role::kOperator, sha("operator-token")}};
  TestServer t(options);
  RaiseEccFault(t, "n1");
  const int port = t.server.http_port();
  const std::string ack = "/api/v1/incidents/inc-000001/ack";
  EXPECT_EQ(HttpCall(port, "POST", ack, "{}", "").status, 401);
  EXPECT_EQ(HttpCall(port, "POST", ack, "{}", "wrong-token").status, 401);
  HttpResult denied = HttpCall(port, "POST", ack, "{}", "viewer-token");
  EXPECT_EQ(denied.status, 403);
  EXPECT_NE(denied.body.find("needs operator"), std::string::npos) << denied.body;
  EXPECT_EQ(HttpCall(port, "POST", ack, "not json", "operator-token").status, 400);
  EXPECT_EQ(HttpCall(port, "POST", "/api/v1/incidents/inc-009999/ack", "{}",
                     "operator-token").status, 404);
  HttpResult ok = HttpCall(port, "POST", ack, R"({"comment":"mine"})", "operator-token");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(Json::parse(ok.body)["lifecycle"], "acknowledged");
  EXPECT_EQ(HttpCall(port, "POST", ack, "{}", "operator-token").status, 409);

  Json listed = GetJson(port, "/api/v1/incidents");
  EXPECT_EQ(listed["incidents"][0]["lifecycle"], "acknowledged");
  Json detail = GetJson(port, "/api/v1/incidents/inc-000001");
  bool acked_in_timeline = false;
  for (const Json& e : detail["timeline"])
    acked_in_timeline |= e["type"] == "acknowledged" && e["who"] == "olga";
  EXPECT_TRUE(acked_in_timeline) << detail["timeline"].dump(1);

  HttpResult silence = HttpCall(
      port, "POST", "/api/v1/silences",
      R"({"matchers":[{"name":"node","value":"n2*"}],"duration_minutes":30,"comment":"swap"})",
      "operator-token");
  ASSERT_EQ(silence.status, 201) << silence.body;
  EXPECT_EQ(HttpCall(port, "POST", "/api/v1/silences",
                     R"({"matchers":[{"name":"rack","value":"r1"}],"duration_minutes":30})",
                     "operator-token").status, 400);
  EXPECT_EQ(GetJson(port, "/api/v1/silences")["silences"].size(), 1u);
  const std::string id = Json::parse(silence.body)["id"];
  EXPECT_EQ(HttpCall(port, "DELETE", "/api/v1/silences/" + id, "", "viewer-token").status, 403);
  EXPECT_EQ(HttpCall(port, "DELETE", "/api/v1/silences/" + id, "", "operator-token").status, 200);
  EXPECT_TRUE(GetJson(port, "/api/v1/silences")["silences"].empty());

  Json whoami = Json::parse(HttpCall(port, "GET", "/api/v1/whoami", "", "viewer-token").body);
  EXPECT_EQ(whoami["role"], "viewer");
  EXPECT_EQ(HttpCall(port, "POST", "/api/v1/remediation/reset", "", "operator-token").status, 403);
  Json audit = GetJson(port, "/api/v1/audit");
  ASSERT_GE(audit["entries"].size(), 4u);
  EXPECT_EQ(audit["entries"][0]["who"], "olga");
  EXPECT_EQ(audit["entries"][0]["action"], "expire_silence");
}

TEST(DetectionTest, ReadsNeedATokenWhenAnonymousReadIsOff) {
  ServerOptions options = TestOptions();
  options.auth.anonymous_read = false;
  options.auth.tokens = {{"vic", Role::kViewer, HexEncode(Sha256("viewer-token"))}};
  TestServer t(options);
  const int port = t.server.http_port();
  EXPECT_EQ(HttpCall(port, "GET", "/api/v1/incidents", "", "").status, 401);
  EXPECT_EQ(HttpCall(port, "GET", "/api/v1/incidents", "", "viewer-token").status, 200);
  EXPECT_EQ(HttpCall(port, "GET", "/healthz", "", "").status, 200);
  // Every method is gated, not only GET: a HEAD answered 200 with the
  // body's length would leak a query's result by its size.
  for (const char* path :
       {"/api/v1/series", "/api/v1/series?job=j&node=n1", "/api/v1/incidents",
        "/api/v1/incidents/inc-000001", "/api/v1/query?series=1",
        "/api/v1/baseline?series=1", "/api/v1/jobs", "/api/v1/jobs/j",
        "/api/v1/nodes", "/api/v1/events", "/api/v1/silences",
        "/api/v1/deliveries", "/api/v1/actions", "/api/v1/remediation",
        "/api/v1/audit", "/api/v1/oncall", "/api/v1/whoami", "/metrics"}) {
    for (const char* method : {"GET", "HEAD", "OPTIONS"}) {
      SCOPED_TRACE(absl::StrCat(method, " ", path));
      const HttpResult r = HttpCall(port, method, path, "", "");
      EXPECT_EQ(r.status, 401) << r.body;
    }
  }
  EXPECT_EQ(HttpCall(port, "HEAD", "/api/v1/incidents", "", "viewer-token").status, 200);
  // /metrics names jobs and nodes: a scraper needs a viewer token too.
  EXPECT_EQ(HttpCall(port, "GET", "/metrics", "", "viewer-token").status, 200);
}

// Every field of a request body is type-checked: a wrong type is a 400
// with a message, never a 500 or a crash.
TEST(DetectionTest, WrongFieldTypesInBodiesAre400) {
  ServerOptions options = TestOptions();
  options.auth.tokens = {{"olga", Role::kOperator, HexEncode(Sha256("operator-token"))}};
  TestServer t(options);
  RaiseEccFault(t, "n1");
  const int port = t.server.http_port();
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"/api/v1/incidents/inc-000001/ack", R"({"comment": 5})"},
      {"/api/v1/incidents/inc-000001/resolve", R"({"comment": ["x"]})"},
      {"/api/v1/incidents/inc-000001/silence", R"({"duration_minutes": "long"})"},
      {"/api/v1/silences", R"({"matchers": 5, "duration_minutes": 30})"},
      {"/api/v1/silences", R"({"matchers": [{"name": 1, "value": "x"}], "duration_minutes": 30})"},
      {"/api/v1/silences", R"({"matchers": [{"name": "node", "value": "n1"}], "duration_minutes": "x"})"},
      {"/api/v1/silences", R"({"matchers": [{"name": "node", "value": "n1"}], "duration_minutes": 30, "comment": {}})"},
      {"/api/v1/actions", R"({"action": 5, "incident_id": "inc-000001"})"},
      {"/api/v1/actions", R"({"action": "cordon_node", "incident_id": 7, "node": "n1"})"},
      {"/api/v1/actions", R"({"action": "cordon_node", "incident_id": "inc-000001", "node": []})"},
      {"/api/v1/session", R"({"token": 5})"},
  };
  for (const auto& [path, body] : calls) {
    SCOPED_TRACE(path + " " + body);
    const HttpResult r = HttpCall(port, "POST", path, body, "operator-token");
    EXPECT_TRUE(r.status == 400 || r.status == 404) << r.status << " " << r.body;
    EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
  }
  // Deeply nested JSON is refused, not built.
  const std::string deep = "{\"matchers\": " + std::string(100000, '[') +
                           std::string(100000, ']') + "}";
  for (const char* path : {"/api/v1/silences", "/api/v1/session"}) {
    SCOPED_TRACE(path);
    const HttpResult r = HttpCall(port, "POST", path, deep, "operator-token");
    EXPECT_EQ(r.status, 400) << r.body;
  }
  EXPECT_EQ(HttpCall(port, "GET", "/healthz", "", "").status, 200);
}

// A body over the limit (1 MiB) is refused with 413 and a JSON error
// before any handler runs, signed in or not; the server goes on serving.
TEST(DetectionTest, OversizedBodiesAreRefused) {
  TestServer t(TestOptions());
  const int port = t.server.http_port();
  const std::string big(2 << 20, 'x');
  for (const char* path : {"/api/v1/session", "/api/v1/silences"}) {
    SCOPED_TRACE(path);
    const HttpResult r = HttpCall(port, "POST", path, big, "");
    EXPECT_EQ(r.status, 413) << r.body.substr(0, 200);
    EXPECT_NE(r.body.find("request body over 1048576 bytes"), std::string::npos)
        << r.body.substr(0, 200);
  }
  const HttpResult unknown = HttpCall(port, "GET", "/api/v1/nothing-here", "", "");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("\"error\""), std::string::npos) << unknown.body;
  EXPECT_EQ(HttpCall(port, "GET", "/healthz", "", "").status, 200);
}

}  // namespace
}  // namespace vigil::testing
