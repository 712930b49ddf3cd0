// The incident engine's handling of a cluster's ordinary life and of
// impact: job ends, nodes silent together, XID storms, repeat offenders
// and GPU-hours at risk.
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rules/engine.h"
#include "rules/incident_json.h"

namespace vigil {
namespace {

using K = AnomalyKind;

Anomaly Make(K kind, double ts, std::string job, std::string node = "",
             std::optional<int> gpu = std::nullopt) {
  Anomaly a;
  a.kind = kind;
  a.ts = ts;
  a.job = std::move(job);
  a.node = std::move(node);
  a.gpu = gpu;
  return a;
}

Anomaly Cleared(Anomaly a, double ts) {
  a.cleared = true;
  a.ts = ts;
  return a;
}

std::vector<IncidentUpdate> Feed(IncidentEngine& e, std::vector<Anomaly> in) {
  return e.Process(in);
}

// A job's end ends its conditions: its incidents resolve instead of
// firing forever, and the end itself is a P3 lifecycle incident.
TEST(LifecycleTest, JobEndResolvesTheJobsIncidentsAndIsP3) {
  IncidentEngine e;
  Anomaly frag = Make(K::kFragmentation, 100, "j", "n1", 2);
  frag.series_id = 7;
  std::vector<IncidentUpdate> u = Feed(e, {frag});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.severity, Severity::kP2);
  Anomaly end = Make(K::kJobEnded, 200, "j");
  end.detail = "all 2 nodes stopped reporting at step 500; 2 nodes";
  u = Feed(e, {Make(K::kJobEnded, 200, "j", "n1"), end, Cleared(end, 200)});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.kind, "job_ended");
  EXPECT_EQ(u[0].incident.severity, Severity::kP3);
  EXPECT_EQ(u[0].incident.hint_category, HintCategory::kLifecycle);
  u = e.Advance(200 + 301);
  ASSERT_EQ(u.size(), 2u);
  for (const IncidentUpdate& r : u) EXPECT_EQ(r.type, UpdateType::kResolved);
}

// A node's own end (a marker) ends only that node's conditions.
TEST(LifecycleTest, OneNodesEndLeavesTheOthers) {
  IncidentEngine e;
  Anomaly a = Make(K::kThermalThrottle, 100, "j", "n1", 0);
  Anomaly b = Make(K::kThermalThrottle, 100, "j", "n2", 0);
  Feed(e, {a, b});
  Feed(e, {Make(K::kJobEnded, 150, "j", "n1")});
  std::vector<IncidentUpdate> u = e.Advance(150 + 400);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.node, "n1");
}

// A dead node stays down after its job ends: node_down is not a job
// condition.
TEST(LifecycleTest, NodeDownSurvivesTheJobsEnd) {
  IncidentEngine e;
  Feed(e, {Make(K::kNodeSilent, 100, "j", "n1")});
  Anomaly end = Make(K::kJobEnded, 200, "j");
  Feed(e, {end, Cleared(end, 200)});
  std::vector<IncidentUpdate> u = e.Advance(2000);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.kind, "job_ended");
}

