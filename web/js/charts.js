// Charts on top of uPlot (vendored by scripts/vendor-web.sh; loaded on
// first use so pages without charts do not wait for it):
// an evidence chart with the learned baseline band (mean ± k·sigma as a
// uPlot band) and anomalous points as a points-only series, a peers chart,
// and sparklines. Also the point helpers (counter → rate, band checks).
import { showError } from './api.js';
import { absTime, deviation, fmt, num } from './util.js';

const MISSING = 'charts unavailable: web/vendor/uPlot.iife.min.js did not load (run scripts/vendor-web.sh)';
let loading = null;

// Loads uPlot once. Resolves to true when window.uPlot is there; false
// (and a message in #error) when the script cannot be loaded.
export function loadCharts() {
  if (window.uPlot) return Promise.resolve(true);
  loading ??= new Promise((resolve) => {
    const script = document.createElement('script');
    script.src = 'vendor/uPlot.iife.min.js';
    script.onload = () => resolve(!!window.uPlot);
    script.onerror = () => {
      loading = null;
      showError('charts', MISSING);
      resolve(false);
    };
    document.head.append(script);
  });
  return loading;
}

const live = new Set();  // charts to resize with the window

window.addEventListener('resize', () => {
  for (const entry of [...live]) {
    if (!entry.el.isConnected) { live.delete(entry); continue; }
    entry.plot.setSize(entry.size());
  }
});

