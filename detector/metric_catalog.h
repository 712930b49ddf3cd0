// The metric catalogue of REQUIREMENTS.md as the detectors see it: which
// metrics are counters, which get a baseline and in which direction, which
// are red lines. Resolved once per series, never per sample.
#ifndef VIGIL_DETECTOR_METRIC_CATALOG_H_
#define VIGIL_DETECTOR_METRIC_CATALOG_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "detector/anomaly.h"

namespace vigil {

// Catalogue metrics the detectors treat specially; kOther for the rest.
enum class Metric : uint8_t {
  kOther,
  kGpuUtilization,
  kGpuPower,
  kGpuTemperature,
  kGpuMemoryTemperature,
  kGpuSmClock,
  kGpuThrottleReasons,
  kGpuMemoryUsed,
  kGpuMemoryTotal,
  kGpuNvlinkTx,
  kGpuNvlinkRx,
  kGpuNvlinkCrc,
  kGpuNvlinkReplay,
  kGpuNvlinkRecovery,
  kGpuEccSbe,
  kGpuEccDbe,
  kGpuRemappedRowsPending,
  kGpuXidErrors,
  kGpuXidLast,
  kGpuPcieReplays,
  kTorchReserved,
  kTorchAllocated,
  kTorchAllocRetries,
  kNetTx,
  kNetRx,
  kNetRetransmits,
  kNetDrops,
  kNetLinkDowned,
  kDiskReadBytes,
  kDiskReads,
  kDiskReadSeconds,
  kTrainLoss,
  kTrainGradNorm,
  kTrainTokensPerSecond,
  kTrainStepTime,
  kTrainDataloaderWait,
  kTrainMfu,
  kTrainLossScale,
  kTrainPhase,
};

// Which deviations of a series' baseline are bad.
enum class BaselineMode : uint8_t {
  kNone,  // no generic baseline (own detector, red line, or meaningless)
  kHigh,  // only above the band is bad (temperature, step time, loss)
  kLow,   // only below the band is bad (power, clock, traffic)
  kBoth,  // unknown metrics
};

// How the detectors treat one metric.
struct MetricTraits {
  Metric metric = Metric::kOther;
  // Monotonic counter: detectors see its per-interval increase / rate.
  bool counter = false;
  BaselineMode mode = BaselineMode::kNone;
  // The level keeps moving in training (loss): compare with a fast EWMA.
  bool trending = false;
  // Reported once per training step: only evaluated when the step moved.
  bool per_step = false;
  // Absolute sigma floor, in the series' unit (rate for counters).
  double sigma_floor = 0;
  // Sigma floor as a fraction of the level; negative: the detector's
  // default (BaselineOptions::sigma_floor_rel).
  double sigma_floor_rel = -1;
  // A confirmed level shift is taken as the new normal after a while
  // (BaselineOptions::relearn_after_s): metrics whose shifts are context,
  // not faults (unknown metrics, temperatures, traffic).
  bool relearn = false;
  // Counter red line fired by any increase.
  std::optional<AnomalyKind> red_line;
  // A counter of the node's hardware errors: it goes on counting whatever
  // job the node runs, so a node that changes job straight from one to the
  // next carries its value over (an error between the two jobs' frames,
  // often the one that ended the first, is an increase).
  bool node_errors = false;
};

// Whether the detectors learn a baseline for series of `traits`: the
// generic band, or the throughput and gradient-norm detectors' own.
inline bool LearnsBaseline(const MetricTraits& traits) {
  return traits.mode != BaselineMode::kNone ||
         traits.metric == Metric::kTrainTokensPerSecond ||
         traits.metric == Metric::kTrainGradNorm;
}

// The traits of `metric_name`. Unknown names ending in "_total" are
// counters with a two-sided baseline; other unknown names are gauges with
// a two-sided baseline. Both re-learn confirmed level shifts.
MetricTraits LookupMetric(std::string_view metric_name);

}  // namespace vigil

#endif  // VIGIL_DETECTOR_METRIC_CATALOG_H_