// Five of sixteen nodes silent at once: one incident naming the five, in
// its opening update, with a summary that names each once.
TEST(LifecycleTest, NodesSilentTogetherAreOneIncident) {
  IncidentEngine e;
  Anomaly a = Make(K::kNodeSilent, 100, "j");
  a.nodes = {"n03", "n04", "n05", "n06", "n07"};
  a.detail = "no frame for 16 s (interval 1 s)";
  std::vector<IncidentUpdate> u = Feed(e, {a});
  ASSERT_EQ(u.size(), 1u);
  const Incident& inc = u[0].incident;
  EXPECT_EQ(u[0].type, UpdateType::kOpened);
  EXPECT_EQ(inc.kind, "node_down");
  EXPECT_EQ(inc.severity, Severity::kP0);
  EXPECT_EQ(inc.node, "");
  EXPECT_EQ(inc.nodes, a.nodes);
  EXPECT_EQ(inc.evidence.size(), 5u);
  EXPECT_EQ(inc.summary,
            "n03, n04, n05, n06 and n07 stopped reporting (no frame for 16 s "
            "(interval 1 s))");
  // No automatic cordon of five nodes at once.
  for (Response r : inc.responses) EXPECT_NE(r, Response::kCordonNode);
  const nlohmann::json j = IncidentToJson(inc);
  EXPECT_EQ(j["node"], nullptr);
  EXPECT_EQ(j["nodes"], nlohmann::json(a.nodes));
  // A sixth node of the job a minute later joins it.
  u = Feed(e, {Make(K::kNodeSilent, 160, "j", "n08")});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].type, UpdateType::kEvidenceAdded);
  EXPECT_EQ(u[0].incident.nodes.size(), 6u);
  // Anomalies of the silent nodes are inhibited by it.
  u = Feed(e, {Make(K::kPeerPowerLow, 170, "j", "n05", 1)});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.id, "inc-000001");
  // Each comes back on its own; once all are back it resolves.
  std::vector<Anomaly> back;
  for (const std::string& n : {"n03", "n04", "n05", "n06", "n07", "n08"}) {
    back.push_back(Cleared(Make(K::kNodeSilent, 200, "j", n), 200));
  }
  back.push_back(Cleared(Make(K::kPeerPowerLow, 200, "j", "n05", 1), 200));
  Feed(e, back);
  u = e.Advance(501);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].type, UpdateType::kResolved);
}

// A node dying alone in a running job is still its own P0.
TEST(LifecycleTest, OneNodeSilentIsP0OnIt) {
  IncidentEngine e;
  std::vector<IncidentUpdate> u = Feed(e, {Make(K::kNodeSilent, 100, "j", "n2")});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.severity, Severity::kP0);
  EXPECT_EQ(u[0].incident.node, "n2");
  EXPECT_TRUE(u[0].incident.nodes.empty());
  // Silence of another job's node is another incident.
  u = Feed(e, {Make(K::kNodeSilent, 110, "other", "n9")});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.id, "inc-000002");
}

// An idle node's silence is a ticket; a job the scheduler runs whose nodes
// all fell silent is a P1.
TEST(LifecycleTest, IdleSilenceIsP2AndUnreachableJobIsP1) {
  IncidentEngine e;
  std::vector<IncidentUpdate> u =
      Feed(e, {Make(K::kIdleNodeSilent, 100, "idle", "n2")});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.kind, "idle_node_down");
  EXPECT_EQ(u[0].incident.severity, Severity::kP2);
  Anomaly gone = Make(K::kJobUnreachable, 100, "j");
  gone.nodes = {"n5", "n6"};
  u = Feed(e, {gone});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.kind, "job_unreachable");
  EXPECT_EQ(u[0].incident.severity, Severity::kP1);
}

// Ten thousand XIDs of one code on one GPU are one incident whose evidence
// counts them; another code on the same GPU is another condition; an
// application XID is the job's, not the node's.
TEST(LifecycleTest, XidStormIsOneConditionPerCode) {
  IncidentEngine e;
  auto xid = [](double ts, int code, double count) {
    Anomaly a = Make(K::kXid, ts, "j", "n1", 3);
    a.code = code;
    a.series_id = 4;
    a.value = count;
    a.detail = "xid " + std::to_string(code);
    return a;
  };
  std::vector<IncidentUpdate> u = Feed(e, {xid(100, 94, 1)});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.kind, "xid_gpu_error");
  EXPECT_EQ(u[0].incident.severity, Severity::kP1);
  for (double c : {10.0, 100.0, 1000.0, 10000.0}) {
    u = Feed(e, {xid(100 + c / 100, 94, c)});
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(u[0].type, UpdateType::kEvidenceAdded);
    EXPECT_EQ(u[0].incident.id, "inc-000001");
  }
  EXPECT_EQ(u[0].incident.evidence[0].anomaly.value, 10000);
  // XID 79 on the same GPU: a new condition, which raises it to P0.
  u = Feed(e, {xid(300, 79, 1)});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].type, UpdateType::kSeverityRaised);
  EXPECT_EQ(u[0].incident.severity, Severity::kP0);
  EXPECT_EQ(u[0].incident.kind, "xid_fatal");
  // An application XID on another job: the job's incident, no node, no
  // cordon.
  Anomaly app = Make(K::kXid, 400, "k", "n7", 1);
  app.code = 13;
  app.series_id = 9;
  u = Feed(e, {app});
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.kind, "xid_app_error");
  EXPECT_EQ(u[0].incident.node, "");
  EXPECT_EQ(u[0].incident.hint_category, HintCategory::kApplication);
  for (Response r : u[0].incident.responses) {
    EXPECT_NE(r, Response::kCordonNode);
  }
}

