#!/usr/bin/env python3
"""Vigil reliability drills (issue 13): real binaries on loopback.

  tests/drills/drills.py --build build --short            # the CI form (ctest drill_*)
  tests/drills/drills.py --build build --write-doc docs/RELIABILITY.md   # the full form
  tests/drills/drills.py --build build --short --only sigkill,partition

Drills: sigkill, partition, receivers, disk, soak (see docs/RELIABILITY.md,
which --write-doc regenerates from the results of the run). --build is a
CMake build directory (binaries under server/, agent/, actuator/, ...) or a
directory holding the binaries themselves. Exit status: 0 when every check
of every drill run passed, 1 otherwise, 2 on bad usage.
"""
import argparse
import collections
import datetime
import json
import os
import platform
import random
import shlex
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib  # noqa: E402
from lib import (Actuator, Agent, DrillError, Env, Receivers, Server, Skip,  # noqa: E402
                 TcpProxy, log, pct, server_config, wait_until)

ORDER = ["sigkill", "partition", "receivers", "disk", "soak"]


class Result:
    def __init__(self, name, title):
        self.name, self.title = name, title
        self.injected, self.times, self.load = "", "", ""
        self.checks = []       # (name, ok, detail)
        self.facts = []        # (name, value)
        self.notes = []
        self.skipped = None
        self.error = None
        self.seconds = 0.0

    def check(self, name, ok, detail=""):
        self.checks.append((name, bool(ok), detail))
        log(f"  {'PASS' if ok else 'FAIL'} {name}: {detail}")
        return ok

    def fact(self, name, value):
        self.facts.append((name, value))
        log(f"  {name}: {value}")

    @property
    def passed(self):
        return self.error is None and self.skipped is None and all(ok for _, ok, _ in self.checks)

    @property
    def status(self):
        if self.skipped:
            return "SKIPPED"
        if self.error:
            return "ERROR"
        return "PASS" if self.passed else "FAIL"


# --- shared checks ----------------------------------------------------------

def check_exactly_once(res, server, agents, label="acked samples"):
    """Every tick an agent took is stored once, in order: one point per tick
    on each of its GPU 0 power series (one series per node/job)."""
    bad, total = [], 0
    for a in agents:
        # One series per (node, job, gpu): pick the one of this agent's job.
        series = server.api(f"/api/v1/series?metric=gpu_power_watts&node={a.node}")["series"]
        ts = None
        for s in series:
            if s["labels"].get("job") == a.job and s["labels"].get("gpu") == "0":
                ts = [p[0] for p in server.api(
                    f"/api/v1/query?series={s['id']}&from=0&to=4102444800")["points"]]
        ticks = a.exit["ticks"]
        total += ticks
        if ts is None:
            bad.append(f"{a.node}/{a.job}: no gpu 0 power series")
        elif a.exit["pending"] != 0:
            bad.append(f"{a.node}/{a.job}: agent exited with {a.exit['pending']} pending")
        elif len(ts) != len(set(ts)):
            bad.append(f"{a.node}/{a.job}: {len(ts) - len(set(ts))} timestamps twice")
        elif ts != sorted(ts):
            bad.append(f"{a.node}/{a.job}: out of order")
        elif len(ts) != ticks:
            bad.append(f"{a.node}/{a.job}: {len(ts)} points stored, {ticks} ticks acked")
    res.check(f"every {label} stored exactly once, in order", not bad,
              f"{len(agents)} agents, {total} ticks acked" + ("; " + "; ".join(bad[:6]) if bad else ""))
    return total


def wait_drained(agents, timeout):
    return wait_until(lambda: all(a.metric("vigil_agent_pending_batches", 1) == 0 for a in agents),
                      timeout, 1)


def wait_outbox_empty(server, timeout, settle=4):
    """Waits until nothing is pending, `settle` seconds in a row."""
    deadline = time.time() + timeout
    quiet_since = None
    while time.time() < deadline:
        try:
            pending = sum(d["state"] == "pending" for d in server.deliveries())
        except DrillError:
            pending = -1
        if pending == 0:
            quiet_since = quiet_since or time.time()
            if time.time() - quiet_since >= settle:
                return True
        else:
            quiet_since = None
        time.sleep(1)
    return False


