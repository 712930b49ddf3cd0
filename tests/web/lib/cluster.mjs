// A real Vigil cluster for the browser tests: vigil-server on loopback
// ports it picks itself (port 0), with its own temp data dir, API tokens and
// a short baseline learning, plus simulated vigil-agents streaming to it, one
// of them with a fault injected. Everything is stopped (SIGTERM, then
// SIGKILL) by stop(), and killed outright if the test process exits first.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, openSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

// The repository root (tests/web/lib/../../..).
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

// API tokens of the cluster's users (config "auth.tokens").
export const USERS = {
  operator: { name: 'olga', role: 'operator', token: 'op-token' },
  viewer: { name: 'vic', role: 'viewer', token: 'view-token' },
  admin: { name: 'ada', role: 'admin', token: 'admin-token' },
};

// The default cluster: job "gpt-pretrain" on n001 and n002, whose n001
// GPU 3 loses its cooling FAULT_AT seconds after the start, and a healthy
// job "bert-finetune" on n101. Measured on a 2-core box: with learn_steps 5,
// --start-step 1000 (past the detector's 200-step LR warm-up, which would
// otherwise keep every series out of learning), rewarm_seconds 0 (a run
// first seen mid-training is treated as a resume, which re-warms for 90 s
// by default before learning) and a 0.25 s interval, the
// baselines are learned ~8 s after the start (5 steps of ~1.7 s, and the
// 30 samples the detector needs at least); the GPU then warms ~0.2 C/s and
// crosses its learned band (mean + 3 x 2.5 C floor) ~14 s after the fault:
// a P3 "gpu_temperature_high" incident whose evidence is baseline_high on
// the gpu_temperature_celsius series, ~24 s after the start. The P2
// throttle incident follows ~50 s after the fault.
export const DEFAULT_FAULT = Object.freeze({
  scenario: 'thermal_throttle', job: 'gpt-pretrain', node: 'n001', gpu: 3,
  atSeconds: 10, kind: 'gpu_temperature_high',
});
export const DEFAULT_AGENTS = Object.freeze([
  { node: 'n001', job: 'gpt-pretrain', scenario: 'thermal_throttle' },
  { node: 'n002', job: 'gpt-pretrain', scenario: 'thermal_throttle' },
  { node: 'n101', job: 'bert-finetune', scenario: 'healthy' },
]);

