#include "agent/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vigil::agent {
namespace {

// How a reading is rounded before it is reported, as the real source does.
enum class Quant {
  kMilli,    // NVML milliwatts -> W with 3 decimals
  kInteger,  // temperatures, clocks, bit masks, flags
  kPercent,  // NVML whole-percent utilization -> ratio
  kMiB,      // framebuffer sizes
  k2MiB,     // caching-allocator segments
  k512,      // allocator blocks, disk sectors
  kFloat32,  // values that come from float32 tensors
  kNone,
};

double Quantize(double v, Quant q) {
  if (!std::isfinite(v)) return v;
  switch (q) {
    case Quant::kMilli:
      return std::round(v * 1000.0) / 1000.0;
    case Quant::kInteger:
      return std::round(v);
    case Quant::kPercent:
      return std::round(v * 100.0) / 100.0;
    case Quant::kMiB:
      return std::round(v / 1048576.0) * 1048576.0;
    case Quant::k2MiB:
      return std::round(v / 2097152.0) * 2097152.0;
    case Quant::k512:
      return std::round(v / 512.0) * 512.0;
    case Quant::kFloat32:
      return static_cast<double>(static_cast<float>(v));
    case Quant::kNone:
      return v;
  }
  return v;
}

// A metric of the catalogue. Counters accumulate the tick's increment in
// units of `unit` (IB counts 4-byte words, NVML NVLink KiB, disks sectors and
// milliseconds); gauges are reported as read, rounded by `quant`.
template <typename Tick>
struct Metric {
  const char* name;
  bool counter;
  double (*get)(const Tick&);
  Quant quant;  // gauges
  double unit;  // counters
  double base;  // counters: upper bound of the random start value
};

using GpuMetric = Metric<GpuTick>;
using NicMetric = Metric<NicTick>;
using DiskMetric = Metric<DiskTick>;

constexpr double kOne = 1.0;  // counter unit of plain event counts

const GpuMetric kGpuMetrics[] = {
    {"gpu_utilization_ratio", false,
     [](const GpuTick& g) { return g.utilization; }, Quant::kPercent, 0, 0},
    {"gpu_power_watts", false, [](const GpuTick& g) { return g.power_watts; },
     Quant::kMilli, 0, 0},
    {"gpu_temperature_celsius", false,
     [](const GpuTick& g) { return g.temperature_celsius; }, Quant::kInteger, 0,
     0},
    {"gpu_memory_temperature_celsius", false,
     [](const GpuTick& g) { return g.memory_temperature_celsius; },
     Quant::kInteger, 0, 0},
    {"gpu_sm_clock_mhz", false, [](const GpuTick& g) { return g.sm_clock_mhz; },
     Quant::kInteger, 0, 0},
    {"gpu_throttle_reasons", false,
     [](const GpuTick& g) { return double(g.throttle_reasons); },
     Quant::kInteger, 0, 0},
    {"gpu_memory_used_bytes", false,
     [](const GpuTick& g) { return g.memory_used_bytes; }, Quant::kMiB, 0, 0},
    {"gpu_memory_total_bytes", false,
     [](const GpuTick& g) { return g.memory_total_bytes; }, Quant::kMiB, 0, 0},
    {"gpu_nvlink_tx_bytes_total", true,
     [](const GpuTick& g) { return g.nvlink_tx_bytes; }, Quant::kNone, 1024,
     5e11},
    {"gpu_nvlink_rx_bytes_total", true,
     [](const GpuTick& g) { return g.nvlink_rx_bytes; }, Quant::kNone, 1024,
     5e11},
    {"gpu_nvlink_crc_errors_total", true,
     [](const GpuTick& g) { return double(g.nvlink_crc_errors); }, Quant::kNone,
     kOne, 0},
    {"gpu_nvlink_replay_errors_total", true,
     [](const GpuTick& g) { return double(g.nvlink_replay_errors); },
     Quant::kNone, kOne, 0},
    {"gpu_nvlink_recovery_errors_total", true,
     [](const GpuTick& g) { return double(g.nvlink_recovery_errors); },
     Quant::kNone, kOne, 0},
    {"gpu_ecc_sbe_total", true,
     [](const GpuTick& g) { return double(g.ecc_sbe); }, Quant::kNone, kOne, 0},
    {"gpu_ecc_dbe_total", true,
     [](const GpuTick& g) { return double(g.ecc_dbe); }, Quant::kNone, kOne, 0},
    {"gpu_remapped_rows_pending", false,
     [](const GpuTick& g) { return g.remapped_rows_pending ? 1.0 : 0.0; },
     Quant::kInteger, 0, 0},
    {"gpu_xid_errors_total", true,
     [](const GpuTick& g) { return double(g.xid_errors); }, Quant::kNone, kOne,
     0},
    {"gpu_xid_last", false, [](const GpuTick& g) { return double(g.xid_last); },
     Quant::kInteger, 0, 0},
    {"gpu_pcie_replays_total", true,
     [](const GpuTick& g) { return double(g.pcie_replays); }, Quant::kNone,
     kOne, 0},
    {"torch_reserved_bytes", false,
     [](const GpuTick& g) { return g.torch_reserved_bytes; }, Quant::k2MiB, 0,
     0},
    {"torch_allocated_bytes", false,
     [](const GpuTick& g) { return g.torch_allocated_bytes; }, Quant::k512, 0,
     0},
    {"torch_alloc_retries_total", true,
     [](const GpuTick& g) { return double(g.torch_alloc_retries); },
     Quant::kNone, kOne, 0},
};

const NicMetric kNicMetrics[] = {
    {"net_tx_bytes_total", true, [](const NicTick& n) { return n.tx_bytes; },
     Quant::kNone, 4, 2e12},
    {"net_rx_bytes_total", true, [](const NicTick& n) { return n.rx_bytes; },
     Quant::kNone, 4, 2e12},
    {"net_retransmits_total", true,
     [](const NicTick& n) { return double(n.retransmits); }, Quant::kNone, kOne,
     0},
    {"net_drops_total", true, [](const NicTick& n) { return double(n.drops); },
     Quant::kNone, kOne, 0},
    {"net_link_downed_total", true,
     [](const NicTick& n) { return double(n.link_downed); }, Quant::kNone, kOne,
     0},
};

const DiskMetric kDiskMetrics[] = {
    {"disk_read_bytes_total", true,
     [](const DiskTick& d) { return d.read_bytes; }, Quant::kNone, 512, 5e11},
    {"disk_reads_total", true,
     [](const DiskTick& d) { return double(d.reads); }, Quant::kNone, kOne,
     4e6},
    {"disk_read_seconds_total", true,
     [](const DiskTick& d) { return d.read_seconds; }, Quant::kNone, 0.001,
     800},
};

// Node-level training metrics, in catalogue order; train_loss_scale last
// because it exists for fp16 jobs only.
struct TrainMetric {
  const char* name;
  double (*get)(const TrainTick&);
  Quant quant;
};
const TrainMetric kTrainMetrics[] = {
    {"train_loss", [](const TrainTick& t) { return t.loss; }, Quant::kFloat32},
    {"train_grad_norm", [](const TrainTick& t) { return t.grad_norm; },
     Quant::kFloat32},
    {"train_tokens_per_second",
     [](const TrainTick& t) { return t.tokens_per_second; }, Quant::kNone},
    {"train_step_time_seconds",
     [](const TrainTick& t) { return t.step_time_seconds; }, Quant::kNone},
    {"train_dataloader_wait_seconds",
     [](const TrainTick& t) { return t.dataloader_wait_seconds; },
     Quant::kNone},
    {"train_mfu_ratio", [](const TrainTick& t) { return t.mfu_ratio; },
     Quant::kNone},
    {"train_phase", [](const TrainTick& t) { return double(t.phase); },
     Quant::kInteger},
};
constexpr char kLossScaleMetric[] = "train_loss_scale";

// Fraction of a step, from its start, at which the backward pass begins:
// gradient all-reduce traffic peaks after it.
constexpr double kBackwardStart = 0.4;
// Per-GPU NVLink rates (bytes/s) in the forward and backward passes and
// while a checkpoint is written.
constexpr double kNvlinkForward = 165e9, kNvlinkBackward = 235e9,
                 kNvlinkCheckpoint = 0.05e9;
// Per-NIC RDMA rates (400 Gb/s = 50 GB/s line rate).
constexpr double kNicForward = 1.5e9, kNicBackward = 42e9,
                 kNicCheckpoint = 0.3e9;
// Dataloader reads per step and node, in 128 KiB requests.
constexpr double kDiskBytesPerStep = 6.0 * 1048576, kDiskRequest = 131072,
                 kDiskSecondsPerRead = 0.00018;
// Power under BF16 load, while checkpointing, spinning in a collective
// (NCCL kernels poll: utilization reads ~100 %) and idle, watts.
constexpr double kPowerTrain = 655, kPowerCheckpoint = 135, kPowerBarrier = 88,
                 kPowerIdle = 72;
// Power while a job starts up (process start, checkpoint load), watts.
constexpr double kPowerStartup = 115;
constexpr double kMaxSmClock = 1980;
// SM clock of a GPU with nothing to run, MHz, and its "GPU idle" throttle
// reason bit.
constexpr double kIdleSmClock = 345;
constexpr uint32_t kThrottleGpuIdle = 0x1;
// Framebuffer used on a GPU no process holds, and the management traffic of
// an idle node's NICs (bytes/s).
constexpr double kIdleMemoryBytes = 480.0 * 1048576;
constexpr double kIdleNicBytesPerSecond = 25e3;
// Framebuffer held by the CUDA context and NCCL, outside PyTorch's cache.
constexpr double kContextBytes = 612.0 * 1048576;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a: stable across platforms, unlike std::hash.
uint64_t HashName(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

double ToUnit(uint64_t bits) { return (bits >> 11) * 0x1.0p-53; }

// Box-Muller on two uniforms; portable, unlike std::normal_distribution.
double NormalFrom(double u1, double u2) {
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2);
}

SeriesKey Key(const char* metric, const char* label, std::string value) {
  SeriesKey key{metric, {}};
  if (label != nullptr) key.labels.push_back({label, std::move(value)});
  return key;
}

}  // namespace