SEV_RANK = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
EXPECTED_KIND = {"ecc_dbe": ("ecc_double_bit",), "loss_nan": ("loss_nan", "grad_nan"),
                 "xid_storm": ("xid_app_error", "xid_gpu_error", "xid", "xid_fatal"),
                 "gpu_fell_off_bus": ("xid_fatal", "gpu_drop")}


def check_pages(res, server, receivers, kills, seen_deliveries, allow_dup_per_crash=True):
    """Deliveries: nothing seen is lost, all delivered, each received; duplicates
    only under the same Idempotency-Key and only explained by a crash."""
    final = {d["key"]: d for d in server.deliveries()}
    lost = sorted(set(seen_deliveries) - set(final))
    res.check("no page or action delivery lost", not lost,
              f"{len(seen_deliveries)} seen during the run, {len(final)} at the end"
              + (f"; missing {lost[:5]}" if lost else ""))
    states = collections.Counter(d["state"] for d in final.values())
    res.check("every delivery delivered", states.get("pending", 0) == 0 and states.get("failed", 0) == 0,
              dict(states))
    receipts = [r for r in receivers.receipts()
                if r.get("service") not in ("actuator", "fault") and 200 <= r.get("status", 200) < 300]
    by_key = collections.defaultdict(list)
    for r in receipts:
        by_key[r["idempotency_key"]].append(r["time"])
    pages = {k: d for k, d in final.items() if d["kind"] == "page"}
    unreceived = [k for k, d in pages.items() if d["state"] == "delivered" and k not in by_key]
    res.check("every delivered page received at least once", not unreceived,
              f"{len(pages)} pages, {len(by_key)} distinct keys received"
              + (f"; never received: {unreceived[:5]}" if unreceived else ""))
    stray = [k for k in by_key if k not in final]
    res.check("every receipt carries a page's Idempotency-Key", not stray,
              f"{len(receipts)} receipts" + (f"; unknown keys: {stray[:5]}" if stray else ""))
    dups, unexplained = 0, []
    for k, times in by_key.items():
        extra = len(times) - 1
        if extra <= 0:
            continue
        dups += extra
        crashes = sum(1 for t in kills if min(times) - 1 <= t <= max(times) + 1)
        if not allow_dup_per_crash or extra > crashes:
            unexplained.append(f"{k} x{len(times)} ({crashes} crashes in between)")
    res.fact("duplicate receipts (same key)", f"{dups} over {len(kills)} crashes")
    res.check("duplicates at most one per crash, same key" if allow_dup_per_crash
              else "no duplicates (no crash)", not unexplained,
              f"{dups} duplicates" + (f"; {unexplained[:5]}" if unexplained else ""))
    return final


def check_actions(res, server, actuator, seen_actions):
    actions = server.actions()
    final = {a["id"]: a for a in actions}
    lost = sorted(set(seen_actions) - set(final))
    res.check("no action lost", not lost, f"{len(seen_actions)} seen, {len(final)} at the end"
              + (f"; missing {lost}" if lost else ""))
    per_key = collections.Counter(a["key"] for a in actions)
    twice_key = [k for k, n in per_key.items() if n > 1]
    started = collections.Counter(r["id"] for r in actuator.records() if r.get("result") == "started")
    done = collections.Counter(r["id"] for r in actuator.records() if r.get("result") == "done")
    twice = [i for i, n in started.items() if n > 1]
    res.check("no action performed twice", not twice and not twice_key,
              f"{len(actions)} actions, {sum(started.values())} performed by the actuator"
              + (f"; performed twice: {twice}" if twice else "")
              + (f"; one decision made into two actions: {twice_key}" if twice_key else ""))
    # P1 actions wait for an operator (pending_approval) by design; every
    # action Vigil decided to run must be done, and recorded done.
    to_run = [a for a in actions if a.get("verdict") == "run"]
    not_done = [a["id"] for a in to_run if a["state"] == "done" and a["id"] not in done]
    unfinished = [a["id"] + ":" + a["state"] for a in to_run if a["state"] != "done"]
    waiting = sum(a["state"] == "pending_approval" for a in actions)
    res.check("every action Vigil ran is done at the actuator", not not_done and not unfinished,
              f"{len(to_run)} to run, {sum(done.values())} done in the audit log, "
              f"{waiting} waiting for approval (P1)"
              + (f"; not in the audit log: {not_done}" if not_done else "")
              + (f"; not done: {unfinished}" if unfinished else ""))
    return actions


