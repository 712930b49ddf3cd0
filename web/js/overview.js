// Fleet overview (#/overview, the landing page): three zones that say at a
// glance what is red, what is slow and what is running out (zones.js says
// which zone holds what). Each zone shows counts and its worst few items,
// each linking to its incident, job or node, never the whole fleet: the
// page costs the same with 10 nodes or 10,000. Refreshed by the app on
// every incident event (or its 5 s polling), and every 10 s on its own for
// what changes without an incident (frame ages, GPU states, throughput).
import { api, clearError, reportError } from './api.js';
import { ago, bySeverityThenNewest, duration, esc, fmt, incidentState, nowSec, signedPct, where } from './util.js';
import { MFU_LINE, SLOWDOWN_PCT, ZONES, jobPerf, nodeRed, nodeSlow, zoneOf } from './zones.js';

const TOP_ITEMS = 8;     // items listed per zone
const TOP_JOBS = 6;      // jobs in the performance table
const LIMIT = 1000;      // firing incidents read per severity group
const OWN_REFRESH_MS = 10_000;

// Links to a node's and a job's view; `key` names the link across
// re-renders (focus is kept on it).
const nodeLink = (node, key) => `<a href="#/nodes/${encodeURIComponent(node)}" data-key="${esc(key)}">${esc(node)}</a>`;
const jobLink = (job, key) => `<a href="#/jobs/${encodeURIComponent(job)}" data-key="${esc(key)}">${esc(job)}</a>`;
const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

// One firing incident as a zone item: severity and kind (the link), then
// where (node and job links), since when, and the summary.
function incidentItem(inc, now) {
  const state = incidentState(inc);
  const note = inc.lifecycle === 'silenced' ? ' · silenced' : state === 'acknowledged' ? ' · acknowledged' : '';
  const at = [];
  if (inc.node) at.push(nodeLink(inc.node, `incident:${inc.id}:node`));
  else if (Array.isArray(inc.nodes) && inc.nodes.length) at.push(esc(where(inc)));
  if (inc.gpu != null) at.push(`GPU ${esc(inc.gpu)}`);
  if (inc.job && inc.job !== 'cluster') at.push(jobLink(inc.job, `incident:${inc.id}:job`));
  return `<li data-item="incident" data-incident-id="${esc(inc.id)}" data-severity="${esc(inc.severity)}" data-kind="${esc(inc.kind)}">` +
    `<a class="item-main" href="#/incidents/${encodeURIComponent(inc.id)}" data-key="incident:${esc(inc.id)}">` +
    `<span class="sev sev-${esc(inc.severity)}">${esc(inc.severity)}</span> ${esc(inc.kind)}</a>` +
    `<span class="item-where">${at.join(' · ') || 'fleet-wide'}</span>` +
    `<span class="item-age">${ago(inc.ts, now)}<span class="muted">${note}</span></span>` +
    `<span class="item-text" title="${esc(inc.summary)}">${esc(inc.summary)}</span></li>`;
}

// A node flagged without (or besides) an incident: `what` says why.
function nodeItem(n, what) {
  return `<li data-item="node" data-node="${esc(n.node)}">` +
    `<a class="item-main" href="#/nodes/${encodeURIComponent(n.node)}" data-key="node:${esc(n.node)}">${esc(n.node)}</a>` +
    `<span class="item-where">${n.job ? jobLink(n.job, `node:${n.node}:job`) : '<span class="muted">no job</span>'}</span>` +
    `<span class="item-text">${esc(what)}</span></li>`;
}

function itemsHtml(items, label) {
  if (!items.length) return '';
  return `<ol class="zone-items" aria-label="${esc(label)}">${items.slice(0, TOP_ITEMS).join('')}</ol>`;
}

// Counts as tiles; `bad` ones (non-zero) are coloured.
function statsHtml(stats) {
  return `<ul class="zone-stats">${stats.map(([key, label, value, bad]) =>
    `<li data-stat="${key}"${bad && value ? ' data-bad="true"' : ''}><b>${esc(value)}</b> ${esc(label)}</li>`).join('')}</ul>`;
}

