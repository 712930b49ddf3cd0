// Job detail (#/jobs/NAME): health, metrics against baseline, its firing
// incidents and a GPU heat map (power, temperature, throttle) across nodes.
import { api, clearError, reportError } from './api.js';
import { rowsHtml } from './incidents.js';
import { METRICS, drawSparks, incidentCounts, metricHtml } from './jobs.js';
import { ago, bySeverityThenNewest, esc, fmt, num } from './util.js';

// NVML clocks-throttle reasons: hardware, thermal and power-brake
// slowdowns are bad; the software power cap (0x4) is a warning; idle,
// application clocks and sync boost (0x1, 0x2, 0x10) are harmless.
const SLOWDOWN = 0x8 | 0x20 | 0x40 | 0x80;
const POWER_CAP = 0x4;

// Per metric: the GPU field, a cell label and a 0..1 heat. Power is hot
// when far from the job's median (a GPU drawing less than its peers is as
// suspect as one drawing more); temperature from 60 to 90 °C; throttle by
// its bits.
const HEAT = {
  power: { field: 'power_watts', label: (v) => `${fmt(v)} W`,
    heat: (v, median) => Math.min(1, Math.abs(v - median) / Math.max(50, 0.15 * median)) },
  temperature: { field: 'temperature_celsius', label: (v) => `${fmt(v)} °C`,
    heat: (v) => Math.min(1, Math.max(0, (v - 60) / 30)) },
  throttle: { field: 'throttle_reasons', label: (v) => `0x${Math.round(v).toString(16)}`,
    heat: (v) => ((v & SLOWDOWN) ? 1 : (v & POWER_CAP) ? 0.6 : 0) },
};
let selected = 'power';

// Heat map HTML: one row per node, one cell per GPU.
function heatmapHtml(gpus, metric) {
  const spec = HEAT[metric];
  const values = gpus.map((g) => num(g[spec.field])).filter(Number.isFinite).sort((a, b) => a - b);
  const median = values[Math.floor(values.length / 2)];
  const heat = (v) => spec.heat(v, median);
  const nodes = [...new Set(gpus.map((g) => g.node))].sort();
  const maxGpu = Math.max(-1, ...gpus.map((g) => g.gpu));
  const at = new Map(gpus.map((g) => [`${g.node}/${g.gpu}`, g]));
  const head = `<div class="hm-row hm-head"><span class="hm-node"></span>${Array.from({ length: maxGpu + 1 }, (_, i) => `<span>${i}</span>`).join('')}</div>`;
  return head + nodes.map((node) => `<div class="hm-row"><span class="hm-node">${esc(node)}</span>` +
    Array.from({ length: maxGpu + 1 }, (_, gpu) => {
      const g = at.get(`${node}/${gpu}`);
      const v = g ? num(g[spec.field]) : NaN;
      if (!Number.isFinite(v)) {
        return `<span class="cell missing" data-node="${esc(node)}" data-gpu="${gpu}" title="${esc(node)} GPU ${gpu}: no data">–</span>`;
      }
      const h = heat(v);
      const extra = g.throttle_reasons != null ? `, throttle 0x${Math.round(num(g.throttle_reasons)).toString(16)}` : '';
      return `<span class="cell" data-node="${esc(node)}" data-gpu="${gpu}" style="--heat:${h.toFixed(3)}"` +
        ` title="${esc(node)} GPU ${gpu}: ${esc(spec.label(v))}${metric === 'throttle' ? '' : esc(extra)}">${esc(spec.label(v).split(' ')[0])}</span>`;
    }).join('') + '</div>').join('');
}

export function mount(root, name) {
  root.innerHTML = `<section id="job-detail" data-job="${esc(name)}">
    <p><a href="#/jobs">← all jobs</a></p>
    <h2>Job ${esc(name)} <span data-field="health"></span></h2>
    <div data-part="summary"><p>loading…</p></div>
    <h3>GPUs</h3>
    <label>Heat map of <select id="heatmap-metric">
      <option value="power">power</option><option value="temperature">temperature</option><option value="throttle">throttle</option>
    </select></label>
    <div id="heatmap" class="heatmap"></div>
    <h3>Firing incidents</h3>
    <table class="cards incidents"><thead><tr><th>Sev</th><th>Kind</th><th>Job</th><th>Where</th><th>Since</th><th>State</th><th>Hint</th></tr></thead><tbody></tbody></table>
  </section>`;
  const select = root.querySelector('#heatmap-metric');
  select.value = selected;
  let job = null;

  function renderHeatmap() {
    root.querySelector('#heatmap').innerHTML = job?.gpus?.length ? heatmapHtml(job.gpus, selected)
      : '<p class="muted">no GPU data</p>';
  }
  select.addEventListener('change', () => {
    selected = select.value;
    renderHeatmap();
  });

  async function refresh() {
    const enc = encodeURIComponent(name);
    const [j, incs] = await Promise.allSettled([api(`/api/v1/jobs/${enc}`),
      api(`/api/v1/incidents?state=firing&job=${enc}&limit=500`)]);
    if (j.status === 'rejected') {
      if (!job) root.querySelector('[data-part=summary]').innerHTML = `<p>cannot load job ${esc(name)}: ${esc(j.reason.message)}</p>`;
      throw j.reason;
    }
    clearError('page');
    job = j.value;
    const h = root.querySelector('[data-field=health]');
    h.className = `health health-${job.health}`;
    h.textContent = job.health;
    root.querySelector('[data-part=summary]').innerHTML = `<dl class="facts">
      <dt>nodes</dt><dd>${esc((job.nodes || []).join(', '))}</dd>
      <dt>step</dt><dd>${esc(job.step ?? '–')}</dd>
      <dt>last frame</dt><dd>${ago(job.last_frame_ts, num(job.now) || undefined)}</dd>
      <dt>open incidents</dt><dd>${incidentCounts(job.incidents)}</dd>
      ${METRICS.map(([key, label, unit]) => `<dt>${label}</dt><dd><div class="spark wide" data-job="${esc(name)}"
        data-metric="${key}" title="${label}, last 30 min"></div> ${metricHtml(job.metrics?.[key], unit)}</dd>`).join('')}</dl>`;
    drawSparks(root.querySelector('[data-part=summary]'), [job]);
    renderHeatmap();
    const tbody = root.querySelector('table.incidents tbody');
    if (incs.status === 'fulfilled') {
      tbody.innerHTML = rowsHtml((incs.value.incidents || []).sort(bySeverityThenNewest)) ||
        '<tr><td colspan="7" class="muted">none</td></tr>';
    } else {
      reportError(incs.reason, 'incidents');
    }
  }
  root.querySelector('table.incidents tbody').addEventListener('click', (e) => {
    const tr = e.target.closest('tr[data-incident-id]');
    if (tr && !e.target.closest('a')) location.hash = `#/incidents/${encodeURIComponent(tr.dataset.incidentId)}`;
  });
  return { refresh };
}
