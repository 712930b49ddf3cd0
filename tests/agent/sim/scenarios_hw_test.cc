// Hardware and network fault scenarios show their signature on the named
// node and GPU only, and their job-wide effects on every node.
#include <cmath>
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/agent/sim/scenario_harness.h"

namespace vigil::agent {
namespace {

// Frames before the fault (which starts 60 s in) and well after it.
constexpr size_t kBefore = 50, kAfter = 300, kEnd = 399;

TEST(ScenariosHwTest, ThermalThrottleOnNamedGpuSlowsEveryNode) {
  HarnessRun run = RunScenario("thermal_throttle", {});
  const NodeFrames &healthy = run.nodes[0], &hot = run.nodes[1];
  for (size_t t = kAfter; t < hot.values.size(); ++t) {
    int bits =
        static_cast<int>(hot.values[t].at(GpuKey("gpu_throttle_reasons", 3)));
    EXPECT_TRUE(bits & 0x20) << t;
    EXPECT_TRUE(bits & 0x40) << t;
    for (int g = 0; g < 3; ++g) {
      int other =
          static_cast<int>(hot.values[t].at(GpuKey("gpu_throttle_reasons", g)));
      EXPECT_EQ(other & 0x68, 0) << g;
    }
  }
  EXPECT_LT(Mean(hot, GpuKey("gpu_sm_clock_mhz", 3), kAfter, kEnd), 1650);
  EXPECT_GT(Mean(hot, GpuKey("gpu_sm_clock_mhz", 2), kAfter, kEnd), 1900);
  EXPECT_GT(Mean(hot, GpuKey("gpu_temperature_celsius", 3), kAfter, kEnd), 86);
  EXPECT_LT(Mean(hot, GpuKey("gpu_temperature_celsius", 2), kAfter, kEnd), 78);
  // The hot card draws less than its peers, which wait for it.
  double p3 = Mean(hot, GpuKey("gpu_power_watts", 3), kAfter, kEnd);
  double p2 = Mean(hot, GpuKey("gpu_power_watts", 2), kAfter, kEnd);
  EXPECT_LT(p3, p2 - 50);
  // The barrel: both nodes step more slowly, in lockstep.
  for (const NodeFrames* n : {&healthy, &hot}) {
    double before = n->steps[kBefore] - n->steps[0];
    double after = n->steps[kEnd] - n->steps[kEnd - kBefore];
    EXPECT_LT(after, before * 0.85) << n->node;
    EXPECT_GT(Mean(*n, "train_step_time_seconds", kAfter, kEnd),
              1.2 * Mean(*n, "train_step_time_seconds", 0, kBefore));
  }
  EXPECT_NEAR(healthy.steps[kEnd], hot.steps[kEnd], 1);
  // The other node's GPU 3 is not the one throttling.
  for (size_t t = kAfter; t < healthy.values.size(); ++t) {
    int bits = static_cast<int>(
        healthy.values[t].at(GpuKey("gpu_throttle_reasons", 3)));
    EXPECT_EQ(bits & 0x68, 0);
  }
}

TEST(ScenariosHwTest, NvlinkDegradationErrorsClimbAndTrafficVanishes) {
  HarnessRun run = RunScenario("nvlink_degradation", {});
  const NodeFrames& n = run.nodes[1];
  std::string crc = GpuKey("gpu_nvlink_crc_errors_total", 3);
  EXPECT_EQ(Increase(n, crc, 0, kBefore), 0);
  EXPECT_GT(Increase(n, crc, 100, 101 + 10), 0);
  EXPECT_GT(Increase(n, crc, kAfter, kEnd), Increase(n, crc, 70, 100));
  EXPECT_GT(Increase(n, GpuKey("gpu_nvlink_replay_errors_total", 3), 60, kEnd),
            0);
  EXPECT_EQ(n.values[kEnd].at(GpuKey("gpu_xid_last", 3)), 74);
  double tx3 =
      Increase(n, GpuKey("gpu_nvlink_tx_bytes_total", 3), kAfter, kEnd);
  double tx2 =
      Increase(n, GpuKey("gpu_nvlink_tx_bytes_total", 2), kAfter, kEnd);
  EXPECT_LT(tx3, 0.01 * tx2);
  EXPECT_EQ(Increase(n, GpuKey("gpu_nvlink_crc_errors_total", 2), 0, kEnd), 0);
  EXPECT_EQ(Increase(run.nodes[0], crc, 0, kEnd), 0);
  EXPECT_LT(run.nodes[0].steps[kEnd] - run.nodes[0].steps[kAfter],
            0.7 * (kEnd - kAfter) / 1.7);
}

TEST(ScenariosHwTest, PacketLossThenEveryNodeHangs) {
  HarnessRun run = RunScenario("packet_loss_hang", {});
  const ResolvedFault& f = run.faults[0];
  EXPECT_EQ(f.spec.dev, "mlx5_3");
  const NodeFrames& n = run.nodes[1];
  std::string drops = DevKey("net_drops_total", "mlx5_3");
  EXPECT_EQ(Increase(n, drops, 0, kBefore), 0);
  EXPECT_GT(Increase(n, drops, 61, 61 + 30), 0);
  EXPECT_GT(Increase(n, DevKey("net_retransmits_total", "mlx5_3"), 61, 91), 0);
  EXPECT_EQ(Increase(n, DevKey("net_drops_total", "mlx5_2"), 0, kEnd), 0);
  size_t hung = 60 + static_cast<size_t>(f.hang_after_seconds) + 5;
  ASSERT_LT(hung + 20, kEnd);
  for (const NodeFrames& node : run.nodes) {
    EXPECT_EQ(node.steps[hung], node.steps[kEnd]) << node.node;  // no step
    EXPECT_GT(node.steps[hung], node.steps[0] + 50);
    for (int g = 0; g < 4; ++g) {
      double p = Mean(node, GpuKey("gpu_power_watts", g), hung, kEnd);
      EXPECT_GT(p, 70);
      EXPECT_LT(p, 100);
      EXPECT_GT(Mean(node, GpuKey("gpu_utilization_ratio", g), hung, kEnd),
                0.97);
      EXPECT_LT(
          Increase(node, GpuKey("gpu_nvlink_tx_bytes_total", g), hung, kEnd),
          1e6);
    }
    EXPECT_LT(
        Increase(node, DevKey("net_tx_bytes_total", "mlx5_0"), hung, kEnd),
        1e6);
  }
}

TEST(ScenariosHwTest, GpuFellOffTheBusDisappearsAfterXid79) {
  HarnessRun run = RunScenario("gpu_fell_off_bus", {});
  const NodeFrames& n = run.nodes[1];
  std::string xid = GpuKey("gpu_xid_errors_total", 3);
  size_t at = 0;
  while (at < n.values.size() && n.values[at].at(xid) == 0) ++at;
  ASSERT_LT(at, n.values.size());
  EXPECT_EQ(n.values[at].at(GpuKey("gpu_xid_last", 3)), 79);
  for (size_t t = at + 1; t < n.values.size(); ++t) {
    EXPECT_EQ(n.values[t].count(GpuKey("gpu_power_watts", 3)), 0u);
    EXPECT_EQ(n.values[t].count(GpuKey("gpu_power_watts", 2)), 1u);
  }
  for (const NodeFrames& node : run.nodes) {
    EXPECT_EQ(node.steps[at + 5], node.steps[kEnd]) << node.node;
  }
  EXPECT_EQ(run.nodes[0].values[kEnd].count(GpuKey("gpu_power_watts", 3)), 1u);
}

TEST(ScenariosHwTest, NodeDownSendsNothingAndTheJobHangs) {
  HarnessRun run = RunScenario("node_down", {});
  ASSERT_TRUE(run.onsets[0].has_value());
  const NodeFrames& down = run.nodes[1];
  ASSERT_FALSE(down.ts.empty());
  EXPECT_LT(down.ts.back(), run.onsets[0]->ts);
  EXPECT_EQ(run.nodes[0].values.size(), 400u);
  EXPECT_EQ(run.nodes[0].steps[100], run.nodes[0].steps[kEnd]);
}

TEST(ScenariosHwTest, NodeDownWithDurationComesBack) {
  HarnessOptions options;
  ScenarioSpec spec = *ParseScenarioSpec(
      R"({"faults": [{"kind": "node_down", "at_seconds": 60,
                      "duration_seconds": 100}]})");
  HarnessRun run = RunSpec(spec, options);
  EXPECT_EQ(run.nodes[1].values.size(), 300u);
  EXPECT_GT(run.nodes[0].steps[kEnd], run.nodes[0].steps[170] + 50);
}

