// End to end: the web UI in headless Chromium against a real vigil-server
// fed by simulated agents (tests/web/lib/cluster.mjs). The steps share one
// cluster and run in order: a fault is injected -> the incident shows up
// live on the incidents page -> its detail page draws the evidence chart
// with the baseline band -> the operator acknowledges it -> a viewer cannot;
// the other pages render without script errors; a bad token and a stopped
// server are reported. With VIGIL_SCREENSHOTS=DIR every page is saved there
// at desktop and phone size.
//
// Run: VIGIL_BUILD=build node --test --test-concurrency=1 tests/web/
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { launchBrowser } from './lib/browser.mjs';
import { startCluster, USERS, waitFor } from './lib/cluster.mjs';
import {
  assertNoErrors, DESKTOP, httpErrorLine, painted, screenshots, signIn, watchErrors,
} from './lib/page.mjs';

let cluster;        // the running cluster
let operator;       // {browser, page}: olga, signed in through the form
let viewer;         // {browser, page}: vic
let incident;       // the fault's incident, as the API first showed it
let seriesId;       // the series of its baseline evidence
let silenceId;      // the silence added on the silences page
const failures = [];

before(async () => {
  // The browser first: the fault's clock starts with the agents.
  operator = await openBrowser();
  cluster = await startCluster();
});

after(async () => {
  for (const b of [operator, viewer]) await b?.browser.close().catch(() => {});
  if (failures.length && cluster) {
    console.error(`\n${failures.length} step(s) failed; cluster logs:\n${cluster.logs()}`);
  }
  await cluster?.stop();
});

// A test step; on failure saves a screenshot of each open page (path in the
// message) and notes the page's URL and #error text.
function step(name, fn, timeout = 90_000) {
  test(name, { timeout }, async (t) => {
    try {
      await fn(t);
    } catch (e) {
      failures.push(name);
      for (const b of [operator, viewer]) if (b) b.page.vigilErrors = [];  // reported with this step
      const dir = mkdtempSync(join(tmpdir(), 'vigil-web-failure-'));
      for (const [who, b] of [['operator', operator], ['viewer', viewer]]) {
        if (!b || b.page.isClosed()) continue;
        const shot = join(dir, `${who}.png`);
        const error = await b.page.locator('#error').textContent({ timeout: 1000 }).catch(() => '?');
        await b.page.screenshot({ path: shot }).catch(() => {});
        e.message += `\n  ${who} page: ${b.page.url()} #error: ${JSON.stringify(error)} screenshot: ${shot}`;
      }
      throw e;
    }
  });
}

async function openBrowser() {
  const browser = await launchBrowser({ viewport: DESKTOP, colorScheme: 'dark' });
  const page = browser.context.pages()[0] ?? await browser.context.newPage();
  page.setDefaultTimeout(15_000);
  watchErrors(page);
  page.loads = 0;
  page.on('load', () => { page.loads += 1; });
  page.eventStreams = 0;
  page.on('request', (r) => { if (r.url().includes('/api/v1/events')) page.eventStreams += 1; });
  return { browser, page };
}

const attr = (locator, name) => locator.getAttribute(name);

// Throws unless #live reads "live" (the event stream is connected) within
// `timeoutMs`.
async function assertLive(page, timeoutMs = 1000) {
  assert.ok(page.eventStreams >= 1, 'the page opened no /api/v1/events stream');
  await page.locator('#live[data-state=live]').waitFor({ timeout: timeoutMs }).catch(async () => {
    throw new Error(`#live is "${await attr(page.locator('#live'), 'data-state')}", not "live", ` +
      'after signing in: the event stream is not connected');
  });
}

// Clicks nav link `name` and waits until it is the current page.
async function navigate(page, name) {
  await page.locator(`nav a[data-page=${name}]`).click();
  await page.locator(`nav a[data-page=${name}][aria-current=page]`).waitFor();
}

