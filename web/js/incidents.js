// Incidents page (#/incidents): open incidents P0 first, filters (state,
// severity, job, node) and server-side search; one innerHTML per render.
import { api, clearError, reportError } from './api.js';
import { ago, bySeverityThenNewest, debounce, esc, incidentState, nowSec, query, where } from './util.js';

const LIMIT = 2000;
// Filters survive leaving the page and coming back.
const filters = { state: 'firing', severity: '', job: '', node: '', q: '' };

// Table rows for `list`, as one HTML string.
export function rowsHtml(list, now = nowSec()) {
  return list.map((inc) => {
    const state = incidentState(inc);
    const silenced = inc.lifecycle === 'silenced' ? ' silenced' : '';
    return `<tr data-incident-id="${esc(inc.id)}" data-severity="${esc(inc.severity)}" data-state="${state}"` +
      ` title="${esc(inc.summary)}">` +
      `<td data-field="severity" data-label="sev"><span class="sev sev-${esc(inc.severity)}">${esc(inc.severity)}</span></td>` +
      `<td data-field="kind" data-label="kind"><a href="#/incidents/${encodeURIComponent(inc.id)}">${esc(inc.kind)}</a></td>` +
      `<td data-field="job" data-label="job">${esc(inc.job)}</td>` +
      `<td data-field="where" data-label="where">${esc(where(inc))}</td>` +
      `<td data-field="age" data-label="since">${ago(inc.ts, now)}</td>` +
      `<td data-field="state" data-label="state" class="state state-${state}${silenced}">${state}</td>` +
      `<td data-field="hint" data-label="hint" class="hint" title="${esc(inc.hint)}">${esc(inc.hint)}</td></tr>`;
  }).join('');
}

export function mount(root) {
  root.innerHTML = `
    <h2>Incidents</h2>
    <form class="filters" onsubmit="return false">
      <label>State <select id="filter-state">
        <option value="firing">firing</option><option value="resolved">resolved</option><option value="all">all</option>
      </select></label>
      <label>Severity <select id="filter-severity">
        <option value="">any</option><option>P0</option><option>P1</option><option>P2</option><option>P3</option>
      </select></label>
      <label>Job <input id="filter-job" placeholder="any" autocomplete="off"></label>
      <label>Node <input id="filter-node" placeholder="any" autocomplete="off"></label>
      <label class="grow">Search <input id="search" type="search" placeholder="id, kind, job, node, summary, hint"></label>
    </form>
    <p><span id="incident-count">loading…</span> <span class="muted" data-field="note"></span></p>
    <table id="incidents" class="cards">
      <thead><tr><th>Sev</th><th>Kind</th><th>Job</th><th>Where</th><th>Since</th><th>State</th><th>Hint</th></tr></thead>
      <tbody></tbody>
    </table>`;
  const $ = (sel) => root.querySelector(sel);
  const inputs = { state: '#filter-state', severity: '#filter-severity', job: '#filter-job', node: '#filter-node', q: '#search' };
  for (const [k, sel] of Object.entries(inputs)) $(sel).value = filters[k];
  const tbody = $('#incidents tbody');
  let generation = 0;

  async function refresh() {
    const gen = ++generation;
    const params = { ...filters, limit: LIMIT };
    const data = await api(`/api/v1/incidents${query(params)}`);
    if (gen !== generation) return;  // a newer filter's answer wins
    clearError('page');
    const list = (data.incidents || []).slice().sort(bySeverityThenNewest);
    tbody.innerHTML = rowsHtml(list);
    const counts = { P0: 0, P1: 0, P2: 0, P3: 0 };
    for (const inc of list) counts[inc.severity] = (counts[inc.severity] || 0) + 1;
    $('#incident-count').textContent = `${list.length} incident${list.length === 1 ? '' : 's'}`;
    $('[data-field=note]').textContent = Object.entries(counts).filter(([, n]) => n)
      .map(([s, n]) => `${s}: ${n}`).join(' · ') + (list.length >= LIMIT ? ` — first ${LIMIT} shown; narrow the filters` : '');
  }

  const changed = (key, sel) => () => { filters[key] = $(sel).value.trim(); refresh().catch(reportError); };
  for (const [k, sel] of Object.entries(inputs)) {
    const el = $(sel);
    if (el.tagName === 'SELECT') el.addEventListener('change', changed(k, sel));
    else el.addEventListener('input', debounce(changed(k, sel), 250));
  }
  tbody.addEventListener('click', (e) => {
    if (e.target.closest('a')) return;
    const tr = e.target.closest('tr[data-incident-id]');
    if (tr) location.hash = `#/incidents/${encodeURIComponent(tr.dataset.incidentId)}`;
  });
  return { refresh };
}
