#include "agent/sim/simulator.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

constexpr double kStart = 1764000000.0;

// Runs `ticks` 1 Hz ticks and returns the frames.
std::vector<SimFrame> Ticks(Simulator& sim, int ticks, double start = kStart) {
  std::vector<SimFrame> frames;
  for (int i = 0; i < ticks; ++i) {
    std::optional<SimFrame> f = sim.Tick(start + i);
    if (f.has_value()) frames.push_back(std::move(*f));
  }
  return frames;
}

Simulator Make(SimulatorOptions options = {}, const Scenario* s = nullptr) {
  absl::StatusOr<Simulator> sim = Simulator::Create(std::move(options), s);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return std::move(*sim);
}

// Values of one tick by series text, e.g. "gpu_power_watts{gpu=\"3\"}" or
// "train_loss".
std::map<std::string, double> ByName(const Simulator& sim, const SimFrame& f) {
  std::map<std::string, double> out;
  for (const SimSample& s : f.samples) {
    const SeriesKey& key = sim.series()[s.series];
    out[key.labels.empty() ? key.metric : key.ToString()] = s.value;
  }
  return out;
}

std::string Gpu(const char* metric, int gpu) {
  return std::string(metric) + "{gpu=\"" + std::to_string(gpu) + "\"}";
}

TEST(SimulatorTest, CatalogueIsCompleteWithValidKeys) {
  Simulator sim = Make();
  const std::set<std::string> gpu_metrics = {"gpu_utilization_ratio",
                                             "gpu_power_watts",
                                             "gpu_temperature_celsius",
                                             "gpu_memory_temperature_celsius",
                                             "gpu_sm_clock_mhz",
                                             "gpu_throttle_reasons",
                                             "gpu_memory_used_bytes",
                                             "gpu_memory_total_bytes",
                                             "gpu_nvlink_tx_bytes_total",
                                             "gpu_nvlink_rx_bytes_total",
                                             "gpu_nvlink_crc_errors_total",
                                             "gpu_nvlink_replay_errors_total",
                                             "gpu_nvlink_recovery_errors_total",
                                             "gpu_ecc_sbe_total",
                                             "gpu_ecc_dbe_total",
                                             "gpu_remapped_rows_pending",
                                             "gpu_xid_errors_total",
                                             "gpu_xid_last",
                                             "gpu_pcie_replays_total",
                                             "torch_reserved_bytes",
                                             "torch_allocated_bytes",
                                             "torch_alloc_retries_total"};
  const std::set<std::string> nic_metrics = {
      "net_tx_bytes_total", "net_rx_bytes_total", "net_retransmits_total",
      "net_drops_total", "net_link_downed_total"};
  const std::set<std::string> disk_metrics = {
      "disk_read_bytes_total", "disk_reads_total", "disk_read_seconds_total"};
  const std::set<std::string> train_metrics = {"train_loss",
                                               "train_grad_norm",
                                               "train_tokens_per_second",
                                               "train_step_time_seconds",
                                               "train_dataloader_wait_seconds",
                                               "train_mfu_ratio",
                                               "train_phase"};

  std::map<std::string, std::set<std::string>> labels;  // metric -> values
  std::set<SeriesKey> unique;
  for (const SeriesKey& key : sim.series()) {
    SeriesKey copy = key;
    ASSERT_TRUE(NormalizeSeriesKey(&copy).ok()) << key.ToString();
    EXPECT_EQ(copy, key);
    EXPECT_TRUE(unique.insert(key).second) << key.ToString();
    ASSERT_LE(key.labels.size(), 1u);
    labels[key.metric].insert(key.labels.empty() ? ""
                                                 : key.labels[0].first + "=" +
                                                       key.labels[0].second);
    if (key.metric.size() > 6 && key.metric.ends_with("_total")) {
      EXPECT_TRUE(gpu_metrics.count(key.metric) ||
                  nic_metrics.count(key.metric) ||
                  disk_metrics.count(key.metric));
    }
  }
  std::set<std::string> gpus, nics, disks = {"dev=nvme0n1", "dev=nvme1n1"};
  for (int i = 0; i < 8; ++i) {
    gpus.insert("gpu=" + std::to_string(i));
    nics.insert("dev=mlx5_" + std::to_string(i));
  }
  for (const std::string& m : gpu_metrics) EXPECT_EQ(labels[m], gpus) << m;
  for (const std::string& m : nic_metrics) EXPECT_EQ(labels[m], nics) << m;
  for (const std::string& m : disk_metrics) EXPECT_EQ(labels[m], disks) << m;
  for (const std::string& m : train_metrics)
    EXPECT_EQ(labels[m], std::set<std::string>{""}) << m;
  EXPECT_EQ(labels.size(), gpu_metrics.size() + nic_metrics.size() +
                               disk_metrics.size() + train_metrics.size());
  EXPECT_EQ(sim.series().size(), 22u * 8 + 5 * 8 + 3 * 2 + 7);

  // Every tick of a healthy node reports every series once.
  for (const SimFrame& f : Ticks(sim, 3)) {
    std::set<uint32_t> ids;
    for (const SimSample& s : f.samples) ids.insert(s.series);
    EXPECT_EQ(ids.size(), sim.series().size());
  }
}

