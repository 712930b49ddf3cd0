#include <string>
#include <vector>

#include "escalation/escalation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr double kT0 = 1800000000;

ActionRequest Request(std::string action, std::string job, std::string node,
                      Severity severity = Severity::kP0) {
  ActionRequest r;
  r.incident_id = "inc-1";
  r.severity = severity;
  r.action = std::move(action);
  r.job = std::move(job);
  r.node = std::move(node);
  return r;
}

ActionRequest Cordon(std::string job, std::string node) {
  return Request("cordon_node", std::move(job), std::move(node));
}

ActionRequest Pause(std::string job) {
  return Request("checkpoint_then_pause_job", std::move(job), "");
}

TEST(ActionGateTest, RunsWhatNoInterlockStops) {
  ActionGate gate{InterlockConfig()};
  const ActionDecision d = gate.Decide(Cordon("llama", "n3"), 100, false, kT0);
  EXPECT_EQ(d.verdict, ActionVerdict::kRun);
  EXPECT_FALSE(d.tripped);
  EXPECT_THAT(d.reason, HasSubstr("cordon node n3 of job llama"));
  EXPECT_EQ(gate.Decide(Pause("llama"), 100, false, kT0).verdict,
            ActionVerdict::kRun);
  EXPECT_FALSE(gate.tripped());
}

TEST(ActionGateTest, DryRunRecordsOnlyAndNeverCounts) {
  InterlockConfig config;
  config.dry_run = true;
  ActionGate gate(config);
  for (int i = 0; i < 20; ++i) {
    const ActionDecision d = gate.Decide(
        Cordon("llama", "n" + std::to_string(i)), 100, false, kT0 + i);
    EXPECT_EQ(d.verdict, ActionVerdict::kDryRun);
    EXPECT_THAT(d.reason, HasSubstr("dry run: would cordon node"));
    EXPECT_EQ(gate.Decide(Pause("llama"), 100, false, kT0 + i).verdict,
              ActionVerdict::kDryRun);
  }
  EXPECT_FALSE(gate.tripped());
  EXPECT_EQ(
      gate.Decide(Request("diagnostic_report", "llama", ""), 100, false, kT0)
          .verdict,
      ActionVerdict::kDryRun);
  EXPECT_EQ(
      gate.Decide(Request("uncordon_node", "llama", "n1"), 100, false, kT0)
          .verdict,
      ActionVerdict::kDryRun);
}

TEST(ActionGateTest, ApprovalBySeverity) {
  ActionGate gate{InterlockConfig()};  // approval for P1
  const ActionRequest p1 = Request("pause_job", "llama", "", Severity::kP1);
  const ActionDecision wait = gate.Decide(p1, 100, false, kT0);
  EXPECT_EQ(wait.verdict, ActionVerdict::kNeedsApproval);
  EXPECT_THAT(wait.reason, HasSubstr("P1 actions need one"));
  EXPECT_EQ(gate.Decide(p1, 100, true, kT0).verdict, ActionVerdict::kRun);
  EXPECT_EQ(gate.Decide(Request("pause_job", "llama", "", Severity::kP0), 100,
                        false, kT0)
                .verdict,
            ActionVerdict::kRun);
  // Reports and uncordons never wait.
  EXPECT_EQ(
      gate.Decide(Request("diagnostic_report", "llama", "", Severity::kP1), 100,
                  false, kT0)
          .verdict,
      ActionVerdict::kRun);
}

// A node named only by remote-written labels (no agent streams it) may be
// a remote_write token holder's invention: nothing runs on it unapproved.
TEST(ActionGateTest, ClaimedNodesWaitForAHuman) {
  ActionGate gate{InterlockConfig()};
  ActionRequest cordon = Cordon("llama", "n3");
  cordon.unverified_node = true;
  const ActionDecision wait = gate.Decide(cordon, 100, false, kT0);
  EXPECT_EQ(wait.verdict, ActionVerdict::kNeedsApproval);
  EXPECT_THAT(wait.reason, HasSubstr("remote-written"));
  ActionRequest pause = Pause("llama");
  pause.unverified_node = true;
  EXPECT_EQ(gate.Decide(pause, 100, false, kT0).verdict, ActionVerdict::kNeedsApproval);
  EXPECT_EQ(gate.Decide(cordon, 100, /*approved=*/true, kT0).verdict, ActionVerdict::kRun);
}