// The performance table: the worst TOP_JOBS jobs, MFU against the line,
// tokens/s and step time against their baselines.
function jobsTableHtml(jobs) {
  if (!jobs.length) return '<p class="muted">no job reports training figures</p>';
  const rows = jobs.slice(0, TOP_JOBS).map(({ j, p }) => {
    const m = j.metrics || {};
    const mfuPct = Number.isFinite(p.mfu) ? `${Math.round(p.mfu * 100)} %` : '–';
    const mfuBar = Number.isFinite(p.mfu)
      ? `<span class="mfu${p.mfuLow ? ' low' : ''}" style="--v:${Math.max(0, Math.min(1, p.mfu)).toFixed(3)}" aria-hidden="true"><span></span></span> ` : '';
    const dev = (pct, worse) => (Number.isFinite(pct)
      ? `<span class="dev${worse(pct) ? ' off' : ''}">${signedPct(pct)}</span>` : '');
    return `<tr data-job="${esc(j.job)}" data-slow="${p.slow}">` +
      `<th scope="row"><span class="job-name">${jobLink(j.job, `perf:${j.job}`)}</span>` +
      `${p.slow ? '<span class="sr-only"> (slow)</span>' : ''}</th>` +
      `<td data-field="mfu" title="MFU ${mfuPct}; the line is ${MFU_LINE * 100} %">${mfuBar}<span class="value${p.mfuLow ? ' off' : ''}">${mfuPct}</span></td>` +
      `<td data-field="tokens">${fmt(m.tokens_per_second?.last)}${dev(p.tokensPct, (x) => x <= SLOWDOWN_PCT)}</td>` +
      `<td data-field="step-time">${Number.isFinite(p.stepTime) ? `${fmt(p.stepTime)} s` : '–'}${dev(p.stepTimePct, (x) => x >= -SLOWDOWN_PCT)}</td></tr>`;
  }).join('');
  const more = jobs.length > TOP_JOBS ? `<p class="more"><a href="#/jobs">all ${jobs.length} jobs</a></p>` : '';
  return `<div class="perf-wrap"><table class="perf"><caption>Jobs, slowest first: MFU against the ` +
    `${MFU_LINE * 100} % line; tokens/s and step time against their baselines</caption>` +
    '<thead><tr><th scope="col">Job</th><th scope="col">MFU</th><th scope="col">tokens/s</th>' +
    `<th scope="col">step time</th></tr></thead><tbody>${rows}</tbody></table></div>${more}`;
}

// Sorts `list` of [rank, item] by rank and keeps the items.
const ranked = (list) => list.sort((a, b) => a[0] - b[0] || String(a[2]).localeCompare(String(b[2]))).map((x) => x[1]);

// Everything the page shows, from the API answers (any may be null when
// its request failed). Pure but for the clock: one pass over the nodes.
export function model(incidents, jobs, nodes, now = nowSec()) {
  const zone = { red: [], slow: [], capacity: [] };
  for (const inc of incidents || []) {
    const z = zoneOf(inc);
    if (z) zone[z].push(inc);
  }
  for (const z of Object.keys(zone)) zone[z].sort(bySeverityThenNewest);
  const named = (z) => new Set(zone[z].map((i) => i.node).filter(Boolean));
  const redNodes = named('red'), slowNodes = named('slow');

  const red = [], slow = [];
  let missing = 0, silent = 0, cordoned = 0, lemons = 0, hot = 0, throttled = 0, gpus = 0, remote = 0;
  for (const n of nodes || []) {
    gpus += n.gpus || 0;
    if (n.cordoned) cordoned += 1;
    if (n.lemon) lemons += 1;
    if (n.source === 'remote_write') remote += 1;
    const r = nodeRed(n);
    if (r) {
      missing += r.missing;
      if (r.silent) silent += 1;
      // Silent nodes first, then by GPUs missing; cordoned nodes are out of
      // service already: listed after the rest.
      if (!redNodes.has(n.node)) {
        const why = [r.missing ? `${plural(r.missing, 'GPU')} missing` : '',
          r.silent ? (Number.isFinite(n.age_seconds) ? `silent for ${duration(n.age_seconds)}` : 'never reported') : '',
          n.cordoned ? 'cordoned' : ''].filter(Boolean).join(' · ');
        red.push([(n.cordoned ? 1e6 : 0) - (r.silent ? 1e5 : 0) - r.missing, n, n.node, why]);
      }
      continue;
    }
    const s = nodeSlow(n);
    if (s) {
      hot += s.hot;
      throttled += s.throttled;
      if (!slowNodes.has(n.node)) {
        const why = [s.hot ? `${plural(s.hot, 'GPU')} hot (≥ 85 °C)` : '', s.throttled ? `${plural(s.throttled, 'GPU')} throttled` : '']
          .filter(Boolean).join(' · ');
        slow.push([-(s.hot + s.throttled), n, n.node, why]);
      }
    }
  }
  const perf = (jobs || []).map((j) => ({ j, p: jobPerf(j) }))
    .sort((a, b) => a.p.score - b.p.score || a.j.job.localeCompare(b.j.job));
  const slowJobs = perf.filter((x) => x.p.slow);
  const severities = { P0: 0, P1: 0, P2: 0, P3: 0 };
  for (const inc of incidents || []) severities[inc.severity] = (severities[inc.severity] || 0) + 1;
  return {
    zone, perf, slowJobs, severities,
    redNodes: ranked(red.map(([rank, n, name, why]) => [rank, { n, why }, name])),
    slowNodes: ranked(slow.map(([rank, n, name, why]) => [rank, { n, why }, name])),
    counts: { missing, silent, cordoned, lemons, hot, throttled, gpus, remote,
      nodes: (nodes || []).length, jobs: (jobs || []).length },
  };
}