step('a: the incident appears live on the incidents page (SSE, no reload)', async (t) => {
  const { page } = operator;
  const since = () => `${(Date.now() / 1000 - cluster.startedAt).toFixed(1)} s`;
  await page.goto(`${cluster.url}/#/login`);
  await page.locator('form#login-form').waitFor();
  await screenshots(page, 'login');
  await signIn(page, cluster.url, USERS.operator);
  await page.locator('#logout').waitFor({ state: 'visible' });
  assert.equal(await page.locator('#login-link').isVisible(), false, '#login-link shown while signed in');
  if (!page.url().includes('#/incidents')) await navigate(page, 'incidents');
  await page.locator('nav a[data-page=incidents][aria-current=page]').waitFor();
  await page.locator('#incidents').waitFor();
  await page.locator('#incident-count').waitFor();
  await page.evaluate(() => { window.vigilE2eMarker = 'same document'; });
  const loads = page.loads;
  t.diagnostic(`incidents page open ${since()} after the agents started (fault at ${cluster.fault.atSeconds} s)`);
  assert.ok(Date.now() / 1000 - cluster.startedAt < cluster.fault.atSeconds,
    `the incidents page opened only ${since()} after the start, after the fault: raise faultAt`);
  assert.equal(await cluster.faultIncident(), undefined, 'the fault\'s incident existed before the page was open');
  // Live (the UI stops polling while the event stream is up): what shows
  // up next is pushed.
  await assertLive(page, 5_000);

  incident = await waitFor('the fault\'s incident in the API', () => cluster.faultIncident(),
    { timeoutMs: 75_000, intervalMs: 250 });
  const evidence = incident.evidence.find((e) =>
    (e.kind === 'baseline_high' || e.kind === 'baseline_low') && Number.isInteger(e.series));
  assert.ok(evidence, `no baseline evidence with a series in ${JSON.stringify(incident.evidence)}`);
  assert.ok(Number.isFinite(evidence.baseline_mean) && Number.isFinite(evidence.baseline_sigma),
    `baseline evidence without mean/sigma: ${JSON.stringify(evidence)}`);
  seriesId = evidence.series;
  t.diagnostic(`${incident.id} (${incident.kind}) in the API ${since()} after the start`);

  // Pushed by the server: the row must follow within a few seconds.
  const row = page.locator(`#incidents tr[data-incident-id="${incident.id}"]`);
  await row.waitFor({ timeout: 10_000 });
  t.diagnostic(`row on the page ${since()} after the start`);
  assert.equal(await page.evaluate(() => window.vigilE2eMarker), 'same document', 'the page was reloaded');
  assert.equal(page.loads, loads, 'the page was reloaded');
  assert.match(await attr(row, 'data-severity'), /^P[0-3]$/);
  assert.equal(await attr(row, 'data-state'), 'firing');
  for (const f of ['severity', 'kind', 'job', 'where', 'age', 'state', 'hint']) {
    assert.equal(await row.locator(`td[data-field=${f}]`).count(), 1, `row has no td[data-field=${f}]`);
  }
  assert.match(await row.locator('td[data-field=kind]').textContent(), new RegExp(cluster.fault.kind));
  assert.match(await page.locator('#incident-count').textContent(), /[1-9]/);
  await assertLive(page);
  assertNoErrors(page, 'incidents page', [httpErrorLine(401)]);  // 401: the session check before signing in

  await screenshots(page, 'incidents');
  // The theme toggle flips html[data-theme]; one shot in each theme.
  const html = page.locator('html');
  for (let i = 0; i < 2; i += 1) {
    const before = await attr(html, 'data-theme');
    assert.match(before, /^(dark|light)$/, 'html[data-theme] is not dark or light');
    await page.locator('#theme-toggle').click();
    const now = await attr(html, 'data-theme');
    assert.notEqual(now, before, '#theme-toggle did not switch html[data-theme]');
    await row.waitFor();
    await screenshots(page, 'incidents', { suffix: now, desktopOnly: true });
  }
  assertNoErrors(page, 'incidents page (theme toggle)');
});