TEST(SimulatorTest, LossScaleOnlyForFp16) {
  SimulatorOptions options;
  options.fp16 = true;
  options.gpus = 2;
  Simulator sim = Make(options);
  std::map<std::string, double> v = ByName(sim, Ticks(sim, 1)[0]);
  EXPECT_EQ(v.at("train_loss_scale"), 65536.0);
  Simulator bf16 = Make();
  EXPECT_EQ(ByName(bf16, Ticks(bf16, 1)[0]).count("train_loss_scale"), 0u);
}

TEST(SimulatorTest, CountersAreMonotonicIntegersAndErrorsStayZero) {
  SimulatorOptions options;
  options.start_step = 950;  // includes a checkpoint
  Simulator sim = Make(options);
  std::vector<SimFrame> frames = Ticks(sim, 600);
  for (size_t i = 0; i < sim.series().size(); ++i) {
    const std::string& m = sim.series()[i].metric;
    if (!m.ends_with("_total")) continue;
    double prev = -1;
    for (const SimFrame& f : frames) {
      double v = f.samples[i].value;
      ASSERT_EQ(f.samples[i].series, i);
      if (m == "disk_read_seconds_total") {
        EXPECT_NEAR(v * 1000, std::round(v * 1000), 1e-6) << m;  // whole ms
      } else {
        EXPECT_EQ(v, std::floor(v)) << m;
      }
      EXPECT_GE(v, prev) << sim.series()[i].ToString();
      prev = v;
    }
    bool error_counter = m.find("error") != std::string::npos ||
                         m.find("ecc") != std::string::npos ||
                         m.find("retransmits") != std::string::npos ||
                         m.find("drops") != std::string::npos ||
                         m.find("downed") != std::string::npos ||
                         m.find("replays") != std::string::npos ||
                         m.find("retries") != std::string::npos;
    if (error_counter) {
      EXPECT_EQ(frames.back().samples[i].value, 0) << m;
    } else {
      EXPECT_GT(frames.back().samples[i].value, frames.front().samples[i].value)
          << m;
    }
    if (m == "net_tx_bytes_total") {
      EXPECT_EQ(std::fmod(prev, 4), 0);
    }
    if (m == "gpu_nvlink_tx_bytes_total") {
      EXPECT_EQ(std::fmod(prev, 1024), 0);
    }
  }
}

