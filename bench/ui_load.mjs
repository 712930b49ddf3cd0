// Web UI load benchmark (issue 6 target: each page < 1 s on loopback with
// 1,000 incidents and 1,000 nodes). Run by bench/ui_load.sh, which starts
// the server and fills it (bench/ui_fleet.cc); see bench/RESULTS.md.
//
//   node bench/ui_load.mjs --url http://127.0.0.1:PORT --token TOKEN
//        [--runs 5] [--pages incidents,nodes,jobs] [--json FILE]
//        [--accept-encoding VALUE]
//
// For each page, RUNS loads on a fresh tab with the browser cache cleared
// first ("cold") and RUNS on a fresh tab with a warm cache ("warm"), desktop
// viewport, signed in with TOKEN through a session cookie. Per load, in ms
// after navigation start (performance.timeOrigin), measured in the page:
//   rows      the page's rows are all in the DOM (a MutationObserver counts
//             the page's selector up to the count the API gives just before
//             the load): the figure the 1 s target is about;
//   painted   the first frame after that (rAF, then a posted message);
//   dcl, load DOMContentLoaded and load event ends;
//   api_start, api_ttfb, api_end  when the page's list request started,
//             its first byte and last byte arrived (Resource Timing);
//   extra     jobs only: every sparkline drawn (3 uPlot canvases a job);
//   script, style, layout  main-thread time spent running JS,
//             recalculating style and laying out, summed over the load
//             (Chromium's Performance.getMetrics, read after it).
// Prints per-load lines, then median and max per page and mode; --json
// writes everything. --accept-encoding replaces the browser's
// Accept-Encoding (e.g. "gzip, deflate": what the pages cost when the
// server does not answer in brotli). Exits 1 when a page never shows its rows (after one
// retry: the expected count may change between the probe and the load),
// or a page throws.
import { writeFileSync } from 'node:fs';
import { launchBrowser } from '../tests/web/lib/browser.mjs';

const DESKTOP = { width: 1280, height: 800 };
const LOAD_TIMEOUT_MS = 30_000;

function parseArgs(argv) {
  const args = { url: '', token: '', runs: 5, pages: 'incidents,nodes,jobs', json: '', 'accept-encoding': '' };
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '');
    if (!(name in args) || argv[i + 1] === undefined) {
      throw new Error('usage: node bench/ui_load.mjs --url URL --token TOKEN [--runs 5] ' +
        `[--pages incidents,nodes,jobs] [--json FILE] [--accept-encoding VALUE] (bad: ${argv[i]})`);
    }
    args[name] = argv[i + 1];
  }
  if (!args.url || !args.token) throw new Error('--url and --token are required');
  args.runs = Number(args.runs);
  if (!(args.runs >= 1)) throw new Error('--runs must be >= 1');
  return args;
}

// What each page shows, and how many of it the API says there are now.
const PAGES = {
  incidents: {
    hash: '#/incidents',
    selector: 'tr[data-incident-id]',
    api: '/api/v1/incidents?',  // prefix of the page's list request
    // The page's default: firing incidents, at most 2000 (web/js/incidents.js).
    expected: async (get) => Math.min(2000, (await get('/api/v1/incidents?state=firing&limit=10000')).incidents.length),
  },
  nodes: {
    hash: '#/nodes',
    selector: '.node[data-node]',
    api: '/api/v1/nodes',
    expected: async (get) => (await get('/api/v1/nodes')).nodes.length,
  },
  jobs: {
    hash: '#/jobs',
    selector: 'tr[data-job]',
    api: '/api/v1/jobs',
    expected: async (get) => (await get('/api/v1/jobs')).jobs.length,
    extraSelector: '.spark canvas',
    extraPerRow: 3,
  },
};

// Installed before the page's scripts: records when `selector` first
// matches `expected` elements (and `extraSelector` extraExpected).
function probe({ selector, expected, extraSelector, extraExpected }) {
  const state = { rows: null, painted: null, extra: null, count: 0 };
  window.__uiBench = state;
  const observer = new MutationObserver(() => {
    if (state.rows === null) {
      state.count = document.querySelectorAll(selector).length;
      if (state.count >= expected) {
        state.rows = performance.now();
        requestAnimationFrame(() => {
          const channel = new MessageChannel();
          channel.port1.onmessage = () => { state.painted = performance.now(); };
          channel.port2.postMessage(0);
        });
      }
    }
    if (extraSelector && state.extra === null &&
        document.querySelectorAll(extraSelector).length >= extraExpected) {
      state.extra = performance.now();
    }
    if (state.rows !== null && (!extraSelector || state.extra !== null)) observer.disconnect();
  });
  observer.observe(document, { childList: true, subtree: true });
}

function median(values) {
  const v = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (!v.length) return NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}
const max = (values) => Math.max(...values.filter(Number.isFinite));
const ms = (x) => (Number.isFinite(x) ? x.toFixed(0).padStart(6) : '     -');