// An implication another engine made, told again (every server re-reads
// the shared ones), is kept once; a different job or GPU at the same time
// is another.
TEST(LifecycleTest, AnImplicationToldAgainIsKeptOnce) {
  IncidentEngine e;
  IncidentEngine::NodeImplication i{"n17", "", 1000, "job1", "inc-s1-000004", "xid_fatal", 2};
  for (int k = 0; k < 3; ++k) e.AddImplication(i);
  IncidentEngine::NodeImplication other_gpu = i;
  other_gpu.gpu = 3;
  e.AddImplication(other_gpu);
  IncidentEngine::NodeImplication other_job = i;
  other_job.job = "job2";
  e.AddImplication(other_job);
  const nlohmann::json history = nlohmann::json::parse(e.SaveHistory());
  ASSERT_TRUE(history.contains("n17")) << history.dump();
  EXPECT_EQ(history["n17"].size(), 3u) << history.dump(1);
}

// A node implicated in faults of three jobs within the window is one
// lemon_node P2 (job ""), naming its history; it resolves once the window
// has moved past them.
TEST(LifecycleTest, RepeatOffenderAcrossJobs) {
  IncidentEngine e;
  std::vector<IncidentUpdate> all;
  for (int i = 0; i < 3; ++i) {
    const std::string job = "job" + std::to_string(i);
    const double ts = 1000 + i * 86400.0;
    Anomaly a = Make(K::kPeerPowerLow, ts, job, "n17", 2);
    std::vector<IncidentUpdate> u = Feed(e, {a});
    all.insert(all.end(), u.begin(), u.end());
    Feed(e, {Cleared(a, ts + 10)});
    e.Advance(ts + 400);
  }
  ASSERT_EQ(all.size(), 4u);  // three faults, then the lemon
  const Incident& lemon = all.back().incident;
  EXPECT_EQ(lemon.kind, "lemon_node");
  EXPECT_EQ(lemon.severity, Severity::kP2);
  EXPECT_EQ(lemon.job, "");
  EXPECT_EQ(lemon.node, "n17");
  EXPECT_EQ(lemon.gpu, 2);
  EXPECT_NE(lemon.evidence[0].anomaly.detail.find("3 incidents in 3 jobs"),
            std::string::npos)
      << lemon.evidence[0].anomaly.detail;
  EXPECT_NE(lemon.hint.find("drain"), std::string::npos) << lemon.hint;
  // Faults on other nodes, or two jobs only, make no lemon.
  IncidentEngine other;
  for (int i = 0; i < 3; ++i) {
    Feed(other, {Make(K::kPeerPowerLow, 1000 + i * 100.0, "job" + std::to_string(i % 2),
                     "n" + std::to_string(i), 0)});
  }
  for (const Incident& inc : other.Incidents()) {
    EXPECT_NE(inc.kind, "lemon_node");
  }
  // A week after the last fault the lemon's window is empty: it resolves.
  std::vector<IncidentUpdate> u = e.Advance(1000 + 2 * 86400.0 + 7 * 86400.0);
  u = e.Advance(1000 + 2 * 86400.0 + 7 * 86400.0 + 400);
  bool resolved = false;
  for (const Incident& inc : e.Incidents()) {
    if (inc.kind == "lemon_node") resolved = inc.state == IncidentState::kResolved;
  }
  EXPECT_TRUE(resolved);
}