absl::StatusOr<Simulator> Simulator::Create(SimulatorOptions options,
                                            const Scenario* scenario) {
  if (options.gpus < 1 || options.gpus > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus must be 1..64, got ", options.gpus));
  }
  if (options.nics < 0 || options.nics > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("nics must be 0..64, got ", options.nics));
  }
  if (!(options.step_seconds > 0) || !(options.tokens_per_step_per_gpu > 0) ||
      !(options.checkpoint_seconds >= 0) || options.warmup_steps < 0 ||
      options.checkpoint_every_steps < 0 || options.start_step < 0 ||
      !(options.startup_seconds >= 0) || options.ramp_steps < 0 ||
      !(options.noise.power_sd_watts >= 0) ||
      !(options.noise.power_offset_watts >= 0) ||
      !(options.noise.clock_jitter >= 0) ||
      !(options.noise.nvlink_jitter >= 0)) {
    return absl::InvalidArgumentError(
        "step_seconds and tokens_per_step_per_gpu must be > 0; "
        "checkpoint_seconds, "
        "warmup_steps, checkpoint_every_steps, start_step, startup_seconds, "
        "ramp_steps and noise >= 0");
  }
  if (options.hardware.has_value() &&
      options.hardware->gpu_temperature.size() !=
          static_cast<size_t>(options.gpus)) {
    return absl::InvalidArgumentError(
        "hardware state is of a node with a different number of GPUs");
  }
  Simulator sim(std::move(options), scenario);
  for (SeriesKey& key : sim.series_) {
    absl::Status s = NormalizeSeriesKey(&key);
    if (!s.ok()) return s;  // a bad disk name
  }
  return sim;
}

