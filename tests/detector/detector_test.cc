#include "detector/detector.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "detector/metric_catalog.h"
#include "detector/sustain.h"
#include "gtest/gtest.h"
#include "tests/detector/sim.h"

namespace vigil {
namespace {

using sim::Cluster;
using sim::NodeValues;
using sim::SimOptions;

// Frames of healthy behaviour before a fault: learning (1000 steps plus
// warm-up) is over and one checkpoint has passed.
constexpr int64_t kWarm = 1500;

std::string Describe(const Anomaly& a) {
  std::string s(AnomalyKindName(a.kind));
  s += a.cleared ? " cleared" : " raised";
  s += " node=" + a.node;
  if (a.gpu) s += " gpu=" + std::to_string(*a.gpu);
  if (!a.metric.empty()) s += " metric=" + a.metric;
  s += " ts=" + std::to_string(a.ts) + " value=" + std::to_string(a.value) +
       " score=" + std::to_string(a.score) + " " + a.detail;
  return s;
}

TEST(AnomalyKindTest, NamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(AnomalyKind::kMfuLow); ++i) {
    const auto kind = static_cast<AnomalyKind>(i);
    EXPECT_EQ(ParseAnomalyKind(AnomalyKindName(kind)), kind);
  }
  EXPECT_EQ(AnomalyKindName(AnomalyKind::kLossNan), "loss_nan");
  EXPECT_FALSE(ParseAnomalyKind("nope").has_value());
}

TEST(MetricCatalogTest, Traits) {
  EXPECT_TRUE(LookupMetric("gpu_nvlink_tx_bytes_total").counter);
  EXPECT_EQ(LookupMetric("gpu_power_watts").mode, BaselineMode::kLow);
  EXPECT_EQ(LookupMetric("gpu_utilization_ratio").mode, BaselineMode::kNone);
  EXPECT_EQ(LookupMetric("gpu_ecc_dbe_total").red_line, AnomalyKind::kEccDbe);
  EXPECT_TRUE(LookupMetric("train_loss").trending);
  const MetricTraits unknown = LookupMetric("my_widgets_total");
  EXPECT_TRUE(unknown.counter);
  EXPECT_EQ(unknown.mode, BaselineMode::kBoth);
  EXPECT_FALSE(LookupMetric("my_gauge").counter);
}

TEST(SustainTest, NofMAndHysteresis) {
  const SustainOptions o{3, 5, 4};
  Sustain s;
  EXPECT_EQ(s.Observe(true, false, o), Sustain::Edge::kNone);
  EXPECT_EQ(s.Observe(false, false, o), Sustain::Edge::kNone);
  EXPECT_EQ(s.Observe(true, false, o), Sustain::Edge::kNone);
  EXPECT_EQ(s.Observe(true, false, o), Sustain::Edge::kRaised);
  // Not calm enough for long enough: stays raised.
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(s.Observe(false, true, o), Sustain::Edge::kNone);
  EXPECT_EQ(s.Observe(false, false, o), Sustain::Edge::kNone);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(s.Observe(false, true, o), Sustain::Edge::kNone);
  EXPECT_EQ(s.Observe(false, true, o), Sustain::Edge::kCleared);
  EXPECT_FALSE(s.raised());
}

TEST(DetectorTest, RegisterSeriesErrors) {
  Detector d;
  SeriesKey key{"gpu_power_watts", {{"gpu", "0"}, {"job", "j"}, {"node", "n"}}};
  EXPECT_FALSE(d.HasSeries(3));
  EXPECT_TRUE(d.RegisterSeries(3, key).ok());
  EXPECT_TRUE(d.HasSeries(3));
  EXPECT_FALSE(d.HasSeries(2));
  EXPECT_TRUE(d.RegisterSeries(3, key).ok());
  SeriesKey other = key;
  other.metric = "gpu_temperature_celsius";
  EXPECT_EQ(d.RegisterSeries(3, other).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(d.RegisterSeries(Detector::kMaxSeriesId, key).code(),
            absl::StatusCode::kInvalidArgument);
}

// The detector keeps a key as interned parts (its job and node labels, and
// the rest); what it gives back is exactly what was registered: sorted or
// not, with or without those labels, sharing parts with other series.
TEST(DetectorTest, KeysComeBackAsRegistered) {
  Detector d;
  std::vector<SeriesKey> keys;
  for (const char* job : {"j1", "j2"}) {
    for (const char* node : {"n1", "n2"}) {
      for (const char* gpu : {"0", "1"}) {
        keys.push_back({"gpu_power_watts", {{"gpu", gpu}, {"job", job}, {"node", node}}});
        keys.push_back({"gpu_xid_last", {{"gpu", gpu}, {"job", job}, {"node", node}}});
      }
      keys.push_back({"net_rx_bytes_total", {{"dev", "mlx5_0"}, {"job", job}, {"node", node},
                                             {"port", "1"}}});
    }
  }
  keys.push_back({"node_up", {{"node", "n1"}}});                          // no job
  keys.push_back({"train_loss", {}});                                     // no labels
  keys.push_back({"gpu_power_watts", {{"node", "n1"}, {"gpu", "0"}, {"job", "j1"}}});  // unsorted
  keys.push_back({"gpu_power_watts", {{"job", "a"}, {"job", "b"}}});      // a name twice
  for (uint32_t id = 0; id < keys.size(); ++id) ASSERT_TRUE(d.RegisterSeries(id, keys[id]).ok());
  for (uint32_t id = 0; id < keys.size(); ++id) {
    EXPECT_TRUE(d.RegisterSeries(id, keys[id]).ok()) << keys[id].ToString();
    SeriesKey other = keys[id];
    other.labels.emplace_back("zz", "1");
    const absl::Status s = d.RegisterSeries(id, other);
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
    EXPECT_TRUE(std::string(s.message()).ends_with(" is already " + keys[id].ToString()))
        << s.message();
  }
}

TEST(DetectorTest, UnregisteredSamplesAreCounted) {
  Detector d;
  std::vector<uint32_t> ids = {7, 8};
  std::vector<double> values = {1, 2};
  FrameView f{"n0", "j", 5, 100.0, ids, values};
  std::vector<Anomaly> out;
  d.ProcessFrame(f, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(d.stats().unregistered_samples, 2);
  EXPECT_EQ(d.stats().frames, 1);
}

// Healthy clusters of several shapes raise nothing at all.
struct HealthyCase {
  std::string name;
  SimOptions options;
  int64_t frames;
};

class HealthyTest : public testing::TestWithParam<HealthyCase> {};

TEST_P(HealthyTest, NoAnomalies) {
  const HealthyCase& c = GetParam();
  Detector d;
  Cluster cluster(&d, c.options);
  std::vector<Anomaly> out;
  cluster.Run(c.frames, nullptr, &out);
  for (const Anomaly& a : out) ADD_FAILURE() << Describe(a);
  EXPECT_GT(d.stats().samples, c.frames * c.options.nodes * 100);
}

SimOptions Opts(int nodes, uint64_t seed) {
  SimOptions o;
  o.nodes = nodes;
  o.seed = seed;
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    Clusters, HealthyTest,
    testing::Values(
        // 10 simulated hours, two 8-GPU nodes, checkpoints every 1000 steps.
        HealthyCase{"ten_hours", Opts(2, 11), 36000},
        HealthyCase{"one_node_phase_fp16",
                    [] {
                      SimOptions o = Opts(1, 12);
                      o.report_phase = true;
                      o.fp16 = true;
                      o.checkpoint_every = 500;
                      o.checkpoint_frames = 30;
                      return o;
                    }(),
                    12000},
        HealthyCase{"no_steps",
                    [] {
                      SimOptions o = Opts(2, 13);
                      o.report_steps = false;
                      return o;
                    }(),
                    6000},
        HealthyCase{"many_nodes", Opts(32, 14), 3000},
        HealthyCase{"slow_frames",
                    [] {
                      SimOptions o = Opts(4, 15);
                      o.interval_s = 10;
                      return o;
                    }(),
                    4000}),
    [](const testing::TestParamInfo<HealthyCase>& i) { return i.param.name; });

// One injected fault: the detector must raise `kind` on the faulty node
// (and GPU), within `max_delay_s` of the fault, and nothing else before it.
struct FaultCase {
  std::string name;
  sim::FaultFn fault;  // gets frames relative to the fault start
  AnomalyKind kind;
  std::string node;  // "" for job-wide
  std::optional<int> gpu;
  double max_delay_s;
  int64_t run_frames = 400;
  SimOptions options = Opts(2, 21);
  int tier = 1;
};

class FaultTest : public testing::TestWithParam<FaultCase> {};

TEST_P(FaultTest, DetectedAndLocalised) {
  const FaultCase& c = GetParam();
  Detector d;
  Cluster cluster(&d, c.options);
  std::vector<Anomaly> before;
  cluster.Run(kWarm, nullptr, &before);
  for (const Anomaly& a : before)
    ADD_FAILURE() << "before fault: " << Describe(a);
  const double start = cluster.FrameTs(kWarm);
  std::vector<Anomaly> after;
  cluster.Run(
      c.run_frames,
      [&](int64_t frame, int node, NodeValues& v) {
        c.fault(frame - kWarm, node, v);
      },
      &after);
  const Anomaly* hit = nullptr;
  for (const Anomaly& a : after) {
    if (a.cleared || a.kind != c.kind) continue;
    EXPECT_EQ(a.node, c.node) << Describe(a);
    if (c.gpu) {
      EXPECT_EQ(a.gpu, c.gpu) << Describe(a);
    }
    EXPECT_EQ(a.job, "llama");
    if (!hit) hit = &a;
  }
  ASSERT_NE(hit, nullptr) << "no " << AnomalyKindName(c.kind) << "; got "
                          << after.size() << " others, first: "
                          << (after.empty() ? "" : Describe(after[0]));
  EXPECT_LE(hit->ts - start, c.max_delay_s) << Describe(*hit);
  EXPECT_GE(hit->ts, start);
  if (c.kind == AnomalyKind::kThroughputDrop) {
    int top = 0;
    for (const Anomaly& a : after) {
      if (a.kind == c.kind && !a.cleared) top = std::max(top, a.tier);
    }
    EXPECT_EQ(top, c.tier);
  }
}

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// Fault hooks: frame `f` counts from the fault start (negative before).
sim::FaultFn OnGpu(int node, int gpu,
                   std::function<void(int64_t, sim::GpuValues&)> fn) {
  return [=](int64_t f, int n, NodeValues& v) {
    if (f >= 0 && n == node) fn(f, v.gpu[gpu]);
  };
}
sim::FaultFn OnNode(int node, std::function<void(int64_t, NodeValues&)> fn) {
  return [=](int64_t f, int n, NodeValues& v) {
    if (f >= 0 && (node < 0 || n == node)) fn(f, v);
  };
}

std::vector<FaultCase> Faults() {
  using K = AnomalyKind;
  std::vector<FaultCase> c;
  c.push_back({"loss_nan",
               OnNode(0, [](int64_t, NodeValues& v) { v.loss = kNan; }),
               K::kLossNan,
               "n000",
               {},
               1});
  c.push_back(
      {"grad_inf",
       OnNode(1, [](int64_t, NodeValues& v) { v.grad_norm = INFINITY; }),
       K::kGradNan,
       "n001",
       {},
       1});
  c.push_back(
      {"ecc_dbe",
       OnGpu(1, 3, [](int64_t f, sim::GpuValues& g) { g.dbe_inc = f == 0; }),
       K::kEccDbe, "n001", 3, 1});
  c.push_back({"nvlink_crc",
               OnGpu(0, 2, [](int64_t, sim::GpuValues& g) { g.crc_inc = 3; }),
               K::kNvlinkErrors, "n000", 2, 1});
  c.push_back(
      {"nvlink_replay",
       OnGpu(1, 7,
             [](int64_t f, sim::GpuValues& g) { g.replay_inc = f % 5 == 0; }),
       K::kNvlinkErrors, "n001", 7, 1});
  c.push_back(
      {"net_drops",
       OnNode(1, [](int64_t, NodeValues& v) { v.nic[1].drops_inc = 2; }),
       K::kNetDrops,
       "n001",
       {},
       1});
  c.push_back(
      {"net_retransmits",
       OnNode(0, [](int64_t, NodeValues& v) { v.nic[0].retrans_inc = 5; }),
       K::kNetRetransmits,
       "n000",
       {},
       1});
  c.push_back({"net_link_down",
               OnNode(0, [](int64_t f,
                            NodeValues& v) { v.nic[0].downed_inc = f == 0; }),
               K::kNetLinkDown,
               "n000",
               {},
               1});
  c.push_back({"xid",
               OnGpu(0, 4,
                     [](int64_t f, sim::GpuValues& g) {
                       g.xid_inc = f == 0;
                       g.xid_last = 79;
                     }),
               K::kXid, "n000", 4, 1});
  c.push_back(
      {"row_remap",
       OnGpu(1, 1, [](int64_t, sim::GpuValues& g) { g.remap_pending = 1; }),
       K::kRowRemapPending, "n001", 1, 1});
  c.push_back(
      {"gpu_fell_off",
       OnGpu(0, 5, [](int64_t, sim::GpuValues& g) { g.present = false; }),
       K::kGpuMissing, "n000", 5, 4});
  c.push_back({"node_down",
               OnNode(1, [](int64_t, NodeValues& v) { v.send = false; }),
               K::kNodeSilent,
               "n001",
               {},
               17});
  c.push_back({"nccl_hang",
               OnNode(-1,
                      [](int64_t, NodeValues& v) {
                        v.step = kWarm;
                        for (auto& g : v.gpu) g.power = 90, g.nvl_rate = 0;
                      }),
               K::kJobHang,
               "",
               {},
               190,
               400});
  // 65 W: this GPU draws ~7 W above the median when healthy, and with 12 W
  // of noise a 55 W loss (48 W below its peers) is a coin toss.
  c.push_back({"peer_power_65w",
               OnGpu(1, 6, [](int64_t, sim::GpuValues& g) { g.power -= 65; }),
               K::kPeerPowerLow, "n001", 6, 10});
  c.push_back({"thermal_throttle",
               OnGpu(0, 1,
                     [](int64_t, sim::GpuValues& g) {
                       g.throttle = 0x44;
                       g.clock *= 0.7;
                       g.temp += 15;
                     }),
               K::kThermalThrottle, "n000", 1, 5});
  c.push_back({"clock_low",
               OnGpu(1, 0, [](int64_t, sim::GpuValues& g) { g.clock *= 0.7; }),
               K::kClockLow, "n001", 0, 8});
  c.push_back(
      {"nvlink_degraded",
       OnGpu(0, 3, [](int64_t, sim::GpuValues& g) { g.nvl_rate *= 0.05; }),
       K::kNvlinkTrafficLow, "n000", 3, 8});
  c.push_back({"hot_gpu",
               OnGpu(0, 4, [](int64_t, sim::GpuValues& g) { g.temp += 15; }),
               K::kBaselineHigh, "n000", 4, 6});
  {
    FaultCase t{"throughput_20",
                OnNode(-1, [](int64_t, NodeValues& v) { v.tokens *= 0.8; }),
                K::kThroughputDrop,
                "n000",
                {},
                12};
    t.options = Opts(1, 22);
    c.push_back(t);
    FaultCase t2{"throughput_35",
                 OnNode(-1, [](int64_t, NodeValues& v) { v.tokens *= 0.65; }),
                 K::kThroughputDrop,
                 "n000",
                 {},
                 12};
    t2.options = Opts(1, 23);
    t2.tier = 2;
    c.push_back(t2);
  }
  {
    // A leak of 30 MB/s from 85 %: 98 % in ~370 s, warned within the
    // 600 s horizon once the fit has seen the growth.
    FaultCase t{
        "oom_growth",
        OnGpu(0, 2,
              [](int64_t f, sim::GpuValues& g) { g.mem_used += 3e7 * f; }),
        K::kOomForecast,
        "n000",
        2,
        200};
    t.options.mem_fraction = 0.85;
    c.push_back(t);
  }
  c.push_back({"fragmentation",
               OnGpu(1, 5,
                     [](int64_t, sim::GpuValues& g) {
                       g.allocated = 0.7 * g.reserved;
                     }),
               K::kFragmentation, "n001", 5, 12});
  c.push_back({"dataloader_stall",
               OnNode(1,
                      [](int64_t f, NodeValues& v) {
                        if (f % 8 < 2) {
                          for (auto& g : v.gpu) g.power = 80;
                          v.dl_wait = 2;
                        }
                      }),
               K::kPeriodicStall,
               "n001",
               {},
               45});
  {
    // Synchronous data parallelism: every node dips while n002 waits for
    // its batch (reported with the step after the stall).
    FaultCase t{"dataloader_stall_all_nodes_dip",
                [](int64_t f, int n, NodeValues& v) {
                  if (f < 0) return;
                  if (f % 8 < 2) {
                    for (auto& g : v.gpu) g.power = 80;
                  }
                  if (n == 2 && f % 8 == 2) v.dl_wait = 2;
                },
                K::kPeriodicStall,
                "n002",
                {},
                45};
    t.options = Opts(3, 26);
    c.push_back(t);
    FaultCase t2{"periodic_stall_no_culprit",
                 OnNode(-1,
                        [](int64_t f, NodeValues& v) {
                          if (f % 8 < 2) {
                            for (auto& g : v.gpu) g.power = 80;
                          }
                        }),
                 K::kPeriodicStall,
                 "",
                 {},
                 45};
    t2.options = Opts(3, 27);
    c.push_back(t2);
    // Frames 10 s apart: a 1.6 s stall every few steps is no power dip,
    // only the last step's dataloader wait now and then.
    FaultCase t3{"dataloader_spikes_slow_frames",
                 OnNode(1,
                        [](int64_t f, NodeValues& v) {
                          if (f % 4 == 0) v.dl_wait = 1.6;
                        }),
                 K::kBaselineHigh,
                 "n001",
                 {},
                 150};
    t3.options = Opts(4, 28);
    t3.options.interval_s = 10;
    c.push_back(t3);
  }
  c.push_back(
      {"grad_explosion",
       OnNode(0, [](int64_t f,
                    NodeValues& v) { v.grad_norm *= std::pow(1.2, f); }),
       K::kGradExplosion,
       "n000",
       {},
       25});
  c.push_back({"grad_vanishing",
               OnNode(1, [](int64_t, NodeValues& v) { v.grad_norm *= 0.01; }),
               K::kGradVanishing,
               "n001",
               {},
               5});
  c.push_back({"loss_oscillation",
               OnNode(0, [](int64_t f,
                            NodeValues& v) { v.loss += f % 2 ? 0.6 : -0.4; }),
               K::kLossOscillation,
               "n000",
               {},
               25});
  c.push_back({"loss_divergence",
               OnNode(1, [](int64_t f, NodeValues& v) { v.loss += 0.02 * f; }),
               K::kBaselineHigh,
               "n001",
               {},
               40});
  {
    FaultCase t{"loss_scale_thrash",
                OnNode(-1,
                       [](int64_t f, NodeValues& v) {
                         v.loss_scale = (f / 15) % 2 ? 4096 : 8192;
                       }),
                K::kLossScaleThrash,
                "n000",
                {},
                140};
    t.options = Opts(1, 25);
    t.options.fp16 = true;
    c.push_back(t);
  }
  c.push_back({"ecc_sbe_storm",
               OnGpu(1, 2, [](int64_t, sim::GpuValues& g) { g.sbe_inc = 2; }),
               K::kEccSbeRate, "n001", 2, 10});
  {
    FaultCase t{
        "low_mfu",  OnNode(-1, [](int64_t, NodeValues& v) { v.mfu = 0.3; }),
        K::kMfuLow, "n000",
        {},         60};
    t.options = Opts(1, 24);
    c.push_back(t);
  }
  return c;
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultTest, testing::ValuesIn(Faults()),
                         [](const testing::TestParamInfo<FaultCase>& i) {
                           return i.param.name;
                         });

// A fault that comes and goes raises once and clears once.
TEST(HysteresisTest, RaiseOnceClearOnce) {
  Detector d;
  Cluster cluster(&d, Opts(2, 31));
  std::vector<Anomaly> out;
  cluster.Run(kWarm, nullptr, &out);
  ASSERT_TRUE(out.empty());
  cluster.Run(
      300,
      [](int64_t f, int n, NodeValues& v) {
        if (n == 0 && f >= kWarm && f < kWarm + 100) v.gpu[4].temp += 15;
      },
      &out);
  std::vector<std::string> events;
  for (const Anomaly& a : out) events.push_back(Describe(a));
  ASSERT_EQ(out.size(), 2u) << testing::PrintToString(events);
  EXPECT_EQ(out[0].kind, AnomalyKind::kBaselineHigh);
  EXPECT_FALSE(out[0].cleared);
  EXPECT_EQ(out[1].kind, AnomalyKind::kBaselineHigh);
  EXPECT_TRUE(out[1].cleared);
  EXPECT_EQ(out[1].gpu, 4);
}

// A shift hovering right at the threshold does not flap.
TEST(HysteresisTest, BorderlineShiftDoesNotFlap) {
  Detector d;
  Cluster cluster(&d, Opts(1, 32));
  std::vector<Anomaly> out;
  cluster.Run(kWarm, nullptr, &out);
  ASSERT_TRUE(out.empty());
  cluster.Run(
      3000, [](int64_t, int, NodeValues& v) { v.gpu[2].temp += 5; }, &out);
  int raises = 0;
  for (const Anomaly& a : out) raises += a.cleared ? 0 : 1;
  EXPECT_LE(raises, 2);
}

// Counter resets (agent or driver restart) are not errors or traffic drops.
TEST(CounterTest, ResetIsRestartNotNegativeRate) {
  Detector d;
  SeriesKey crc{"gpu_nvlink_crc_errors_total",
                {{"gpu", "0"}, {"job", "j"}, {"node", "n"}}};
  SeriesKey tx{"gpu_nvlink_tx_bytes_total",
               {{"gpu", "0"}, {"job", "j"}, {"node", "n"}}};
  ASSERT_TRUE(d.RegisterSeries(0, crc).ok());
  ASSERT_TRUE(d.RegisterSeries(1, tx).ok());
  std::vector<Anomaly> out;
  double bytes = 1e12;
  std::vector<uint32_t> ids = {0, 1};
  for (int i = 0; i < 3000; ++i) {
    if (i == 2000) bytes = 0;
    bytes += 4e10;
    std::vector<double> values = {i >= 2000 ? 0.0 : 17.0, bytes};
    FrameView f{"n", "j", i, 1000.0 + i, ids, values};
    d.ProcessFrame(f, &out);
  }
  for (const Anomaly& a : out) ADD_FAILURE() << Describe(a);
}

// A process that starts without a counter's previous value (a server
// restart) is given it: the first frame's increase over it is seen, even
// when that frame starts the node's run; a value not earlier than the
// frame, or given to a gauge, changes nothing.
TEST(CounterTest, APrimedCounterCountsItsFirstFrameFromThePrimedValue) {
  SeriesKey dbe{"gpu_ecc_dbe_total", {{"gpu", "0"}}};
  SeriesKey power{"gpu_power_watts", {{"gpu", "0"}}};
  std::vector<uint32_t> ids = {0, 1};
  auto first_frame = [&](double dbe_value, auto prime) {
    Detector d;
    EXPECT_TRUE(d.RegisterSeries(0, dbe).ok());
    EXPECT_TRUE(d.RegisterSeries(1, power).ok());
    prime(d);
    std::vector<Anomaly> out;
    std::vector<double> values = {dbe_value, 400};
    d.ProcessFrame(FrameView{"n", "j", 10, 1000.0, ids, values}, &out);
    int ecc = 0;
    for (const Anomaly& a : out) ecc += a.kind == AnomalyKind::kEccDbe && !a.cleared;
    return ecc;
  };
  EXPECT_EQ(first_frame(1, [](Detector&) {}), 0);  // nothing to compare with
  EXPECT_EQ(first_frame(1, [](Detector& d) { d.PrimeCounter(0, 999, 0); }), 1);
  EXPECT_EQ(first_frame(0, [](Detector& d) { d.PrimeCounter(0, 999, 0); }), 0);
  // Not earlier than the frame: not its previous value.
  EXPECT_EQ(first_frame(1, [](Detector& d) { d.PrimeCounter(0, 1000, 0); }), 0);
  // Gauges, unknown ids and non-finite values are ignored.
  EXPECT_EQ(first_frame(1, [](Detector& d) {
              d.PrimeCounter(1, 999, 0);
              d.PrimeCounter(7, 999, 0);
              d.PrimeCounter(0, 999, NAN);
            }),
            0);
}

// NaN/Inf in gauges and counters other than loss/grad norm are ignored.
TEST(NanTest, NonFiniteGaugesAndCountersAreSkipped) {
  Detector d;
  Cluster cluster(&d, Opts(1, 33));
  std::vector<Anomaly> out;
  cluster.Run(
      kWarm + 300,
      [](int64_t f, int, NodeValues& v) {
        if (f % 7 == 0) v.gpu[1].power = kNan;
        if (f % 11 == 0) v.gpu[2].temp = INFINITY;
        if (f % 13 == 0) v.tokens = kNan;
      },
      &out);
  for (const Anomaly& a : out) ADD_FAILURE() << Describe(a);
}

// fp16 jobs: sporadic Inf grad norms while GradScaler adjusts are benign.
TEST(NanTest, Fp16OverflowStepsAreNotARedLine) {
  Detector d;
  SimOptions o = Opts(1, 34);
  o.fp16 = true;
  Cluster cluster(&d, o);
  std::vector<Anomaly> out;
  cluster.Run(
      3000,
      [](int64_t f, int, NodeValues& v) {
        if (f % 97 < 2) v.grad_norm = INFINITY;
      },
      &out);
  for (const Anomaly& a : out) ADD_FAILURE() << Describe(a);
}

// Silence is noticed from other nodes' frames and clears on return.
TEST(LivenessTest, SilenceViaAdvanceTimeAndRecovery) {
  Detector d;
  Cluster cluster(&d, Opts(3, 35));
  std::vector<Anomaly> out;
  cluster.Run(300, nullptr, &out);
  cluster.Run(
      100,
      [](int64_t f, int n, NodeValues& v) {
        if (n == 2 && f < 360) v.send = false;
      },
      &out);
  std::vector<std::string> events;
  for (const Anomaly& a : out) events.push_back(Describe(a));
  ASSERT_EQ(out.size(), 2u) << testing::PrintToString(events);
  EXPECT_EQ(out[0].kind, AnomalyKind::kNodeSilent);
  EXPECT_EQ(out[0].node, "n002");
  EXPECT_FALSE(out[0].cleared);
  EXPECT_TRUE(out[1].cleared);
}

// AdvanceTime alone (the server's timer) notices that nodes stopped: the
// only node of a training job stopping at its step is the job's end (a
// lifecycle event, never node_silent); a node without a training job that
// stops is kIdleNodeSilent.
TEST(LivenessTest, AdvanceTimeWithoutFrames) {
  {
    Detector d;
    Cluster cluster(&d, Opts(1, 36));
    std::vector<Anomaly> out;
    cluster.Run(100, nullptr, &out);
    const double last = cluster.FrameTs(99);
    d.AdvanceTime(last + 10, &out);
    EXPECT_TRUE(out.empty());
    d.AdvanceTime(last + 16, &out);
    ASSERT_FALSE(out.empty());
    for (const Anomaly& a : out) {
      EXPECT_EQ(a.kind, AnomalyKind::kJobEnded) << Describe(a);
    }
    EXPECT_EQ(out.back().node, "");
    EXPECT_TRUE(out.back().cleared);
  }
  {
    Detector d;
    SimOptions o = Opts(1, 36);
    o.report_steps = false;
    Cluster cluster(&d, o);
    std::vector<Anomaly> out;
    cluster.Run(100, nullptr, &out);
    d.AdvanceTime(cluster.FrameTs(99) + 16, &out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].kind, AnomalyKind::kIdleNodeSilent);
    EXPECT_EQ(out[0].node, "n000");
  }
}

// A node moving to another job does not leave a silent ghost behind: the
// job it left ends (a lifecycle event), nothing else.
TEST(LivenessTest, NodeChangingJobIsNotSilent) {
  Detector d;
  SeriesKey a{"gpu_power_watts", {{"gpu", "0"}, {"job", "a"}, {"node", "n"}}};
  SeriesKey b{"gpu_power_watts", {{"gpu", "0"}, {"job", "b"}, {"node", "n"}}};
  ASSERT_TRUE(d.RegisterSeries(0, a).ok());
  ASSERT_TRUE(d.RegisterSeries(1, b).ok());
  std::vector<Anomaly> out;
  for (int i = 0; i < 200; ++i) {
    const uint32_t id = i < 100 ? 0 : 1;
    const double v = 500;
    FrameView f{"n", i < 100 ? "a" : "b", i, 1000.0 + i, {&id, 1}, {&v, 1}};
    d.AdvanceTime(f.ts, &out);
    d.ProcessFrame(f, &out);
  }
  for (const Anomaly& x : out) {
    if (x.kind != AnomalyKind::kJobEnded || x.job != "a") {
      ADD_FAILURE() << Describe(x);
    }
  }
}

// After a server restart every agent resends its backlog at once, at its
// own pace: n1's catch-up races to the present while n2's frames still carry
// times 400 s old. A frame counts as a sign of life when it is processed
// (detection time = the server's clock), so n2 does not look silent and the
// resent steps do not look like a hang.
TEST(LivenessTest, CatchUpAfterRestartIsNotSilenceOrHang) {
  Detector d;
  SeriesKey k1{"gpu_power_watts", {{"gpu", "0"}, {"job", "j"}, {"node", "n1"}}};
  SeriesKey k2{"gpu_power_watts", {{"gpu", "0"}, {"job", "j"}, {"node", "n2"}}};
  ASSERT_TRUE(d.RegisterSeries(0, k1).ok());
  ASSERT_TRUE(d.RegisterSeries(1, k2).ok());
  std::vector<Anomaly> out;
  const double v = 500;
  auto send = [&](uint32_t id, int i) {
    FrameView f{id == 0 ? "n1" : "n2", "j", i, 1000.0 + i, {&id, 1}, {&v, 1}};
    d.AdvanceTime(f.ts, &out);  // as the pipeline does before each frame
    d.ProcessFrame(f, &out);
  };
  // Server time runs from 1700 to 1710 while 700 s of backlog arrive; n1
  // sends three frames for each of n2's.
  int i1 = 0, i2 = 0;
  for (int k = 0; i2 < 700; ++k) {
    d.AdvanceTime(1700.0 + k / 100.0, &out);  // the server's clock tick
    for (int r = 0; r < 3 && i1 < 700; ++r) send(0, i1++);
    send(1, i2++);
  }
  for (const Anomaly& x : out) ADD_FAILURE() << Describe(x);
  // Their stop is still noticed afterwards: both stopped at one step, the
  // job's end.
  d.AdvanceTime(1760, &out);
  std::vector<std::string> events;
  for (const Anomaly& a : out) events.push_back(Describe(a));
  ASSERT_EQ(out.size(), 4u) << testing::PrintToString(events);
  for (const Anomaly& a : out) EXPECT_EQ(a.kind, AnomalyKind::kJobEnded);
}

}  // namespace
}  // namespace vigil