TEST(ScenariosHwTest, EccDoubleBitWithXid48AndRowRemap) {
  HarnessRun run = RunScenario("ecc_dbe", {});
  const NodeFrames& n = run.nodes[1];
  std::string dbe = GpuKey("gpu_ecc_dbe_total", 3);
  EXPECT_EQ(n.values[59].at(dbe), 0);
  EXPECT_GE(n.values[kEnd].at(dbe), 1);
  EXPECT_EQ(n.values[kEnd].at(GpuKey("gpu_xid_last", 3)), 48);
  EXPECT_EQ(n.values[kEnd].at(GpuKey("gpu_remapped_rows_pending", 3)), 1);
  EXPECT_EQ(n.values[kEnd].at(GpuKey("gpu_ecc_dbe_total", 2)), 0);
}

TEST(ScenariosHwTest, EccSingleBitStormClimbsFast) {
  HarnessRun run = RunScenario("ecc_sbe_storm", {});
  const NodeFrames& n = run.nodes[1];
  std::string sbe = GpuKey("gpu_ecc_sbe_total", 3);
  EXPECT_EQ(Increase(n, sbe, 0, kBefore), 0);
  EXPECT_GT(Increase(n, sbe, 60, kEnd), 50);
  EXPECT_EQ(n.values[kEnd].at(GpuKey("gpu_ecc_dbe_total", 3)), 0);
}