TEST(ActionGateTest, BreakerTripsOnTheCordonCountAndStaysOpen) {
  ActionGate gate{InterlockConfig()};  // 3 cordons per 60 min
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(
        gate.Decide(Cordon("job" + std::to_string(i), "n" + std::to_string(i)),
                    100, false, kT0 + i)
            .verdict,
        ActionVerdict::kRun);
  }
  const ActionDecision trip =
      gate.Decide(Cordon("job9", "n9"), 100, false, kT0 + 10);
  EXPECT_EQ(trip.verdict, ActionVerdict::kHalted);
  EXPECT_TRUE(trip.tripped);
  EXPECT_EQ(trip.reason,
            "circuit breaker: 3 cordons in the last 60 min (max 3)");
  EXPECT_TRUE(gate.tripped());
  // Everything after is halted without tripping again, pauses included,
  // even long after the window.
  const ActionDecision later =
      gate.Decide(Cordon("job8", "n8"), 100, false, kT0 + 100000);
  EXPECT_EQ(later.verdict, ActionVerdict::kHalted);
  EXPECT_FALSE(later.tripped);
  EXPECT_THAT(later.reason, HasSubstr("circuit breaker is open"));
  EXPECT_EQ(gate.Decide(Pause("job8"), 100, true, kT0 + 100000).verdict,
            ActionVerdict::kHalted);
  // Reports and uncordons are never halted.
  EXPECT_EQ(gate.Decide(Request("diagnostic_report", "job8", ""), 100, false,
                        kT0 + 100000)
                .verdict,
            ActionVerdict::kRun);
  EXPECT_EQ(gate.Decide(Request("uncordon_node", "job0", "n0"), 100, false,
                        kT0 + 100000)
                .verdict,
            ActionVerdict::kRun);
}

// The fleet's count (cluster mode) as a fake: `slots` left, or an error.
class FakeSharedBreaker : public SharedBreaker {
 public:
  absl::StatusOr<bool> Take(bool cordon, int limit, double window_seconds) override {
    asked.push_back({cordon, limit, window_seconds});
    if (!reachable) return absl::UnavailableError("etcd: connection refused");
    if (slots == 0) return false;
    --slots;
    return true;
  }
  struct Ask {
    bool cordon;
    int limit;
    double window;
  };
  std::vector<Ask> asked;
  int slots = 0;
  bool reachable = true;
};

TEST(ActionGateTest, ASharedBreakerFullTripsThisGateToo) {
  ActionGate gate{InterlockConfig()};  // 3 cordons, 5 pauses per 60 min
  FakeSharedBreaker fleet;
  fleet.slots = 1;  // the other servers took two of the three
  EXPECT_EQ(gate.Decide(Cordon("a", "n1"), 100, false, kT0, &fleet).verdict,
            ActionVerdict::kRun);
  ASSERT_EQ(fleet.asked.size(), 1u);
  EXPECT_TRUE(fleet.asked[0].cordon);
  EXPECT_EQ(fleet.asked[0].limit, 3);
  EXPECT_EQ(fleet.asked[0].window, 3600);
  // A node already cordoned for the job is not counted, locally or fleet-wide.
  EXPECT_EQ(gate.Decide(Cordon("a", "n1"), 100, false, kT0 + 1, &fleet).verdict,
            ActionVerdict::kRun);
  EXPECT_EQ(fleet.asked.size(), 1u);
  const ActionDecision full = gate.Decide(Cordon("b", "n2"), 100, false, kT0 + 2, &fleet);
  EXPECT_EQ(full.verdict, ActionVerdict::kHalted);
  EXPECT_TRUE(full.tripped);
  EXPECT_EQ(full.reason,
            "circuit breaker: the fleet's servers together ran 3 cordons in the last 60 "
            "min (max 3)");
  EXPECT_TRUE(gate.tripped());
  // Halted from now on without asking the fleet again.
  EXPECT_EQ(gate.Decide(Pause("c"), 100, true, kT0 + 3, &fleet).verdict,
            ActionVerdict::kHalted);
  EXPECT_EQ(fleet.asked.size(), 2u);
}

TEST(ActionGateTest, AnUnreachableSharedBreakerWaitsForAHuman) {
  ActionGate gate{InterlockConfig()};
  FakeSharedBreaker fleet;
  fleet.reachable = false;
  const ActionDecision d = gate.Decide(Pause("a"), 100, false, kT0, &fleet);
  EXPECT_EQ(d.verdict, ActionVerdict::kNeedsApproval);
  EXPECT_THAT(d.reason, HasSubstr("fleet-wide circuit breaker cannot be asked"));
  EXPECT_THAT(d.reason, HasSubstr("connection refused"));
  EXPECT_FALSE(gate.tripped());
  // Approved by a human, it runs (and counts here).
  EXPECT_EQ(gate.Decide(Pause("a"), 100, true, kT0, &fleet).verdict, ActionVerdict::kRun);
  // The pause was asked for with the pause limit.
  EXPECT_FALSE(fleet.asked.back().cordon);
  EXPECT_EQ(fleet.asked.back().limit, 5);
}