// The incidents of kind `kind` among `e`'s.
std::vector<Incident> OfKind(const IncidentEngine& e, const std::string& kind) {
  std::vector<Incident> out;
  for (const Incident& inc : e.Incidents()) {
    if (inc.kind == kind) out.push_back(inc);
  }
  return out;
}

// Packet loss in three jobs within ten minutes is one fleet-wide P1 (job
// "", no node) naming them and pointing at the fabric; a fourth job grows
// it in place; it resolves once the window has moved past them. No
// automatic action: a person looks.
TEST(LifecycleTest, FaultsOfOneClassInThreeJobsAreOneFleetWideFault) {
  IncidentEngine e;
  std::vector<IncidentUpdate> all;
  for (int i = 0; i < 3; ++i) {
    Anomaly drops = Make(K::kNetDrops, 1000 + i * 120.0, "job" + std::to_string(i),
                         "n" + std::to_string(i));
    drops.dev = "mlx5_0";
    std::vector<IncidentUpdate> u = Feed(e, {drops});
    all.insert(all.end(), u.begin(), u.end());
  }
  ASSERT_EQ(all.size(), 4u);  // three jobs' incidents, then the fleet's
  const Incident& fleet = all.back().incident;
  EXPECT_EQ(all.back().type, UpdateType::kOpened);
  EXPECT_EQ(fleet.kind, "fleet_wide_fault");
  EXPECT_EQ(fleet.severity, Severity::kP1);
  EXPECT_EQ(fleet.job, "");
  EXPECT_EQ(fleet.node, "");
  EXPECT_EQ(fleet.responses, std::vector<Response>{Response::kNotifySre});
  EXPECT_NE(fleet.summary.find("network faults in 3 jobs within 10 min"), std::string::npos)
      << fleet.summary;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(fleet.summary.find("(job job" + std::to_string(i) + ")"), std::string::npos)
        << fleet.summary;
  }
  EXPECT_NE(fleet.hint.find("fabric"), std::string::npos) << fleet.hint;

  Anomaly fourth = Make(K::kNetDrops, 1500, "job3", "n3");
  std::vector<IncidentUpdate> u = Feed(e, {fourth});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[1].type, UpdateType::kEvidenceAdded);
  EXPECT_EQ(u[1].incident.id, fleet.id);
  EXPECT_NE(u[1].incident.summary.find("in 4 jobs"), std::string::npos);
  EXPECT_EQ(OfKind(e, "fleet_wide_fault").size(), 1u);
  // A later look that finds no new job says nothing.
  EXPECT_TRUE(e.Advance(1561).empty());

  // Ten minutes after the last fault the window holds none: it resolves.
  e.Advance(1500 + 600 + 61);
  e.Advance(1500 + 600 + 61 + 400);
  ASSERT_EQ(OfKind(e, "fleet_wide_fault").size(), 1u);
  EXPECT_EQ(OfKind(e, "fleet_wide_fault")[0].state, IncidentState::kResolved);
}