TEST(SimulatorTest, ValuesArePhysicalDuringTraining) {
  SimulatorOptions options;
  options.start_step = 5000;
  Simulator sim = Make(options);
  std::vector<SimFrame> frames = Ticks(sim, 300);
  std::map<std::string, double> prev;
  for (size_t t = 0; t < frames.size(); ++t) {
    std::map<std::string, double> v = ByName(sim, frames[t]);
    ASSERT_EQ(v.at("train_phase"), 0);
    for (int g = 0; g < 8; ++g) {
      double p = v.at(Gpu("gpu_power_watts", g));
      EXPECT_GE(p, 600);
      EXPECT_LE(p, 700);
      EXPECT_NEAR(p * 1000, std::round(p * 1000), 1e-6);  // whole mW
      double temp = v.at(Gpu("gpu_temperature_celsius", g));
      EXPECT_GE(temp, 58);
      EXPECT_LE(temp, 76);
      EXPECT_EQ(temp, std::round(temp));
      EXPECT_GT(v.at(Gpu("gpu_memory_temperature_celsius", g)), temp);
      double clock = v.at(Gpu("gpu_sm_clock_mhz", g));
      EXPECT_GE(clock, 1900);
      EXPECT_LE(clock, 1980);
      double util = v.at(Gpu("gpu_utilization_ratio", g));
      EXPECT_GE(util, 0.95);
      EXPECT_LE(util, 1.0);
      EXPECT_NEAR(util * 100, std::round(util * 100), 1e-9);
      double used = v.at(Gpu("gpu_memory_used_bytes", g));
      double total = v.at(Gpu("gpu_memory_total_bytes", g));
      EXPECT_GT(used / total, 0.95);
      EXPECT_LT(used / total, 0.985);
      double reserved = v.at(Gpu("torch_reserved_bytes", g));
      double allocated = v.at(Gpu("torch_allocated_bytes", g));
      EXPECT_LT(reserved, used);
      EXPECT_LT(allocated, reserved);
      EXPECT_GT(allocated / reserved, 0.8);  // fragmentation < 20 %
      if (t > 0) {
        double nv = v.at(Gpu("gpu_nvlink_tx_bytes_total", g)) -
                    prev.at(Gpu("gpu_nvlink_tx_bytes_total", g));
        EXPECT_GT(nv, 100e9);
        EXPECT_LT(nv, 300e9);
      }
    }
    if (t > 0) {
      double ib = v.at("net_tx_bytes_total{dev=\"mlx5_0\"}") -
                  prev.at("net_tx_bytes_total{dev=\"mlx5_0\"}");
      EXPECT_LE(ib, 50e9);  // 400 Gb/s line rate
      EXPECT_GT(ib, 1e9);
    }
    EXPECT_GT(v.at("train_mfu_ratio"), 0.45);
    EXPECT_LT(v.at("train_mfu_ratio"), 0.55);
    EXPECT_GT(v.at("train_grad_norm"), 0.5);
    EXPECT_LT(v.at("train_grad_norm"), 2.0);
    EXPECT_GT(v.at("train_step_time_seconds"), 1.0);
    EXPECT_LT(v.at("train_step_time_seconds"), 2.0);
    EXPECT_LT(v.at("train_dataloader_wait_seconds"), 0.05);
    EXPECT_NEAR(v.at("train_tokens_per_second"), 8 * 2048 / 1.7,
                8 * 2048 / 1.7 * 0.1);
    EXPECT_GT(v.at("train_loss"), 1.6);
    EXPECT_LT(v.at("train_loss"), 4.0);
    prev = v;
  }
}