// True when uPlot is loaded (see loadCharts); otherwise says so in `el`.
function ready(el) {
  if (window.uPlot) return true;
  el.insertAdjacentHTML('beforeend', `<p class="muted">${MISSING}</p>`);
  return false;
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// Time-axis label: 24 h "HH:MM" (":SS" below a minute, date from a day).
function clock(ts, incr) {
  const d = new Date(ts * 1000);
  const p = (n) => String(n).padStart(2, '0');
  if (incr >= 86400) return `${d.getMonth() + 1}/${d.getDate()}`;
  return `${p(d.getHours())}:${p(d.getMinutes())}${incr < 60 ? `:${p(d.getSeconds())}` : ''}`;
}

// Axis styling that follows the theme's colours.
function axes(yFormat = (v) => fmt(v)) {
  const stroke = cssVar('--mute');
  const grid = { stroke: cssVar('--line'), width: 1 };
  return [
    { stroke, grid, ticks: grid, space: 70, values: (u, splits, ax, space, incr) => splits.map((t) => clock(t, incr)) },
    { stroke, grid, ticks: grid, size: 56, values: (u, vals) => vals.map(yFormat) },
  ];
}

// Draws into a fresh child of `el` (so el's padding is not counted) and
// keeps it as wide as that child on window resizes.
function mount(el, opts, data, height) {
  const box = document.createElement('div');
  box.className = 'plot';
  el.append(box);
  const size = () => ({ width: Math.max(200, box.clientWidth || 600), height });
  const plot = new window.uPlot({ ...opts, ...size() }, data, box);
  live.add({ el: box, plot, size });
  return plot;
}

// Points [[ts, v], ...] or step buckets [[start, min, max, mean, count]]
// as {x, y, lo, hi} arrays (lo/hi: bucket min/max, equal to y when raw).
// Counters (`rate`) become per-second rates; resets and non-finite values
// become gaps (null). `nonFinite` counts values that cannot be drawn.
export function toSeries(points, { rate = false } = {}) {
  const x = [], y = [], lo = [], hi = [];
  let nonFinite = 0;
  const clean = (v) => (Number.isFinite(v) ? v : null);
  for (let i = 0; i < points.length; i++) {
    const p = points[i];
    const mean = num(p.length > 2 ? p[3] : p[1]);
    if (!Number.isFinite(mean)) nonFinite++;
    if (rate) {
      if (i === 0) continue;
      const prev = points[i - 1];
      const dt = p[0] - prev[0];
      const d = mean - num(prev.length > 2 ? prev[3] : prev[1]);
      const r = dt > 0 && d >= 0 ? d / dt : null;
      x.push(p[0]); y.push(clean(r)); lo.push(clean(r)); hi.push(clean(r));
      continue;
    }
    x.push(p[0]);
    y.push(clean(mean));
    lo.push(clean(p.length > 2 ? num(p[1]) : mean));
    hi.push(clean(p.length > 2 ? num(p[2]) : mean));
  }
  return { x, y, lo, hi, nonFinite };
}

// Marks points outside [lower, upper] (value: the bucket extreme that is
// outside) and always the point nearest `detectTs`. Returns the marker
// series (null where not anomalous) and how many points it marks.
export function anomalies(s, lower, upper, detectTs) {
  const marks = s.y.map((v, i) => {
    if (v == null) return null;
    if (Number.isFinite(upper) && s.hi[i] > upper) return s.hi[i];
    if (Number.isFinite(lower) && s.lo[i] < lower) return s.lo[i];
    return null;
  });
  let best = -1;
  for (let i = 0; i < s.x.length; i++) {
    if (s.y[i] == null) continue;
    if (best < 0 || Math.abs(s.x[i] - detectTs) < Math.abs(s.x[best] - detectTs)) best = i;
  }
  if (best >= 0 && marks[best] == null) marks[best] = s.y[best];
  return { marks, count: marks.filter((v) => v != null).length };
}

// A hook drawing a dashed vertical line at `ts` (the detection time).
function markerHook(ts, color) {
  return (u) => {
    const x = u.valToPos(ts, 'x', true);
    if (!(x >= u.bbox.left && x <= u.bbox.left + u.bbox.width)) return;
    const { ctx } = u;
    ctx.save();
    ctx.strokeStyle = color;
    ctx.setLineDash([4, 4]);
    ctx.lineWidth = window.devicePixelRatio || 1;
    ctx.beginPath();
    ctx.moveTo(x, u.bbox.top);
    ctx.lineTo(x, u.bbox.top + u.bbox.height);
    ctx.stroke();
    ctx.restore();
  };
}

// Evidence chart in `el`: the series, the band mean ± k·sigma when both
// are finite, anomalous points marked, the detection time as a dashed
// line. Sets el.dataset.band and el.dataset.anomalies.
export function evidenceChart(el, { label, series, mean, sigma, k = 3, detectTs, height = 220 }) {
  if (!ready(el)) return null;
  const m = num(mean), sd = num(sigma);
  const band = Number.isFinite(m) && Number.isFinite(sd);
  const upper = band ? m + k * sd : NaN, lower = band ? m - k * sd : NaN;
  const { marks, count } = anomalies(series, lower, upper, detectTs);
  const bad = cssVar('--bad');
  const accent = cssVar('--accent');
  const data = [series.x, series.y];
  const opts = {
    legend: { show: true },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: true } },
    axes: axes(),
    series: [
      { value: (u, v) => (v == null ? '–' : absTime(v)) },
      { label, stroke: accent, width: 1.5, value: (u, v) => fmt(v, 4) },
    ],
    hooks: { draw: [markerHook(detectTs, bad)] },
  };
  if (band) {
    const n = series.x.length;
    data.push(new Array(n).fill(upper), new Array(n).fill(lower));
    const edge = cssVar('--band-edge');
    opts.series.push(
      { label: `mean + ${k}σ`, stroke: edge, width: 1, dash: [3, 3], value: (u, v) => fmt(v, 4) },
      { label: `mean − ${k}σ`, stroke: edge, width: 1, dash: [3, 3], value: (u, v) => fmt(v, 4) },
    );
    opts.bands = [{ series: [2, 3], fill: cssVar('--band') }];
  }
  data.push(marks);
  opts.series.push({
    label: 'anomalous', stroke: bad, fill: bad, width: 0, paths: () => null,
    points: { show: true, size: 8, stroke: bad, fill: bad }, value: (u, v) => fmt(v, 4),
  });
  el.dataset.band = String(band);
  el.dataset.anomalies = String(count);
  return mount(el, opts, data, height);
}