// Two jobs, three jobs spread over more than the window, or faults of
// different classes make no fleet-wide fault; fleet_jobs 0 turns it off.
TEST(LifecycleTest, FewJobsSpreadFaultsOrMixedClassesAreNotFleetWide) {
  IncidentEngine two;
  for (int i = 0; i < 3; ++i)
    Feed(two, {Make(K::kNetDrops, 1000 + i, "job" + std::to_string(i % 2), "n" + std::to_string(i))});
  EXPECT_TRUE(OfKind(two, "fleet_wide_fault").empty());

  IncidentEngine spread;
  for (int i = 0; i < 3; ++i) {
    const double ts = 1000 + i * 400.0;  // 800 s from first to last
    Feed(spread, {Make(K::kNetDrops, ts, "job" + std::to_string(i), "n" + std::to_string(i))});
    spread.Advance(ts + 1);
  }
  EXPECT_TRUE(OfKind(spread, "fleet_wide_fault").empty());

  IncidentEngine mixed;
  Feed(mixed, {Make(K::kNetDrops, 1000, "job0", "n0")});
  Feed(mixed, {Make(K::kJobHang, 1010, "job1")});
  Feed(mixed, {Make(K::kNodeSilent, 1020, "job2", "n2")});
  EXPECT_TRUE(OfKind(mixed, "fleet_wide_fault").empty());

  RuleSet off = DefaultRuleSet();
  off.settings.fleet_jobs = 0;
  IncidentEngine disabled(off);
  for (int i = 0; i < 3; ++i)
    Feed(disabled, {Make(K::kNetDrops, 1000 + i, "job" + std::to_string(i), "n" + std::to_string(i))});
  EXPECT_TRUE(OfKind(disabled, "fleet_wide_fault").empty());
}

// Engines that watch different jobs share what they saw; only the one
// that raises fleet incidents opens it (at its next Advance when the
// third job was another engine's), and one that starts raising while the
// window holds enough jobs opens it then.
TEST(LifecycleTest, FleetWideFaultsAreCountedEverywhereAndRaisedOnce) {
  IncidentEngine raiser, counter;
  counter.set_raises_fleet_incidents(false);
  counter.set_record_implications(true);
  raiser.set_record_implications(true);
  for (int i = 0; i < 3; ++i) {
    IncidentEngine& e = i == 1 ? raiser : counter;
    Feed(e, {Make(K::kJobHang, 1000 + i * 10.0, "job" + std::to_string(i))});
    std::vector<IncidentEngine::NodeImplication> shared;
    e.TakeImplications(&shared);
    ASSERT_EQ(shared.size(), 1u);
    EXPECT_EQ(shared[0].cause, "hang");
    EXPECT_EQ(shared[0].node, "");
    (i == 1 ? counter : raiser).AddImplication(shared[0]);
  }
  EXPECT_TRUE(OfKind(counter, "fleet_wide_fault").empty());
  EXPECT_TRUE(OfKind(raiser, "fleet_wide_fault").empty()) << "raised at its next look";
  std::vector<IncidentUpdate> u = raiser.Advance(1030);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.kind, "fleet_wide_fault");
  EXPECT_NE(u[0].incident.summary.find("hang faults in 3 jobs"), std::string::npos)
      << u[0].incident.summary;
  EXPECT_NE(u[0].incident.hint.find("share"), std::string::npos);
  // The counter takes over (the fleet leader moved): it opens its own.
  counter.set_raises_fleet_incidents(true);
  u = counter.Advance(1031);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].incident.kind, "fleet_wide_fault");
}

// An incident that opens as a P3 (a GPU's series above its band) and
// becomes P2 hardware when the throttle that explains it joins still
// implicates its node: the same GPU throttling in three jobs is a lemon.
// It counts once, however often it is raised again.
TEST(LifecycleTest, AnIncidentThatBecomesHardwareLaterImplicatesItsNode) {
  IncidentEngine e;
  for (int i = 0; i < 3; ++i) {
    const std::string job = "job" + std::to_string(i);
    const double ts = 1000 + i * 86400.0;
    Anomaly high = Make(K::kBaselineHigh, ts, job, "n60", 0);
    high.metric = "gpu_temperature_celsius";
    high.series_id = 100 + i;
    Feed(e, {high});
    ASSERT_EQ(OfKind(e, "lemon_node").size(), 0u);
    Anomaly throttle = Make(K::kThermalThrottle, ts + 20, job, "n60", 0);
    for (int k = 0; k < 3; ++k) Feed(e, {throttle});  // raised again
    bool p2 = false;
    for (const Incident& inc : e.Incidents()) {
      p2 |= inc.job == job && inc.kind == "gpu_thermal_throttle" && inc.severity == Severity::kP2;
    }
    ASSERT_TRUE(p2) << "job " << job;
  }
  const std::vector<Incident> lemons = OfKind(e, "lemon_node");
  ASSERT_EQ(lemons.size(), 1u);
  EXPECT_EQ(lemons[0].node, "n60");
  EXPECT_EQ(lemons[0].gpu, 0);
  EXPECT_NE(lemons[0].evidence.back().anomaly.detail.find("3 incidents in 3 jobs"),
            std::string::npos)
      << lemons[0].evidence.back().anomaly.detail;
}