TEST(SimulatorTest, AllReducePeaksVaryNicTraffic) {
  Simulator sim = Make();
  std::vector<SimFrame> frames = Ticks(sim, 200);
  const size_t nic0 = 22 * 8;  // first NIC series: net_tx_bytes_total mlx5_0
  ASSERT_EQ(sim.series()[nic0].ToString(),
            "net_tx_bytes_total{dev=\"mlx5_0\"}");
  double lo = 1e30, hi = 0;
  for (size_t t = 1; t < frames.size(); ++t) {
    double d =
        frames[t].samples[nic0].value - frames[t - 1].samples[nic0].value;
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  EXPECT_GT(hi, 35e9);      // ticks covering a whole backward pass
  EXPECT_LT(lo, 0.6 * hi);  // and ticks mostly in the forward pass
}

TEST(SimulatorTest, LossFallsAndWarmupRaisesGradNorm) {
  Simulator sim = Make();
  std::vector<SimFrame> frames = Ticks(sim, 3000);
  auto mean = [&](const char* metric, size_t from, size_t to) {
    double sum = 0;
    for (size_t t = from; t < to; ++t) sum += ByName(sim, frames[t]).at(metric);
    return sum / (to - from);
  };
  EXPECT_GT(mean("train_loss", 0, 100), mean("train_loss", 2900, 3000) + 1.0);
  EXPECT_GT(mean("train_grad_norm", 0, 30),
            2 * mean("train_grad_norm", 2900, 3000));
}

TEST(SimulatorTest, StepAdvancesAtMostOnePerTick) {
  SimulatorOptions options;
  options.start_step = 100;
  Simulator sim = Make(options);
  std::vector<SimFrame> frames = Ticks(sim, 1000);
  EXPECT_EQ(frames.front().step, 100);
  for (size_t t = 1; t < frames.size(); ++t) {
    EXPECT_LE(frames[t].step - frames[t - 1].step, 1);
    EXPECT_GE(frames[t].step, frames[t - 1].step);
  }
  EXPECT_NEAR(frames.back().step - 100, 1000 / 1.7, 1000 / 1.7 * 0.05);
}

TEST(SimulatorTest, CheckpointStallsStepAndDipsPower) {
  SimulatorOptions options;
  options.start_step = 990;
  Simulator sim = Make(options);
  std::vector<SimFrame> frames = Ticks(sim, 60);
  int checkpoint_ticks = 0;
  bool in_checkpoint = false;
  for (const SimFrame& f : frames) {
    std::map<std::string, double> v = ByName(sim, f);
    if (v.at("train_phase") != 1) continue;
    ++checkpoint_ticks;
    EXPECT_EQ(f.step, 1000);
    // The tick the checkpoint starts in may still be mostly training.
    if (in_checkpoint) {
      for (int g = 0; g < 8; ++g) {
        EXPECT_LT(v.at(Gpu("gpu_power_watts", g)), 300);
      }
    }
    in_checkpoint = true;
  }
  EXPECT_GE(checkpoint_ticks, 4);
  EXPECT_LE(checkpoint_ticks, 9);
  EXPECT_GT(frames.back().step, 1005);
}

TEST(SimulatorTest, DeterministicPerSeedAndNode) {
  SimulatorOptions options;
  Simulator a = Make(options), b = Make(options);
  options.node = "node1";
  Simulator c = Make(options);
  std::vector<SimFrame> fa = Ticks(a, 50), fb = Ticks(b, 50), fc = Ticks(c, 50);
  size_t differ = 0;
  for (size_t t = 0; t < fa.size(); ++t) {
    ASSERT_EQ(fa[t].samples.size(), fb[t].samples.size());
    for (size_t i = 0; i < fa[t].samples.size(); ++i) {
      EXPECT_EQ(fa[t].samples[i].value, fb[t].samples[i].value);
      if (fa[t].samples[i].value != fc[t].samples[i].value) ++differ;
    }
  }
  EXPECT_GT(differ, fa.size() * fa[0].samples.size() / 3);
}

// Lowers GPU 3's power by 55 W and makes GPU 5 disappear after 10 s.
class TestScenario : public Scenario {
 public:
  void Apply(const ScenarioContext& ctx, NodeTick* tick) const override {
    tick->gpus[3].power_watts -= 55;
    if (ctx.seconds_since_start >= 10) tick->gpus[5].present = false;
  }
};

TEST(SimulatorTest, ScenarioEditsHealthyValues) {
  SimulatorOptions options;
  options.start_step = 5000;
  TestScenario scenario;
  Simulator sim = Make(options, &scenario);
  std::vector<SimFrame> frames = Ticks(sim, 20);
  std::map<std::string, double> v = ByName(sim, frames[5]);
  EXPECT_LT(v.at(Gpu("gpu_power_watts", 3)), 650);
  EXPECT_EQ(v.count(Gpu("gpu_power_watts", 5)), 1u);
  v = ByName(sim, frames[15]);
  EXPECT_EQ(v.count(Gpu("gpu_power_watts", 5)), 0u);
  EXPECT_EQ(frames[15].samples.size(), sim.series().size() - 22);
}

TEST(SimulatorTest, RejectsBadOptions) {
  SimulatorOptions options;
  options.gpus = 0;
  EXPECT_FALSE(Simulator::Create(options).ok());
  options = {};
  options.disks = {"bad disk\xff"};
  EXPECT_FALSE(Simulator::Create(options).ok());
}

}  // namespace
}  // namespace vigil::agent
