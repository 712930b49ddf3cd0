// Every simulated fault replayed through vigil-replay's code path: the
// expected incidents (agent::ExpectedIncidents) with the right severity,
// kind and localisation within a delay bound, and no unexplained P0-P2
// incident; plus healthy runs (checkpoints, warm-up, noise, per-GPU
// offsets) of 10 job-hours in all that raise no P0-P2 incident.
#include <ostream>
#include <string>
#include <vector>

#include "agent/sim/scenario_spec.h"
#include "gtest/gtest.h"
#include "tests/server/replay/scenario_replay.h"

namespace vigil {
namespace {

// The detector learns over the first 1000 steps (~1700 s at 1.7 s/step);
// faults start well after that and get half an hour to show.
constexpr double kFaultAtSeconds = 3000;
constexpr double kAfterFaultSeconds = 1800;

struct FaultCase {
  std::string kind;
  // Bound on (first matching line ts) - (time the expected condition
  // exists: fault start + the entry's after_seconds), for every entry.
  double max_delay_s;
};

// One case per fault kind of the simulator.
const FaultCase kCases[] = {
    {"thermal_throttle", 600},   {"nvlink_degradation", 600},
    {"packet_loss_hang", 600},   {"dataloader_stall", 600},
    {"loss_nan", 600},           {"grad_explosion", 600},
    {"loss_oscillation", 600},   {"oom_growth", 600},
    {"fragmentation", 600},      {"ecc_dbe", 600},
    {"ecc_sbe_storm", 600},      {"gpu_fell_off_bus", 600},
    {"node_down", 600},          {"throughput_drop_20", 600},
    {"throughput_drop_35", 600}, {"gpu_power_low_55w", 600},
    // Starts with the job: warm-up (200 steps, ~340 s) and 54 of 60
    // samples come first.
    {"low_mfu", 900},            {"loss_scale_thrash", 600},
    {"nvlink_bandwidth_degraded", 600},
    {"xid_storm", 600},
    // 3 of the 4 nodes at once: one incident naming them.
    {"rack_down", 600},
};

void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.kind; }

std::string CaseName(const testing::TestParamInfo<FaultCase>& info) {
  return info.param.kind;
}

class FaultReplayTest : public testing::TestWithParam<FaultCase> {};

TEST_P(FaultReplayTest, RaisesTheExpectedIncident) {
  const FaultCase& c = GetParam();
  ScenarioRunOptions options;
  options.scenario = c.kind;
  options.cluster.nodes = 4;
  options.cluster.gpus = 8;
  options.cluster.seed = 3;
  // low_mfu is a property of the job from its first step.
  if (c.kind != "low_mfu") options.overrides.at_seconds = kFaultAtSeconds;
  options.cluster.seconds =
      (c.kind == "low_mfu" ? 0 : kFaultAtSeconds) + kAfterFaultSeconds;
  const ScenarioReplay replay = RunAndReplay(options);
  ASSERT_EQ(replay.truth["faults"].size(), 1u);
  ASSERT_FALSE(replay.truth["faults"][0]["start_ts"].is_null());
  EXPECT_TRUE(replay.bad_lines.empty());
  const Score score = ScoreReplay(replay);
  const std::string report = score.Describe(replay);
  ASSERT_FALSE(score.entries.empty()) << report;
  const double start = replay.truth["faults"][0]["start_ts"].get<double>();
  for (const EntryResult& e : score.entries) {
    ASSERT_TRUE(e.hit.has_value()) << "missed " << e.expected.dump() << "\n"
                                   << report;
    const double exists_after = e.expected["ts"].get<double>() - start;
    EXPECT_LE(e.delay_s - exists_after, c.max_delay_s)
        << e.expected.dump() << "\n"
        << report;
  }
  EXPECT_TRUE(score.false_alarms.empty()) << report;
}

INSTANTIATE_TEST_SUITE_P(EveryFault, FaultReplayTest, testing::ValuesIn(kCases),
                         CaseName);

// The table covers every kind the simulator offers.
TEST(FaultReplayCoverageTest, EveryFaultKindHasACase) {
  for (const std::string& kind : agent::FaultKindNames()) {
    bool found = false;
    for (const FaultCase& c : kCases) found = found || c.kind == kind;
    EXPECT_TRUE(found) << kind << " has no FaultReplayTest case";
  }
}

// Healthy job-hours: 2 runs x 5 h x 4 nodes x 8 GPUs, different seeds.
class CleanReplayTest : public testing::TestWithParam<uint64_t> {};

TEST_P(CleanReplayTest, RaisesNoP0ToP2Incident) {
  ScenarioRunOptions options;
  options.cluster.nodes = 4;
  options.cluster.gpus = 8;
  options.cluster.seed = GetParam();
  options.cluster.seconds = 5 * 3600;
  const ScenarioReplay replay = RunAndReplay(options);
  EXPECT_TRUE(replay.bad_lines.empty());
  EXPECT_GT(replay.stats.samples, 0);
  const Score score = ScoreReplay(replay);
  EXPECT_TRUE(score.false_alarms.empty()) << score.Describe(replay);
}

INSTANTIATE_TEST_SUITE_P(TenJobHours, CleanReplayTest,
                         testing::Values(uint64_t{11}, uint64_t{12}));

}  // namespace
}  // namespace vigil