export function mount(root) {
  root.innerHTML = `
    <h2 id="overview-title">Fleet overview</h2>
    <p class="overview-summary" data-field="summary" aria-live="polite">loading…</p>
    <div class="zones">${ZONES.map(({ zone, title, what }) => `
      <section class="zone" id="zone-${zone}" data-zone="${zone}" data-state="loading" aria-labelledby="zone-${zone}-title">
        <h3 id="zone-${zone}-title">${esc(title)} <span class="zone-count" data-field="count"></span></h3>
        <p class="zone-what muted">${esc(what)}</p>
        <div data-part="body"><p class="muted">loading…</p></div>
      </section>`).join('')}
    </div>`;
  const $ = (sel) => root.querySelector(sel);
  let generation = 0;
  let lastSummary = '';

  function renderZone(zone, count, html, clearText) {
    const section = $(`#zone-${zone}`);
    section.dataset.state = count ? 'alert' : 'clear';
    section.dataset.count = String(count);
    const badge = section.querySelector('[data-field=count]');
    badge.innerHTML = count ? `${count}<span class="sr-only"> flagged</span>` : 'clear';
    section.querySelector('[data-part=body]').innerHTML =
      html + (count ? '' : `<p class="zone-clear" data-field="clear">✓ ${esc(clearText)}</p>`);
  }

  function render(m, truncated, now) {
    const { zone, counts: c } = m;
    const nodeItems = (list) => list.map(({ n, why }) => nodeItem(n, why));
    // What the top items leave out: incidents come first, then nodes.
    const more = (incidents, nodeCount) => {
      const hiddenIncidents = Math.max(0, incidents - TOP_ITEMS);
      const hiddenNodes = nodeCount - Math.max(0, Math.min(nodeCount, TOP_ITEMS - incidents));
      const parts = [];
      if (hiddenIncidents) parts.push(`<a href="#/incidents">${plural(hiddenIncidents, 'more incident')}</a>`);
      if (hiddenNodes) parts.push(`<a href="#/nodes">${plural(hiddenNodes, 'more node')}</a>`);
      return parts.length ? `<p class="more">Not shown: ${parts.join(' · ')}</p>` : '';
    };

    // Red lines.
    const redItems = [...zone.red.map((i) => incidentItem(i, now)), ...nodeItems(m.redNodes)];
    const redCount = zone.red.length + m.redNodes.length;
    renderZone('red', redCount,
      statsHtml([
        ['p0', 'P0 firing', m.severities.P0, true],
        ['red-incidents', 'red-line incidents', zone.red.length, true],
        ['gpus-missing', 'GPUs missing', c.missing, true],
        ['silent-nodes', 'silent nodes', c.silent, true],
        ['lemons', 'repeat offenders', c.lemons, true],
        ['cordoned', 'cordoned', c.cordoned, false],
      ]) + itemsHtml(redItems, 'red-line items, worst first') + more(zone.red.length, m.redNodes.length),
      'No red line crossed: every GPU present, every node reporting.');

    // Performance.
    const slowItems = [...zone.slow.map((i) => incidentItem(i, now)), ...nodeItems(m.slowNodes)];
    const slowCount = zone.slow.length + m.slowNodes.length + m.slowJobs.length;
    const mfuLow = m.perf.filter((x) => x.p.mfuLow).length;
    renderZone('slow', slowCount,
      statsHtml([
        ['mfu-low', `jobs under ${MFU_LINE * 100} % MFU`, mfuLow, true],
        ['jobs-slow', 'jobs below baseline', m.perf.filter((x) => x.p.belowBaseline).length, true],
        ['gpus-hot', 'GPUs hot or throttled', c.hot + c.throttled, true],
        ['slow-incidents', 'performance incidents', zone.slow.length, true],
      ]) + jobsTableHtml(m.perf) + itemsHtml(slowItems, 'slow items, worst first') +
        more(zone.slow.length, m.slowNodes.length),
      'Nothing slow: every job at or above its baseline and the MFU line.');

    // Capacity.
    const capItems = zone.capacity.map((i) => incidentItem(i, now));
    const oom = zone.capacity.filter((i) => /oom/i.test(i.kind)).length;
    const memory = zone.capacity.filter((i) => i.hint_category === 'memory').length;
    renderZone('capacity', capItems.length,
      statsHtml([
        ['oom', 'OOM forecasts', oom, true],
        ['memory', 'memory incidents', memory, true],
        ['storage', 'storage and disk incidents', capItems.length - memory, true],
      ]) + itemsHtml(capItems, 'running-out items, worst first') + more(capItems.length, 0),
      'Nothing running out: no OOM forecast, memory or storage incident firing.');

    const sev = ['P0', 'P1', 'P2', 'P3'].filter((s) => m.severities[s])
      .map((s) => `<span class="sev sev-${s}">${s} ${m.severities[s]}</span>`).join(' ');
    const summary = $('[data-field=summary]');
    const text =
      `${plural(c.jobs, 'job')} · ${plural(c.nodes, 'node')}${c.remote ? ` (${c.remote} by remote write)` : ''} · ` +
      `${plural(c.gpus, 'GPU')} · firing: ${sev || '<span class="muted">none</span>'}` +
      (truncated ? ` <span class="muted">— over ${LIMIT} incidents per severity group: the newest are counted</span>` : '');
    if (text !== lastSummary) summary.innerHTML = lastSummary = text;  // a live region: changes only
  }

  async function refresh() {
    const gen = ++generation;
    const [urgent, rest, jobs, nodes] = await Promise.allSettled([
      api(`/api/v1/incidents?state=firing&severity=P0,P1&limit=${LIMIT}`),
      api(`/api/v1/incidents?state=firing&severity=P2,P3&limit=${LIMIT}`),
      api('/api/v1/jobs'),
      api('/api/v1/nodes'),
    ]);
    if (gen !== generation || !root.isConnected) return;  // a newer answer wins
    const failed = [urgent, rest, jobs, nodes].find((r) => r.status === 'rejected');
    if (failed) reportError(failed.reason);
    else clearError('page');
    const value = (r, key) => (r.status === 'fulfilled' ? r.value?.[key] || [] : null);
    const a = value(urgent, 'incidents'), b = value(rest, 'incidents');
    const incidents = a || b ? [...(a || []), ...(b || [])] : null;
    const truncated = (a?.length ?? 0) >= LIMIT || (b?.length ?? 0) >= LIMIT;

    // Re-rendering replaces the links: keep the keyboard where it was.
    const focused = root.contains(document.activeElement) ? document.activeElement.dataset.key : undefined;
    render(model(incidents, value(jobs, 'jobs'), value(nodes, 'nodes')), truncated, nowSec());
    if (focused) root.querySelector(`[data-key="${CSS.escape(focused)}"]`)?.focus();
  }

  // Rows of the performance table open their job, like the jobs page's.
  root.addEventListener('click', (e) => {
    if (e.target.closest('a')) return;
    const tr = e.target.closest('table.perf tr[data-job]');
    if (tr) location.hash = `#/jobs/${encodeURIComponent(tr.dataset.job)}`;
  });
  const timer = setInterval(() => {
    if (!root.isConnected) return clearInterval(timer);
    if (!document.hidden) refresh().catch(reportError);
  }, OWN_REFRESH_MS);
  return { refresh };
}