// Repeat offenders span jobs, and jobs are spread over engines (detection
// shards, servers): every engine counts, only the one that raises fleet
// incidents opens the lemon, so a node is one lemon however its jobs were
// spread - even when an engine that only counts completed it. An engine
// that starts raising opens what its counts hold, but not a lemon it
// already knows (here: resolved by an operator).
TEST(LifecycleTest, RepeatOffendersAreRaisedOnceWhereverTheirJobsRan) {
  IncidentEngine raiser, counter;
  counter.set_raises_fleet_incidents(false);
  counter.set_record_implications(true);
  raiser.set_record_implications(true);
  for (int i = 0; i < 3; ++i) {
    IncidentEngine& e = i == 1 ? raiser : counter;  // the third is the counter's
    const double ts = 1000 + i * 3600.0;
    Anomaly a = Make(K::kPeerPowerLow, ts, "job" + std::to_string(i), "n17", 2);
    Feed(e, {a});
    Feed(e, {Cleared(a, ts + 10)});
    std::vector<IncidentEngine::NodeImplication> shared;
    e.TakeImplications(&shared);
    ASSERT_EQ(shared.size(), 1u);
    EXPECT_EQ(shared[0].node, "n17");
    (i == 1 ? counter : raiser).AddImplication(shared[0]);
  }
  EXPECT_TRUE(OfKind(counter, "lemon_node").empty()) << "it counts, it does not raise";
  EXPECT_TRUE(OfKind(raiser, "lemon_node").empty()) << "raised at its next look";
  std::vector<IncidentUpdate> u = raiser.Advance(1000 + 2 * 3600.0 + 20);
  std::vector<Incident> lemons = OfKind(raiser, "lemon_node");
  ASSERT_EQ(lemons.size(), 1u);
  EXPECT_EQ(lemons[0].node, "n17");
  EXPECT_EQ(lemons[0].gpu, 2);
  EXPECT_EQ(lemons[0].state, IncidentState::kFiring);
  for (const IncidentUpdate& v : raiser.Advance(1000 + 2 * 3600.0 + 30))
    EXPECT_NE(v.incident.kind, "lemon_node") << "raised once";

  // An engine that knows the lemon does not open it again when it starts
  // raising; one that does not know it opens it.
  IncidentEngine knows;
  for (int i = 0; i < 3; ++i) {
    const double ts = 1000 + i * 3600.0;
    Anomaly a = Make(K::kPeerPowerLow, ts, "job" + std::to_string(i), "n17", 2);
    Feed(knows, {a});
    Feed(knows, {Cleared(a, ts + 10)});
  }
  ASSERT_EQ(OfKind(knows, "lemon_node").size(), 1u);
  knows.set_raises_fleet_incidents(false);
  knows.set_raises_fleet_incidents(true);
  for (const IncidentUpdate& v : knows.Advance(1000 + 2 * 3600.0 + 20))
    EXPECT_NE(v.incident.kind, "lemon_node");
  counter.set_raises_fleet_incidents(true);
  u = counter.Advance(1000 + 2 * 3600.0 + 20);
  EXPECT_EQ(OfKind(counter, "lemon_node").size(), 1u);
}