class Watcher:
    """Remembers every incident, delivery and action the API ever showed."""

    def __init__(self, server):
        self.server = server
        self.incidents, self.deliveries, self.actions = {}, {}, {}

    def poll(self):
        try:
            for i in self.server.incidents():
                self.incidents.setdefault(i["id"], i)
            for d in self.server.deliveries():
                self.deliveries.setdefault(d["key"], d)
            for a in self.server.actions():
                self.actions.setdefault(a["id"], a)
        except DrillError:
            pass


def check_incidents(res, server, watcher, fault_agents, kills=()):
    final = {i["id"]: i for i in server.incidents()}
    lost = sorted(set(watcher.incidents) - set(final))
    res.check("no incident lost", not lost, f"{len(watcher.incidents)} seen, {len(final)} at the end"
              + (f"; missing {lost}" if lost else ""))
    missing, doubled = [], []
    for a in fault_agents:
        kinds = EXPECTED_KIND.get(a.scenario, ())
        mine = [i for i in final.values() if i.get("job") == a.job and i["kind"] in kinds]
        if not mine:
            missing.append(f"{a.scenario} on {a.node} ({a.job})")
        per_kind = collections.defaultdict(list)
        for i in mine:
            per_kind[i["kind"]].append(i["ts"])
        for k, ts in per_kind.items():
            if len(ts) > 1:
                later = sorted(ts)[1:]
                near = sum(any(0 <= t - kt <= 5 for kt in kills) for t in later)
                doubled.append(f"{k} x{len(ts)} in {a.job} ({near} of the {len(later)} extra "
                               f"opened within 5 s after a restart)")
    res.check("every injected fault raised its incident", not missing,
              f"{len(fault_agents)} faults" + (f"; none for {missing}" if missing else ""))
    res.check("no incident opened twice for one fault", not doubled,
              "; ".join(doubled))
    others = collections.Counter((i["kind"], i.get("job")) for i in final.values())
    again = [f"{k} x{n} in {j}" for (k, j), n in others.items() if n > 1]
    res.fact("incidents by (kind, job) opened more than once", "; ".join(again) or "none")
    return final


# --- drill 1: server SIGKILL under load ----------------------------------------

