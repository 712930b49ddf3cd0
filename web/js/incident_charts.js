// The charts of an incident's detail page, each drawn on its own as soon
// as its data arrive (queries in parallel; a failing chart says so in its
// card and in #error, the others go on): every evidence series around the
// detection with its baseline band, and for a fault localized to a GPU the
// culprit against its peers on the metric that tells the fault, plus
// context charts of the culprit's temperature, SM clock and power.
import { api, clearError, reportError } from './api.js';
import { evidenceChart, loadCharts, peersChart, toSeries } from './charts.js';
import { esc, fmt, num, nowSec, where } from './util.js';

const WINDOW = 15 * 60;    // seconds either side of the detection
const MAX_POINTS = 900;    // step buckets per chart (each keeps min and max)
const MAX_PEERS = 16;      // peer GPUs drawn (same node first)

// Context charts of the culprit GPU: [metric, name in the title].
const CONTEXT = [['gpu_temperature_celsius', 'temperature'], ['gpu_sm_clock_mhz', 'SM clock'],
  ['gpu_power_watts', 'power']];

// The metric that sets a faulty GPU apart from its peers, by incident
// (rule) or evidence kind; other kinds compare the evidence metric.
const PEER_METRIC = [[/thermal_throttle|clock_low/, 'gpu_sm_clock_mhz'], [/power_low/, 'gpu_power_watts'],
  [/nvlink/, 'gpu_nvlink_tx_bytes_total'], [/oom_forecast|fragmentation/, 'gpu_memory_used_bytes']];

const enc = encodeURIComponent;
// Counters (`*_total`) are drawn as per-second rates.
const isCounter = (metric) => metric.endsWith('_total');
const label = (metric) => (isCounter(metric) ? `${metric} /s` : metric);

// The GPU an incident is localized to, {node, gpu (string), ev (its
// evidence or {})}; null for job- or node-wide incidents.
function culpritGpu(inc) {
  const ev = inc.evidence.find((e) => e.node && e.gpu != null &&
    (inc.gpu == null || (e.gpu === inc.gpu && (!inc.node || e.node === inc.node))));
  const node = inc.node || ev?.node;
  const gpu = inc.gpu ?? ev?.gpu;
  return node && gpu != null ? { node, gpu: String(gpu), ev: ev || {} } : null;
}

// The metric to compare the culprit (evidence `ev`) with its peers on.
function peerMetric(inc, ev) {
  const kinds = `${inc.kind} ${ev.kind || ''}`;
  return PEER_METRIC.find(([re]) => re.test(kinds))?.[1] || ev.metric;
}

// The window around `ts`: [ts − 15 min, min(now, ts + 15 min)].
function windowAround(ts) {
  const from = ts - WINDOW;
  return { from, to: Math.max(from + 1, Math.min(nowSec(), ts + WINDOW)) };
}

// Points of series `id` over the window in step buckets [start, min,
// max, mean, count]: one request, at most MAX_POINTS of them.
function fetchPoints(id, { from, to }) {
  const step = Math.max(1, Math.ceil((to - from) / MAX_POINTS));
  return api(`/api/v1/query?series=${id}&from=${from}&to=${to}&step=${step}`);
}

// The detector's current band of series `id` (learned, or while it learns
// an early or inherited one, its k widened), else the evidence's own.
async function baselineFor(id, ev) {
  try {
    const b = await api(`/api/v1/baseline?series=${id}`);
    const usable = b.usable ?? b.learned;
    if (usable) {
      const source = b.learned ? 'learned baseline'
        : b.source === 'inherited' ? 'baseline of the previous run (still learning)'
          : `early baseline, widened (learning: step ${b.learning?.step ?? '?'} of ${b.learning?.of_steps ?? '?'})`;
      return { mean: b.mean, sigma: b.sigma, k: num(b.k_sigma) || 3, source };
    }
  } catch (e) {
    if (e.status !== 404) reportError(e, 'charts');
  }
  return { mean: ev.baseline_mean, sigma: ev.baseline_sigma, k: 3, source: 'baseline at detection' };
}

// Series `id` of `metric` around `ts` in `el`, with the baseline band
// (learned, else the one in evidence `ev`) and a caption saying where the
// band comes from.
async function seriesChart(el, { id, metric, ts, ev = {} }) {
  const [q, base] = await Promise.all([fetchPoints(id, windowAround(ts)), baselineFor(id, ev)]);
  const series = toSeries(q.points, { rate: isCounter(metric) });
  const banded = Number.isFinite(num(base.mean)) && Number.isFinite(num(base.sigma));
  const notes = [banded ? `band: ${base.source}, mean ${fmt(base.mean, 4)} ± ${base.k}σ (σ ${fmt(base.sigma)})`
    : 'no learned baseline for this series'];
  if (ev.value != null) notes.push(`value at detection ${fmt(ev.value, 4)}`);
  if (q.step) notes.push(`${q.step} s buckets`);
  if (series.nonFinite) notes.push(`${series.nonFinite} NaN/Inf value(s) not drawn`);
  await loadCharts();
  el.querySelector('p').textContent = notes.join(' · ');
  evidenceChart(el, { label: label(metric), series, mean: base.mean, sigma: base.sigma, k: base.k, detectTs: ts });
}