Simulator::Simulator(SimulatorOptions options, const Scenario* scenario)
    : options_(std::move(options)),
      scenario_(scenario),
      node_seed_(SplitMix64(options_.seed ^ HashName(options_.node))),
      job_seed_(
          SplitMix64(options_.seed ^ HashName(options_.job) ^ 0x5bd1e995ULL)),
      rng_(node_seed_),
      progress_(static_cast<double>(options_.start_step)),
      startup_left_(options_.startup_seconds),
      completed_checkpoint_step_(options_.start_step) {
  for (int g = 0; g < options_.gpus; ++g) {
    GpuConst c;
    c.power_offset_watts = -20 + 32 * Uniform();
    c.temperature_offset_celsius = -3 + 7 * Uniform();
    c.memory_temperature_offset_celsius = 5 + 4 * Uniform();
    c.memory_headroom_bytes =
        2048.0 * 1048576 + std::floor(512 * Uniform()) * 1048576;
    if (options_.noise.power_offset_watts > 0) {  // per job and node
      double u = ToUnit(SplitMix64(job_seed_ ^ node_seed_ ^
                                   SplitMix64(static_cast<uint64_t>(g) + 99)));
      c.power_offset_watts = options_.noise.power_offset_watts * (2 * u - 1);
    }
    gpu_const_.push_back(c);
  }
  gpu_temp_.assign(options_.gpus, 0);
  if (options_.hardware.has_value()) {
    continued_ = true;
    hardware_ts_ = options_.hardware->ts;
    gpu_temp_ = options_.hardware->gpu_temperature;
  }
  scaler_search_steps_ = 3 + static_cast<int>((job_seed_ >> 17) % 4);
  BuildCatalogue();
}

