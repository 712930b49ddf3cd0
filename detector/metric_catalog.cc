#include "detector/metric_catalog.h"

#include <array>

namespace vigil {
namespace {

struct Entry {
  std::string_view name;
  MetricTraits traits;
};

constexpr BaselineMode kNo = BaselineMode::kNone;
constexpr BaselineMode kHi = BaselineMode::kHigh;
constexpr BaselineMode kLo = BaselineMode::kLow;

MetricTraits T(Metric m, bool counter, BaselineMode mode, double floor = 0,
               std::optional<AnomalyKind> red = std::nullopt) {
  MetricTraits t;
  t.metric = m;
  t.counter = counter;
  t.mode = mode;
  t.sigma_floor = floor;
  t.red_line = red;
  return t;
}

MetricTraits Train(Metric m, BaselineMode mode, double floor = 0,
                   bool trending = false) {
  MetricTraits t = T(m, false, mode, floor);
  t.per_step = true;
  t.trending = trending;
  return t;
}

// A steady job's step time jitters by ~0.1 %: a 2 % floor would hide a 5 %
// slowdown. 0.5 % stays above millisecond rounding of sub-second steps.
MetricTraits Precise(MetricTraits t) {
  t.sigma_floor_rel = 0.005;
  return t;
}

MetricTraits Relearn(MetricTraits t) {
  t.relearn = true;
  return t;
}

MetricTraits NodeErrors(MetricTraits t) {
  t.node_errors = true;
  return t;
}

// Absolute sigma floors carry the physics: temperatures wander by degrees
// with inlet air and load (thermal mass makes them strongly autocorrelated,
// so a 3-sigma band of the learned spread alone is crossed for minutes at a
// time), while a cooling failure adds 10-20 C: sigma >= 2.5 C puts the band
// at 7.5 C. Power +-5 W, clock +-15 MHz are sensor resolution scale.
// Utilization, memory totals, bitmasks, allocator bytes and disk traffic
// get no baseline: alone they say nothing about health (utilization reads
// 100 % while a GPU waits) or have their own detectors.
const std::array<Entry, 40>& Catalog() {
  static const auto* catalog = new std::array<Entry, 40>{{
      {"gpu_utilization_ratio", T(Metric::kGpuUtilization, false, kNo)},
      {"gpu_power_watts", T(Metric::kGpuPower, false, kLo, 5)},
      {"gpu_temperature_celsius",
       Relearn(T(Metric::kGpuTemperature, false, kHi, 2.5))},
      {"gpu_memory_temperature_celsius",
       Relearn(T(Metric::kGpuMemoryTemperature, false, kHi, 2.5))},
      {"gpu_sm_clock_mhz", T(Metric::kGpuSmClock, false, kLo, 15)},
      {"gpu_throttle_reasons", T(Metric::kGpuThrottleReasons, false, kNo)},
      {"gpu_memory_used_bytes", T(Metric::kGpuMemoryUsed, false, kNo)},
      {"gpu_memory_total_bytes", T(Metric::kGpuMemoryTotal, false, kNo)},
      {"gpu_nvlink_tx_bytes_total",
       Relearn(T(Metric::kGpuNvlinkTx, true, kLo))},
      {"gpu_nvlink_rx_bytes_total",
       Relearn(T(Metric::kGpuNvlinkRx, true, kLo))},
      // The same traffic as a rate (dcgm-exporter's DCGM_FI_PROF_NVLINK_*,
      // promcompat/metric_mapping.cc): read as the counters' rate is.
      {"gpu_nvlink_tx_bytes_per_second",
       Relearn(T(Metric::kGpuNvlinkTx, false, kLo))},
      {"gpu_nvlink_rx_bytes_per_second",
       Relearn(T(Metric::kGpuNvlinkRx, false, kLo))},
      {"gpu_nvlink_crc_errors_total",
       NodeErrors(T(Metric::kGpuNvlinkCrc, true, kNo, 0, AnomalyKind::kNvlinkErrors))},
      {"gpu_nvlink_replay_errors_total",
       NodeErrors(T(Metric::kGpuNvlinkReplay, true, kNo, 0, AnomalyKind::kNvlinkErrors))},
      {"gpu_nvlink_recovery_errors_total",
       NodeErrors(T(Metric::kGpuNvlinkRecovery, true, kNo, 0, AnomalyKind::kNvlinkErrors))},
      {"gpu_ecc_sbe_total", NodeErrors(T(Metric::kGpuEccSbe, true, kNo))},
      {"gpu_ecc_dbe_total",
       NodeErrors(T(Metric::kGpuEccDbe, true, kNo, 0, AnomalyKind::kEccDbe))},
      {"gpu_remapped_rows_pending",
       T(Metric::kGpuRemappedRowsPending, false, kNo)},
      {"gpu_xid_errors_total",
       NodeErrors(T(Metric::kGpuXidErrors, true, kNo, 0, AnomalyKind::kXid))},
      {"gpu_xid_last", T(Metric::kGpuXidLast, false, kNo)},
      {"gpu_pcie_replays_total", NodeErrors(T(Metric::kGpuPcieReplays, true, kHi, 1))},
      {"torch_reserved_bytes", T(Metric::kTorchReserved, false, kNo)},
      {"torch_allocated_bytes", T(Metric::kTorchAllocated, false, kNo)},
      {"torch_alloc_retries_total",
       T(Metric::kTorchAllocRetries, true, kHi, 0.1)},
      {"net_tx_bytes_total", Relearn(T(Metric::kNetTx, true, kLo))},
      {"net_rx_bytes_total", Relearn(T(Metric::kNetRx, true, kLo))},
      {"net_retransmits_total",
       NodeErrors(T(Metric::kNetRetransmits, true, kNo, 0, AnomalyKind::kNetRetransmits))},
      {"net_drops_total",
       NodeErrors(T(Metric::kNetDrops, true, kNo, 0, AnomalyKind::kNetDrops))},
      {"net_link_downed_total",
       NodeErrors(T(Metric::kNetLinkDowned, true, kNo, 0, AnomalyKind::kNetLinkDown))},
      {"disk_read_bytes_total", T(Metric::kDiskReadBytes, true, kNo)},
      {"disk_reads_total", T(Metric::kDiskReads, true, kNo)},
      {"disk_read_seconds_total", T(Metric::kDiskReadSeconds, true, kHi, 0.05)},
      {"train_loss", Train(Metric::kTrainLoss, kHi, 0, /*trending=*/true)},
      {"train_grad_norm", Train(Metric::kTrainGradNorm, kNo)},
      {"train_tokens_per_second",
       Precise(Train(Metric::kTrainTokensPerSecond, kNo))},
      {"train_step_time_seconds",
       Precise(Train(Metric::kTrainStepTime, kHi, 0.001))},
      {"train_dataloader_wait_seconds",
       Train(Metric::kTrainDataloaderWait, kHi, 0.02)},
      {"train_mfu_ratio", Train(Metric::kTrainMfu, kNo)},
      {"train_loss_scale", Train(Metric::kTrainLossScale, kNo)},
      {"train_phase", T(Metric::kTrainPhase, false, kNo)},
  }};
  return *catalog;
}

}  // namespace

MetricTraits LookupMetric(std::string_view metric_name) {
  for (const Entry& e : Catalog()) {
    if (e.name == metric_name) return e.traits;
  }
  constexpr std::string_view kTotal = "_total";
  bool counter =
      metric_name.size() >= kTotal.size() &&
      metric_name.substr(metric_name.size() - kTotal.size()) == kTotal;
  return Relearn(T(Metric::kOther, counter, BaselineMode::kBoth));
}

}  // namespace vigil
