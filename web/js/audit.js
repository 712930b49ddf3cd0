// Audit page (#/audit): every operator call, newest first.
import { api, clearError } from './api.js';
import { ago, esc, nowSec } from './util.js';

export function mount(root) {
  root.innerHTML = `
    <h2>Audit log</h2>
    <p class="muted" data-field="count">loading…</p>
    <table id="audit" class="cards">
      <thead><tr><th>When</th><th>Who</th><th>Action</th><th>Target</th><th>Result</th><th>Detail</th></tr></thead>
      <tbody></tbody>
    </table>`;
  const tbody = root.querySelector('#audit tbody');

  async function refresh() {
    const data = await api('/api/v1/audit?limit=500');
    clearError('page');
    const now = nowSec();
    const list = data.entries || [];
    tbody.innerHTML = list.map((e) => `<tr data-result="${e.result === 'ok' ? 'ok' : 'error'}">` +
      `<td data-label="when">${ago(e.ts, now)}</td>` +
      `<td data-label="who">${esc(e.who)} <span class="muted">${esc(e.role)}</span></td>` +
      `<td data-label="action">${esc(e.action)}</td><td data-label="target">${esc(e.target)}</td>` +
      `<td data-label="result">${esc(e.result)}</td><td data-label="detail" class="detail">${esc(e.detail)}</td></tr>`).join('');
    root.querySelector('[data-field=count]').textContent = list.length
      ? `${list.length} entr${list.length === 1 ? 'y' : 'ies'}` : 'no operator calls recorded yet';
  }
  return { refresh, wants: () => false };
}
