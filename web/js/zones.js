// The three zones of the fleet overview (REQUIREMENTS "Severity and
// response": red-line alerts wake someone by phone; performance and
// capacity alerts inform), and which zone a firing incident, node or job
// belongs to. Pure functions of the API's JSON: no DOM, no requests.

// MFU below this is an optimisation hint (REQUIREMENTS "Training").
export const MFU_LINE = 0.40;
// Throughput more than this far below its baseline hints at a data
// bottleneck or a slower operator (REQUIREMENTS "Training").
export const SLOWDOWN_PCT = -15;
// A node without a frame for this long is silent (as on the nodes page).
export const SILENT_SECONDS = 60;

// Zone names in page order, with their headings and what they hold.
export const ZONES = [
  { zone: 'red', title: 'Red lines',
    what: 'Page at once: GPU dropped, XID / ECC, NVLink errors, network drops, silent nodes, NaN, hangs.' },
  { zone: 'slow', title: 'Performance',
    what: 'What is slow: MFU against the 40 % line, tokens/s and step time per job, GPUs and nodes behind their peers, stalls.' },
  { zone: 'capacity', title: 'Capacity',
    what: 'What is running out: GPU memory growth and OOM forecasts, allocator pressure, storage and disk.' },
];

// Responses that take a job or a node out of service: only hard faults ask
// for them (pause: NaN, fatal hardware; cordon: ECC, XID, row remap).
const OUT_OF_SERVICE = new Set(['pause_job', 'checkpoint_then_pause_job', 'cordon_node']);
// Hint categories of hardware that either works or does not.
const HARDWARE = new Set(['gpu_hardware', 'communication']);
// Categories that hold both slow and running-out kinds ("data_pipeline":
// dataloader waits and disk latency; "general": baseline fluctuations, and
// Vigil's own store or imported Prometheus alerts such as
// "alert:NodeFilesystemAlmostOutOfSpace"), and the kinds in them that are
// about headroom.
const MIXED = new Set(['data_pipeline', 'general']);
const RUNNING_OUT = /oom|memory|disk|storage|checkpoint|filesystem|space|quota/i;

// The zone of firing incident `inc` ({severity, kind, hint_category,
// responses, severity_history}): "red", "slow", "capacity", or null for
// records that are no fault (category "lifecycle": a job's end). Decided
// from the severity, the hint category (rules/incident.h HintCategory, one
// per rule in rules/catalog.cc) and the responses rather than from the
// kind, so rules added later fall into a zone without changes here:
//
//   red       severity P0 (phones: node_down, gpu_drop, ecc_double_bit,
//             xid_fatal, nvlink_errors, loss_nan, grad_nan, job_hang);
//             or a response that pauses the job or cordons the node
//             (row_remap_pending, xid_gpu_error, ecc_single_bit_rate);
//             or category "node" (job_unreachable, idle_node_down,
//             lemon_node: silent or repeat-offender nodes);
//             or a P1 of category "gpu_hardware" / "communication" that
//             its own rule made P1 (xid, network_packet_loss,
//             network_link_down) — not a card's slowdown raised to P1 by
//             the throughput drop that joined it (severity_history).
//   capacity  category "memory" (oom_forecast, gpu_memory_fragmentation,
//             alloc_retries); and, in the mixed categories "data_pipeline"
//             and "general", a kind naming OOM, memory, disk, storage,
//             checkpoint, filesystem, space or quota (disk_latency, Vigil's
//             own storage_degraded, imported alerts).
//   slow      every other fault: "performance" (throughput_drop*,
//             step_time_high, mfu_low, gpu_hours_at_risk), GPUs and links
//             behind their peers ("gpu_hardware" / "communication" at P2-P3:
//             gpu_thermal_throttle, gpu_power_low, gpu_clock_low,
//             gpu_temperature_high, pcie_replays, nvlink_traffic_low,
//             network_traffic_low), "data_pipeline" (dataloader_slow,
//             data_stall), "model" (loss and gradient trouble short of NaN),
//             "application" (xid_app_error) and "general"
//             (baseline_fluctuation, fleet_wide_fault).
export function zoneOf(inc) {
  const category = inc.hint_category || 'general';
  if (category === 'lifecycle') return null;
  const responses = Array.isArray(inc.responses) ? inc.responses : [];
  const history = Array.isArray(inc.severity_history) ? inc.severity_history : [];
  const raisedBy = history.length ? history[history.length - 1].rule : inc.kind;
  if (inc.severity === 'P0' || responses.some((r) => OUT_OF_SERVICE.has(r)) || category === 'node' ||
      (HARDWARE.has(category) && inc.severity === 'P1' && raisedBy === inc.kind)) return 'red';
  if (category === 'memory' || (MIXED.has(category) && RUNNING_OUT.test(String(inc.kind ?? '')))) {
    return 'capacity';
  }
  return 'slow';
}

