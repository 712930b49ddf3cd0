// The simulator's job lifecycle features (SimulatorOptions fields used by
// vigil-sim --multi-job): idle nodes, hardware handed from one job to the
// next, startup and ramp, GradScaler dynamics, noisy jobs, no phase
// markers.
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/sim/simulator.h"
#include "gtest/gtest.h"

namespace vigil::agent {
namespace {

constexpr double kStart = 1764000000.0;

Simulator Make(SimulatorOptions options) {
  absl::StatusOr<Simulator> sim = Simulator::Create(std::move(options));
  EXPECT_TRUE(sim.ok()) << sim.status();
  return std::move(*sim);
}

// Frames at `start`, `start` + `every`, ... (`ticks` of them).
std::vector<SimFrame> Ticks(Simulator& sim, int ticks, double start = kStart,
                            double every = 1) {
  std::vector<SimFrame> frames;
  for (int i = 0; i < ticks; ++i) {
    std::optional<SimFrame> f = sim.Tick(start + i * every);
    if (f.has_value()) frames.push_back(std::move(*f));
  }
  return frames;
}

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

TEST(SimulatorLifecycleTest, IdleNodeReportsHardwareOnly) {
  SimulatorOptions options;
  options.idle = true;
  options.job = "idle";
  Simulator sim = Make(options);
  std::vector<SimFrame> frames = Ticks(sim, 120);
  for (const SimFrame& f : frames) {
    for (const SimSample& s : f.samples) {
      EXPECT_FALSE(Simulator::IsProcessSeries(sim.series()[s.series]))
          << sim.series()[s.series].ToString();
    }
  }
  std::map<std::string, double> v = ByName(sim, frames.back());
  std::map<std::string, double> first = ByName(sim, frames.front());
  for (int g = 0; g < 8; ++g) {
    EXPECT_GE(v.at(Gpu("gpu_power_watts", g)), 58);
    EXPECT_LE(v.at(Gpu("gpu_power_watts", g)), 82);
    EXPECT_EQ(v.at(Gpu("gpu_utilization_ratio", g)), 0);
    EXPECT_LE(v.at(Gpu("gpu_memory_used_bytes", g)), 0.6 * 1073741824.0);
    EXPECT_LT(v.at(Gpu("gpu_temperature_celsius", g)), 45);
    EXPECT_LT(v.at(Gpu("gpu_sm_clock_mhz", g)), 500);
    EXPECT_EQ(v.at(Gpu("gpu_nvlink_tx_bytes_total", g)),
              first.at(Gpu("gpu_nvlink_tx_bytes_total", g)));
  }
  // NICs carry a trickle of management traffic, nowhere near training's.
  double tx = v.at("net_tx_bytes_total{dev=\"mlx5_0\"}") -
              first.at("net_tx_bytes_total{dev=\"mlx5_0\"}");
  EXPECT_GT(tx, 0);
  EXPECT_LT(tx, 119 * 100e3);
}

TEST(SimulatorLifecycleTest, HardwareGoesOnAcrossJobs) {
  SimulatorOptions options;
  options.job = "a";
  options.start_step = 5000;
  Simulator job_a = Make(options);
  std::vector<SimFrame> a = Ticks(job_a, 300);
  NodeHardware hw = job_a.hardware();
  EXPECT_EQ(hw.ts, kStart + 299);

  SimulatorOptions idle;
  idle.idle = true;
  idle.hardware = hw;
  Simulator node_idle = Make(idle);
  std::vector<SimFrame> b = Ticks(node_idle, 300, kStart + 300);

  SimulatorOptions next = options;
  next.job = "b";
  next.hardware = node_idle.hardware();
  Simulator job_b = Make(next);
  std::vector<SimFrame> c = Ticks(job_b, 100, kStart + 600);

  std::map<std::string, double> va = ByName(job_a, a.back()),
                                vb = ByName(node_idle, b.front()),
                                vc = ByName(job_b, c.front());
  for (const auto& [key, value] : vb) {
    if (key.find("_total") == std::string::npos) continue;
    EXPECT_GE(value, va.at(key)) << key;  // the node's counters go on
    EXPECT_GE(vc.at(key), value) << key;
    EXPECT_LT(value, va.at(key) + 1e9) << key;  // no fresh random start
  }
  // A new process counts its own allocator retries from zero.
  EXPECT_EQ(vc.at(Gpu("torch_alloc_retries_total", 0)), 0);
  // Temperatures move continuously: the idle node cools from its training
  // temperature, the next job heats from the idle one.
  for (int g = 0; g < 8; ++g) {
    std::string t = Gpu("gpu_temperature_celsius", g);
    EXPECT_GT(vb.at(t), ByName(node_idle, b.back()).at(t) + 5) << g;
    EXPECT_LT(vc.at(t), ByName(job_b, c.back()).at(t) - 5) << g;
  }
}

TEST(SimulatorLifecycleTest, StartupClimbsThenTrainsAfterSlowFirstSteps) {
  SimulatorOptions options;
  options.gpus = 2;
  options.start_step = 4000;
  options.startup_seconds = 40;
  options.ramp_steps = 2;
  options.checkpoint_every_steps = 0;
  Simulator sim = Make(options);
  std::vector<SimFrame> frames = Ticks(sim, 120);
  double last_memory = 0;
  for (int t = 0; t < 40; ++t) {
    std::map<std::string, double> v = ByName(sim, frames[t]);
    EXPECT_EQ(frames[t].step, 4000);
    EXPECT_EQ(v.count("train_loss"), 0u) << t;  // no step completed yet
    EXPECT_EQ(v.count(Gpu("torch_reserved_bytes", 0)), 1u);
    double memory = v.at(Gpu("gpu_memory_used_bytes", 0));
    EXPECT_GE(memory, last_memory);
    last_memory = memory;
    EXPECT_LT(v.at(Gpu("gpu_power_watts", 0)), 200) << t;
  }
  EXPECT_LT(ByName(sim, frames[5]).at(Gpu("gpu_memory_used_bytes", 0)),
            0.3 * 81559.0 * 1048576);
  EXPECT_GT(last_memory, 0.9 * 81559.0 * 1048576);
  // The first step takes ~2.5x, later ones ~1x.
  std::map<std::string, double> late = ByName(sim, frames.back());
  EXPECT_EQ(late.count("train_loss"), 1u);
  EXPECT_NEAR(late.at("train_step_time_seconds"), 1.7, 0.2);
  for (const SimFrame& f : frames) {
    std::map<std::string, double> v = ByName(sim, f);
    if (v.count("train_step_time_seconds") && f.step <= 4002) {
      EXPECT_GT(v.at("train_step_time_seconds"), 2.5) << f.step;
    }
  }
}

TEST(SimulatorLifecycleTest, GradScalerSearchesThenOverflowsRarely) {
  SimulatorOptions options;
  options.gpus = 1;
  options.nics = 1;
  options.fp16 = true;
  options.grad_scaler = true;
  options.step_seconds = 0.05;  // many steps per 1-s tick
  options.checkpoint_every_steps = 0;
  options.warmup_steps = 0;
  Simulator sim = Make(options);
  // One tick per step for the first steps: the search.
  std::vector<SimFrame> first;
  for (int i = 0; i < 12; ++i) {
    std::optional<SimFrame> f = sim.Tick(kStart + i * 0.05);
    first.push_back(*f);
  }
  std::vector<double> scales;
  std::set<int64_t> inf_steps;  // a step may be reported by two ticks
  for (const SimFrame& f : first) {
    std::map<std::string, double> v = ByName(sim, f);
    scales.push_back(v.at("train_loss_scale"));
    if (std::isinf(v.at("train_grad_norm"))) inf_steps.insert(f.step);
  }
  const int inf_grads = static_cast<int>(inf_steps.size());
  EXPECT_EQ(scales.front(), 32768);  // after step 0's overflow
  EXPECT_GE(inf_grads, 3);
  EXPECT_LE(inf_grads, 7);
  EXPECT_LE(scales.back(), 8192);
  EXPECT_GE(scales.back(), 1024);
  // Later: the scale stays within a factor 2-4 of where the search ended,
  // with a halving every 1000-3000 steps and a doubling after 2000 clean
  // steps. A fresh simulator resumed at a step reports the same scale.
  SimulatorOptions later = options;
  later.start_step = 200000;
  Simulator resumed = Make(later);
  std::vector<SimFrame> frames = Ticks(resumed, 2000, kStart, 1);  // 40k steps
  int halvings = 0, doublings = 0;
  double prev = 0, low = 1e9, high = 0;
  for (const SimFrame& f : frames) {
    double s = ByName(resumed, f).at("train_loss_scale");
    if (prev > 0 && s < prev) ++halvings;
    if (prev > 0 && s > prev) ++doublings;
    prev = s;
    low = std::min(low, s);
    high = std::max(high, s);
  }
  EXPECT_GE(halvings, 40000 / 3000);
  EXPECT_LE(halvings, 40000 / 1000);
  EXPECT_GE(doublings, 40000 / 4000);
  EXPECT_LE(high / low, 4);
  EXPECT_GE(low, scales.back() / 2);
}

TEST(SimulatorLifecycleTest, NoisyJobSwingsWithoutAPersistentStraggler) {
  SimulatorOptions options;
  options.start_step = 5000;
  options.checkpoint_every_steps = 0;
  options.noise = {35, 25, 0.02, 0.3};
  Simulator sim = Make(options);
  std::vector<SimFrame> frames = Ticks(sim, 600, kStart, 10);
  std::vector<double> mean(8, 0), nv(8, 0);
  double swings = 0;
  int n = 0;
  std::vector<double> prev(8, 0);
  for (size_t t = 1; t < frames.size(); ++t) {
    std::map<std::string, double> v = ByName(sim, frames[t]);
    for (int g = 0; g < 8; ++g) {
      double p = v.at(Gpu("gpu_power_watts", g));
      mean[g] += p / (frames.size() - 1);
      if (t > 1) {
        swings += std::abs(p - prev[g]);
        ++n;
      }
      prev[g] = p;
    }
  }
  EXPECT_GT(swings / n, 25);  // tens of watts from one sample to the next
  double median = 0;
  std::vector<double> sorted = mean;
  std::sort(sorted.begin(), sorted.end());
  median = (sorted[3] + sorted[4]) / 2;
  for (int g = 0; g < 8; ++g) EXPECT_GT(mean[g], median - 40) << g;
}

TEST(SimulatorLifecycleTest, PhaseMarkersCanBeOff) {
  SimulatorOptions options;
  options.gpus = 1;
  options.nics = 1;
  options.report_phase = false;
  Simulator sim = Make(options);
  std::map<std::string, double> v = ByName(sim, Ticks(sim, 3).back());
  EXPECT_EQ(v.count("train_phase"), 0u);
  EXPECT_EQ(v.count("train_loss"), 1u);
}

TEST(SimulatorLifecycleTest, CheckpointStepIsTheLastCompletedOne) {
  SimulatorOptions options;
  options.gpus = 1;
  options.nics = 1;
  options.start_step = 900;
  options.checkpoint_every_steps = 100;
  options.checkpoint_seconds = 20;
  Simulator sim = Make(options);
  EXPECT_EQ(sim.checkpoint_step(), 900);
  Ticks(sim, 171);  // step 1000 reached after ~170 s: checkpoint running
  EXPECT_EQ(sim.checkpoint_step(), 900);
  Ticks(sim, 40, kStart + 171);
  EXPECT_EQ(sim.checkpoint_step(), 1000);
}

TEST(SimulatorLifecycleTest, RejectsHardwareOfAnotherShape) {
  SimulatorOptions options;
  options.gpus = 2;
  NodeHardware hw;
  hw.gpu_temperature = {30, 30, 30};
  options.hardware = hw;
  EXPECT_FALSE(Simulator::Create(options).ok());
  options.hardware.reset();
  options.startup_seconds = -1;
  EXPECT_FALSE(Simulator::Create(options).ok());
}

}  // namespace
}  // namespace vigil::agent