// Culprit-GPU context: finds the series of `metric` for the GPU (the card
// is hidden when there is none) and charts it.
async function contextChart(el, { job, culprit, metric, ts }) {
  const list = (await api(`/api/v1/series?job=${enc(job)}&node=${enc(culprit.node)}&metric=${enc(metric)}`)).series || [];
  const s = list.find((x) => x.labels.gpu === culprit.gpu);
  if (!s) {
    el.hidden = true;
    return;
  }
  el.dataset.seriesId = s.id;
  await seriesChart(el, { id: s.id, metric, ts });
}

// The culprit GPU (bold red) against up to MAX_PEERS other GPUs of the job.
async function peerChart(el, { job, culprit, metric, ts }) {
  const list = (await api(`/api/v1/series?job=${enc(job)}&metric=${enc(metric)}`)).series || [];
  const isCulprit = (s) => s.labels.node === culprit.node && s.labels.gpu === culprit.gpu;
  const mine = list.find(isCulprit);
  const others = list.filter((s) => !isCulprit(s) && s.labels.gpu != null);
  const peers = others.sort((a, b) => (b.labels.node === culprit.node) - (a.labels.node === culprit.node) ||
    a.labels.node.localeCompare(b.labels.node) || Number(a.labels.gpu) - Number(b.labels.gpu)).slice(0, MAX_PEERS);
  if (!mine && !peers.length) {
    el.querySelector('p').textContent = `no ${metric} series in job ${job}`;
    return;
  }
  const range = windowAround(ts);
  const answers = await Promise.all([mine, ...peers].map((s) => s && fetchPoints(s.id, range)));
  const [c, ...p] = answers.map((a) => a && toSeries(a.points, { rate: isCounter(metric) }));
  await loadCharts();
  const shown = peers.length < others.length ? `${peers.length} of ${others.length}` : `${peers.length}`;
  el.querySelector('p').textContent = `${mine ? `${culprit.node} GPU ${culprit.gpu} in red` : 'culprit series not found'}` +
    ` · ${shown} peer GPUs in grey, their median dashed · ${answers.find(Boolean).step} s buckets`;
  const name = `${culprit.node} GPU ${culprit.gpu}`;
  peersChart(el, { culprit: c && { label: name, ...c }, peers: p, detectTs: ts });
}

// Cards of the culprit GPU's peer comparison and of its context metrics
// but those in `skip` (already charted as its evidence).
function gpuCards(inc, culprit, skip) {
  const ts = num(inc.ts);
  const name = `${culprit.node} GPU ${culprit.gpu}`;
  const cards = [];
  const metric = peerMetric(inc, culprit.ev);
  if (metric) {
    cards.push({ attrs: 'data-kind="peers"', title: `peers: ${label(metric)} of ${name} against the other GPUs of ${inc.job}`,
      draw: (el) => peerChart(el, { job: inc.job, culprit, metric, ts }) });
  }
  for (const [m, what] of CONTEXT.filter(([m]) => !skip.has(m))) {
    cards.push({ attrs: `data-kind="context" data-metric="${m}"`, title: `context: ${what} of ${name}`,
      draw: (el) => contextChart(el, { job: inc.job, culprit, metric: m, ts }) });
  }
  return cards;
}

// Fills `box` with the charts of `inc`: the culprit GPU's evidence, peers
// and context first (their queries go out first), then the other
// evidence. Cards already in `box` (from an earlier call) are kept as they
// are; new ones (and failed ones, retried) show their title at once and
// their chart when the data come.
export function drawCharts(box, inc) {
  const culprit = culpritGpu(inc);
  const onCulprit = (e) => culprit && e.node === culprit.node && String(e.gpu) === culprit.gpu;
  const own = [], others = [];  // evidence cards: {attrs, title, draw(el)}
  const drawn = new Set(), ownMetrics = new Set();
  for (const ev of inc.evidence) {
    if (ev.series == null || drawn.has(ev.series)) continue;
    const metric = ev.metric || '';
    drawn.add(ev.series);
    if (onCulprit(ev)) ownMetrics.add(metric);
    (onCulprit(ev) ? own : others).push({ attrs: `data-series-id="${esc(ev.series)}"`, title: `${label(metric)} — ${where(ev)}`,
      draw: (el) => seriesChart(el, { id: ev.series, metric, ts: num(ev.ts) || num(inc.ts), ev }) });
  }
  const gpu = culprit ? gpuCards(inc, culprit, ownMetrics) : [];
  const cards = [...own, ...gpu, ...others];
  if (!cards.length) {
    box.innerHTML = '<p class="muted">no evidence series to chart</p>';
    return;
  }
  const old = new Map([...box.querySelectorAll(':scope > .chart')].map((el) => [el.dataset.key, el]));
  const fresh = [];
  box.replaceChildren(...cards.map((c) => {
    const key = `${c.attrs} ${c.title}`;
    if (old.has(key)) return old.get(key);
    const t = document.createElement('template');
    t.innerHTML = `<div class="chart" ${c.attrs}><h4>${esc(c.title)}</h4><p class="muted">loading…</p></div>`;
    const el = t.content.firstChild;
    el.dataset.key = key;
    fresh.push([c, el]);
    return el;
  }));
  if (fresh.length) clearError('charts');
  loadCharts();  // fetched while the queries run
  for (const [c, el] of fresh) {
    c.draw(el).catch((e) => {
      el.dataset.key = '';  // retried on the next refresh
      el.querySelector('p').textContent = `chart unavailable: ${e.message}`;
      reportError(e, 'charts');
    });
  }
}
