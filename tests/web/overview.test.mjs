// End to end: the fleet overview (#/overview), the landing page, in
// headless Chromium against a real vigil-server and simulated agents: the
// default cluster of tests/web/lib/cluster.mjs (a GPU of gpt-pretrain
// overheats) plus job llama-sft on n201 whose GPU reports a double-bit ECC
// error 5 s after the start, a red line. The steps share the cluster and
// run in order: the landing page shows the three zones -> the ECC fault is
// a red-line item and the overheating GPU a performance item, pushed
// without a reload -> clicking or pressing Enter on an item opens its
// incident, job and node -> every rule of rules/catalog.cc lands in the
// zone the table below says -> with 5,000 nodes the page lists counts and
// the top items only. With VIGIL_SCREENSHOTS=DIR the page is saved there.
//
// Run: VIGIL_BUILD=build node --test --test-concurrency=1 tests/web/
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { launchBrowser } from './lib/browser.mjs';
import { DEFAULT_AGENTS, REPO_ROOT, startCluster, USERS, waitFor } from './lib/cluster.mjs';
import { assertNoErrors, DESKTOP, httpErrorLine, screenshots, signIn, watchErrors } from './lib/page.mjs';

const RED = { node: 'n201', job: 'llama-sft', scenario: 'ecc_dbe', faultAt: 5 };
// What the ECC fault may be named (the double-bit rule, or XID 48's).
const RED_KINDS = ['ecc_double_bit', 'xid_fatal'];

let cluster;
let browser;
let page;
let redIncident;    // the ECC fault's incident, from the API
const failures = [];

before(async () => {
  browser = await launchBrowser({ viewport: DESKTOP, colorScheme: 'light' });
  page = browser.context.pages()[0] ?? await browser.context.newPage();
  page.setDefaultTimeout(15_000);
  watchErrors(page);
  cluster = await startCluster({ agents: [...DEFAULT_AGENTS, RED] });
});

after(async () => {
  await browser?.close().catch(() => {});
  if (failures.length && cluster) console.error(`\n${failures.length} step(s) failed; cluster logs:\n${cluster.logs()}`);
  await cluster?.stop();
});

// A test step; on failure saves a screenshot (path in the message).
function step(name, fn, timeout = 90_000) {
  test(name, { timeout }, async (t) => {
    try {
      await fn(t);
    } catch (e) {
      failures.push(name);
      if (page && !page.isClosed()) {
        page.vigilErrors = [];
        const shot = join(mkdtempSync(join(tmpdir(), 'vigil-web-failure-')), 'overview.png');
        const error = await page.locator('#error').textContent({ timeout: 1000 }).catch(() => '?');
        await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
        e.message += `\n  page: ${page.url()} #error: ${JSON.stringify(error)} screenshot: ${shot}`;
      }
      throw e;
    }
  });
}

const zone = (name) => page.locator(`section.zone[data-zone=${name}]`);
const sameDocument = async () =>
  assert.equal(await page.evaluate(() => window.vigilE2eMarker), 'same document', 'the page was reloaded');

// Back on the overview through the browser's history.
async function back() {
  await page.goBack();
  await page.locator('nav a[data-page=overview][aria-current=page]').waitFor();
  await zone('red').locator(`li[data-incident-id="${redIncident.id}"]`).waitFor();
}

step('the landing page is the overview, with its three zones', async () => {
  await signIn(page, cluster.url, USERS.operator);
  await page.locator('nav a[data-page=overview][aria-current=page]').waitFor();  // after sign-in
  await page.goto(`${cluster.url}/`);  // no hash: the landing page
  await page.locator('nav a[data-page=overview][aria-current=page]').waitFor();
  assert.match(await page.locator('main h2').first().textContent(), /Fleet overview/);
  await page.evaluate(() => { window.vigilE2eMarker = 'same document'; });

  const zones = page.locator('section.zone');
  assert.deepEqual(await zones.evaluateAll((els) => els.map((e) => e.dataset.zone)), ['red', 'slow', 'capacity']);
  for (const [name, title] of [['red', /Red lines/], ['slow', /Performance/], ['capacity', /Capacity/]]) {
    const section = zone(name);
    // Each zone is a region named by its heading.
    const heading = await section.evaluate((s) => document.getElementById(s.getAttribute('aria-labelledby'))?.tagName);
    assert.equal(heading, 'H3', `zone ${name} is not labelled by its heading`);
    assert.match(await section.locator('h3').textContent(), title);
    await page.locator(`section.zone[data-zone=${name}]:not([data-state=loading])`).waitFor();
    assert.ok(await section.locator('.zone-stats li').count() >= 3, `zone ${name} shows fewer than 3 counts`);
  }
  // The landing page of before is one click away.
  await page.locator('nav a[data-page=incidents]').waitFor();
  assertNoErrors(page, 'overview', [httpErrorLine(401)]);  // the session check before signing in
});

