#include "agent/sim/scenarios.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"

namespace vigil::agent {
namespace {

constexpr double kMaxClockMhz = 1980;
constexpr double kCheckpointPowerWatts = 135;
// Power of a GPU whose transfers crawl over a degraded link (copy engines
// and NCCL kernels busy, SMs mostly waiting).
constexpr double kSlowLinkPowerWatts = 230;
constexpr double kCleanMfu = 0.5116;  // healthy MFU of the default job
constexpr double kMiB = 1048576.0;
constexpr double kGiB = 1024 * kMiB;
// oom_growth: the job holds this much less than the healthy job, so the
// leak on the faulty GPU has room to grow visibly.
constexpr double kOomJobHeadroom = 14 * kGiB;
// Framebuffer the CUDA context and NCCL hold outside PyTorch's cache.
constexpr double kContextBytes = 612 * kMiB;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashName(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Uniform [0, 1) fixed by `bits`.
double Unit(uint64_t bits) { return (Mix(bits) >> 11) * 0x1.0p-53; }
// Uniform [-1, 1) fixed by `bits`.
double Signed(uint64_t bits) { return 2 * Unit(bits) - 1; }

uint64_t TsBits(double ts) { return static_cast<uint64_t>(ts * 1000.0); }

// Events in a tick from a rate: the whole part plus one more with the
// fractional part's probability (u uniform in [0, 1)).
uint64_t Events(double rate_per_s, double dt, double u) {
  double x = std::max(0.0, rate_per_s * dt);
  return static_cast<uint64_t>(std::floor(x + u));
}

// Power of a GPU that computes through the whole tick (a straggler does not
// wait for anyone) at `factor` of its full-clock power.
double StragglerPower(const NodeTick& tick, const GpuTick& gpu, double factor) {
  const TickTime& t = tick.time;
  if (t.dt <= 0) return gpu.busy_power_watts * factor;
  double ckpt = t.checkpoint_s / t.dt;
  return (1 - ckpt) * gpu.busy_power_watts * factor +
         ckpt * kCheckpointPowerWatts;
}

enum class Kind {
  kThermal,
  kNvlink,
  kPacketLoss,
  kDataStall,
  kLossNan,
  kGradExplosion,
  kLossOscillation,
  kOom,
  kFragmentation,
  kEccDbe,
  kEccSbe,
  kFellOffBus,
  kNodeDown,
  kThroughputDrop,
  kPowerLow,
  kLowMfu,
  kLossScaleThrash,
  kNvlinkBandwidth,
  kXidStorm,
  kRackDown,
};

std::optional<Kind> KindOf(std::string_view name) {
  static const std::pair<const char*, Kind> kNames[] = {
      {"thermal_throttle", Kind::kThermal},
      {"nvlink_degradation", Kind::kNvlink},
      {"packet_loss_hang", Kind::kPacketLoss},
      {"dataloader_stall", Kind::kDataStall},
      {"loss_nan", Kind::kLossNan},
      {"grad_explosion", Kind::kGradExplosion},
      {"loss_oscillation", Kind::kLossOscillation},
      {"oom_growth", Kind::kOom},
      {"fragmentation", Kind::kFragmentation},
      {"ecc_dbe", Kind::kEccDbe},
      {"ecc_sbe_storm", Kind::kEccSbe},
      {"gpu_fell_off_bus", Kind::kFellOffBus},
      {"node_down", Kind::kNodeDown},
      {"throughput_drop_20", Kind::kThroughputDrop},
      {"throughput_drop_35", Kind::kThroughputDrop},
      {"gpu_power_low_55w", Kind::kPowerLow},
      {"low_mfu", Kind::kLowMfu},
      {"loss_scale_thrash", Kind::kLossScaleThrash},
      {"nvlink_bandwidth_degraded", Kind::kNvlinkBandwidth},
      {"xid_storm", Kind::kXidStorm},
      {"rack_down", Kind::kRackDown},
  };
  for (const auto& [n, k] : kNames) {
    if (name == n) return k;
  }
  return std::nullopt;
}

Kind KindOf(const ResolvedFault& f) { return *KindOf(f.spec.kind); }

// Kinds whose effects sit on one node; the others are job-wide.
bool OnNode(Kind k) {
  switch (k) {
    case Kind::kLossNan:
    case Kind::kGradExplosion:
    case Kind::kLossOscillation:
    case Kind::kThroughputDrop:
    case Kind::kLowMfu:
    case Kind::kLossScaleThrash:
      return false;
    default:
      return true;
  }
}

// thermal_throttle: nominal GPU temperature `e` s after the cooling failed,
// and how far throttling has gone (0..1).
double ThermalTemp(double e, double t_max) {
  return 66 + (t_max - 66) * (1 - std::exp(-e / 40));
}
double ThermalLevel(double e, double t_max) {
  return std::clamp((ThermalTemp(e, t_max) - 85) / (t_max - 1 - 85), 0.0, 1.0);
}
double ThermalMax(const ResolvedFault& f) {
  return 92 + 1.5 * Unit(f.seed + 7);
}

// nvlink_bandwidth_degraded: the job's speed once the link has degraded to
// `ratio` of its peers' traffic (0.21 -> 0.60, 0.29 -> 0.65: step time
// +53..+67 %).
double SlowLinkSpeed(double ratio) {
  return std::clamp(0.45 + 0.7 * ratio, 0.05, 1.0);
}

// xid_storm: seconds over which the events arrive.
double XidStormSeconds(const ResolvedFault& f) {
  return 180 + 120 * Unit(f.seed + 8);
}

// oom_growth: seconds until the leak fills the card (nominal).
double OomFillSeconds(const ResolvedFault& f) {
  return (kOomJobHeadroom + 2.2 * kGiB) / (f.magnitude * kMiB);
}

// The job's speed `e` seconds into fault `f` (1 unaffected, 0 hung).
double FaultSpeed(const ResolvedFault& f, double e) {
  switch (KindOf(f)) {
    case Kind::kThermal:
      return 1 - (1 - f.magnitude) * ThermalLevel(e, ThermalMax(f));
    case Kind::kNvlink:
      return 1 - (1 - f.magnitude) * std::min(1.0, e / 40);
    case Kind::kPacketLoss:
      return e >= f.hang_after_seconds ? 0.0 : 0.9;
    case Kind::kOom:
      return e >= OomFillSeconds(f) ? 0.75 : 1.0;
    case Kind::kFellOffBus:
    case Kind::kNodeDown:
    case Kind::kRackDown:
      return 0;
    case Kind::kNvlinkBandwidth:
      return 1 - (1 - SlowLinkSpeed(f.magnitude)) * std::min(1.0, e / 20);
    case Kind::kThroughputDrop:
      return 1 - f.magnitude * std::min(1.0, e / 20);
    case Kind::kLowMfu:
      return f.magnitude / kCleanMfu;
    default:
      return 1;
  }
}

}  // namespace

bool IsNodeFault(const ResolvedFault& fault) { return OnNode(KindOf(fault)); }

bool FaultHitsNode(const ResolvedFault& fault, const std::string& node) {
  Kind k = KindOf(fault);
  if (!OnNode(k)) return true;
  if (k == Kind::kRackDown && !fault.spec.nodes.empty()) {
    return std::find(fault.spec.nodes.begin(), fault.spec.nodes.end(), node) !=
           fault.spec.nodes.end();
  }
  return node == fault.spec.node;
}

bool FaultKillsJob(const ResolvedFault& fault) {
  switch (KindOf(fault)) {
    case Kind::kNodeDown:
    case Kind::kRackDown:
    case Kind::kFellOffBus:
    case Kind::kEccDbe:
    case Kind::kPacketLoss:
    case Kind::kLossNan:
      return true;
    case Kind::kGradExplosion:
      return fault.ends_in_nan;
    default:
      return false;
  }
}

absl::StatusOr<std::vector<ResolvedFault>> ResolveFaults(
    const ScenarioSpec& spec, uint64_t seed) {
  std::vector<ResolvedFault> out;
  for (size_t i = 0; i < spec.faults.size(); ++i) {
    ResolvedFault f;
    f.spec = spec.faults[i];
    std::optional<Kind> kind = KindOf(f.spec.kind);
    if (!kind.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown fault kind '", f.spec.kind, "'"));
    }
    f.seed = Mix(seed ^ Mix(HashName(f.spec.kind) + i));
    double u = Signed(f.seed + 1);  // the strength's variation
    double m = 0;
    switch (*kind) {
      case Kind::kThermal:
        m = 0.77 + 0.03 * u;
        break;
      case Kind::kNvlink:
        m = 0.55 + 0.05 * u;
        break;
      case Kind::kPacketLoss:
        m = 2e-4 * (1 + 0.3 * u);
        break;
      case Kind::kDataStall:
        m = 1.6 + 0.3 * u;
        break;
      case Kind::kGradExplosion:
        m = 1.25 + 0.05 * u;
        break;
      case Kind::kLossOscillation:
        m = 0.35 + 0.05 * u;
        break;
      case Kind::kOom:
        m = 20 + 3 * u;
        break;
      case Kind::kFragmentation:
        m = 0.62 + 0.04 * u;
        break;
      case Kind::kEccSbe:
        m = 120 * (1 + 0.3 * u);
        break;
      case Kind::kThroughputDrop:
        m = (f.spec.kind == "throughput_drop_20" ? 0.20 : 0.35) + 0.02 * u;
        break;
      case Kind::kPowerLow:
        m = 55 + 2 * u;
        break;
      case Kind::kLowMfu:
        m = 0.30 + 0.01 * u;
        break;
      case Kind::kLossScaleThrash:
        m = 0.3 + 0.05 * u;
        break;
      case Kind::kNvlinkBandwidth:
        m = 0.25 + 0.04 * u;
        break;
      case Kind::kXidStorm:
        m = std::round(10000 * (1 + 0.3 * u));
        break;
      case Kind::kRackDown:
        m = static_cast<double>(std::max<size_t>(1, f.spec.nodes.size()));
        break;
      default:
        m = 1;
        break;
    }
    f.magnitude = f.spec.magnitude.value_or(m);
    f.hang_after_seconds =
        f.spec.hang_after_seconds.value_or(90 + 20 * Signed(f.seed + 2));
    f.period_steps = f.spec.period_steps.value_or(
        3 + static_cast<int>(3 * Unit(f.seed + 3)));
    f.ends_in_nan = f.spec.nan.value_or(Unit(f.seed + 4) < 0.5);
    if (*kind == Kind::kXidStorm) {
      // Half the storms are hardware (contained ECC), half the
      // application's (graphics exception, MMU fault).
      f.xid_code = f.spec.xid.value_or(Unit(f.seed + 5) < 0.5   ? 94
                                       : Unit(f.seed + 6) < 0.5 ? 13
                                                                : 31);
    }
    f.job_speed = FaultSpeed(f, 1e9);
    out.push_back(std::move(f));
  }
  return out;
}

void AdjustJobOptions(const std::vector<ResolvedFault>& faults,
                      SimulatorOptions* options) {
  for (const ResolvedFault& f : faults) {
    if (KindOf(f) == Kind::kLossScaleThrash) options->fp16 = true;
  }
}

std::vector<ExpectedIncident> ExpectedIncidents(const ResolvedFault& f) {
  // Throughput cost of a slowdown, graded as the catalogue does.
  auto throughput = [&](std::vector<ExpectedIncident>* out) {
    double drop = 1 - f.job_speed;
    if (drop > 0.30) {
      out->push_back({{"throughput_drop_severe"}, "P1", false, false, 0});
    } else if (drop > 0.15) {
      out->push_back({{"throughput_drop"}, "P2", false, false, 0});
    }
  };
  std::vector<ExpectedIncident> out;
  switch (KindOf(f)) {
    case Kind::kThermal:
      out.push_back({{"gpu_thermal_throttle", "gpu_clock_low", "gpu_power_low"},
                     "P2",
                     true,
                     true,
                     50});
      throughput(&out);
      break;
    case Kind::kNvlink:
      out.push_back({{"nvlink_errors", "xid_fatal", "nvlink_traffic_low"},
                     "P0",
                     true,
                     true,
                     0});
      break;
    case Kind::kPacketLoss:
      out.push_back({{"network_packet_loss"}, "P1", true, false, 0});
      out.push_back({{"job_hang"}, "P0", false, false, f.hang_after_seconds});
      break;
    case Kind::kDataStall:
      out.push_back({{"data_stall", "dataloader_slow", "disk_latency"},
                     "P2",
                     true,
                     false,
                     0});
      break;
    case Kind::kLossNan:
      out.push_back({{"loss_nan", "grad_nan"}, "P0", false, false, 0});
      break;
    case Kind::kGradExplosion:
      out.push_back({{"grad_explosion"}, "P1", false, false, 0});
      if (f.ends_in_nan) {
        out.push_back({{"loss_nan", "grad_nan"},
                       "P0",
                       false,
                       false,
                       1.7 * std::log(1e5) / std::log(f.magnitude)});
      }
      break;
    case Kind::kLossOscillation:
      out.push_back(
          {{"loss_oscillation", "dataloader_slow"}, "P2", false, false, 0});
      break;
    case Kind::kOom:
      out.push_back({{"oom_forecast"}, "P2", true, true, 0});
      break;
    case Kind::kFragmentation:
      out.push_back(
          {{"gpu_memory_fragmentation", "alloc_retries"}, "P2", true, true, 0});
      break;
    case Kind::kEccDbe:
      out.push_back({{"ecc_double_bit", "xid_fatal", "row_remap_pending"},
                     "P0",
                     true,
                     true,
                     0});
      break;
    case Kind::kEccSbe:
      out.push_back({{"ecc_single_bit_rate"}, "P2", true, true, 0});
      break;
    case Kind::kFellOffBus:
      out.push_back({{"gpu_drop", "xid_fatal"}, "P0", true, true, 0});
      break;
    case Kind::kNodeDown:
      out.push_back({{"node_down"}, "P0", true, false, 0});
      break;
    case Kind::kThroughputDrop:
      throughput(&out);
      break;
    case Kind::kPowerLow:
      out.push_back({{"gpu_power_low", "gpu_clock_low"}, "P2", true, true, 0});
      break;
    case Kind::kLowMfu:
      out.push_back({{"mfu_low"}, "P3", false, false, 0});
      break;
    case Kind::kLossScaleThrash:
      out.push_back({{"loss_scale_thrash"}, "P2", false, false, 0});
      break;
    case Kind::kNvlinkBandwidth:
      // One incident on the GPU, at the severity of what it costs the job.
      out.push_back({{"nvlink_traffic_low", "gpu_clock_low", "gpu_power_low",
                      "throughput_drop_severe"},
                     "P1",
                     true,
                     true,
                     0});
      break;
    case Kind::kXidStorm:
      if (f.xid_code == 94 || f.xid_code == 63 || f.xid_code == 92) {
        out.push_back({{"xid_gpu_error"}, "P1", true, true, 0});
      } else {  // the application's fault: the job's incident
        out.push_back({{"xid_app_error"}, "P2", false, false, 0});
      }
      break;
    case Kind::kRackDown:
      out.push_back({{"node_down"}, "P0", false, false, 0, true});
      break;
  }
  return out;
}

std::vector<std::string> SideEffectKinds(const ResolvedFault& f) {
  // A slower or stopped job drags every node's power, traffic and step time.
  std::vector<std::string> slow = {"step_time_high", "network_traffic_low",
                                   "baseline_fluctuation", "throughput_drop"};
  std::vector<std::string> out;
  switch (KindOf(f)) {
    case Kind::kThermal:
      out = slow;
      out.push_back("gpu_temperature_high");
      break;
    case Kind::kNvlink:
      out = slow;
      out.insert(out.end(), {"throughput_drop_severe", "pcie_replays"});
      break;
    case Kind::kPacketLoss:
    case Kind::kFellOffBus:
    case Kind::kNodeDown:
    case Kind::kRackDown:
    case Kind::kEccDbe:
      out = slow;
      out.insert(out.end(), {"job_hang", "throughput_drop_severe", "xid",
                             "xid_fatal", "gpu_power_low", "data_stall"});
      break;
    case Kind::kDataStall:
    case Kind::kLossOscillation:
    case Kind::kOom:
    case Kind::kThroughputDrop:
    case Kind::kLowMfu:
      out = slow;
      out.insert(out.end(), {"data_stall", "dataloader_slow", "disk_latency",
                             "alloc_retries", "loss_divergence"});
      break;
    case Kind::kLossNan:
    case Kind::kGradExplosion:
    case Kind::kLossScaleThrash:
      out = {"loss_divergence", "baseline_fluctuation", "grad_nan", "loss_nan"};
      break;
    case Kind::kFragmentation:
      out = {"alloc_retries", "baseline_fluctuation"};
      break;
    case Kind::kEccSbe:
      out = {"baseline_fluctuation", "xid_gpu_error"};
      break;
    case Kind::kPowerLow:
      out = {"baseline_fluctuation", "gpu_temperature_high"};
      break;
    case Kind::kNvlinkBandwidth:
      out = slow;
      out.insert(out.end(), {"throughput_drop_severe", "pcie_replays"});
      break;
    case Kind::kXidStorm:
      out = {"baseline_fluctuation", "xid"};
      break;
  }
  return out;
}

FaultScenario::FaultScenario(std::vector<ResolvedFault> faults,
                             std::string node)
    : faults_(std::move(faults)),
      node_(std::move(node)),
      node_hash_(HashName(node_)),
      state_(faults_.size()) {}

std::optional<double> FaultScenario::Elapsed(size_t i,
                                             const ScenarioContext& ctx) const {
  const FaultSpec& spec = faults_[i].spec;
  State& s = state_[i];
  if (!s.onset.has_value()) {
    bool started =
        spec.at_step.has_value()
            ? ctx.step >= *spec.at_step
            : ctx.seconds_since_start >= spec.at_seconds.value_or(0) - 1e-9;
    if (!started) return std::nullopt;
    s.onset = FaultOnset{ctx.ts, ctx.step};
  }
  double e = ctx.ts - s.onset->ts;
  if (spec.duration_seconds.has_value() && e >= *spec.duration_seconds) {
    return std::nullopt;
  }
  return e;
}

double FaultScenario::Noise(size_t i, double ts, uint64_t which) const {
  uint64_t h = Mix(faults_[i].seed ^ node_hash_ ^ Mix(TsBits(ts) + which));
  return std::sqrt(-2.0 * std::log(1.0 - Unit(h))) *
         std::cos(2.0 * M_PI * Unit(h + 1));
}

double FaultScenario::StepSpeed(const ScenarioContext& ctx) const {
  double speed = 1;
  for (size_t i = 0; i < faults_.size(); ++i) {
    std::optional<double> e = Elapsed(i, ctx);
    if (e.has_value()) speed *= FaultSpeed(faults_[i], *e);
  }
  return speed;
}

double FaultScenario::BarrierShare(const ScenarioContext& ctx) const {
  // The most slowing active fault decides how the lost time is spent.
  double slowest = 2, share = 1;
  for (size_t i = 0; i < faults_.size(); ++i) {
    std::optional<double> e = Elapsed(i, ctx);
    if (!e.has_value()) continue;
    double speed = FaultSpeed(faults_[i], *e);
    if (speed >= slowest) continue;
    slowest = speed;
    Kind k = KindOf(faults_[i]);
    // A uniformly slower job computes more slowly (power a bit down); an
    // inefficient one also exposes communication. Stragglers and hangs
    // leave everyone else spinning at the barrier.
    share = k == Kind::kThroughputDrop ? 0.3 : k == Kind::kLowMfu ? 0.5 : 1.0;
  }
  return share;
}

StepStall FaultScenario::StallBefore(const ScenarioContext& ctx,
                                     int64_t step) const {
  StepStall stall;
  for (size_t i = 0; i < faults_.size(); ++i) {
    const ResolvedFault& f = faults_[i];
    Kind k = KindOf(f);
    if (k != Kind::kDataStall && k != Kind::kLossOscillation) continue;
    if (!Elapsed(i, ctx).has_value()) continue;
    double step_u = Unit(f.seed ^ Mix(static_cast<uint64_t>(step)));
    double seconds = 0;
    bool own = true;
    if (k == Kind::kDataStall) {
      // Every period_steps-th step's batch is late; the other nodes wait for
      // this one in the all-reduce.
      if (step % f.period_steps != 0) continue;
      seconds = f.magnitude * (0.85 + 0.3 * step_u);
      own = node_ == f.spec.node;
    } else {  // every node's dataloader chews on the bad shards
      seconds = 0.25 * (0.7 + 0.6 * step_u);
    }
    if (seconds > stall.seconds) stall = {seconds, own};
  }
  return stall;
}

void FaultScenario::Apply(const ScenarioContext& ctx, NodeTick* tick) const {
  for (size_t i = 0; i < faults_.size(); ++i) {
    const ResolvedFault& f = faults_[i];
    if (KindOf(f) == Kind::kOom) {  // the job's memory, from the first step
      for (GpuTick& g : tick->gpus) {
        g.memory_used_bytes -= kOomJobHeadroom;
        g.torch_reserved_bytes -= kOomJobHeadroom;
        g.torch_allocated_bytes -= kOomJobHeadroom * 0.9;
      }
    }
    std::optional<double> e = Elapsed(i, ctx);
    if (!e.has_value()) continue;
    if (!FaultHitsNode(f, node_)) continue;
    ApplyOne(i, *e, ctx, tick);
  }
}

void FaultScenario::ApplyOne(size_t i, double e, const ScenarioContext& ctx,
                             NodeTick* tick) const {
  const ResolvedFault& f = faults_[i];
  const double dt = ctx.dt;
  const double ts = ctx.ts;
  size_t g = static_cast<size_t>(f.spec.gpu.value_or(0));
  if (g >= tick->gpus.size()) return;  // not resolved for this node shape
  GpuTick& gpu = tick->gpus[g];
  TrainTick& train = tick->train;
  // Completed steps since the onset (0: the step running at the onset).
  const int64_t k = train.step - state_[i].onset->step + 1;
  // A uniform draw fixed by (fault, node, tick, which).
  auto u = [&](uint64_t which) {
    return Unit(Mix(TsBits(ts) + which) ^ f.seed ^ node_hash_);
  };
  switch (KindOf(f)) {
    case Kind::kThermal: {
      double t_max = ThermalMax(f);
      double level = ThermalLevel(e, t_max);
      double ratio = 1 - (1 - f.magnitude) * level;
      // The card heats whatever it draws: its cooling has failed.
      double temp = ThermalTemp(e, t_max) + 0.4 * Noise(i, ts, 2);
      gpu.temperature_celsius = std::max(gpu.temperature_celsius, temp);
      gpu.memory_temperature_celsius =
          std::max(gpu.memory_temperature_celsius, temp + 5);
      gpu.throttle_reasons &= ~0x4u;
      if (level == 0) {
        gpu.sm_clock_mhz = kMaxClockMhz;
      } else {
        gpu.throttle_reasons |= 0x20;
        if (level > 0.5) gpu.throttle_reasons |= 0x40;
        gpu.sm_clock_mhz = kMaxClockMhz * ratio + 8 * Noise(i, ts, 1);
      }
      gpu.power_watts = StragglerPower(*tick, gpu, std::pow(ratio, 1.6));
      gpu.utilization = std::max(gpu.utilization, 0.99);
      break;
    }
    case Kind::kNvlink: {
      // A lane degrades: errors climb, the link trains down and traffic
      // falls back to PCIe.
      double crc_rate = std::min(20 * std::exp(e / 20), 5000.0) *
                        std::exp(0.3 * Noise(i, ts, 1));
      uint64_t crc = Events(crc_rate, dt, u(2));
      gpu.nvlink_crc_errors += crc;
      gpu.nvlink_replay_errors += Events(crc_rate * 0.4, dt, u(3));
      double residual = std::max(0.002, 1 - e / 40);
      gpu.nvlink_tx_bytes *= residual;
      gpu.nvlink_rx_bytes *= residual;
      if (e >= 30 && e - dt < 30) {  // the link goes down: XID 74
        gpu.nvlink_recovery_errors += 1;
        gpu.xid_errors += 1;
      }
      if (e >= 30) {
        gpu.xid_last = 74;
        gpu.pcie_replays += Events(0.5, dt, u(4));
        gpu.nvlink_recovery_errors += Events(1.0 / 60, dt, u(5));
      }
      break;
    }
    case Kind::kPacketLoss: {
      NicTick* nic = nullptr;
      for (size_t n = 0; n < tick->nics.size(); ++n) {
        if (f.spec.dev == absl::StrCat("mlx5_", n)) nic = &tick->nics[n];
      }
      if (nic == nullptr) break;
      if (e < f.hang_after_seconds) {
        double packets = (nic->tx_bytes + nic->rx_bytes) / 4096;
        double drops = packets * f.magnitude * std::exp(0.3 * Noise(i, ts, 1));
        nic->drops += Events(drops, 1, u(2));
        nic->retransmits += Events(drops * 0.7, 1, u(3));
      } else {  // the ring is stuck: the QP keeps timing out
        nic->retransmits += Events(0.3, dt, u(3));
      }
      break;
    }
    case Kind::kDataStall:
      for (DiskTick& d : tick->disks) d.read_seconds *= 6 + 2 * u(1);
      break;
    case Kind::kLossNan: {
      int64_t nan_at = 2 + static_cast<int64_t>(2 * Unit(f.seed + 5));
      if (k <= 0) break;
      if (k < nan_at) {
        train.grad_norm *= k == 1 ? 4 : 60;
        train.loss *= k == 1 ? 1.1 : 1.8;
      } else {
        train.loss = NAN;
        train.grad_norm = k == nan_at ? INFINITY : NAN;
      }
      break;
    }
    case Kind::kGradExplosion: {
      if (k <= 0) break;
      double growth = std::pow(f.magnitude, static_cast<double>(k));
      double cap = f.ends_in_nan ? 1e5 : 3e3 * (1 + Unit(f.seed + 6));
      if (growth >= cap && f.ends_in_nan) {
        train.grad_norm = NAN;
        train.loss = NAN;
        break;
      }
      growth = std::min(growth, cap);
      train.grad_norm *= growth;
      train.loss *= 1 + 0.05 * std::log(growth);
      break;
    }
    case Kind::kLossOscillation: {
      double period = 6 + 6 * Unit(f.seed + 5);
      uint64_t bits = f.seed ^ Mix(static_cast<uint64_t>(train.step));
      double step_n = std::sqrt(-2 * std::log(1 - Unit(bits))) *
                      std::cos(2 * M_PI * Unit(bits + 1));
      double swing = f.magnitude * std::sin(2 * M_PI * train.step / period) +
                     0.5 * f.magnitude * step_n;
      train.loss *= std::max(0.3, 1 + swing);
      break;
    }
    case Kind::kOom: {
      double leak = f.magnitude * kMiB * e;
      double limit = gpu.memory_total_bytes - 300 * kMiB;
      double used = std::min(gpu.memory_used_bytes + leak, limit);
      gpu.torch_allocated_bytes = std::min(gpu.torch_allocated_bytes + leak,
                                           (used - kContextBytes) * 0.985);
      gpu.torch_reserved_bytes = used - kContextBytes;
      gpu.memory_used_bytes = used;
      if (used >= limit) {  // the allocator flushes its cache and retries
        gpu.torch_alloc_retries += Events(4, dt, u(1));
      }
      break;
    }
    case Kind::kFragmentation: {
      double ratio = 0.9 - (0.9 - f.magnitude) * std::min(1.0, e / 300);
      gpu.torch_allocated_bytes =
          gpu.torch_reserved_bytes * ratio * (1 + 0.01 * Noise(i, ts, 1));
      gpu.torch_alloc_retries +=
          Events(0.05 * std::min(1.0, e / 300), dt, u(2));
      break;
    }
    case Kind::kEccDbe:
      if (e == 0) {
        gpu.ecc_dbe += 1 + static_cast<uint64_t>(2 * Unit(f.seed + 5));
        gpu.ecc_sbe += 3 + static_cast<uint64_t>(8 * Unit(f.seed + 6));
        gpu.xid_errors += 1;
      }
      gpu.xid_last = 48;
      gpu.remapped_rows_pending = true;
      break;
    case Kind::kEccSbe: {
      double rate = f.magnitude / 60 * std::min(1.0, 0.2 + e / 600) *
                    std::exp(0.4 * Noise(i, ts, 1));
      gpu.ecc_sbe += Events(rate, dt, u(2));
      break;
    }
    case Kind::kFellOffBus:
      if (e == 0) {
        gpu.xid_errors += 1;
        gpu.xid_last = 79;
      } else {
        gpu.present = false;
      }
      break;
    case Kind::kNodeDown:
    case Kind::kRackDown:
      tick->node_up = false;
      break;
    case Kind::kNvlinkBandwidth: {
      // The link trains down to fewer lanes without logging an error: NCCL
      // routes most of this GPU's traffic through PCIe, its transfers crawl
      // and its peers wait for it at every collective.
      double ratio = 1 - (1 - f.magnitude) * std::min(1.0, e / 20);
      double wiggle = 1 + 0.03 * Noise(i, ts, 1);
      gpu.nvlink_tx_bytes *= ratio * wiggle;
      gpu.nvlink_rx_bytes *= ratio * wiggle;
      double speed = FaultSpeed(f, e);
      const TickTime& t = tick->time;
      double ckpt = t.dt > 0 ? t.checkpoint_s / t.dt : 0;
      gpu.power_watts = (1 - ckpt) * (speed * gpu.busy_power_watts +
                                      (1 - speed) * kSlowLinkPowerWatts) +
                        ckpt * kCheckpointPowerWatts;
      gpu.utilization = std::max(gpu.utilization, 0.99);
      break;
    }
    case Kind::kXidStorm: {
      double storm = XidStormSeconds(f);
      if (e < storm) {
        uint64_t n = Events(f.magnitude / storm, dt, u(1));
        gpu.xid_errors += std::max<uint64_t>(n, e == 0 ? 1 : 0);
      }
      gpu.xid_last = static_cast<uint32_t>(f.xid_code);
      break;
    }
    case Kind::kThroughputDrop:
    case Kind::kLowMfu:
      break;  // all in the job's speed
    case Kind::kPowerLow:
      gpu.power_watts -= f.magnitude;
      gpu.temperature_celsius -= 0.058 * f.magnitude;
      gpu.throttle_reasons &= ~0x4u;
      gpu.sm_clock_mhz =
          std::min(gpu.sm_clock_mhz, kMaxClockMhz - 45 - 15 * Unit(f.seed + 5));
      break;
    case Kind::kLossScaleThrash: {
      // GradScaler: an overflowing step is skipped and halves the scale;
      // the scale only grows after 2000 clean steps, which never come.
      State& s = state_[i];
      if (s.scale_step < 0) {  // from the job's scale, if it has one
        s.scale_step = train.step;
        s.scale = train.loss_scale.value_or(s.scale);
      }
      while (s.scale_step < train.step) {
        ++s.scale_step;
        double p = f.magnitude * std::clamp(std::log2(s.scale) / 16, 0.1, 1.0);
        s.overflow = Unit(f.seed ^ Mix(s.scale_step)) < p;
        if (s.overflow) s.scale /= 2;
      }
      train.loss_scale = s.scale;
      if (s.overflow) train.grad_norm = INFINITY;
      break;
    }
  }
}

}  // namespace vigil::agent