bool Simulator::IsProcessSeries(const SeriesKey& key) {
  return key.metric.starts_with("train_") || key.metric.starts_with("torch_");
}

NodeHardware Simulator::hardware() const {
  NodeHardware hw;
  hw.ts = last_ts_;
  hw.counters = counters_;
  hw.carry = carry_;
  hw.gpu_temperature = gpu_temp_;
  return hw;
}

void Simulator::BuildCatalogue() {
  for (const GpuMetric& m : kGpuMetrics) {
    for (int g = 0; g < options_.gpus; ++g) {
      series_.push_back(Key(m.name, "gpu", absl::StrCat(g)));
    }
  }
  for (const NicMetric& m : kNicMetrics) {
    for (int n = 0; n < options_.nics; ++n) {
      series_.push_back(Key(m.name, "dev", absl::StrCat("mlx5_", n)));
    }
  }
  for (const DiskMetric& m : kDiskMetrics) {
    for (const std::string& d : options_.disks) {
      series_.push_back(Key(m.name, "dev", d));
    }
  }
  for (const TrainMetric& m : kTrainMetrics) {
    series_.push_back(Key(m.name, nullptr, ""));
  }
  if (options_.fp16) series_.push_back(Key(kLossScaleMetric, nullptr, ""));
  counters_.assign(series_.size(), 0);
  carry_.assign(series_.size(), 0);
  for (const SeriesKey& key : series_) process_.push_back(IsProcessSeries(key));
}

double Simulator::Uniform() { return ToUnit(rng_()); }

double Simulator::Gauss() {
  double u1 = Uniform();
  return NormalFrom(u1, Uniform());
}

double Simulator::StepGauss(int64_t step, uint64_t which) const {
  uint64_t h = SplitMix64(job_seed_ ^ SplitMix64(static_cast<uint64_t>(step)) ^
                          (which * 0x632be59bd9b4e019ULL));
  return NormalFrom(ToUnit(h), ToUnit(SplitMix64(h)));
}

double Simulator::StepSeconds(int64_t step) const {
  double s = options_.step_seconds * std::exp(0.015 * StepGauss(step, 1));
  if (options_.ramp_steps > 0 && step >= options_.start_step) {
    s *= 1 + 1.5 * std::exp(-static_cast<double>(step - options_.start_step) /
                            options_.ramp_steps);
  }
  return s;
}

void Simulator::AdvanceScaler(int64_t step) const {
  // The scale the model tolerates: where the search ends.
  const double ceiling = 65536.0 / std::ldexp(1.0, scaler_search_steps_);
  if (step < scaler_.step) scaler_ = Scaler();
  while (scaler_.step < step) {
    int64_t k = ++scaler_.step;
    double u =
        ToUnit(SplitMix64(job_seed_ ^ SplitMix64(static_cast<uint64_t>(k)) ^
                          0x2545f4914f6cdd1dULL));
    bool overflow;
    if (k < scaler_search_steps_) {
      overflow = true;
    } else if (scaler_.scale > ceiling) {
      overflow = u < 1.0 / 400;
    } else {
      overflow = u < 1.0 / 5000;
    }
    scaler_.overflow = overflow;
    if (overflow) {
      scaler_.scale /= 2;
      scaler_.clean = 0;
    } else if (++scaler_.clean >= 2000) {
      scaler_.scale *= 2;
      scaler_.clean = 0;
    }
  }
}

