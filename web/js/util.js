// Small helpers shared by the pages: HTML escaping, number and time
// formatting, debouncing. No DOM state lives here.

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

// `value` as text safe inside HTML content and quoted attributes.
export function esc(value) {
  return String(value ?? '').replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

// A JSON number from the API as a JS number: "nan"/"inf"/"-inf" strings
// and null become NaN/±Infinity/NaN.
export function num(value) {
  if (typeof value === 'number') return value;
  if (value === 'inf') return Infinity;
  if (value === '-inf') return -Infinity;
  if (typeof value === 'string' && value.trim() !== '') return Number(value);
  return NaN;
}

// Short human number: 3 significant digits, k/M/G suffixes; "–" when missing.
export function fmt(value, digits = 3) {
  const x = num(value);
  if (Number.isNaN(x)) return value == null ? '–' : 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? '∞' : '−∞';
  const a = Math.abs(x);
  if (a >= 1e9) return (x / 1e9).toPrecision(digits) + 'G';
  if (a >= 1e6) return (x / 1e6).toPrecision(digits) + 'M';
  if (a >= 1e4) return (x / 1e3).toPrecision(digits) + 'k';
  if (a !== 0 && a < 1e-3) return x.toExponential(1);
  return String(Number(x.toPrecision(digits)));
}

// How far `last` is from `baseline`: pct (percent of |baseline|; NaN
// when either is unknown or the baseline is 0), sigmas ((last − baseline)
// / sigma; NaN without sigma) and off (more than `k` sigmas away).
export function deviation({ last, baseline, sigma } = {}, k = 3) {
  const x = num(last), b = num(baseline), sd = num(sigma);
  const pct = b !== 0 ? ((x - b) / Math.abs(b)) * 100 : NaN;
  const sigmas = sd >= 0 ? (x - b) / sd : NaN;
  return { pct, sigmas, off: Math.abs(sigmas) > k };
}

// A signed percentage: "+4.2 %", "−12 %" (a real minus sign).
export function signedPct(pct) {
  const a = Math.abs(pct);
  return `${pct < 0 ? '\u2212' : '+'}${a < 10 ? a.toFixed(1) : Math.round(a)} %`;
}

export const nowSec = () => Date.now() / 1000;

// Seconds as "42 s", "3 m", "5 h", "2 d".
export function duration(seconds) {
  const s = Math.max(0, seconds);
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} m`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

// Unix seconds as local "2026-12-02 21:55:03".
export function absTime(ts) {
  const t = num(ts);
  if (!Number.isFinite(t)) return '–';
  const d = new Date(t * 1000);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
    `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// "3 m ago" with the absolute time on hover, as HTML.
export function ago(ts, now = nowSec()) {
  const t = num(ts);
  if (!Number.isFinite(t)) return '–';
  return `<time datetime="${new Date(t * 1000).toISOString()}" data-ts="${t}" title="${absTime(t)}">` +
    `${duration(now - t)} ago</time>`;
}

// Re-words every ago() under `root` for the current time.
export function refreshAges(root, now = nowSec()) {
  for (const el of root.querySelectorAll('time[data-ts]')) {
    el.textContent = `${duration(now - Number(el.dataset.ts))} ago`;
  }
}

// Where an incident or piece of evidence is: "n002 · GPU 5", "nodes n003,
// n004, n005" (several nodes at once), or "job-wide".
export function where(x) {
  const parts = [];
  if (!x.node && Array.isArray(x.nodes) && x.nodes.length) {
    const shown = x.nodes.slice(0, 8).join(', ');
    parts.push(`nodes ${shown}${x.nodes.length > 8 ? ` and ${x.nodes.length - 8} more` : ''}`);
  }
  if (x.node) parts.push(x.node);
  if (x.gpu != null) parts.push(`GPU ${x.gpu}`);
  if (x.dev) parts.push(x.dev);
  return parts.length ? parts.join(' · ') : 'job-wide';
}

// Operator-facing state of an incident: resolved, acknowledged or firing.
export function incidentState(inc) {
  if (inc.state === 'resolved' || inc.lifecycle === 'resolved') return 'resolved';
  return inc.lifecycle === 'acknowledged' ? 'acknowledged' : 'firing';
}

const SEV_RANK = { P0: 0, P1: 1, P2: 2, P3: 3 };
// Sort order for incidents: P0 first, then newest first.
export function bySeverityThenNewest(a, b) {
  return (SEV_RANK[a.severity] ?? 9) - (SEV_RANK[b.severity] ?? 9) || num(b.ts) - num(a.ts);
}

// `fn` delayed until `ms` after the last call.
export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// Query string of the non-empty entries of `params`.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v != null) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}