// Median of the non-null numbers in `values` (null when none).
function median(values) {
  const v = values.filter((x) => x != null).sort((a, b) => a - b);
  if (!v.length) return null;
  const mid = v.length >> 1;
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

// Peer comparison in `el`: `peers` (toSeries results) as thin grey lines
// under one legend entry "peers (n)" whose value is their range at the
// cursor, their median as a dashed line, and `culprit` ({label, x, y})
// bold red on top; the detection time as a dashed vertical line. Series
// are joined by timestamp (missing values are gaps).
export function peersChart(el, { culprit, peers, detectTs, height = 240 }) {
  if (!ready(el)) return null;
  const all = culprit ? [...peers, culprit] : peers;
  const xs = [...new Set(all.flatMap((s) => s.x))].sort((a, b) => a - b);
  const index = new Map(xs.map((t, i) => [t, i]));
  const align = (s) => {
    const ys = new Array(xs.length).fill(null);
    s.x.forEach((t, i) => { ys[index.get(t)] = s.y[i]; });
    return ys;
  };
  const peerYs = peers.map(align);
  const column = (i) => peerYs.map((ys) => ys[i]).filter((v) => v != null);
  const value = (u, v) => fmt(v, 4);
  const range = (u, v, si, i) => {
    const c = i == null ? [] : column(i);
    return c.length ? `${fmt(Math.min(...c), 4)} – ${fmt(Math.max(...c), 4)}` : '–';
  };
  const grey = cssVar('--peer');
  const series = [{ value: (u, v) => (v == null ? '–' : absTime(v)) }];
  peerYs.forEach((_, i) => series.push({ label: i ? `peer ${i}` : `peers (${peers.length})`, stroke: grey,
    width: 1, points: { show: false }, value: range }));
  series.push({ label: 'peers\u2019 median', stroke: cssVar('--fg'), width: 1.5, dash: [6, 4],
    points: { show: false }, value });
  if (culprit) series.push({ label: culprit.label, stroke: cssVar('--bad'), width: 2.5, value });
  const isPeer = (i) => i >= 1 && i <= peers.length;
  const opts = {
    legend: { show: true },
    cursor: { points: { size: (u, i) => (isPeer(i) ? 0 : 8) } },
    scales: { x: { time: true } },
    axes: axes(),
    series,
    hooks: {
      draw: [markerHook(detectTs, cssVar('--bad'))],
      // The one "peers" legend entry shows and hides every peer.
      setSeries: [(u, i, o) => {
        if (i !== 1 || o.show == null) return;
        for (let j = 2; j <= peers.length; j++) u.setSeries(j, { show: o.show }, false);
      }],
    },
  };
  const plot = mount(el, opts, [xs, ...peerYs, xs.map((_, i) => median(column(i))), ...(culprit ? [align(culprit)] : [])], height);
  const rows = plot.root.querySelectorAll('.u-legend .u-series');
  for (let j = 2; j <= peers.length; j++) rows[j]?.setAttribute('hidden', '');
  return plot;
}

// Sparkline of [[ts, v]] the size of `el` (120×30 before layout): the
// baseline as a dashed line in a faint ± 3 sigma band when known, and the
// last value as a dot, red when it is outside the band.
export function spark(el, points, { baseline, sigma } = {}) {
  if (!window.uPlot) return null;
  const s = toSeries(points || []);
  const b = num(baseline), sd = num(sigma);
  const flat = (v) => s.x.map(() => v);
  const plain = (stroke, more = {}) => ({ stroke, width: 1, points: { show: false }, ...more });
  const data = [s.x, s.y];
  const series = [{}, plain(cssVar('--accent'), { width: 1.25 })];
  const opts = {
    width: el.clientWidth || 120, height: el.clientHeight || 30, legend: { show: false }, cursor: { show: false },
    scales: { x: { time: false } }, axes: [{ show: false }, { show: false }], series,
  };
  if (Number.isFinite(b)) {
    data.push(flat(b));
    series.push(plain(cssVar('--band-edge'), { dash: [3, 2] }));
    if (Number.isFinite(sd) && sd > 0) {
      data.push(flat(b + 3 * sd), flat(b - 3 * sd));
      series.push(plain('transparent'), plain('transparent'));
      opts.bands = [{ series: [3, 4], fill: cssVar('--band') }];
    }
  }
  const last = s.y.findLastIndex((v) => v != null);
  if (last >= 0) {
    const color = deviation({ last: s.y[last], baseline: b, sigma: sd }).off ? cssVar('--bad') : cssVar('--accent');
    data.push(s.y.map((v, i) => (i === last ? v : null)));
    series.push({ stroke: color, fill: color, width: 0, paths: () => null,
      points: { show: true, size: 5, stroke: color, fill: color } });
  }
  el.textContent = '';
  return new window.uPlot(opts, data, el);
}