// Polls `probe` (sync or async) every `intervalMs` until it returns a
// truthy value, which is returned. Throws "timed out after Ns waiting for
// WHAT" with the last value or error of the probe when `timeoutMs` passes.
export async function waitFor(what, probe, { timeoutMs = 30_000, intervalMs = 250 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await probe();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() >= deadline) {
      const detail = last instanceof Error ? last.message : JSON.stringify(last);
      throw new Error(`timed out after ${timeoutMs / 1000}s waiting for ${what} (last: ${detail})`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

// The build directory: `build` argument, else $VIGIL_BUILD, else "build",
// relative to the repository root. Throws when its binaries are missing.
export function buildDir(build) {
  const dir = resolve(REPO_ROOT, build || process.env.VIGIL_BUILD || 'build');
  for (const bin of ['server/vigil-server', 'agent/vigil-agent']) {
    if (!existsSync(join(dir, bin))) {
      throw new Error(`${join(dir, bin)} not found: build it or set VIGIL_BUILD to the build directory`);
    }
  }
  return dir;
}

const live = new Set();  // child processes not yet reaped, of every cluster
const workDirs = new Set();  // work dirs of clusters not yet stopped
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
  if (!process.env.KEEP) for (const d of workDirs) rmSync(d, { recursive: true, force: true });
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => process.exit(128 + (sig === 'SIGINT' ? 2 : 15)));
}

function startProcess(cmd, args, logFile) {
  const fd = openSync(logFile, 'a');
  const child = spawn(cmd, args, { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  live.add(child);
  child.exited = new Promise((r) => child.once('exit', (code, signal) => {
    live.delete(child);
    r({ code, signal });
  }));
  return child;
}

// SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone.
async function stopProcess(child, graceMs = 5_000) {
  if (!live.has(child)) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await child.exited;
  clearTimeout(timer);
}

function tail(file, lines) {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines - 1).join('\n');
  } catch (e) {
    return `(cannot read ${file}: ${e.message})`;
  }
}

// Starts the server and the agents. Options (all optional):
//   build: build directory (see buildDir); learnSteps: detection.learn_steps
//   (5); interval: agent tick in seconds (0.25); faultAt: seconds after the
//   agents' start at which the fault begins (DEFAULT_FAULT.atSeconds);
//   agents: [{node, job, scenario, faultAt?}] (DEFAULT_AGENTS); an agent
//   whose scenario is not the fault's starts its own scenario's fault on
//   itself `faultAt` seconds after the start (the kind's default, often
//   120 s, without it).
// Resolves to a Cluster (below) once /healthz answers; throws with the tail
// of the server log when the server does not come up within 20 s.
export async function startCluster(opts = {}) {
  const build = buildDir(opts.build);
  const work = mkdtempSync(join(tmpdir(), 'vigil-web-e2e-'));
  workDirs.add(work);
  const serverLog = join(work, 'server.log');
  const sha = (t) => createHash('sha256').update(t).digest('hex');
  const config = {
    data_dir: join(work, 'data'),
    grpc_listen: '127.0.0.1:0',
    http_listen: '127.0.0.1:0',
    detection: { learn_steps: opts.learnSteps ?? 5, rewarm_seconds: 0 },
    auth: {
      anonymous_read: false,
      tokens: Object.values(USERS).map((u) => ({ name: u.name, role: u.role, sha256: sha(u.token) })),
    },
  };
  writeFileSync(join(work, 'server.json'), JSON.stringify(config, null, 1));
  const server = startProcess(join(build, 'server/vigil-server'), [
    '--config', join(work, 'server.json'), '--grpc-insecure', '--web-dir', join(REPO_ROOT, 'web'),
  ], serverLog);
  const procs = [server];
  const cluster = {
    work, serverLog, build,
    fault: { ...DEFAULT_FAULT, atSeconds: opts.faultAt ?? DEFAULT_FAULT.atSeconds },
    // Base URL of the HTTP API and UI, e.g. http://127.0.0.1:41234.
    url: '',
    grpc: '',
    // Unix seconds at which the agents were started.
    startedAt: 0,
    // The last `lines` lines of the server log (and of each agent log).
    logs(lines = 40) {
      const agents = (opts.agents || DEFAULT_AGENTS).map((a) =>
        `--- agent ${a.node} (tail)\n${tail(join(work, `agent-${a.node}.log`), 5)}`);
      return [`--- ${serverLog} (tail)\n${tail(serverLog, lines)}`, ...agents].join('\n');
    },
    // Calls the API as `user` (a USERS entry, default operator); returns
    // {status, body} with the body parsed as JSON (null if it is not).
    async api(path, { user = USERS.operator, method = 'GET', body } = {}) {
      const res = await fetch(cluster.url + path, {
        method,
        headers: { Authorization: `Bearer ${user.token}`, 'Content-Type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      let json = null;
      try { json = JSON.parse(text); } catch { /* not JSON */ }
      return { status: res.status, body: json, text };
    },
    // Incidents (state=all) as the operator sees them; throws on a non-200.
    async incidents() {
      const r = await cluster.api('/api/v1/incidents?state=all&limit=1000');
      if (r.status !== 200) throw new Error(`GET /api/v1/incidents: ${r.status} ${r.text}`);
      return r.body.incidents;
    },
    // The incident the injected fault raises (kind fault.kind on fault.node),
    // or undefined.
    async faultIncident() {
      return (await cluster.incidents()).find((i) =>
        i.kind === cluster.fault.kind && i.node === cluster.fault.node);
    },
    // Stops the server only (SIGTERM, then SIGKILL); the agents keep
    // retrying.
    async stopServer() { await stopProcess(server); },
    // Stops everything and removes the work dir (kept when $KEEP is set).
    async stop() {
      await Promise.all(procs.map((p) => stopProcess(p)));
      workDirs.delete(work);
      if (!process.env.KEEP) rmSync(work, { recursive: true, force: true });
      else console.error(`cluster: kept ${work}`);
    },
  };
  try {
    // "vigil-server: ingest (...) on 127.0.0.1:P, HTTP API on http://127.0.0.1:Q/ ..."
    const m = await waitFor('vigil-server to report its ports', () => {
      if (!live.has(server)) throw new Error('vigil-server exited');
      return /ingest .* on (\S+), HTTP API on (http:\/\/[^/\s]+)\//.exec(readFileSync(serverLog, 'utf8'));
    }, { timeoutMs: 20_000, intervalMs: 100 });
    cluster.grpc = m[1];
    cluster.url = m[2];
    await waitFor(`${cluster.url}/healthz`, async () => (await fetch(`${cluster.url}/healthz`)).ok,
      { timeoutMs: 20_000, intervalMs: 100 });
    const interval = String(opts.interval ?? 0.25);
    cluster.startedAt = Date.now() / 1000;
    for (const a of opts.agents || DEFAULT_AGENTS) {
      const args = ['--server', cluster.grpc, '--insecure', '--node', a.node, '--job', a.job,
        `--simulate=${a.scenario}`, '--interval', interval, '--start-step', '1000'];
      if (a.scenario === cluster.fault.scenario) {
        args.push('--fault-node', cluster.fault.node, '--fault-gpu', String(cluster.fault.gpu),
          '--fault-at', String(cluster.fault.atSeconds));
      } else if (a.faultAt != null) {
        args.push('--fault-at', String(a.faultAt));
      }
      procs.push(startProcess(join(build, 'agent/vigil-agent'), args, join(work, `agent-${a.node}.log`)));
    }
  } catch (e) {
    const logs = cluster.logs();
    await cluster.stop();
    throw new Error(`${e.message}\n${logs}`);
  }
  return cluster;
}