TrainTick Simulator::TrainAt(int64_t step) const {
  TrainTick t;
  t.step = step;
  double s = static_cast<double>(step);
  // Power-law decrease from ~ln(vocab) towards an irreducible loss.
  t.loss = (1.6 + 9.0 * std::pow(1.0 + s / 50.0, -0.35)) *
           (1.0 + 0.015 * StepGauss(step, 2));
  // Large while the learning rate warms up, then around 1.
  double warm =
      options_.warmup_steps > 0
          ? std::exp(-3.0 * s / static_cast<double>(options_.warmup_steps))
          : 0.0;
  t.grad_norm = (0.95 + 4.0 * warm) * std::exp(0.08 * StepGauss(step, 3));
  t.step_time_seconds = StepSeconds(step);
  t.dataloader_wait_seconds = 0.004 + 0.004 * std::abs(StepGauss(step, 4));
  t.tokens_per_second =
      options_.tokens_per_step_per_gpu * options_.gpus / t.step_time_seconds;
  t.mfu_ratio = t.tokens_per_second * 6.0 * options_.model_params /
                (options_.gpus * options_.peak_flops_per_gpu);
  if (options_.fp16 && options_.grad_scaler) {
    AdvanceScaler(step);
    t.loss_scale = scaler_.scale;
    if (scaler_.overflow) t.grad_norm = INFINITY;
  } else if (options_.fp16) {
    t.loss_scale = 65536.0;
  }
  return t;
}

TickTime Simulator::Advance(const ScenarioContext& ctx) {
  TickTime time;
  time.dt = ctx.dt;
  double speed =
      scenario_ != nullptr ? std::max(0.0, scenario_->StepSpeed(ctx)) : 1.0;
  double share = speed < 1 && scenario_ != nullptr
                     ? std::clamp(scenario_->BarrierShare(ctx), 0.0, 1.0)
                     : 1.0;
  double remaining = ctx.dt;
  while (remaining > 1e-12) {
    if (startup_left_ > 0) {
      double s = std::min(remaining, startup_left_);
      startup_left_ -= s;
      time.startup_s += s;
      remaining -= s;
      continue;
    }
    if (checkpoint_left_ > 0) {
      double c = std::min(remaining, checkpoint_left_);
      checkpoint_left_ -= c;
      time.checkpoint_s += c;
      remaining -= c;
      if (checkpoint_left_ <= 0) {
        completed_checkpoint_step_ = last_checkpoint_step_;
      }
      continue;
    }
    if (stall_.seconds > 0) {
      double w = std::min(remaining, stall_.seconds);
      stall_.seconds -= w;
      (stall_.own_data ? time.data_s : time.barrier_s) += w;
      step_wall_ += w;
      if (stall_.own_data) step_data_ += w;
      remaining -= w;
      continue;
    }
    if (speed <= 0) {  // hung: time passes at the barrier, no progress
      time.barrier_s += remaining;
      return time;
    }
    double whole = std::floor(progress_);
    double frac = progress_ - whole;
    double full_len = StepSeconds(static_cast<int64_t>(whole));
    double step_len = full_len / speed;
    double to_boundary = (1.0 - frac) * step_len;
    double t = std::min(remaining, to_boundary);
    double end = frac + t / step_len;
    time.backward_work_s +=
        (std::max(end, kBackwardStart) - std::max(frac, kBackwardStart)) *
        full_len;
    time.work_s += t * speed;
    time.barrier_s += t * (1.0 - speed) * share;
    time.compute_s += t * (1.0 - (1.0 - speed) * share);
    step_wall_ += t;
    remaining -= t;
    if (t < to_boundary) {
      progress_ = whole + end;
      continue;
    }
    measured_step_ = static_cast<int64_t>(whole);
    measured_wall_ = step_wall_;
    measured_data_ = step_data_;
    step_wall_ = step_data_ = 0;
    progress_ = whole + 1.0;
    int64_t step = static_cast<int64_t>(progress_);
    if (options_.checkpoint_every_steps > 0 &&
        step % options_.checkpoint_every_steps == 0 &&
        step != last_checkpoint_step_) {
      last_checkpoint_step_ = step;
      checkpoint_left_ = options_.checkpoint_seconds *
                         (1.0 + 0.1 * std::abs(StepGauss(step, 5)));
    }
    if (scenario_ != nullptr) stall_ = scenario_->StallBefore(ctx, step);
  }
  return time;
}