// One load of `page` on a fresh tab; returns the figures above.
async function loadOnce(context, url, name, page, expected, cold) {
  const tab = await context.newPage();
  const errors = [];
  tab.on('pageerror', (e) => errors.push(e.message));
  try {
    const cdp = await context.newCDPSession(tab);
    if (cold) await cdp.send('Network.clearBrowserCache');
    await cdp.send('Performance.enable');
    const extraExpected = page.extraSelector ? page.extraPerRow * expected : 0;
    await tab.addInitScript(probe, { selector: page.selector, expected, extraSelector: page.extraSelector, extraExpected });
    await tab.goto(`${url}/${page.hash}`, { waitUntil: 'commit' });
    await tab.waitForFunction(() => window.__uiBench && window.__uiBench.painted !== null,
      null, { timeout: LOAD_TIMEOUT_MS, polling: 50 }).catch(async () => {
      const shown = await tab.evaluate(() => window.__uiBench?.count).catch(() => '?');
      throw new Error(`${shown} of ${expected} rows after ${LOAD_TIMEOUT_MS / 1000} s`);
    });
    if (page.extraSelector) {
      // Sparklines are drawn after the rows; give them a few seconds more.
      await tab.waitForFunction(() => window.__uiBench.extra !== null, null, { timeout: 5_000, polling: 50 })
        .catch(() => {});
    }
    await tab.waitForFunction(() => performance.getEntriesByType('navigation')[0]?.loadEventEnd > 0,
      null, { timeout: LOAD_TIMEOUT_MS, polling: 50 });
    const r = await tab.evaluate((apiPrefix) => {
      const nav = performance.getEntriesByType('navigation')[0];
      const api = performance.getEntriesByType('resource').find((e) => {
        const u = new URL(e.name);
        return (u.pathname + u.search).startsWith(apiPrefix);
      });
      const s = window.__uiBench;
      return {
        rows: s.rows, painted: s.painted, extra: s.extra, count: s.count,
        dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
        api_start: api?.startTime, api_ttfb: api?.responseStart, api_end: api?.responseEnd,
        api_bytes: api?.decodedBodySize, requests: performance.getEntriesByType('resource').length,
      };
    }, page.api);
    const { metrics } = await cdp.send('Performance.getMetrics');
    const metric = (m) => 1000 * metrics.find((x) => x.name === m).value;
    r.script = metric('ScriptDuration');
    r.style = metric('RecalcStyleDuration');
    r.layout = metric('LayoutDuration');
    if (errors.length) throw new Error(`${name}: page error: ${errors.join('; ')}`);
    return r;
  } finally {
    await tab.close();
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const auth = { Authorization: `Bearer ${args.token}` };
  const get = async (path) => {
    const res = await fetch(args.url + path, { headers: auth });
    if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  const names = args.pages.split(',');
  for (const n of names) if (!PAGES[n]) throw new Error(`unknown page ${n} (known: ${Object.keys(PAGES).join(', ')})`);

  const encoding = args['accept-encoding'];
  const browser = await launchBrowser({
    viewport: DESKTOP, ...(encoding ? { extraHTTPHeaders: { 'Accept-Encoding': encoding } } : {}),
  });
  const results = [];
  try {
    const signIn = await browser.context.request.post(`${args.url}/api/v1/session`, { data: { token: args.token } });
    if (!signIn.ok()) throw new Error(`sign-in: ${signIn.status()} ${await signIn.text()}`);
    console.log('mode  page       run  rows   paint  extra    dcl   load  api_start api_ttfb api_end  script  style layout  api_KiB  count');
    for (const mode of ['cold', 'warm']) {
      for (const name of names) {
        const page = PAGES[name];
        if (mode === 'warm') await loadOnce(browser.context, args.url, name, page, await page.expected(get), false);
        for (let run = 1; run <= args.runs; run++) {
          let r;
          for (let attempt = 1; ; attempt++) {
            const expected = await page.expected(get);
            try {
              r = await loadOnce(browser.context, args.url, name, page, expected, mode === 'cold');
              r.expected = expected;
              break;
            } catch (e) {
              if (attempt >= 2) throw new Error(`${name} (${mode}) run ${run}: ${e.message} (expected ${expected} rows)`);
              console.log(`  retry ${name} run ${run}: ${e.message.split('\n')[0]}`);
            }
          }
          results.push({ mode, page: name, run, ...r });
          console.log(`${mode}  ${name.padEnd(9)} ${String(run).padStart(3)} ${ms(r.rows)} ${ms(r.painted)} ${ms(r.extra)} ` +
            `${ms(r.dcl)} ${ms(r.load)}    ${ms(r.api_start)}   ${ms(r.api_ttfb)}  ${ms(r.api_end)} ` +
            `${ms(r.script)} ${ms(r.style)} ${ms(r.layout)} ` +
            `${String(Math.round((r.api_bytes || 0) / 1024)).padStart(7)}  ${r.count}/${r.expected}`);
        }
      }
    }
  } finally {
    await browser.close();
  }

  console.log(`\nsummary (ms after navigation start; median / max of ${args.runs} runs)`);
  const columns = ['rows', 'painted', 'extra', 'dcl', 'load', 'api_ttfb', 'api_end', 'script', 'style', 'layout'];
  console.log(`mode  page       ${columns.map((c) => c.padEnd(16)).join('')}api_KiB`);
  const summary = [];
  for (const mode of ['cold', 'warm']) {
    for (const name of names) {
      const rs = results.filter((r) => r.mode === mode && r.page === name);
      const f = (k) => ({ median: median(rs.map((r) => r[k])), max: max(rs.map((r) => r[k])) });
      const s = { mode, page: name, ...Object.fromEntries(columns.map((c) => [c, f(c)])),
        api_kib: median(rs.map((r) => r.api_bytes)) / 1024, count: rs[0].count };
      summary.push(s);
      const mm = (x) => `${ms(x.median)} /${ms(x.max)}  `;
      console.log(`${mode}  ${name.padEnd(9)}  ${columns.map((c) => mm(s[c])).join('')}${s.api_kib.toFixed(0)}`);
    }
  }
  if (args.json) {
    writeFileSync(args.json, JSON.stringify({ runs: args.runs, acceptEncoding: encoding || null, results, summary }, null, 1));
  }
}

main().catch((e) => {
  console.error(`ui_load: ${e.message}`);
  process.exit(1);
});
