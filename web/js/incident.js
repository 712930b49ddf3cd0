// Incident detail (#/incidents/ID): what broke, where, since when, what
// Vigil already did (timeline, notifications, actions) and the buttons to
// act, and the charts (incident_charts.js), drawn after the rest.
import { api, canAct, cannotActTitle, clearError, reportError, session, showError } from './api.js';
import { askSilence, confirmAction } from './dialogs.js';
import { drawCharts } from './incident_charts.js';
import { absTime, ago, esc, fmt, incidentState, num, nowSec, where } from './util.js';

// Human text for a timeline event (HTML).
function eventText(e) {
  const who = e.who ? ` by <b>${esc(e.who)}</b>` : '';
  const detail = e.detail ? ` — ${esc(e.detail)}` : '';
  switch (e.type) {
    case 'opened': return `Detected (${esc(e.severity)})`;
    case 'severity_raised': return `Severity raised to ${esc(e.severity)}`;
    case 'evidence_added': return 'More evidence';
    case 'resolved': return 'Resolved: the detector no longer sees the fault';
    case 'reopened': return `Reopened (${esc(e.severity)})`;
    case 'acknowledged': return `Acknowledged${who}${detail}`;
    case 'unacknowledged': return `Acknowledgement removed${who}${detail}`;
    case 'ack_expired': return `Acknowledgement expired, escalation restarts${detail}`;
    case 'resolved_by_operator': return `Resolved${who}${detail}`;
    case 'comment': return `Comment${who}: “${esc(e.detail)}”`;
    case 'paged': return `Paged${detail}`;
    case 'page_queued': return `Notification queued${detail}`;
    case 'page_failed': return `Notification failed${detail}`;
    case 'page_skipped': return `Notification skipped${detail}`;
    case 'delivery': return `Notification ${esc(e.key)} via ${esc(e.receiver)}: <b>${esc(e.state)}</b>` +
      ` after ${esc(e.attempts)} attempt(s)${detail}`;
    case 'silenced': return `Silenced${who}${e.detail ? ` (silence ${esc(e.detail)})` : ''}`;
    case 'unsilenced': return `Silence ended${who}${detail}`;
    case 'escalation_exhausted': return `Escalation finished${detail}`;
    case 'action': return `Action ${esc(e.action)} (${esc(e.action_id)}): <b>${esc(e.state)}</b>${detail}`;
    default: return `${esc(e.type)}${who}${detail}`;
  }
}

function timelineHtml(events, now) {
  return events.map((e, i) => {
    const repeat = e.type === 'evidence_added' && events[i - 1]?.type === 'evidence_added' ? ' class="repeat"' : '';
    return `<li data-type="${esc(e.type)}"${repeat}>${ago(e.ts, now)} <span>${eventText(e)}</span></li>`;
  }).join('');
}