NodeTick Simulator::Healthy(double ts, const TickTime& time) {
  NodeTick tick;
  tick.ts = ts;
  tick.step = static_cast<int64_t>(std::floor(progress_));
  tick.time = time;
  // Fractions of the tick spent computing, spinning at a barrier, idle for
  // data and checkpointing; the first tick reports the state at its instant.
  double fw, fb, fd, fc, fs;
  if (time.dt > 0) {
    fw = time.compute_s / time.dt;
    fb = time.barrier_s / time.dt;
    fd = time.data_s / time.dt;
    fc = time.checkpoint_s / time.dt;
    fs = time.startup_s / time.dt;
  } else {
    fs = startup_left_ > 0 ? 1.0 : 0.0;
    fc = fs == 0 && checkpoint_left_ > 0 ? 1.0 : 0.0;
    fw = 1.0 - fc - fs;
    fb = fd = 0;
  }
  double step_s = StepSeconds(tick.step);
  const bool has_startup = options_.startup_seconds > 0;
  const SimulatorNoise& noise = options_.noise;
  // How far GPU memory has climbed to the working set (startup).
  const double mem_ramp =
      has_startup
          ? std::clamp((ts - start_ts_) / options_.startup_seconds, 0.0, 1.0)
          : 1.0;

  for (int g = 0; g < options_.gpus; ++g) {
    const GpuConst& c = gpu_const_[g];
    GpuTick gpu;
    double p_train = kPowerTrain + c.power_offset_watts + 6.0 * Gauss();
    if (noise.power_sd_watts > 0) p_train += noise.power_sd_watts * Gauss();
    double p_ckpt = kPowerCheckpoint + c.power_offset_watts / 4 + 8.0 * Gauss();
    double p_wait = kPowerBarrier + c.power_offset_watts / 8 + 3.0 * Gauss();
    double p_idle = kPowerIdle + c.power_offset_watts / 8 + 2.0 * Gauss();
    double p_start =
        has_startup ? kPowerStartup + c.power_offset_watts / 4 + 5.0 * Gauss()
                    : 0.0;
    gpu.busy_power_watts = std::min(p_train, options_.power_limit_watts);
    gpu.power_watts = fw * p_train + fb * p_wait + fd * p_idle + fc * p_ckpt;
    if (fs > 0) gpu.power_watts += fs * p_start;
    gpu.sm_clock_mhz = kMaxSmClock;
    if (gpu.power_watts > options_.power_limit_watts) {
      gpu.power_watts = options_.power_limit_watts - 2.0 * Uniform();
      gpu.throttle_reasons |= 0x4;
      gpu.sm_clock_mhz = kMaxSmClock - 15.0 * (1 + std::floor(3 * Uniform()));
    }
    if (noise.clock_jitter > 0) {
      gpu.sm_clock_mhz *= 1.0 - noise.clock_jitter * std::abs(Gauss());
    }
    gpu.utilization = std::min(
        1.0, fw * (0.97 + 0.035 * Uniform()) + fb * (0.99 + 0.02 * Uniform()) +
                 fd * 0.03 * Uniform() + fc * 0.15 * Uniform());
    if (fs > 0) gpu.utilization += fs * (0.05 + 0.25 * Uniform());
    double target =
        28.0 + 0.058 * gpu.power_watts + c.temperature_offset_celsius;
    double temp = LagTemperature(g, target, ts, time.dt);
    gpu.temperature_celsius = temp + 0.4 * Gauss();
    gpu.memory_temperature_celsius =
        temp + c.memory_temperature_offset_celsius + 0.4 * Gauss();
    gpu.memory_total_bytes = options_.gpu_memory_total_bytes;
    gpu.memory_used_bytes = options_.gpu_memory_total_bytes -
                            c.memory_headroom_bytes +
                            std::floor(3 * Uniform()) * 2097152.0;
    gpu.torch_reserved_bytes = gpu.memory_used_bytes - kContextBytes;
    gpu.torch_allocated_bytes =
        gpu.torch_reserved_bytes *
        ((1 - fc) * (0.86 + 0.08 * Uniform()) + fc * (0.84 + 0.01 * Uniform()));
    if (mem_ramp < 1) {  // the working set is still being allocated
      gpu.memory_used_bytes =
          std::round((kContextBytes +
                      mem_ramp * (gpu.memory_used_bytes - kContextBytes)) /
                     2097152.0) *
          2097152.0;
      gpu.torch_reserved_bytes = gpu.memory_used_bytes - kContextBytes;
      gpu.torch_allocated_bytes = 0.9 * gpu.torch_reserved_bytes;
    }
    double nv = (time.work_s * kNvlinkForward +
                 time.backward_work_s * (kNvlinkBackward - kNvlinkForward) +
                 time.checkpoint_s * kNvlinkCheckpoint +
                 time.startup_s * kNvlinkCheckpoint) *
                (1.0 + 0.02 * Gauss());
    if (noise.nvlink_jitter > 0) {
      nv *= 1.0 + noise.nvlink_jitter * (2 * Uniform() - 1);
    }
    gpu.nvlink_tx_bytes = std::max(0.0, nv);
    gpu.nvlink_rx_bytes = std::max(0.0, nv * (1.0 + 0.005 * Gauss()));
    tick.gpus.push_back(gpu);
  }
  for (int n = 0; n < options_.nics; ++n) {
    NicTick nic;
    double bytes =
        (time.work_s * kNicForward +
         time.backward_work_s * (kNicBackward - kNicForward) +
         time.checkpoint_s * kNicCheckpoint + time.startup_s * kNicCheckpoint) *
        (1.0 + 0.03 * Gauss());
    nic.tx_bytes = std::max(0.0, bytes);
    nic.rx_bytes = std::max(0.0, bytes * (1.0 + 0.01 * Gauss()));
    tick.nics.push_back(nic);
  }
  for (size_t d = 0; d < options_.disks.size(); ++d) {
    DiskTick disk;
    disk.read_bytes =
        std::max(0.0, time.work_s / step_s * kDiskBytesPerStep /
                          options_.disks.size() * (1.0 + 0.1 * Gauss()));
    double reads = disk.read_bytes / kDiskRequest;
    disk.reads = static_cast<uint64_t>(std::floor(reads + Uniform()));
    disk.read_seconds =
        reads * kDiskSecondsPerRead * (1.0 + 0.1 * std::abs(Gauss()));
    tick.disks.push_back(disk);
  }
  // The training process reports its last completed step.
  tick.train = TrainAt(std::max<int64_t>(options_.start_step, tick.step - 1));
  if (tick.train.step == measured_step_) {  // timed here: as it really ran
    TrainTick& t = tick.train;
    t.step_time_seconds = measured_wall_;
    t.dataloader_wait_seconds += measured_data_;
    t.tokens_per_second =
        options_.tokens_per_step_per_gpu * options_.gpus / measured_wall_;
    t.mfu_ratio = t.tokens_per_second * 6.0 * options_.model_params /
                  (options_.gpus * options_.peak_flops_per_gpu);
  }
  tick.train.phase = checkpoint_left_ > 0 ? 1 : 0;
  // With a startup phase the training process reports nothing until its
  // first step completes.
  if (has_startup && measured_step_ < 0) tick.train_present = false;
  return tick;
}