step('b: the detail page shows the evidence chart with its baseline band', async (t) => {
  if (!incident) return t.skip('needs the incident of step a');
  const { page } = operator;
  await page.locator(`#incidents tr[data-incident-id="${incident.id}"]`).click();
  await page.waitForURL(`**/#/incidents/${incident.id}`);
  const detail = page.locator(`section#incident-detail[data-incident-id="${incident.id}"]`);
  await detail.waitFor();
  await detail.locator('[data-field=state]', { hasText: 'firing' }).waitFor();
  assert.ok((await detail.locator('[data-field=summary]').textContent()).trim(), 'empty summary');
  assert.ok((await detail.locator('[data-field=hint]').textContent()).trim(), 'empty hint');
  await detail.locator('ol#timeline li[data-type=opened]').waitFor();

  const chart = detail.locator(`div.chart[data-series-id="${seriesId}"]`);
  await chart.waitFor({ state: 'visible' });
  await chart.locator('canvas').first().waitFor({ state: 'visible' });
  await detail.locator(`div.chart[data-series-id="${seriesId}"][data-band="true"]`).waitFor();
  await waitFor(`div.chart[data-series-id="${seriesId}"] with data-anomalies > 0`,
    async () => Number(await attr(chart, 'data-anomalies')) > 0, { timeoutMs: 15_000 });
  // A GPU fault: the GPU is also drawn against its peers.
  await detail.locator('div.chart[data-kind=peers] canvas').first().waitFor({ state: 'visible' });
  assert.equal(await page.evaluate(() => window.vigilE2eMarker), 'same document', 'the page was reloaded');
  assertNoErrors(page, 'incident detail page');
  await screenshots(page, 'incident-detail', { fullPage: true });
});

step('c: the operator acknowledges; state and timeline change, the list follows', async (t) => {
  if (!incident) return t.skip('needs the incident of step a');
  const { page } = operator;
  const detail = page.locator(`section#incident-detail[data-incident-id="${incident.id}"]`);
  const ack = detail.locator('button[data-action=ack]');
  assert.equal(await ack.isEnabled(), true, 'the ack button is disabled for the operator');
  await ack.click();
  const dialog = page.locator('dialog#confirm');
  await dialog.waitFor({ state: 'visible' });
  assert.match(await dialog.textContent(), /acknowledg/i, 'the confirm dialog does not say what happens');
  assert.match(await dialog.textContent(), new RegExp(incident.id), 'the confirm dialog does not name the incident');
  const comment = dialog.locator('textarea[name=comment]');
  if (await comment.isVisible()) await comment.fill('e2e: looking at the cooling');
  await dialog.locator('button[data-confirm=yes]').click();
  await dialog.waitFor({ state: 'hidden' });

  await detail.locator('[data-field=state]', { hasText: 'acknowledged' }).waitFor();
  await detail.locator('ol#timeline li[data-type=acknowledged]').waitFor();
  const api = await cluster.api(`/api/v1/incidents/${incident.id}`);
  assert.equal(api.body.lifecycle, 'acknowledged', 'the server did not record the ack');
  assert.equal(api.body.escalation?.acknowledged_by, 'olga', JSON.stringify(api.body.escalation));

  await navigate(page, 'incidents');
  await page.locator(`#incidents tr[data-incident-id="${incident.id}"][data-state=acknowledged]`).waitFor();
  assert.match(await page.locator(`#incidents tr[data-incident-id="${incident.id}"] td[data-field=state]`)
    .textContent(), /acknowledged/);
  // Server-side search (q=): no match hides the row, a match shows it.
  const row = page.locator(`#incidents tr[data-incident-id="${incident.id}"]`);
  await page.locator('#search').fill('no-such-incident-xyz');
  await row.waitFor({ state: 'detached' });
  await page.locator('#search').fill(cluster.fault.kind.slice(4, 15).toUpperCase());
  await row.waitFor();
  await page.locator('#search').fill('');
  assert.equal(await page.evaluate(() => window.vigilE2eMarker), 'same document', 'the page was reloaded');
  assertNoErrors(page, 'acknowledge');
});