TEST(ScenariosHwTest, PowerLow55WattsWithoutThrottleBits) {
  HarnessRun run = RunScenario("gpu_power_low_55w", {});
  const NodeFrames& n = run.nodes[1];
  double p3 = Mean(n, GpuKey("gpu_power_watts", 3), 70, kEnd);
  double peers = 0;
  for (int g = 0; g < 3; ++g)
    peers += Mean(n, GpuKey("gpu_power_watts", g), 70, kEnd) / 3;
  EXPECT_GT(peers - p3, 40);
  EXPECT_LT(peers - p3, 90);
  for (size_t t = 70; t < n.values.size(); ++t) {
    EXPECT_EQ(n.values[t].at(GpuKey("gpu_throttle_reasons", 3)), 0);
    EXPECT_LT(n.values[t].at(GpuKey("gpu_sm_clock_mhz", 3)), 1940);
    EXPECT_GT(n.values[t].at(GpuKey("gpu_sm_clock_mhz", 3)), 1850);
  }
}

TEST(ScenariosHwTest, OomGrowthIsLinearTowardTheLimit) {
  HarnessOptions options;
  options.ticks = 1200;
  HarnessRun run = RunScenario("oom_growth", options);
  const NodeFrames& n = run.nodes[1];
  std::string used = GpuKey("gpu_memory_used_bytes", 3);
  double total = n.values[0].at(GpuKey("gpu_memory_total_bytes", 3));
  EXPECT_LT(n.values[50].at(used) / total, 0.85);  // room to grow
  double a = n.values[200].at(used), b = n.values[400].at(used),
         c = n.values[600].at(used);
  EXPECT_GT(b - a, 2e9);
  EXPECT_NEAR(c - b, b - a, 0.1 * (b - a));  // linear
  EXPECT_GT(n.values[1199].at(used) / total, 0.99);
  EXPECT_GT(Increase(n, GpuKey("torch_alloc_retries_total", 3), 1000, 1199), 0);
  EXPECT_NEAR(n.values[600].at(GpuKey("gpu_memory_used_bytes", 2)),
              n.values[50].at(GpuKey("gpu_memory_used_bytes", 2)), 1e7);
  EXPECT_GT(n.values[600].at(GpuKey("torch_reserved_bytes", 3)),
            n.values[50].at(GpuKey("torch_reserved_bytes", 3)) + 4e9);
}

TEST(ScenariosHwTest, FragmentationOpensAGapAndRetries) {
  HarnessOptions options;
  options.ticks = 600;
  HarnessRun run = RunScenario("fragmentation", options);
  const NodeFrames& n = run.nodes[1];
  auto frag = [&](int g, size_t t) {
    return 1 - n.values[t].at(GpuKey("torch_allocated_bytes", g)) /
                   n.values[t].at(GpuKey("torch_reserved_bytes", g));
  };
  EXPECT_LT(frag(3, 50), 0.16);
  EXPECT_GT(frag(3, 500), 0.25);
  EXPECT_LT(frag(2, 500), 0.16);
  EXPECT_GT(n.values[500].at(GpuKey("torch_reserved_bytes", 3)) /
                n.values[500].at(GpuKey("gpu_memory_total_bytes", 3)),
            0.9);
  EXPECT_GT(Increase(n, GpuKey("torch_alloc_retries_total", 3), 60, 599), 0);
}

}  // namespace
}  // namespace vigil::agent