step('the ECC fault is a red-line item; the hot GPU a performance item, live', async (t) => {
  redIncident = await waitFor('the ECC fault\'s incident in the API', async () =>
    (await cluster.incidents()).find((i) => RED_KINDS.includes(i.kind) && i.node === RED.node),
  { timeoutMs: 60_000 });
  t.diagnostic(`${redIncident.id} (${redIncident.kind}, ${redIncident.severity})`);
  const item = zone('red').locator(`li[data-item=incident][data-incident-id="${redIncident.id}"]`);
  await item.waitFor({ timeout: 10_000 });
  assert.equal(await item.getAttribute('data-severity'), 'P0');
  assert.match(await item.locator('.item-main').textContent(), new RegExp(redIncident.kind));
  assert.equal(await item.locator(`a[href="#/nodes/${RED.node}"]`).count(), 1, 'the item does not link its node');
  assert.equal(await item.locator(`a[href="#/jobs/${RED.job}"]`).count(), 1, 'the item does not link its job');
  assert.equal(await page.locator(`section.zone:not([data-zone=red]) li[data-incident-id="${redIncident.id}"]`).count(), 0,
    'the red-line incident is listed in another zone too');
  assert.equal(await zone('red').getAttribute('data-state'), 'alert');
  assert.ok(Number(await zone('red').getAttribute('data-count')) >= 1);
  assert.match(await zone('red').locator('[data-stat=p0] b').textContent(), /^[1-9]/);
  // Keyboard focus survives the re-renders that follow.
  await item.locator('a.item-main').focus();

  // The overheating GPU of gpt-pretrain (~25 s after the start): pushed by
  // the server, in the performance zone, not among the red lines.
  const hot = await waitFor('the thermal fault\'s incident in the API', () => cluster.faultIncident(),
    { timeoutMs: 75_000 });
  await zone('slow').locator(`li[data-item=incident][data-incident-id="${hot.id}"]`).waitFor({ timeout: 10_000 });
  assert.equal(await zone('red').locator(`li[data-incident-id="${hot.id}"]`).count(), 0);
  assert.equal(await page.evaluate(() => document.activeElement?.dataset.key), `incident:${redIncident.id}`,
    'the focused item lost focus when the page re-rendered');
  // Per job: MFU against the line, tokens/s and step time.
  for (const job of ['gpt-pretrain', 'bert-finetune', RED.job]) {
    const row = zone('slow').locator(`table.perf tr[data-job="${job}"]`);
    await row.waitFor();
    assert.match(await row.locator('td[data-field=mfu]').textContent(), /\d+ %|–/);
    assert.match(await row.locator('td[data-field=step-time]').textContent(), /\d s|–/);
  }
  await sameDocument();
  assertNoErrors(page, 'overview (live)');
  await screenshots(page, 'overview', { fullPage: true });
});