// The fleet-wide fault windows outlive a restart with the repeat-offender
// history: two jobs' hangs before it and a third after are one fleet-wide
// fault. They are saved beside the nodes' histories (under "@hang"), so a
// history written before them still restores and an older reader takes the
// new one; a malformed one is refused and changes nothing.
TEST(LifecycleTest, FleetWideFaultWindowsOutliveARestart) {
  IncidentEngine before;
  for (int i = 0; i < 2; ++i) {
    Feed(before, {Make(K::kJobHang, 1000 + i * 10.0, "job" + std::to_string(i))});
  }
  const std::string saved = before.SaveHistory();
  EXPECT_EQ(nlohmann::json::parse(saved)["@hang"].size(), 2u) << saved;
  IncidentEngine after;
  ASSERT_TRUE(after.RestoreHistory(saved).ok()) << saved;
  Feed(after, {Make(K::kJobHang, 1100, "job2")});
  ASSERT_EQ(OfKind(after, "fleet_wide_fault").size(), 1u);
  EXPECT_NE(OfKind(after, "fleet_wide_fault")[0].summary.find("hang faults in 3 jobs"),
            std::string::npos);

  IncidentEngine old_format;
  ASSERT_TRUE(old_format
                  .RestoreHistory(R"({"n17": [{"ts": 1000, "job": "job0", "id": "inc-1",)"
                                  R"( "kind": "xid_fatal", "gpu": 2}]})")
                  .ok());
  const nlohmann::json history = nlohmann::json::parse(old_format.SaveHistory());
  EXPECT_EQ(history["n17"].size(), 1u) << history.dump();
  EXPECT_FALSE(old_format.RestoreHistory(R"({"@hang": 3})").ok());
  EXPECT_FALSE(old_format.RestoreHistory(R"([1])").ok());
  EXPECT_EQ(nlohmann::json::parse(old_format.SaveHistory()), history) << "nothing changed";
}

// GPU-hours at risk: the same P2 on a big job that has not saved for 3 h
// becomes P1, with the figure as evidence; on an 8-GPU job it does not.
class FakeContext : public JobContextSource {
 public:
  std::optional<JobContext> Context(std::string_view job) const override {
    JobContext c;
    c.gpus = job == "big" ? 1024 : 8;
    c.nodes = c.gpus / 8;
    c.run_start_ts = 0;
    c.last_checkpoint_ts = 1000;
    return c;
  }
};

TEST(LifecycleTest, GpuHoursAtRiskRaisesP2ToP1) {
  IncidentEngine e;
  FakeContext ctx;
  e.set_context_source(&ctx);
  const double t0 = 1000 + 3 * 3600;
  Feed(e, {Make(K::kFragmentation, t0, "big", "n1", 0),
          Make(K::kFragmentation, t0, "small", "n2", 0)});
  std::vector<IncidentUpdate> u = e.Advance(t0 + 61);
  ASSERT_EQ(u.size(), 1u);
  const Incident& inc = u[0].incident;
  EXPECT_EQ(u[0].type, UpdateType::kSeverityRaised);
  EXPECT_EQ(inc.job, "big");
  EXPECT_EQ(inc.severity, Severity::kP1);
  EXPECT_EQ(inc.kind, "gpu_memory_fragmentation");  // still named for its cause
  EXPECT_EQ(inc.severity_history.back().rule, "gpu_hours_at_risk");
  const Anomaly& risk = inc.evidence.back().anomaly;
  EXPECT_EQ(risk.kind, K::kGpuHoursAtRisk);
  EXPECT_GE(risk.value, 3000);
  EXPECT_NE(risk.detail.find("1024 GPUs"), std::string::npos) << risk.detail;
  // Nothing more later: raised once.
  EXPECT_TRUE(e.Advance(t0 + 3600).empty());
}

}  // namespace
}  // namespace vigil