const finite = (v) => typeof v === 'number' && Number.isFinite(v);

// What is red about node `n` of GET /api/v1/nodes without any incident:
// {missing: GPUs gone, silent: no frame for SILENT_SECONDS}, or null.
export function nodeRed(n) {
  const missing = n.gpu_state?.missing || 0;
  const silent = !(finite(n.age_seconds) && n.age_seconds <= SILENT_SECONDS);
  return missing > 0 || silent ? { missing, silent } : null;
}

// What is slow about node `n`: {hot, throttled} GPU counts, or null.
export function nodeSlow(n) {
  const hot = n.gpu_state?.hot || 0, throttled = n.gpu_state?.throttled || 0;
  return hot + throttled > 0 ? { hot, throttled } : null;
}

// Percent `last` is from `baseline` (NaN when either is unknown).
function pctOff(m) {
  if (!m || !finite(m.last) || !finite(m.baseline) || m.baseline === 0) return NaN;
  return ((m.last - m.baseline) / Math.abs(m.baseline)) * 100;
}
// True when `m` is more than 3 sigma below its baseline.
function farBelow(m) {
  return !!m && finite(m.last) && finite(m.baseline) && finite(m.sigma) && m.sigma > 0 &&
    (m.baseline - m.last) / m.sigma > 3;
}

// How job `j` of GET /api/v1/jobs performs: {mfu, mfuLow, tokensPct,
// stepTime, stepTimeBase, stepTimePct, belowBaseline, slow, score}.
// belowBaseline: tokens/s or step rate SLOWDOWN_PCT or 3 sigma below its
// baseline; slow: that or MFU under the line; score orders jobs worst
// first (more negative is worse).
export function jobPerf(j) {
  const m = j.metrics || {};
  const mfu = finite(m.mfu?.last) ? m.mfu.last : NaN;
  const tokensPct = pctOff(m.tokens_per_second);
  const rate = m.step_rate || {};
  const stepTime = finite(rate.last) && rate.last > 0 ? 1 / rate.last : NaN;
  const stepTimeBase = finite(rate.baseline) && rate.baseline > 0 ? 1 / rate.baseline : NaN;
  const stepTimePct = stepTimeBase > 0 ? ((stepTime - stepTimeBase) / stepTimeBase) * 100 : NaN;
  const mfuLow = mfu < MFU_LINE;
  const ratePct = pctOff(rate);
  const belowBaseline = tokensPct <= SLOWDOWN_PCT || ratePct <= SLOWDOWN_PCT ||
    farBelow(m.tokens_per_second) || farBelow(rate);
  const slow = mfuLow || belowBaseline;
  const worst = Math.min(0, ...[tokensPct, ratePct].filter(finite));
  const score = (slow ? -1000 : 0) + worst + (finite(mfu) ? (mfu - MFU_LINE) * 10 : 0);
  return { mfu, mfuLow, tokensPct, stepTime, stepTimeBase, stepTimePct, belowBaseline, slow, score };
}