step('an item opens its incident, its job and its node (mouse and keyboard)', async (t) => {
  if (!redIncident) return t.skip('needs the incident of the previous step');
  const item = () => zone('red').locator(`li[data-incident-id="${redIncident.id}"]`);

  await item().locator('a.item-main').click();
  await page.waitForURL(`**/#/incidents/${redIncident.id}`);
  await page.locator(`section#incident-detail[data-incident-id="${redIncident.id}"] [data-field=summary]`).waitFor();
  await back();

  // Keyboard: the job link takes focus and opens on Enter.
  const jobLink = item().locator(`a[href="#/jobs/${RED.job}"]`);
  await jobLink.focus();
  // One round trip: a locator's evaluate resolves the element first, and a
  // live re-render in between would leave it holding the replaced link.
  assert.equal(await page.evaluate(() => document.activeElement?.dataset.key), `incident:${redIncident.id}:job`,
    'the job link takes no focus');
  await page.keyboard.press('Enter');
  await page.waitForURL(`**/#/jobs/${RED.job}`);
  await page.locator(`section#job-detail[data-job="${RED.job}"]`).waitFor();
  await back();

  await item().locator(`a[href="#/nodes/${RED.node}"]`).click();
  await page.waitForURL(`**/#/nodes/${RED.node}`);
  await page.locator('nav a[data-page=nodes][aria-current=page]').waitFor();
  await page.locator(`#nodes .node[data-node="${RED.node}"][data-selected=true]`).waitFor();
  assert.equal(await page.locator('#nodes .node[data-node="n001"]').count(), 0, 'the node view is not filtered to its node');
  assert.equal(await page.locator('#filter-node').inputValue(), RED.node);
  await back();

  // A row of the performance table opens its job.
  await zone('slow').locator('table.perf tr[data-job="gpt-pretrain"] td[data-field=mfu]').click();
  await page.waitForURL('**/#/jobs/gpt-pretrain');
  await page.locator('section#job-detail[data-job="gpt-pretrain"]').waitFor();
  await sameDocument();
  assertNoErrors(page, 'overview links');
});

// The zone every built-in rule must land in (web/js/zones.js explains why).
const EXPECTED = {
  red: ['node_down', 'job_unreachable', 'gpu_drop', 'ecc_double_bit', 'xid_fatal', 'nvlink_errors', 'loss_nan',
    'grad_nan', 'job_hang', 'network_packet_loss', 'network_link_down', 'row_remap_pending', 'xid_gpu_error', 'xid',
    'ecc_single_bit_rate', 'idle_node_down', 'lemon_node'],
  capacity: ['gpu_memory_fragmentation', 'oom_forecast', 'disk_latency', 'alloc_retries'],
  slow: ['throughput_drop_severe', 'grad_explosion', 'gpu_hours_at_risk', 'fleet_wide_fault', 'xid_app_error',
    'throughput_drop', 'gpu_thermal_throttle', 'gpu_power_low', 'gpu_clock_low', 'nvlink_traffic_low', 'dataloader_slow',
    'data_stall', 'loss_oscillation', 'loss_scale_thrash', 'loss_divergence', 'grad_vanishing', 'pcie_replays',
    'gpu_temperature_high', 'step_time_high', 'network_traffic_low', 'mfu_low', 'baseline_fluctuation'],
  none: ['job_ended'],
};

// The rules of rules/catalog.cc as incidents would carry them: {kind,
// severity, hint_category, responses}.
function catalogRules() {
  const text = readFileSync(join(REPO_ROOT, 'rules/catalog.cc'), 'utf8');
  const snake = (k) => k.replace(/^k/, '').replace(/[A-Z]/g, (c, i) => (i ? '_' : '') + c.toLowerCase());
  const named = { kPauseAndCordon: ['checkpoint_then_pause_job', 'cordon_node'] };
  const rules = [];
  const re = /Make\(\s*"(\w+)",\s*\{[^}]*\},\s*(P[0-3]),\s*(\{[^}]*\}|\w+),\s*C::(k\w+)/g;
  for (const [, kind, severity, responses, category] of text.matchAll(re)) {
    rules.push({ kind, severity, hint_category: snake(category),
      responses: named[responses] ?? [...responses.matchAll(/R::(k\w+)/g)].map((m) => snake(m[1])) });
  }
  return rules;
}