TEST(ActionGateTest, TripOpensTheBreakerForAnotherServersReason) {
  ActionGate gate{InterlockConfig()};
  gate.Trip("circuit breaker: 3 cordons in the last 60 min (max 3) (on s1/a)");
  EXPECT_TRUE(gate.tripped());
  const ActionDecision d = gate.Decide(Cordon("a", "n1"), 100, false, kT0);
  EXPECT_EQ(d.verdict, ActionVerdict::kHalted);
  EXPECT_FALSE(d.tripped);
  EXPECT_THAT(d.reason, HasSubstr("(on s1/a)"));
  gate.Reset(kT0);
  EXPECT_EQ(gate.Decide(Cordon("a", "n1"), 100, false, kT0).verdict, ActionVerdict::kRun);
}

TEST(ActionGateTest, TheWindowSlides) {
  ActionGate gate{InterlockConfig()};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(
        gate.Decide(Cordon("job" + std::to_string(i), "n"), 100, false, kT0 + i)
            .verdict,
        ActionVerdict::kRun);
  }
  // The first cordon left the window.
  EXPECT_EQ(gate.Decide(Cordon("job3", "n"), 100, false, kT0 + 3600).verdict,
            ActionVerdict::kRun);
  EXPECT_EQ(gate.Decide(Cordon("job4", "n"), 100, false, kT0 + 3600).verdict,
            ActionVerdict::kHalted);
}

TEST(ActionGateTest, BreakerTripsOnThePauseCount) {
  InterlockConfig config;
  config.max_pauses = 2;
  ActionGate gate(config);
  EXPECT_EQ(gate.Decide(Pause("a"), 8, false, kT0).verdict,
            ActionVerdict::kRun);
  EXPECT_EQ(gate.Decide(Request("pause_job", "b", ""), 8, false, kT0).verdict,
            ActionVerdict::kRun);
  // Cordons are counted apart.
  EXPECT_EQ(gate.Decide(Cordon("c", "n1"), 8, false, kT0).verdict,
            ActionVerdict::kRun);
  const ActionDecision trip = gate.Decide(Pause("d"), 8, false, kT0 + 1);
  EXPECT_EQ(trip.verdict, ActionVerdict::kHalted);
  EXPECT_TRUE(trip.tripped);
  EXPECT_EQ(trip.reason,
            "circuit breaker: 2 pauses in the last 60 min (max 2)");
  EXPECT_EQ(gate.Decide(Cordon("e", "n1"), 8, false, kT0 + 2).verdict,
            ActionVerdict::kHalted);
}

TEST(ActionGateTest, BreakerTripsOnAJobsShareOfNodes) {
  InterlockConfig config;
  config.max_cordons = 100;
  ActionGate gate(config);  // 20% of a job's nodes
  EXPECT_EQ(gate.Decide(Cordon("llama", "n1"), 10, false, kT0).verdict,
            ActionVerdict::kRun);
  EXPECT_EQ(gate.Decide(Cordon("llama", "n2"), 10, false, kT0).verdict,
            ActionVerdict::kRun);
  // Cordoning an already cordoned node again takes no more of the job.
  EXPECT_EQ(gate.Decide(Cordon("llama", "n2"), 10, false, kT0).verdict,
            ActionVerdict::kRun);
  const ActionDecision trip =
      gate.Decide(Cordon("llama", "n3"), 10, false, kT0);
  EXPECT_EQ(trip.verdict, ActionVerdict::kHalted);
  EXPECT_TRUE(trip.tripped);
  EXPECT_EQ(trip.reason,
            "circuit breaker: cordoning n3 would take 3 of job llama's 10 "
            "nodes (max 2, 20%)");
}

TEST(ActionGateTest, ASingleNodeJobMayLoseItsOneNode) {
  InterlockConfig config;
  config.max_cordons = 100;
  ActionGate gate(config);
  EXPECT_EQ(gate.Decide(Cordon("tiny", "n1"), 1, false, kT0).verdict,
            ActionVerdict::kRun);
  EXPECT_EQ(gate.Decide(Cordon("small", "n5"), 4, false, kT0).verdict,
            ActionVerdict::kRun);  // floor(0.8) = 0, but at least one
  const ActionDecision trip = gate.Decide(Cordon("small", "n6"), 4, false, kT0);
  EXPECT_EQ(trip.verdict, ActionVerdict::kHalted);
  EXPECT_TRUE(trip.tripped);
}