step('d: a viewer cannot act; mutating calls need the CSRF header', async (t) => {
  if (!incident) return t.skip('needs the incident of step a');
  viewer = await openBrowser();
  const { page } = viewer;
  await signIn(page, cluster.url, USERS.viewer);
  assertNoErrors(page, 'viewer sign-in', [httpErrorLine(401)]);  // the session check before signing in
  await page.goto(`${cluster.url}/#/incidents/${incident.id}`);
  const detail = page.locator(`section#incident-detail[data-incident-id="${incident.id}"]`);
  await detail.locator('[data-field=state]', { hasText: 'acknowledged' }).waitFor();
  const buttons = detail.locator('button[data-action]');
  await buttons.first().waitFor();
  const actions = await buttons.evaluateAll((bs) => bs.map((b) => ({
    action: b.dataset.action, disabled: b.disabled, title: b.title })));
  assert.ok(actions.some((a) => a.action === 'ack' || a.action === 'unack'),
    `no ack/unack button for the viewer: ${JSON.stringify(actions)}`);
  for (const a of actions) {
    assert.ok(a.disabled, `button[data-action=${a.action}] is enabled for a viewer`);
    assert.match(a.title, /your role \(viewer\) cannot act/, `button[data-action=${a.action}] title`);
  }

  const viaViewer = await page.evaluate(async (id) => {
    const s = await (await fetch('/api/v1/session')).json();
    const r = await fetch(`/api/v1/incidents/${id}/ack`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf },
      body: JSON.stringify({ comment: 'viewer tries' }),
    });
    return { session: s, status: r.status, body: await r.text() };
  }, incident.id);
  assert.equal(viaViewer.session.via, 'session');
  assert.equal(viaViewer.session.role, 'viewer');
  assert.ok(viaViewer.session.csrf, 'no CSRF token in the viewer\'s session');
  assert.equal(viaViewer.status, 403, `viewer ack with CSRF: ${viaViewer.status} ${viaViewer.body}`);
  assertNoErrors(page, 'viewer', [httpErrorLine(403)]);

  const noCsrf = await operator.page.evaluate(async (id) => {
    const r = await fetch(`/api/v1/incidents/${id}/unack`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"comment":"no csrf"}',
    });
    return { status: r.status, body: await r.text() };
  }, incident.id);
  assert.equal(noCsrf.status, 403, `operator unack without CSRF header: ${noCsrf.status} ${noCsrf.body}`);
  assert.match(noCsrf.body, /csrf/i);
  assertNoErrors(operator.page, 'operator without CSRF', [httpErrorLine(403)]);
  const api = await cluster.api(`/api/v1/incidents/${incident.id}`);
  assert.equal(api.body.lifecycle, 'acknowledged', 'a refused call changed the incident');
});

step('e1: a wrong token is refused with the server\'s message; sign out', async (t) => {
  if (!viewer) return t.skip('needs the viewer of step d');
  const { page } = viewer;
  await page.locator('#logout').click();
  await page.locator('#login-link').waitFor({ state: 'visible' });
  await page.locator('#login-link').click();
  const form = page.locator('form#login-form');
  await form.waitFor();
  await form.locator('input[name=token]').fill('not-a-token');
  await form.locator('button[type=submit], input[type=submit]').first().click();
  const error = page.locator('#error');
  await error.waitFor({ state: 'visible' });
  await page.waitForFunction(() => /unknown token/.test(document.querySelector('#error')?.textContent ?? ''),
                             null, { timeout: 10_000 }).catch(() => {});
  assert.match(await error.textContent(), /unknown token/);
  assert.doesNotMatch(await page.locator('#whoami').textContent(), /vic/);
  assertNoErrors(page, 'bad login', [httpErrorLine(401)]);
  await viewer.browser.close();
  viewer = undefined;
});

step('f1: jobs and job detail (heat map)', async () => {
  const { page } = operator;
  const job = cluster.fault.job;
  await navigate(page, 'jobs');
  const row = page.locator(`#jobs tr[data-job="${job}"]`);
  await row.waitFor();
  assert.match(await attr(row, 'data-health'), /^(critical|warning|ok|silent)$/);
  await page.locator('#jobs tr[data-job="bert-finetune"]').waitFor();
  await row.locator('.spark').first().waitFor();
  assert.ok(await row.locator('.spark').count() >= 3, 'fewer than 3 sparklines in the job row');
  assertNoErrors(page, 'jobs page');
  await screenshots(page, 'jobs');

  await row.click();
  await page.waitForURL(`**/#/jobs/${job}`);
  const detail = page.locator(`section#job-detail[data-job="${job}"]`);
  await detail.waitFor();
  const cells = detail.locator('#heatmap .cell[data-node][data-gpu]');
  await waitFor('16 heat map cells (2 nodes x 8 GPUs)', async () => (await cells.count()) === 16);
  const hot = detail.locator(`#heatmap .cell[data-node="${cluster.fault.node}"][data-gpu="${cluster.fault.gpu}"]`);
  for (const metric of ['temperature', 'throttle', 'power']) {
    await detail.locator('#heatmap-metric').selectOption(metric);
    await waitFor(`the heat map cell title (${metric})`, async () => (await attr(hot, 'title'))?.trim());
  }
  await detail.locator('#heatmap-metric').selectOption('temperature');
  assertNoErrors(page, 'job detail page');
  await screenshots(page, 'job-detail');
});

