// Jobs page (#/jobs): running jobs with health, step rate, tokens/s and
// MFU against their baselines as sparklines, and open incidents.
import { api, clearError } from './api.js';
import { loadCharts, spark } from './charts.js';
import { ago, deviation, esc, fmt, num, signedPct } from './util.js';

export const METRICS = [['step_rate', 'step rate', '/s'], ['tokens_per_second', 'tokens/s', ''], ['mfu', 'MFU', '']];

// "learning baseline (step 340 of 1000)" for M.learning_progress =
// {step, of_steps, seconds, of_seconds, band}: learning ends at the step
// target or the time bound, whichever comes first.
export function learningText(p) {
  if (!p) return 'learning baseline';
  const bySteps = p.of_steps > 0 ? p.step / p.of_steps : 0;
  const byTime = p.of_seconds > 0 ? p.seconds / p.of_seconds : 0;
  const where = byTime > bySteps
    ? `${Math.round(p.seconds / 60)} of ${Math.round(p.of_seconds / 60)} min`
    : `step ${p.step} of ${p.of_steps}`;
  return `learning baseline (${where})`;
}

// The last value of metric M = {last, baseline, sigma, learning,
// learning_progress} and, when a baseline is known, its deviation ("−12 %
// vs baseline", class "off" when beyond 3 sigma) with the baseline ± 3
// sigma on hover; while the series are learned, how far learning is.
export function metricHtml(m = {}, unit = '') {
  const base = num(m.baseline), sd = num(m.sigma);
  const d = deviation(m);
  const off = d.off ? ' off' : '';
  const value = `<span class="value${off}">${fmt(m.last)}${unit}</span>`;
  const learning = m.learning ? learningText(m.learning_progress) : '';
  if (!Number.isFinite(base)) {
    const why = m.learning ? learning : 'no baseline';
    const title = m.learning ? ' title="the detector learns each series over the job\'s first steps (or first hour); until then it uses a wider band from what it has seen, or the previous run\'s"' : '';
    return `${value}<span class="dev muted" data-learning="${m.learning ? 'true' : 'false'}"${title}>${esc(why)}</span>`;
  }
  if (!Number.isFinite(num(m.last))) return value;
  const band = Number.isFinite(sd) ? ` ± ${fmt(3 * sd)} (3σ)` : '';
  const by = Number.isFinite(d.sigmas) ? `; last value ${fmt(Math.abs(d.sigmas), 2)}σ ${d.sigmas < 0 ? 'below' : 'above'}` : '';
  const text = Number.isFinite(d.pct) ? signedPct(d.pct) : fmt(num(m.last) - base);
  const early = m.learning ? ` <span class="muted" data-learning="true">${esc(learning)}</span>` : '';
  return `${value}<span class="dev${off}" title="baseline ${fmt(base)}${unit}${band}${by}">${text} vs baseline</span>${early}`;
}

export function incidentCounts(counts = {}) {
  const parts = ['P0', 'P1', 'P2', 'P3'].filter((s) => counts[s])
    .map((s) => `<span class="sev sev-${s}">${s} ${esc(counts[s])}</span>`);
  return parts.length ? parts.join(' ') : '<span class="muted">none</span>';
}

// Draws the sparklines of `jobs` into the .spark cells under `root`.
export async function drawSparks(root, jobs) {
  if (!await loadCharts()) return;
  for (const cell of root.querySelectorAll('.spark[data-job]')) {
    const job = jobs.find((j) => j.job === cell.dataset.job);
    const m = job?.metrics?.[cell.dataset.metric];
    if (m) spark(cell, m.spark, m);
  }
}

export function mount(root) {
  root.innerHTML = `
    <h2>Jobs</h2>
    <p class="muted" data-field="count">loading…</p>
    <table id="jobs" class="cards">
      <thead><tr><th>Job</th><th>Health</th><th>Nodes / GPUs</th><th>Step</th>
        ${METRICS.map(([, label]) => `<th colspan="2">${label}</th>`).join('')}<th>Open incidents</th><th>Last frame</th></tr></thead>
      <tbody></tbody>
    </table>`;
  const tbody = root.querySelector('#jobs tbody');

  async function refresh() {
    const data = await api('/api/v1/jobs');
    clearError('page');
    const jobs = data.jobs || [];
    const now = num(data.now) || Date.now() / 1000;
    tbody.innerHTML = jobs.map((j) => {
      const cells = METRICS.map(([key, label, unit]) =>
        `<td data-label="${label}" class="metric">${metricHtml(j.metrics?.[key], unit)}</td>` +
        `<td class="spark-cell"><div class="spark" data-job="${esc(j.job)}" data-metric="${key}" title="${label}, last 30 min"></div></td>`).join('');
      return `<tr data-job="${esc(j.job)}" data-health="${esc(j.health)}">` +
        `<td data-label="job"><a href="#/jobs/${encodeURIComponent(j.job)}">${esc(j.job)}</a></td>` +
        `<td data-label="health"><span class="health health-${esc(j.health)}">${esc(j.health)}</span></td>` +
        `<td data-label="nodes / GPUs">${esc((j.nodes || []).length)} / ${esc(j.gpus)}</td>` +
        `<td data-label="step">${esc(j.step ?? '–')}</td>${cells}` +
        `<td data-label="incidents">${incidentCounts(j.incidents)}</td>` +
        `<td data-label="last frame">${ago(j.last_frame_ts, now)}</td></tr>`;
    }).join('');
    root.querySelector('[data-field=count]').textContent = `${jobs.length} job${jobs.length === 1 ? '' : 's'}`;
    drawSparks(tbody, jobs);
  }

  tbody.addEventListener('click', (e) => {
    if (e.target.closest('a')) return;
    const tr = e.target.closest('tr[data-job]');
    if (tr) location.hash = `#/jobs/${encodeURIComponent(tr.dataset.job)}`;
  });
  return { refresh };
}
