// The built-in rule catalogue: the P0-P3 table of REQUIREMENTS.md. Order
// matters: an anomaly takes the first matching rule, so specific matches
// (XID codes, metrics, tiers) come before catch-alls.
#include <initializer_list>

#include "rules/rule.h"

namespace vigil {
namespace {

using K = AnomalyKind;
using R = Response;
using C = HintCategory;

constexpr std::initializer_list<R> kPauseAndCordon = {
    R::kCheckpointThenPauseJob, R::kCordonNode};

Rule Make(std::string name, std::initializer_list<K> kinds, Severity severity,
          std::initializer_list<R> responses, C category, std::string summary,
          std::initializer_list<const char*> metrics = {}) {
  Rule r;
  r.name = std::move(name);
  r.match.kinds = kinds;
  for (const char* m : metrics) r.match.metrics.emplace_back(m);
  r.severity = severity;
  r.responses = responses;
  r.category = category;
  r.summary = std::move(summary);
  return r;
}

Rule WithXid(Rule r, std::initializer_list<int> codes) {
  r.match.xid_codes = codes;
  return r;
}

Rule WithTier(Rule r, int tier) {
  r.match.tier = tier;
  return r;
}

Rule Generic(Rule r) {
  r.generic = true;
  return r;
}

}  // namespace

RuleSet DefaultRuleSet() {
  constexpr Severity P0 = Severity::kP0, P1 = Severity::kP1, P2 = Severity::kP2,
                     P3 = Severity::kP3;
  RuleSet set;
  set.rules = {
      // --- P0: the job cannot make correct progress. Hardware faults on a
      // node pause the job after a checkpoint and cordon the node.
      // {node} lists every node of a multi-node incident ("n003, n004 and
      // n005"): nodes of one job silent together are one incident.
      Make("node_down", {K::kNodeSilent}, P0, kPauseAndCordon, C::kNode,
           "{node} stopped reporting ({detail})"),
      // The scheduler still runs the job, but none of its nodes reports: a
      // partition between them and Vigil, or all of them down.
      Make("job_unreachable", {K::kJobUnreachable}, P1, {R::kNotifySre},
           C::kNode, "No node of job {job} reports ({detail})"),
      Make("gpu_drop", {K::kGpuMissing}, P0, kPauseAndCordon, C::kGpuHardware,
           "GPU {gpu} on {node} disappeared ({detail})"),
      Make("ecc_double_bit", {K::kEccDbe}, P0, kPauseAndCordon, C::kGpuHardware,
           "Uncorrectable (double-bit) ECC errors on {where}: +{value}"),
      // 48 DBE, 61/62 internal micro-controller halt, 64 row-remap failure,
      // 74 NVLink error, 79 fallen off the bus, 95 uncontained ECC,
      // 119/120 GSP timeout/error, 140 unrecovered ECC.
      WithXid(Make("xid_fatal", {K::kXid}, P0, kPauseAndCordon, C::kGpuHardware,
                   "Fatal GPU error on {where}: {detail}"),
              {48, 61, 62, 64, 74, 79, 95, 119, 120, 140}),
      Make("nvlink_errors", {K::kNvlinkErrors}, P0, kPauseAndCordon,
           C::kCommunication, "NVLink errors on {where}: +{value} ({metric})"),
      // NaN weights must not be checkpointed: pause only, resume from the
      // last good checkpoint. Not a node fault: no cordon.
      Make("loss_nan", {K::kLossNan}, P0, {R::kPauseJob}, C::kModel,
           "Loss is NaN/Inf in job {job}"),
      Make("grad_nan", {K::kGradNan}, P0, {R::kPauseJob}, C::kModel,
           "Gradient norm is NaN/Inf in job {job}"),
      // Cordon applies once a cause localises the hang to a node.
      Make("job_hang", {K::kJobHang}, P0, kPauseAndCordon, C::kPerformance,
           "Job {job} hung: {detail}"),
      // --- P1: severe, a human acts now.
      WithTier(
          Make("throughput_drop_severe", {K::kThroughputDrop}, P1,
               {R::kNotifySre}, C::kPerformance,
               "Job {job} slowed by {percent} (> 30 %) on {node}"),
          2),
      Make("network_packet_loss", {K::kNetDrops, K::kNetRetransmits}, P1,
           {R::kNotifySre}, C::kCommunication,
           "Packet loss on {where}: +{value} ({metric})"),
      Make("network_link_down", {K::kNetLinkDown}, P1, {R::kNotifySre},
           C::kCommunication, "RDMA link went down on {where}"),
      Make("grad_explosion", {K::kGradExplosion}, P1, {R::kNotifySre},
           C::kModel, "Gradient norm {score}x its baseline in job {job}"),
      // Severity by what a fault puts at risk (rules/engine.h): raises a
      // P2 incident whose job has much unsaved work.
      Make("gpu_hours_at_risk", {K::kGpuHoursAtRisk}, P1, {R::kNotifySre},
           C::kPerformance, "{detail}"),
      // Faults of one class in several jobs at once (rules/engine.h): what
      // they share is the likelier cause; a person looks, nothing acts.
      Make("fleet_wide_fault", {K::kFleetWideFault}, P1, {R::kNotifySre},
           C::kGeneral, "Fleet-wide: {detail}"),
      // The GPU needs a reset before the next job: cordon (non-disruptive).
      Make("row_remap_pending", {K::kRowRemapPending}, P1,
           {R::kNotifySre, R::kCordonNode}, C::kGpuHardware,
           "Row remap pending on {where}: GPU needs a reset"),
      // 63 row remap recorded, 92 high single-bit rate, 94 contained ECC.
      WithXid(
          Make("xid_gpu_error", {K::kXid}, P1, {R::kNotifySre, R::kCordonNode},
               C::kGpuHardware, "GPU error on {where}: {detail}"),
          {63, 92, 94}),
      // 13 graphics exception, 31 MMU fault, 43 GPU stopped processing,
      // 45 preemptive cleanup: the application's fault, attributed to the
      // job, not to the node (no cordon; a node that keeps showing them
      // across jobs becomes a lemon).
      WithXid(
          Make("xid_app_error", {K::kXid}, P2, {R::kDiagnosticReport},
               C::kApplication, "Application GPU fault in job {job}: {detail}"),
          {13, 31, 43, 45}),
      Make("xid", {K::kXid}, P1, {R::kNotifySre}, C::kGpuHardware,
           "XID event on {where}: {detail}"),
      // --- P2: warning, diagnostic report.
      WithTier(
          Make("throughput_drop", {K::kThroughputDrop}, P2,
               {R::kDiagnosticReport}, C::kPerformance,
               "Job {job} slowed by {percent} (> 15 %) on {node}"),
          1),
      // A slow card slows the whole job, but how much it costs is measured
      // by throughput_drop: the card-level rule is P2 (check cooling), and a
      // throughput drop joining its incident raises it to P1.
      Make("gpu_thermal_throttle", {K::kThermalThrottle}, P2,
           {R::kDiagnosticReport}, C::kGpuHardware,
           "Thermal/power throttling on {where} ({detail})"),
      Make("gpu_power_low", {K::kPeerPowerLow}, P2, {R::kDiagnosticReport},
           C::kGpuHardware, "GPU power on {where} below its peers ({detail})"),
      Make("gpu_clock_low", {K::kClockLow}, P2, {R::kDiagnosticReport},
           C::kGpuHardware, "SM clock on {where} below its peers ({detail})"),
      Make("nvlink_traffic_low", {K::kNvlinkTrafficLow}, P2,
           {R::kDiagnosticReport}, C::kCommunication,
           "NVLink traffic on {where} far below its peers ({detail})"),
      // REQUIREMENTS: when the daily ECC threshold trips, isolate the node.
      Make("ecc_single_bit_rate", {K::kEccSbeRate}, P2,
           {R::kDiagnosticReport, R::kCordonNode}, C::kGpuHardware,
           "Single-bit ECC storm on {where}: {value} per day"),
      // A node without a training job stopped reporting: no job is at
      // risk; a ticket, not a page.
      Make("idle_node_down", {K::kIdleNodeSilent}, P2, {R::kDiagnosticReport},
           C::kNode, "Idle {node} stopped reporting ({detail})"),
      // A node implicated in faults of several jobs (rules/engine.h).
      Make("lemon_node", {K::kRepeatOffender}, P2, {R::kDiagnosticReport},
           C::kNode, "Repeat offender {where}: {detail}"),
      Make("gpu_memory_fragmentation", {K::kFragmentation}, P2,
           {R::kDiagnosticReport}, C::kMemory,
           "Allocator fragmentation on {where} ({detail})"),
      Make("oom_forecast", {K::kOomForecast}, P2, {R::kDiagnosticReport},
           C::kMemory, "GPU memory on {where} heading for OOM ({detail})"),
      Make("dataloader_slow", {K::kBaselineHigh}, P2, {R::kDiagnosticReport},
           C::kDataPipeline,
           "Dataloader wait on {where} {value} s (baseline {baseline} s)",
           {"train_dataloader_wait_seconds"}),
      Make("disk_latency", {K::kBaselineHigh}, P2, {R::kDiagnosticReport},
           C::kDataPipeline, "Disk read latency up on {where} ({metric})",
           {"disk_read_seconds_total"}),
      Make("data_stall", {K::kPeriodicStall}, P2, {R::kDiagnosticReport},
           C::kDataPipeline, "Periodic GPU stalls on {where} ({detail})"),
      Make("loss_oscillation", {K::kLossOscillation}, P2,
           {R::kDiagnosticReport}, C::kModel,
           "Loss oscillating in job {job} ({detail})"),
      Make("loss_scale_thrash", {K::kLossScaleThrash}, P2,
           {R::kDiagnosticReport}, C::kModel,
           "AMP loss scale keeps halving in job {job} ({detail})"),
      Make("loss_divergence", {K::kBaselineHigh}, P2, {R::kDiagnosticReport},
           C::kModel, "Loss of job {job} rising above its trend ({value})",
           {"train_loss"}),
      // A collapsed gradient burns the whole job's GPUs without learning:
      // worth a ticket, not a page.
      Make("grad_vanishing", {K::kGradVanishing}, P2, {R::kDiagnosticReport},
           C::kModel, "Gradient norm collapsed to {score}x baseline in {job}"),
      Make("alloc_retries", {K::kBaselineHigh}, P2, {R::kDiagnosticReport},
           C::kMemory, "cudaMalloc retries up on {where}",
           {"torch_alloc_retries_total"}),
      Make("pcie_replays", {K::kBaselineHigh}, P2, {R::kDiagnosticReport},
           C::kGpuHardware, "PCIe replays up on {where}",
           {"gpu_pcie_replays_total"}),
      // --- P3: info, recorded. Baselines that many faults move are
      // generic: they never name an incident a specific rule explains.
      Generic(Make("gpu_temperature_high", {K::kBaselineHigh}, P3, {R::kLog},
                   C::kGpuHardware,
                   "{metric} on {where} {value} (baseline {baseline})",
                   {"gpu_temperature_celsius",
                    "gpu_memory_temperature_celsius"})),
      Generic(Make("step_time_high", {K::kBaselineHigh}, P3, {R::kLog},
                   C::kPerformance,
                   "Step time of job {job} up to {value} s on {node}",
                   {"train_step_time_seconds"})),
      Generic(Make("network_traffic_low", {K::kBaselineLow}, P3, {R::kLog},
                   C::kCommunication, "{metric} on {where} below baseline",
                   {"net_*", "gpu_nvlink_*"})),
      Make("mfu_low", {K::kMfuLow}, P3, {R::kLog}, C::kPerformance,
           "MFU of job {job} {value} (< 40 %) on {node}"),
      // A job's end: recorded on its timeline, never paged.
      Make("job_ended", {K::kJobEnded}, P3, {R::kLog}, C::kLifecycle,
           "Job {job} ended: {detail}"),
      Generic(Make("baseline_fluctuation", {K::kBaselineHigh, K::kBaselineLow},
                   P3, {R::kLog}, C::kGeneral,
                   "{metric} on {where} {value} outside baseline {baseline}")),
  };
  return set;
}

}  // namespace vigil