function evidenceHtml(evidence) {
  if (!evidence.length) return '<p class="muted">no evidence recorded</p>';
  const groups = new Map();
  for (const e of evidence) {
    if (!groups.has(e.rule)) groups.set(e.rule, []);
    groups.get(e.rule).push(e);
  }
  let rows = '';
  for (const [rule, list] of groups) {
    rows += `<tr class="group"><th colspan="7">${esc(rule)} — ${list.length} item${list.length === 1 ? '' : 's'}</th></tr>`;
    rows += list.slice(0, 50).map((e) =>
      `<tr${e.active ? '' : ' class="muted"'}><td data-label="kind">${esc(e.kind)}${e.inhibited ? ' (inhibited)' : ''}</td>` +
      `<td data-label="where">${esc(where(e))}</td><td data-label="metric">${esc(e.metric)}</td>` +
        `<td data-label="value">${fmt(e.value, 4)}</td>` +
        `<td data-label="baseline">${fmt(e.baseline_mean, 4)}${Number.isFinite(num(e.baseline_sigma)) ? ` ± ${fmt(e.baseline_sigma)}` : ''}</td>` +
        `<td data-label="detail">${esc(e.detail)} <span class="muted">score ${fmt(e.score)}</span></td>` +
        `<td data-label="at">${ago(e.ts)}</td></tr>`).join('');
    if (list.length > 50) rows += `<tr><td colspan="7" class="muted">${list.length - 50} more not shown</td></tr>`;
  }
  return `<table class="cards evidence"><thead><tr><th>Kind</th><th>Where</th><th>Metric</th><th>Value</th>` +
    `<th>Baseline</th><th>Detail</th><th>At</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function actionsHtml(actions) {
  if (!actions.length) return '<p class="muted">no actions</p>';
  return `<table class="cards"><thead><tr><th>Action</th><th>Target</th><th>State</th><th>By</th><th>Detail</th><th></th></tr></thead><tbody>` +
    actions.map((a) => `<tr data-action-row="${esc(a.id)}"><td data-label="action">${esc(a.action)} <span class="muted">${esc(a.id)}</span></td>` +
      `<td data-label="target">${esc([a.job, a.node].filter(Boolean).join(' / '))}</td>` +
      `<td data-label="state"><b>${esc(a.state)}</b></td><td data-label="by">${esc(a.requested_by)}</td>` +
      `<td data-label="detail">${esc(a.detail || a.decision || (a.result ? JSON.stringify(a.result) : ''))}</td>` +
      `<td>${a.state === 'pending_approval' ? button('approve', 'Approve', `data-action-id="${esc(a.id)}"`) : ''}</td></tr>`).join('') +
    '</tbody></table>';
}

function deliveriesHtml(list) {
  if (!list.length) return '<p class="muted">no notifications sent</p>';
  return `<table class="cards"><thead><tr><th>Notification</th><th>Receiver</th><th>State</th><th>Attempts</th><th>Last detail</th><th>Updated</th></tr></thead><tbody>` +
    list.map((d) => `<tr><td data-label="what">${esc(d.description || d.key)}</td><td data-label="receiver">${esc(d.receiver)}</td>` +
      `<td data-label="state"><b>${esc(d.state)}</b></td><td data-label="attempts">${esc(d.attempts)}</td>` +
      `<td data-label="detail">${esc(d.last_detail)}</td><td data-label="updated">${ago(d.updated_ts)}</td></tr>`).join('') +
    '</tbody></table>';
}

function button(action, label, extra = '') {
  const allowed = canAct();
  return `<button type="button" data-action="${action}" ${extra}${allowed ? '' : ` disabled title="${esc(cannotActTitle())}"`}>${label}</button>`;
}

function headHtml(inc, now) {
  const state = incidentState(inc);
  const escal = inc.escalation || {};
  const facts = [
    ['where', `${esc(inc.job)} · ${esc(where(inc))}`],
    ['since', `${absTime(inc.ts)} (${ago(inc.ts, now)})`],
    ['last update', ago(inc.last_update_ts, now)],
    ['step', esc(inc.step ?? '–')],
  ];
  if (state === 'resolved' && inc.resolved_ts != null) facts.push(['resolved', ago(inc.resolved_ts, now)]);
  if (inc.reopen_count) facts.push(['reopened', `${esc(inc.reopen_count)}×`]);
  if (escal.acknowledged_by) facts.push(['acknowledged', `${esc(escal.acknowledged_by)} ${ago(escal.acknowledged_at, now)}`]);
  if (escal.next_page_at) facts.push(['next page', absTime(escal.next_page_at)]);
  if (inc.responses?.length) facts.push(['responses', esc(inc.responses.join(', '))]);
  return `<h2><span class="sev sev-${esc(inc.severity)}">${esc(inc.severity)}</span> ${esc(inc.kind)} <span class="muted">${esc(inc.id)}</span></h2>
    <p class="status"><span data-field="state" class="state state-${state}">${state}</span>
      ${inc.lifecycle === 'silenced' ? `<span class="badge">silenced${escal.silenced_by ? ` by ${esc(escal.silenced_by)}` : ''}</span>` : ''}</p>
    <p data-field="summary" class="summary">${esc(inc.summary)}</p>
    <div class="hint-box"><b>What to do${inc.hint_category ? ` (${esc(inc.hint_category)})` : ''}:</b>
      <span data-field="hint">${esc(inc.hint)}</span></div>
    <dl class="facts">${facts.map(([k, v]) => `<dt>${k}</dt><dd>${v}</dd>`).join('')}</dl>`;
}

function actionBarHtml(inc) {
  const state = incidentState(inc);
  return [
    state === 'acknowledged' ? button('unack', 'Unacknowledge') : button('ack', 'Acknowledge', state === 'resolved' ? 'hidden' : ''),
    state === 'resolved' ? '' : button('resolve', 'Resolve'),
    button('silence', 'Silence…'),
    inc.job ? button('pause_job', `Pause job ${esc(inc.job)}`) : '',
    inc.node ? button('cordon_node', `Cordon ${esc(inc.node)}`) : '',
  ].join(' ');
}

export function mount(root, id) {
  root.innerHTML = `<section id="incident-detail" data-incident-id="${esc(id)}">
    <p><a href="#/incidents">← all incidents</a></p>
    <div data-part="head"><p>loading ${esc(id)}…</p></div>
    <div class="action-bar" data-part="bar"></div>
    <p role="status" class="notice" data-part="notice"></p>
    <h3>Charts around the detection</h3><div class="charts" data-part="charts"></div>
    <h3>Timeline</h3><ol id="timeline"></ol>
    <h3>Actions</h3><div data-part="actions"></div>
    <h3>Notifications</h3><div data-part="deliveries"></div>
    <h3>Evidence</h3><div data-part="evidence"></div>
  </section>`;
  const part = (name) => root.querySelector(`[data-part=${name}]`);
  let inc = null;

  async function refresh() {
    const enc = encodeURIComponent(id);
    const rest = Promise.allSettled([api(`/api/v1/actions?incident=${enc}`), api(`/api/v1/deliveries?incident=${enc}`)]);
    try {
      inc = await api(`/api/v1/incidents/${enc}`);
    } catch (e) {
      if (!inc) part('head').innerHTML = `<p>cannot load ${esc(id)}: ${esc(e.message)}</p>`;
      throw e;
    }
    clearError('page');
    inc.evidence = inc.evidence || [];
    const now = nowSec();
    part('head').innerHTML = headHtml(inc, now);
    part('bar').innerHTML = actionBarHtml(inc);
    root.querySelector('#timeline').innerHTML = timelineHtml(inc.timeline || [], now);
    part('evidence').innerHTML = evidenceHtml(inc.evidence);
    drawCharts(part('charts'), inc);  // only new cards cost queries
    const [a, d] = await rest;
    if (a.status === 'fulfilled') part('actions').innerHTML = actionsHtml(a.value.actions || []);
    else reportError(a.reason, 'actions');
    if (d.status === 'fulfilled') part('deliveries').innerHTML = deliveriesHtml(d.value.deliveries || []);
    else reportError(d.reason, 'deliveries');
  }

  // Runs `call` (a promise factory) for a confirmed action and refreshes.
  async function perform(label, call) {
    const notice = part('notice');
    try {
      await call();
      clearError('action');
      notice.textContent = `${label}: done`;
    } catch (e) {
      notice.textContent = '';
      reportError(e, 'action');
    }
    await refresh().catch(reportError);
  }

  async function onAction(action, actionId) {
    const enc = encodeURIComponent(id);
    const what = `${id} (${inc.severity} ${inc.kind} in ${inc.job}, ${where(inc)})`;
    const post = (path, body) => api(path, { method: 'POST', body });
    if (action === 'silence') {
      const matchers = [['job', inc.job, true], ['kind', inc.kind, true], ['node', inc.node, true],
        ['gpu', inc.gpu == null ? null : String(inc.gpu), false], ['severity', inc.severity, false]]
        .filter(([, v]) => v).map(([name, value, checked]) => ({ name, value, checked }));
      const s = await askSilence({ matchers,
        text: `While the silence lasts, incidents matching the checked labels page nobody; they are still detected and listed here. Started from ${what}.` });
      if (s) await perform('silence added', () => post('/api/v1/silences', s));
      return;
    }
    const asks = {
      ack: ['Acknowledge', `Acknowledge ${what} as ${session.name}. Paging stops for this incident; it stays open until resolved.`,
        (c) => post(`/api/v1/incidents/${enc}/ack`, { comment: c })],
      unack: ['Unacknowledge', `Remove the acknowledgement of ${what}. Escalation resumes and the on-call person is paged again per the ${inc.severity} policy.`,
        () => post(`/api/v1/incidents/${enc}/unack`, {})],
      resolve: ['Resolve', `Mark ${what} resolved as ${session.name}. Vigil stops paging for it; if the detector still sees the fault, the incident opens again.`,
        (c) => post(`/api/v1/incidents/${enc}/resolve`, { comment: c })],
      pause_job: ['Pause job', `Ask vigil-actuator to checkpoint and then pause job ${inc.job} because of ${id}. Training stops until someone resumes it. Interlocks apply: the action may wait for approval, run as a dry run, or be refused by the circuit breaker.`,
        (c) => post('/api/v1/actions', { action: 'pause_job', job: inc.job, node: inc.node || '', incident_id: id, reason: c || inc.summary })],
      cordon_node: ['Cordon node', `Ask vigil-actuator to cordon node ${inc.node} (job ${inc.job}) because of ${id}: the scheduler places no new work on it; running work is not killed. Interlocks apply: the action may wait for approval, run as a dry run, or be refused by the circuit breaker.`,
        (c) => post('/api/v1/actions', { action: 'cordon_node', job: inc.job, node: inc.node, incident_id: id, reason: c || inc.summary })],
      approve: ['Approve action', `Approve action ${actionId} of ${id}: it is sent to vigil-actuator and runs now.`,
        () => post(`/api/v1/actions/${encodeURIComponent(actionId)}/approve`, {})],
    };
    const [title, text, call] = asks[action];
    const withComment = ['ack', 'resolve', 'pause_job', 'cordon_node'].includes(action);
    const ok = await confirmAction({ title, text, yes: title, comment: withComment });
    if (!ok) return;
    await perform(title, () => call(ok.comment));
  }

  root.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-action]');
    if (!b || b.disabled || !inc) return;
    onAction(b.dataset.action, b.dataset.actionId).catch((err) => showError('action', err.message));
  });

  return { refresh, wants: (ids) => ids.includes(id) };
}