def drill_sigkill(env, res, short, seed):
    r = random.Random(seed)
    kills_wanted = 6 if short else 24
    res.injected = ("SIGKILL of vigil-server at random moments (uniform 2-7 s apart, restarted "
                    "0-1.5 s later on the same data dir) while simulated agents stream at 1 Hz "
                    "and faults raise P0 incidents, pages and actuator actions")
    actuator = Actuator(env)
    actuator.start()
    receivers = Receivers(env)
    receivers.start()
    cfg = server_config(env, env.dir / "data", receivers.url, actuator.url + "/v1/actions",
                        actuator.secret)
    server = Server(env, cfg)
    server.start()
    base = [Agent(env, server.grpc, f"b{i:02d}", "steady", seed=seed) for i in range(4)]
    scenarios = ["ecc_dbe", "loss_nan", "xid_storm", "ecc_dbe"]
    waves = 3 if short else 8
    fault_agents, all_agents = [], list(base)
    watcher = Watcher(server)
    kills, restart_s = [], []

    def start_wave(w):
        sc = scenarios[w % len(scenarios)]
        job = f"wave{w}-{sc}"
        at = r.randint(3, 8)
        for n in range(2):
            a = Agent(env, server.grpc, f"w{w}n{n}", job, scenario=sc, fault_node=f"w{w}n0",
                      fault_at=at, seed=seed + w)
            all_agents.append(a)
            if n == 0:
                fault_agents.append(a)
        log(f"  wave {w}: {sc} on w{w}n0 at +{at} s")

    time.sleep(3)
    next_wave = 0
    for k in range(kills_wanted):
        if next_wave < waves and k >= next_wave * kills_wanted // waves:
            start_wave(next_wave)
            next_wave += 1
        gap = r.uniform(2, 7)
        t_end = time.time() + gap
        while time.time() < t_end:
            watcher.poll()
            time.sleep(min(0.5, max(0, t_end - time.time())))
        server.sigkill()
        kills.append(time.time())
        time.sleep(r.uniform(0, 1.5))
        restart_s.append(server.start())
    while next_wave < waves:
        start_wave(next_wave)
        next_wave += 1
    res.times = f"{len(kills)} SIGKILLs in one run"
    res.load = (f"{len(all_agents)} simulated 8-GPU nodes (vigil-agent --simulate, disk spool), "
                f"{len(fault_agents)} faults: " + ", ".join(sorted({a.scenario for a in fault_agents})))
    log(f"  {len(kills)} kills done; letting faults fire and the outbox drain")
    # Let every wave's fault fire and its escalation (2 rounds, 12 s apart) run out.
    wait_until(lambda: (watcher.poll() or True) and all(
        any(i.get("job") == a.job and i["kind"] in EXPECTED_KIND[a.scenario]
            for i in watcher.incidents.values()) for a in fault_agents), 60, 1)
    time.sleep(30)
    watcher.poll()
    drained = wait_drained(all_agents, 90)
    res.check("agents' spools drained after the last restart", drained,
              f"{sum(1 for a in all_agents if a.metric('vigil_agent_pending_batches', 1) == 0)}"
              f"/{len(all_agents)} agents with nothing pending")
    empty = wait_outbox_empty(server, 90)
    res.check("outbox drained", empty, "")
    watcher.poll()
    for a in all_agents:
        a.stop()
    res.fact("kill times (s after the first)", ", ".join(f"{t - kills[0]:.1f}" for t in kills))
    res.fact("restart time (s) median / max",
             f"{pct(restart_s, 50):.2f} / {max(restart_s):.2f}")
    check_exactly_once(res, server, all_agents)
    check_incidents(res, server, watcher, fault_agents, kills)
    check_pages(res, server, receivers, kills, watcher.deliveries)
    check_actions(res, server, actuator, watcher.actions)
    m = server.metrics()
    res.fact("server: samples ingested in the last process", int(m.get("vigil_ingest_samples_total", 0)))


DRILLS = {
    "sigkill": ("Server SIGKILL under load", drill_sigkill),
}


# --- runner -----------------------------------------------------------------

def run_drill(name, bins, args):
    title, fn = DRILLS[name]
    res = Result(name, title)
    log(f"=== drill {name}: {title} ({'short' if args.short else 'full'})")
    env = Env(name, bins, keep=args.keep)
    t0 = time.time()
    try:
        fn(env, res, args.short, args.seed)
    except Skip as e:
        res.skipped = str(e)
        log(f"  SKIPPED: {e}")
    except Exception as e:  # noqa: BLE001 - every failure is reported
        res.error = f"{type(e).__name__}: {e}"
        log(f"  ERROR: {res.error}")
        traceback.print_exc()
    finally:
        res.seconds = time.time() - t0
        env.failed = not res.passed and res.skipped is None
        env.cleanup()
    log(f"=== drill {name}: {res.status} in {res.seconds:.0f} s")
    return res