step('f2: nodes', async () => {
  const { page } = operator;
  await navigate(page, 'nodes');
  for (const n of ['n001', 'n002', 'n101']) {
    const node = page.locator(`#nodes .node[data-node="${n}"]`);
    await node.waitFor();
    assert.match(await attr(node, 'data-state'), /^(ok|degraded|stale|cordoned)$/);
    await node.locator('[data-field=age]').waitFor();
  }
  await page.locator('#filter-node').fill('n101');
  await page.locator('#nodes .node[data-node="n001"]').waitFor({ state: 'hidden' });
  await page.locator('#nodes .node[data-node="n101"]').waitFor({ state: 'visible' });
  await page.locator('#filter-node').fill('');
  await page.locator('#nodes .node[data-node="n001"]').waitFor({ state: 'visible' });
  assertNoErrors(page, 'nodes page');
  await screenshots(page, 'nodes');
});

step('f3: silences: add one through the form, then expire it', async () => {
  const { page } = operator;
  await navigate(page, 'silences');
  const form = page.locator('form#silence-form');
  await form.waitFor();
  const before = new Set((await cluster.api('/api/v1/silences')).body.silences.map((s) => s.id));
  // One input per matcher name (job, node, gpu, kind, severity).
  await form.locator('input[name=node]').fill(cluster.fault.node);
  await form.locator('select[name=duration]').selectOption('60');
  await form.locator('[name=comment]').fill('e2e: cooling repair');
  await form.locator('button[type=submit], input[type=submit]').first().click();
  const added = await waitFor('the new silence in the API', async () =>
    (await cluster.api('/api/v1/silences')).body.silences.find((s) => !before.has(s.id)));
  silenceId = added.id;
  assert.deepEqual(added.matchers, [{ name: 'node', value: cluster.fault.node }]);
  const row = page.locator(`#silences tr[data-silence-id="${silenceId}"]`);
  await row.waitFor();
  assertNoErrors(page, 'silences page');
  await screenshots(page, 'silences');

  await row.locator('button[data-action=expire]').click();
  const dialog = page.locator('dialog#confirm');
  if (await dialog.isVisible()) await dialog.locator('button[data-confirm=yes]').click();
  await waitFor('the silence to be expired in the API', async () => {
    const s = (await cluster.api('/api/v1/silences')).body.silences.find((x) => x.id === silenceId);
    const end = s && (s.end_ts ?? s.ends_at);
    return !s || end <= Date.now() / 1000 + 1;
  });
  await waitFor('the expired silence to leave the table or be marked', async () =>
    (await row.count()) === 0 || /expired/i.test(await row.textContent()));
  assertNoErrors(page, 'silences page (expire)');
});

step('f4: audit lists the ack and the silence', async (t) => {
  if (!incident || !silenceId) return t.skip('needs the ack of step c and the silence of step f3');
  const { page } = operator;
  await navigate(page, 'audit');
  const rows = page.locator('#audit tr');
  await page.locator('#audit tr', { hasText: incident.id }).first().waitFor();
  await page.locator('#audit tr', { hasText: silenceId }).first().waitFor();
  assert.ok(await rows.count() >= 3, 'fewer audit rows than ack + silence + expire');
  assertNoErrors(page, 'audit page');
  await screenshots(page, 'audit', { fullPage: false });
});

step('e2: a stopped server shows "unreachable" and #live offline', async () => {
  const { page } = operator;
  await navigate(page, 'incidents');
  await page.locator('#live:not([data-state=offline])').waitFor();
  await cluster.stopServer();
  await page.locator('#live[data-state=offline]').waitFor({ timeout: 20_000 });
  await page.locator('#error', { hasText: /unreachable/ }).waitFor({ timeout: 20_000 });
  await painted(page);
});
