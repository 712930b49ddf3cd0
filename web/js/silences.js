// Silences page (#/silences): active and future silences, expiring one
// (after a confirmation) and adding one with the form.
import { api, canAct, cannotActTitle, clearError, reportError } from './api.js';
import { confirmAction } from './dialogs.js';
import { absTime, ago, duration, esc, nowSec } from './util.js';

const NAMES = ['job', 'node', 'gpu', 'kind', 'severity'];

function matchersText(matchers = []) {
  return matchers.map((m) => `${m.name}=${m.value}`).join(', ');
}

export function mount(root) {
  const allowed = canAct();
  const off = allowed ? '' : ` disabled title="${esc(cannotActTitle())}"`;
  root.innerHTML = `
    <h2>Silences</h2>
    <p class="muted">A silence stops pages for matching incidents; they are still detected and listed.</p>
    <table id="silences" class="cards">
      <thead><tr><th>Matchers</th><th>From</th><th>Until</th><th>Author</th><th>Comment</th><th></th></tr></thead>
      <tbody></tbody>
    </table>
    <h3>Add a silence</h3>
    <form id="silence-form" class="filters">
      ${NAMES.map((n) => `<label>${n} <input name="${n}" placeholder="${n === 'severity' ? 'P2' : n === 'gpu' ? '3' : 'any'}" autocomplete="off"></label>`).join('')}
      <label>Duration <select name="duration">
        <option value="30">30 min</option><option value="60" selected>1 h</option><option value="240">4 h</option>
        <option value="720">12 h</option><option value="1440">1 day</option><option value="10080">1 week</option></select></label>
      <label class="grow">Comment <input name="comment" placeholder="why" autocomplete="off"></label>
      <button type="submit" class="primary"${off}>Add silence</button>
    </form>
    <p class="muted">Values are exact; end one with * for a prefix (e.g. node n00*).</p>`;
  const tbody = root.querySelector('#silences tbody');
  const form = root.querySelector('#silence-form');

  async function refresh() {
    const data = await api('/api/v1/silences');
    clearError('page');
    const now = nowSec();
    const list = data.silences || [];
    tbody.innerHTML = list.map((s) => {
      // The server names the times starts_at/ends_at (older: start_ts/end_ts).
      const start = s.starts_at ?? s.start_ts, end = s.ends_at ?? s.end_ts;
      return `<tr data-silence-id="${esc(s.id)}">` +
      `<td data-label="matchers"><code>${esc(matchersText(s.matchers))}</code></td>` +
      `<td data-label="from">${start > now ? `${esc(absTime(start))} (future)` : ago(start, now)}</td>` +
      `<td data-label="until">${esc(absTime(end))} <span class="muted">(${end > now ? `in ${duration(end - now)}` : 'expired'})</span></td>` +
      `<td data-label="author">${esc(s.author)}</td><td data-label="comment">${esc(s.comment)}</td>` +
      `<td><button type="button" data-action="expire"${off}>Expire</button></td></tr>`;
    }).join('') ||
      '<tr><td colspan="6" class="muted">no silences</td></tr>';
  }

  tbody.addEventListener('click', async (e) => {
    const b = e.target.closest('button[data-action=expire]');
    if (!b || b.disabled) return;
    const tr = b.closest('tr[data-silence-id]');
    const id = tr.dataset.silenceId;
    const ok = await confirmAction({ title: 'Expire silence', yes: 'Expire',
      text: `End silence ${id} (${tr.querySelector('code').textContent}) now: matching incidents that still fire page again.` });
    if (!ok) return;
    try {
      await api(`/api/v1/silences/${encodeURIComponent(id)}`, { method: 'DELETE' });
      clearError('action');
    } catch (err) {
      reportError(err, 'action');
    }
    await refresh().catch(reportError);
  });

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const matchers = NAMES.map((name) => ({ name, value: form[name].value.trim() })).filter((m) => m.value);
    const body = { matchers, duration_minutes: Number(form.duration.value), comment: form.comment.value.trim() };
    try {
      await api('/api/v1/silences', { method: 'POST', body });
      clearError('action');
      form.reset();
    } catch (err) {
      reportError(err, 'action');
    }
    await refresh().catch(reportError);
  });
  return { refresh, wants: () => false };
}