def md_escape(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def write_doc(path, results, args, command):
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    form = "short (CI)" if args.short else "full"
    lines = [
        "# Reliability drills",
        "",
        "Generated by `tests/drills/drills.py --write-doc` — do not edit by hand; run the drills "
        "again instead. Each drill starts the real binaries (vigil-server, vigil-agent, "
        "vigil-actuator with its noop backend, and the fake receivers of "
        "`tests/e2e/receivers.py`) on loopback with temporary data directories, injects its "
        "failure, and checks the outcome through the server's HTTP API, the agents' "
        "`/metrics` and exit lines, the receivers' receipts (with their `Idempotency-Key`) "
        "and the actuator's audit log.",
        "",
        f"- Run: {today}, {form} form, on {platform.node()} ({os.cpu_count()} CPUs, "
        f"{platform.system()} {platform.release()}).",
        f"- Command: `{command}`",
        "- Short form (CI, `ctest -R drill_`, also part of `.ci/run`): "
        "`tests/drills/drills.py --build build --short` (about 5 minutes).",
        "- Full form (issue 13's durations: >= 20 kills, 30 min partition, 10 min receiver "
        "outage, 30 min soak; about 80 minutes): "
        "`tests/drills/drills.py --build build --write-doc docs/RELIABILITY.md` "
        "(as root for the disk drill).",
        "",
        "| drill | result | injected | checks passed | time |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        passed = sum(ok for _, ok, _ in r.checks)
        lines.append(f"| [{r.name}](#{r.name}) | **{r.status}** | {md_escape(r.times or '-')} | "
                     f"{passed}/{len(r.checks)} | {r.seconds:.0f} s |")
    for r in results:
        lines += ["", f"## {r.name}", "", f"**{r.title}** — {r.status}, {r.seconds:.0f} s.", ""]
        if r.injected:
            lines.append(f"- Injected: {r.injected}.")
        if r.times:
            lines.append(f"- How many times: {r.times}.")
        if r.load:
            lines.append(f"- Load: {r.load}.")
        if r.skipped:
            lines.append(f"- Skipped: {r.skipped}")
        if r.error:
            lines.append(f"- The drill broke off: `{md_escape(r.error)}`")
        if r.checks:
            lines += ["", "| check | result | detail |", "|---|---|---|"]
            for name, ok, detail in r.checks:
                lines.append(f"| {md_escape(name)} | {'pass' if ok else '**FAIL**'} | "
                             f"{md_escape(detail)} |")
        if r.facts:
            lines += ["", "| measured | value |", "|---|---|"]
            for name, value in r.facts:
                lines.append(f"| {md_escape(name)} | {md_escape(value)} |")
        for n in r.notes:
            lines += ["", n]
    Path(path).write_text("\n".join(lines) + "\n")
    log(f"wrote {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=str(lib.SRC / "build"),
                   help="CMake build dir or a dir holding the binaries (default: build)")
    p.add_argument("--short", action="store_true", help="the CI form (minutes, not hours)")
    p.add_argument("--only", default="", help="comma-separated drills: " + ",".join(ORDER))
    p.add_argument("--write-doc", default="", help="write the results as Markdown (docs/RELIABILITY.md)")
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--keep", action="store_true", help="keep every drill's temp dir")
    p.add_argument("--soak-nodes", type=int, default=0, help="soak: simulated nodes (0: the form's default)")
    p.add_argument("--soak-minutes", type=float, default=0, help="soak: duration (0: the form's default)")
    p.add_argument("--partition-seconds", type=float, default=0, help="partition: cut length (0: default)")
    p.add_argument("--outage-seconds", type=float, default=0, help="receivers: outage length (0: default)")
    args = p.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or ORDER
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        p.error(f"unknown drill(s) {unknown}; known: {ORDER}")
    names = [n for n in names if n in DRILLS]
    try:
        bins = {b: lib.find_binary(args.build, b) for b in ("vigil-server", "vigil-agent",
                                                             "vigil-actuator")}
    except DrillError as e:
        print(f"drills: {e}", file=sys.stderr)
        return 2
    global OPTS
    OPTS = args
    log(f"drills {names}, {'short' if args.short else 'full'} form, seed {args.seed}, binaries from {args.build}")
    results = [run_drill(n, bins, args) for n in names]
    print("\nsummary:")
    for r in results:
        passed = sum(ok for _, ok, _ in r.checks)
        print(f"  {r.name:10s} {r.status:7s} {passed}/{len(r.checks)} checks  {r.seconds:5.0f} s"
              + (f"  ({r.skipped or r.error})" if r.skipped or r.error else ""))
        for name, ok, detail in r.checks:
            if not ok:
                print(f"      FAIL {name}: {detail}")
    if args.write_doc:
        argv = ["tests/drills/drills.py"] + [a for a in sys.argv[1:]]
        write_doc(args.write_doc, results, args, " ".join(shlex.quote(a) for a in argv))
    return 0 if all(r.passed or r.skipped for r in results) else 1


OPTS = None

if __name__ == "__main__":
    sys.exit(main())