TEST(ActionGateTest, UncordonFreesANodeOfTheJob) {
  InterlockConfig config;
  config.max_cordons = 100;
  ActionGate gate(config);
  ASSERT_EQ(gate.Decide(Cordon("llama", "n1"), 10, false, kT0).verdict,
            ActionVerdict::kRun);
  ASSERT_EQ(gate.Decide(Cordon("llama", "n2"), 10, false, kT0).verdict,
            ActionVerdict::kRun);
  EXPECT_EQ(
      gate.Decide(Request("uncordon_node", "llama", "n1"), 10, false, kT0 + 1)
          .verdict,
      ActionVerdict::kRun);
  EXPECT_EQ(gate.Decide(Cordon("llama", "n3"), 10, false, kT0 + 2).verdict,
            ActionVerdict::kRun);
  EXPECT_EQ(gate.Decide(Cordon("llama", "n4"), 10, false, kT0 + 3).verdict,
            ActionVerdict::kHalted);
}

TEST(ActionGateTest, ResetClosesTheBreaker) {
  ActionGate gate{InterlockConfig()};
  for (int i = 0; i < 4; ++i) {
    gate.Decide(Cordon("job" + std::to_string(i), "n"), 100, false, kT0);
  }
  ASSERT_TRUE(gate.tripped());
  gate.Reset(kT0 + 10);
  EXPECT_FALSE(gate.tripped());
  EXPECT_EQ(gate.Decide(Cordon("job7", "n"), 100, false, kT0 + 11).verdict,
            ActionVerdict::kRun);
  EXPECT_EQ(gate.Decide(Pause("job7"), 100, false, kT0 + 11).verdict,
            ActionVerdict::kRun);
}

TEST(ActionGateTest, MalformedRequestsNeverRun) {
  ActionGate gate{InterlockConfig()};
  EXPECT_EQ(
      gate.Decide(Request("reboot_node", "a", "n1"), 4, true, kT0).verdict,
      ActionVerdict::kHalted);
  EXPECT_EQ(gate.Decide(Cordon("a", ""), 4, true, kT0).verdict,
            ActionVerdict::kHalted);
  EXPECT_FALSE(gate.tripped());
}

TEST(ActionGateTest, ExportImportKeepsTheBreaker) {
  InterlockConfig config;
  config.max_cordons = 2;
  ActionGate gate(config);
  ASSERT_EQ(gate.Decide(Cordon("llama", "n1"), 10, false, kT0).verdict,
            ActionVerdict::kRun);
  ActionGate restored(config);
  ASSERT_TRUE(restored.Import(json::parse(gate.Export().dump())).ok());
  EXPECT_EQ(restored.Export(), gate.Export());
  // The cordon of n1 still counts: one more fits, the next trips.
  EXPECT_EQ(restored.Decide(Cordon("gpt", "m1"), 10, false, kT0 + 1).verdict,
            ActionVerdict::kRun);
  EXPECT_TRUE(
      restored.Decide(Cordon("bert", "k1"), 10, false, kT0 + 2).tripped);
  ActionGate tripped(config);
  ASSERT_TRUE(tripped.Import(restored.Export()).ok());
  EXPECT_TRUE(tripped.tripped());
  EXPECT_EQ(tripped.Decide(Pause("llama"), 10, false, kT0 + 3).verdict,
            ActionVerdict::kHalted);
}

TEST(ActionGateTest, ImportRejectsForeignDocuments) {
  ActionGate gate{InterlockConfig()};
  const json good = gate.Export();
  json bad_times = good;
  bad_times["cordons"] = json::array({"yesterday"});
  json bad_nodes = good;
  bad_nodes["cordoned"] = {{"llama", 3}};
  json wrong_version = good;
  wrong_version["version"] = 7;
  json missing = good;
  missing.erase("tripped");
  for (const json& doc : {json(42), json::object(), bad_times, bad_nodes,
                          wrong_version, missing}) {
    EXPECT_EQ(gate.Import(doc).code(), absl::StatusCode::kInvalidArgument)
        << doc.dump();
  }
  EXPECT_EQ(gate.Export(), good);
}

TEST(ActionGateTest, VerdictNames) {
  EXPECT_EQ(ActionVerdictName(ActionVerdict::kRun), "run");
  EXPECT_EQ(ActionVerdictName(ActionVerdict::kDryRun), "dry_run");
  EXPECT_EQ(ActionVerdictName(ActionVerdict::kNeedsApproval), "needs_approval");
  EXPECT_EQ(ActionVerdictName(ActionVerdict::kHalted), "halted");
}

}  // namespace
}  // namespace vigil