double Simulator::LagTemperature(int g, double target, double ts, double dt) {
  if (continued_) dt = std::max(0.0, ts - hardware_ts_);
  double& temp = gpu_temp_[g];
  temp =
      dt > 0 ? temp + (target - temp) * (1.0 - std::exp(-dt / 30.0)) : target;
  return temp;
}

NodeTick Simulator::Idle(double ts, double dt) {
  NodeTick tick;
  tick.ts = ts;
  tick.time.dt = dt;
  tick.process_present = false;
  tick.train_present = false;
  for (int g = 0; g < options_.gpus; ++g) {
    const GpuConst& c = gpu_const_[g];
    GpuTick gpu;
    gpu.power_watts = kPowerIdle - 2 + c.power_offset_watts / 4 + 1.5 * Gauss();
    gpu.busy_power_watts = gpu.power_watts;
    gpu.utilization = 0;
    gpu.sm_clock_mhz = kIdleSmClock;
    gpu.throttle_reasons = kThrottleGpuIdle;
    double target =
        28.0 + 0.058 * gpu.power_watts + c.temperature_offset_celsius;
    double temp = LagTemperature(g, target, ts, dt);
    gpu.temperature_celsius = temp + 0.4 * Gauss();
    gpu.memory_temperature_celsius =
        temp + c.memory_temperature_offset_celsius + 0.4 * Gauss();
    gpu.memory_total_bytes = options_.gpu_memory_total_bytes;
    gpu.memory_used_bytes =
        kIdleMemoryBytes + std::floor(16 * Uniform()) * 2097152.0;
    tick.gpus.push_back(gpu);
  }
  for (int n = 0; n < options_.nics; ++n) {
    NicTick nic;
    nic.tx_bytes =
        dt * kIdleNicBytesPerSecond * (1.0 + 0.3 * std::abs(Gauss()));
    nic.rx_bytes =
        dt * kIdleNicBytesPerSecond * (1.0 + 0.3 * std::abs(Gauss()));
    tick.nics.push_back(nic);
  }
  tick.disks.assign(options_.disks.size(), DiskTick());
  return tick;
}

