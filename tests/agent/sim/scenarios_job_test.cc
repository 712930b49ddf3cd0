// Job-level fault scenarios (training signals, slowdowns), and properties
// every scenario keeps: monotonic counters, lockstep nodes.
#include <cmath>
#include <cstdint>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/agent/sim/scenario_harness.h"

namespace vigil::agent {
namespace {

constexpr size_t kBefore = 50, kAfter = 200, kEnd = 399;

class EveryScenarioTest : public testing::TestWithParam<std::string> {};

TEST_P(EveryScenarioTest, CountersStayMonotonicAndNodesInLockstep) {
  HarnessOptions options;
  options.ticks = 300;
  HarnessRun run = RunScenario(GetParam(), options);
  ASSERT_TRUE(run.onsets[0].has_value());
  for (const NodeFrames& n : run.nodes) {
    std::map<std::string, double> last;
    for (size_t t = 0; t < n.values.size(); ++t) {
      if (t > 0) {
        EXPECT_GE(n.steps[t], n.steps[t - 1]);
      }
      for (const auto& [key, v] : n.values[t]) {
        if (key.find("_total") == std::string::npos) continue;
        ASSERT_TRUE(std::isfinite(v)) << key;
        auto it = last.find(key);
        if (it != last.end()) {
          EXPECT_GE(v, it->second) << n.node << " " << key;
        }
        last[key] = v;
      }
    }
  }
  size_t common =
      std::min(run.nodes[0].steps.size(), run.nodes[1].steps.size());
  for (size_t t = 0; t < common; ++t) {
    EXPECT_NEAR(run.nodes[0].steps[t], run.nodes[1].steps[t], 1) << t;
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, EveryScenarioTest,
                         testing::ValuesIn(FaultKindNames()));

TEST(ScenariosJobTest, DataloaderStallDipsPowerPeriodically) {
  HarnessRun run = RunScenario("dataloader_stall", {});
  const NodeFrames &other = run.nodes[0], &slow = run.nodes[1];
  // Ticks with the faulty node's GPUs near idle, spaced by a few steps.
  std::vector<size_t> dips;
  for (size_t t = 60; t < slow.values.size(); ++t) {
    double p = slow.values[t].at(GpuKey("gpu_power_watts", 0));
    double util = slow.values[t].at(GpuKey("gpu_utilization_ratio", 0));
    if (p < 300 && util < 0.6) dips.push_back(t);
  }
  EXPECT_GT(dips.size(), 20u);
  EXPECT_GT(Mean(slow, "train_dataloader_wait_seconds", kAfter, kEnd), 0.15);
  EXPECT_LT(Mean(other, "train_dataloader_wait_seconds", kAfter, kEnd), 0.02);
  EXPECT_LT(Mean(slow, "train_tokens_per_second", kAfter, kEnd),
            0.9 * Mean(slow, "train_tokens_per_second", 0, kBefore));
  double lat_before =
      Increase(slow, DevKey("disk_read_seconds_total", "nvme0n1"), 0, kBefore) /
      Increase(slow, DevKey("disk_reads_total", "nvme0n1"), 0, kBefore);
  double lat_after =
      Increase(slow, DevKey("disk_read_seconds_total", "nvme0n1"), kAfter,
               kEnd) /
      Increase(slow, DevKey("disk_reads_total", "nvme0n1"), kAfter, kEnd);
  EXPECT_GT(lat_after, 3 * lat_before);
  // The other node waits at the barrier: power dips, utilization stays.
  double min_other_util = 1;
  for (size_t t = 60; t < other.values.size(); ++t) {
    min_other_util = std::min(
        min_other_util, other.values[t].at(GpuKey("gpu_utilization_ratio", 0)));
  }
  EXPECT_GT(min_other_util, 0.9);
}

TEST(ScenariosJobTest, LossNanOnEveryNode) {
  HarnessRun run = RunScenario("loss_nan", {});
  for (const NodeFrames& n : run.nodes) {
    EXPECT_TRUE(std::isfinite(n.values[59].at("train_loss")));
    EXPECT_TRUE(std::isnan(n.values[kEnd].at("train_loss"))) << n.node;
    EXPECT_FALSE(std::isfinite(n.values[kEnd].at("train_grad_norm")));
  }
}

TEST(ScenariosJobTest, GradExplosionGrowsExponentially) {
  for (bool nan : {false, true}) {
    ScenarioSpec spec = *ParseScenarioSpec(
        std::string(R"({"faults": [{"kind": "grad_explosion", "nan": )") +
        (nan ? "true" : "false") + "}]}");
    HarnessRun run = RunSpec(spec, {});
    const NodeFrames& n = run.nodes[0];
    double g0 = Mean(n, "train_grad_norm", 0, kBefore);
    EXPECT_LT(g0, 2);
    // About 10 steps (17 s) after the onset it is an order of magnitude up.
    EXPECT_GT(n.values[60 + 20].at("train_grad_norm"), 5 * g0);
    EXPECT_GT(n.values[60 + 20].at("train_loss"),
              1.05 * Mean(n, "train_loss", 0, kBefore));
    double last = n.values[kEnd].at("train_grad_norm");
    if (nan) {
      EXPECT_TRUE(std::isnan(last));
      EXPECT_TRUE(std::isnan(n.values[kEnd].at("train_loss")));
    } else {
      EXPECT_GT(last, 1000 * g0);
      EXPECT_TRUE(std::isfinite(n.values[kEnd].at("train_loss")));
    }
  }
}

TEST(ScenariosJobTest, LossOscillatesWithNormalGradAndSlowData) {
  HarnessRun run = RunScenario("loss_oscillation", {});
  const NodeFrames& n = run.nodes[0];
  auto swing = [&](size_t from, size_t to) {
    double sum = 0;
    for (size_t t = from + 1; t < to; ++t) {
      sum += std::abs(n.values[t].at("train_loss") -
                      n.values[t - 1].at("train_loss"));
    }
    return sum / (to - from - 1);
  };
  EXPECT_GT(swing(kAfter, kEnd), 8 * swing(0, kBefore));
  EXPECT_NEAR(Mean(n, "train_grad_norm", kAfter, kEnd),
              Mean(n, "train_grad_norm", 0, kBefore), 0.3);
  EXPECT_GT(Mean(n, "train_dataloader_wait_seconds", kAfter, kEnd), 0.1);
}

TEST(ScenariosJobTest, ThroughputDropsSlowTheWholeJobWithoutACulprit) {
  for (auto [name, drop] :
       {std::pair<std::string, double>{"throughput_drop_20", 0.20},
        {"throughput_drop_35", 0.35}}) {
    HarnessOptions options;
    options.overrides.at_seconds = 60;
    HarnessRun run = RunScenario(name, options);
    for (const NodeFrames& n : run.nodes) {
      double before = Mean(n, "train_tokens_per_second", 0, kBefore);
      double after = Mean(n, "train_tokens_per_second", kAfter, kEnd);
      EXPECT_NEAR(1 - after / before, drop, 0.04) << name;
      EXPECT_GT(Mean(n, "train_step_time_seconds", kAfter, kEnd),
                Mean(n, "train_step_time_seconds", 0, kBefore) * 1.15);
      double p_before = Mean(n, GpuKey("gpu_power_watts", 1), 0, kBefore);
      double p_after = Mean(n, GpuKey("gpu_power_watts", 1), kAfter, kEnd);
      EXPECT_LT(p_after, p_before - 10) << name;
      EXPECT_GT(p_after, p_before - 100) << name;
      for (int g = 0; g < 4; ++g) {
        EXPECT_EQ(Mean(n, GpuKey("gpu_throttle_reasons", g), kAfter, kEnd) >= 8,
                  false);
      }
    }
  }
}

TEST(ScenariosJobTest, LowMfuFromTheStart) {
  HarnessOptions options;
  options.overrides = {};  // the kind's default start: the first step
  HarnessRun run = RunScenario("low_mfu", options);
  EXPECT_EQ(run.faults[0].spec.at_seconds, 0);
  for (const NodeFrames& n : run.nodes) {
    EXPECT_NEAR(Mean(n, "train_mfu_ratio", 5, kEnd), 0.30, 0.03);
  }
}

TEST(ScenariosJobTest, LossScaleHalvesRepeatedly) {
  HarnessRun run = RunScenario("loss_scale_thrash", {});
  const NodeFrames& n = run.nodes[0];
  EXPECT_EQ(n.values[50].at("train_loss_scale"), 65536);
  int halvings = 0;
  for (size_t t = 61; t < n.values.size(); ++t) {
    double prev = n.values[t - 1].at("train_loss_scale");
    double cur = n.values[t].at("train_loss_scale");
    EXPECT_LE(cur, prev);
    if (cur < prev) ++halvings;
  }
  EXPECT_GE(halvings, 10);
  EXPECT_EQ(run.nodes[1].values[kEnd].at("train_loss_scale"),
            n.values[kEnd].at("train_loss_scale"));
}

TEST(ScenariosJobTest, StartsAtAStep) {
  HarnessOptions options;
  options.overrides = {};
  options.overrides.at_step = 5100;
  HarnessRun run = RunScenario("ecc_dbe", options);
  ASSERT_TRUE(run.onsets[0].has_value());
  EXPECT_EQ(run.onsets[0]->step, 5100);
}

}  // namespace
}  // namespace vigil::agent
