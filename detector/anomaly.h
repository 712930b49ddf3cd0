// What the detectors report: one Anomaly per raised or cleared condition.
// Plain data for rules/ to map onto incidents; no I/O, no clock.
#ifndef VIGIL_DETECTOR_ANOMALY_H_
#define VIGIL_DETECTOR_ANOMALY_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vigil {

// The condition a detector found. Names (AnomalyKindName) are a contract
// with rules/ and the replay output.
enum class AnomalyKind : uint8_t {
  // Red lines: fire without a baseline, also while a job is learning.
  kLossNan,          // train_loss is NaN/Inf.
  kGradNan,          // train_grad_norm is NaN/Inf (repeatedly, for fp16).
  kEccDbe,           // gpu_ecc_dbe_total increased.
  kNvlinkErrors,     // NVLink CRC/replay/recovery error counters increased.
  kNetDrops,         // net_drops_total increased.
  kNetRetransmits,   // net_retransmits_total increased.
  kNetLinkDown,      // net_link_downed_total increased.
  kXid,              // gpu_xid_errors_total increased (value: gpu_xid_last).
  kRowRemapPending,  // gpu_remapped_rows_pending is 1.
  kGpuMissing,       // a GPU seen before is absent from its node's frames.
  // Liveness.
  kNodeSilent,  // no frame from a node for several of its intervals.
  kJobHang,     // no node of a job advances its step while frames arrive.
  // Dynamic baseline.
  kBaselineHigh,  // a series sustained above its learned band.
  kBaselineLow,   // a series sustained below its learned band.
  // Peers (localised to one GPU).
  kPeerPowerLow,      // power well below the job's peer median.
  kThermalThrottle,   // throttle bits 0x08/0x20/0x40/0x80 set.
  kClockLow,          // SM clock well below the job's peer median.
  kNvlinkTrafficLow,  // NVLink traffic far below the job's peer median.
  // Trends and patterns.
  kOomForecast,      // memory at or projected to reach the OOM threshold.
  kFragmentation,    // 1 - allocated/reserved above threshold.
  kPeriodicStall,    // node power dips to idle at a short regular period.
  kThroughputDrop,   // tokens/s below baseline (tier 1 / tier 2).
  kGradExplosion,    // grad norm many-fold above its baseline.
  kGradVanishing,    // grad norm collapsed toward zero.
  kLossOscillation,  // step-to-step loss swings far above baseline.
  kLossScaleThrash,  // AMP loss scale halved repeatedly.
  kEccSbeRate,       // single-bit ECC rate above the daily threshold.
  kMfuLow,           // MFU below threshold, sustained.
  // Job lifecycle and fleet conditions (appended: names are a contract).
  kJobEnded,        // every node of a job stopped it: a marker, the
                    // scheduler, or nodes stopping together at one step.
                    // Raised and cleared at once; never a fault.
  kIdleNodeSilent,  // a node that runs no training job stopped reporting.
  kJobUnreachable,  // the scheduler runs a job none of whose nodes report.
  kRepeatOffender,  // a node (GPU) implicated in faults of several jobs
                    // (raised by rules/, not by the detector).
  kGpuHoursAtRisk,  // a fault's job has much unsaved work: GPUs x time
                    // since its last checkpoint (raised by rules/).
  kFleetWideFault,  // faults of one class (storage, network, nodes lost,
                    // hangs) in several jobs at once: a shared cause
                    // (raised by rules/; dev names the class).
};

// The stable snake_case name of `kind`, e.g. "loss_nan".
std::string_view AnomalyKindName(AnomalyKind kind);
// The kind named `name`, or nullopt when no kind has that name.
std::optional<AnomalyKind> ParseAnomalyKind(std::string_view name);

// One raise or clear event. A condition is identified by (kind, job, node,
// gpu, dev, series_id); its clear event repeats that identity with
// `cleared` set. Fields that do not apply are empty/nullopt/NaN.
struct Anomaly {
  AnomalyKind kind = AnomalyKind::kBaselineHigh;
  // False: the condition was raised (or escalated to a higher tier);
  // true: it has ended.
  bool cleared = false;
  // Graded detectors: 1, or 2 for the more severe grade (throughput drop
  // beyond the severe threshold). Escalation re-emits a raise with tier 2.
  int tier = 1;
  std::string job;
  std::string node;  // Empty for job-wide conditions (job_hang).
  // Every node of a condition that spans several at once (nodes of one
  // job that fell silent together), sorted; then `node` is empty. Empty
  // for single-node and job-wide conditions.
  std::vector<std::string> nodes;
  std::optional<int> gpu;
  std::string dev;  // NIC or disk, when the series has a "dev" label.
  // The event code that identifies the condition, when the kind has one
  // (the XID code of kXid); part of the condition's identity.
  std::optional<int> code;
  double ts = 0;    // Time of the frame (or AdvanceTime) that decided it.
  std::optional<int64_t> step;
  // Store id of the series involved, when one series is the evidence.
  std::optional<uint32_t> series_id;
  std::string metric;  // Its metric name ("" when none).
  // The observed value that decided (a rate for counters, an increase for
  // red-line counters, seconds for liveness).
  double value = std::numeric_limits<double>::quiet_NaN();
  // The reference it was compared with (baseline level, peer median,
  // threshold) and its spread, when relevant.
  double baseline_mean = std::numeric_limits<double>::quiet_NaN();
  double baseline_sigma = std::numeric_limits<double>::quiet_NaN();
  // Magnitude, unit by kind: z-score for baseline_*, drop fraction for
  // throughput_drop, watts below peers, fold change for grad_*, seconds to
  // the threshold for oom_forecast, errors per day for ecc_sbe_rate.
  double score = 0;
  // Short human-readable evidence ("xid 79", "dataloader wait 2.1 s").
  std::string detail;
};

}  // namespace vigil

#endif  // VIGIL_DETECTOR_ANOMALY_H_