std::optional<SimFrame> Simulator::Tick(double ts) {
  double dt = 0;
  if (!started_ && options_.hardware.has_value()) {
    // The node's counters go on from its previous job's.
    started_ = true;
    start_ts_ = ts;
    last_ts_ = ts;
    const NodeHardware& hw = *options_.hardware;
    for (size_t i = 0; i < counters_.size() && i < hw.counters.size(); ++i) {
      if (process_[i]) continue;
      counters_[i] = hw.counters[i];
      carry_[i] = i < hw.carry.size() ? hw.carry[i] : 0;
    }
  } else if (!started_) {
    started_ = true;
    start_ts_ = ts;
    last_ts_ = ts;
    // Counters start where a node that has been up for a while would be.
    size_t i = 0;
    auto seed_counters = [&](bool counter, double unit, double base, int n) {
      for (int k = 0; k < n; ++k, ++i) {
        if (counter && base > 0)
          counters_[i] = std::floor(base * Uniform() / unit) * unit;
      }
    };
    for (const GpuMetric& m : kGpuMetrics)
      seed_counters(m.counter, m.unit, m.base, options_.gpus);
    for (const NicMetric& m : kNicMetrics)
      seed_counters(m.counter, m.unit, m.base, options_.nics);
    for (const DiskMetric& m : kDiskMetrics) {
      seed_counters(m.counter, m.unit, m.base,
                    static_cast<int>(options_.disks.size()));
    }
  } else if (ts > last_ts_) {
    dt = ts - last_ts_;
    last_ts_ = ts;
  }
  if (options_.idle) {
    NodeTick tick = Idle(ts, dt);
    continued_ = false;
    return Emit(tick);
  }
  ScenarioContext ctx{&options_, ts, ts - start_ts_, dt,
                      static_cast<int64_t>(std::floor(progress_))};
  NodeTick tick = Healthy(ts, Advance(ctx));
  continued_ = false;
  if (scenario_ != nullptr) {
    ctx.step = tick.step;
    scenario_->Apply(ctx, &tick);
  }
  if (!tick.node_up) return std::nullopt;
  return Emit(tick);
}

SimFrame Simulator::Emit(const NodeTick& tick) {
  SimFrame frame;
  frame.ts = tick.ts;
  frame.step = tick.step;
  frame.samples.reserve(series_.size());
  uint32_t i = 0;
  // Adds one sample of series `i`; counters accumulate whole units.
  auto add = [&](bool counter, double v, Quant quant, double unit,
                 bool present) {
    if (counter) {
      carry_[i] += std::max(0.0, v);
      double whole = std::floor(carry_[i] / unit) * unit;
      counters_[i] += whole;
      carry_[i] -= whole;
      v = counters_[i];
    } else {
      v = Quantize(v, quant);
    }
    if (present) frame.samples.push_back({i, v});
    ++i;
  };
  for (const GpuMetric& m : kGpuMetrics) {
    // torch_* readings come from the training process.
    const bool shown = tick.process_present || m.name[0] != 't';
    for (const GpuTick& g : tick.gpus)
      add(m.counter, m.get(g), m.quant, m.unit, g.present && shown);
  }
  for (const NicMetric& m : kNicMetrics) {
    for (const NicTick& n : tick.nics)
      add(m.counter, m.get(n), m.quant, m.unit, true);
  }
  for (const DiskMetric& m : kDiskMetrics) {
    for (const DiskTick& d : tick.disks)
      add(m.counter, m.get(d), m.quant, m.unit, true);
  }
  for (const TrainMetric& m : kTrainMetrics) {
    const bool shown =
        tick.train_present &&
        (options_.report_phase || std::string_view(m.name) != "train_phase");
    add(false, m.get(tick.train), m.quant, 0, shown);
  }
  if (options_.fp16) {
    add(false, tick.train.loss_scale.value_or(NAN), Quant::kNone, 0,
        tick.train.loss_scale.has_value() && tick.train_present);
  }
  return frame;
}

}  // namespace vigil::agent