step('every rule of rules/catalog.cc lands in its zone', async () => {
  const rules = catalogRules();
  assert.ok(rules.length >= 40, `parsed only ${rules.length} rules from rules/catalog.cc`);
  const extra = [
    // Vigil's own store refusing writes; imported Prometheus alerts.
    { kind: 'storage_degraded', severity: 'P1', hint_category: 'general', responses: ['notify_sre'], want: 'capacity' },
    { kind: 'alert:NodeFilesystemAlmostOutOfSpace', severity: 'P2', hint_category: 'general', responses: [], want: 'capacity' },
    { kind: 'alert:HighRequestLatency', severity: 'P2', hint_category: 'general', responses: [], want: 'slow' },
    // A hot card whose incident a throughput drop raised to P1: still slow.
    { kind: 'gpu_thermal_throttle', severity: 'P1', hint_category: 'gpu_hardware', responses: ['diagnostic_report', 'notify_sre'],
      severity_history: [{ rule: 'gpu_thermal_throttle', severity: 'P2' }, { rule: 'throughput_drop_severe', severity: 'P1' }],
      want: 'slow' },
    // A rule the UI has never heard of still gets a zone from its category.
    { kind: 'future_psu_fault', severity: 'P1', hint_category: 'gpu_hardware', responses: ['notify_sre'], want: 'red' },
    { kind: 'future_kv_cache', severity: 'P2', hint_category: 'memory', responses: [], want: 'capacity' },
  ];
  const got = await page.evaluate(async (list) => {
    const { zoneOf } = await import('/js/zones.js');
    return list.map((inc) => zoneOf(inc) ?? 'none');
  }, [...rules, ...extra]);
  const want = new Map(Object.entries(EXPECTED).flatMap(([z, kinds]) => kinds.map((k) => [k, z])));
  const wrong = [];
  rules.forEach((r, i) => {
    // A rule added after this table: any zone, unless it is a lifecycle record.
    const expected = want.get(r.kind) ?? (r.hint_category === 'lifecycle' ? 'none' : got[i] === 'none' ? 'a zone' : got[i]);
    if (got[i] !== expected) wrong.push(`${r.kind} (${r.severity}, ${r.hint_category}): ${got[i]}, want ${expected}`);
  });
  extra.forEach((x, i) => {
    if (got[rules.length + i] !== x.want) wrong.push(`${x.kind}: ${got[rules.length + i]}, want ${x.want}`);
  });
  assert.deepEqual(wrong, []);
  const missing = [...want.keys()].filter((k) => !rules.some((r) => r.kind === k));
  assert.deepEqual(missing, [], 'rules in the table that rules/catalog.cc no longer has (or the parser missed)');
});

step('thousands of nodes: counts and the top items, fast', async (t) => {
  const now = Date.now() / 1000;
  const nodes = Array.from({ length: 5000 }, (_, i) => ({
    node: `x${String(i).padStart(4, '0')}`, job: `job-${i % 50}`, source: 'agent', gpus: 8, cordoned: false, lemon: null,
    gpu_state: { ok: i % 10 === 1 ? 7 : 8, hot: i % 10 === 1 ? 1 : 0, throttled: 0, missing: i % 125 === 7 ? 1 : 0 },
    last_frame_ts: now - (i % 100 === 3 ? 600 : 1), age_seconds: i % 100 === 3 ? 600 : 1,
    incidents: { P0: 0, P1: 0, P2: 0, P3: 0 },
  }));
  await page.route('**/api/v1/nodes', (route) =>
    route.fulfill({ contentType: 'application/json', body: JSON.stringify({ now, nodes, lemons: {} }) }));
  try {
    const started = Date.now();
    await page.locator('nav a[data-page=overview]').click();
    await page.locator('[data-field=summary]', { hasText: '5000 nodes' }).waitFor();
    t.diagnostic(`5,000 nodes shown ${Date.now() - started} ms after the click`);
    // 40 missing GPUs (i % 125 == 7) and 50 silent nodes (i % 100 == 3).
    assert.equal(await zone('red').locator('[data-stat=gpus-missing] b').textContent(), '40');
    assert.equal(await zone('red').locator('[data-stat=silent-nodes] b').textContent(), '50');
    assert.equal(await zone('slow').locator('[data-stat=gpus-hot] b').textContent(), '500');
    for (const name of ['red', 'slow', 'capacity']) {
      const items = await zone(name).locator('.zone-items > li').count();
      assert.ok(items <= 8, `zone ${name} lists ${items} items, not the top 8`);
    }
    assert.ok(await zone('red').locator('li[data-item=node]').count() > 0, 'no node item among the red lines');
    // The whole page stays small: no element per node.
    const elements = await page.evaluate(() => document.querySelectorAll('main *').length);
    assert.ok(elements < 1500, `${elements} elements in the page for 5,000 nodes`);
    // The red node items link their nodes.
    const nodeItem = zone('red').locator('li[data-item=node]').first();
    const name = await nodeItem.getAttribute('data-node');
    assert.equal(await nodeItem.locator(`a[href="#/nodes/${name}"]`).count(), 1);
    assertNoErrors(page, 'overview (5,000 nodes)');
    await screenshots(page, 'overview-5000-nodes', { desktopOnly: true });
  } finally {
    await page.unroute('**/api/v1/nodes');
  }
});
