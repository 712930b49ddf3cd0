#!/usr/bin/env python3
"""Vigil reliability drills (issue 13): real binaries on loopback.

  tests/drills/drills.py --build build --short            # the CI form (ctest drill_*)
  tests/drills/drills.py --build build --write-doc docs/RELIABILITY.md   # the full form
  tests/drills/drills.py --build build --short --only sigkill,partition

Drills: sigkill, partition, receivers, disk, soak, cluster (see docs/RELIABILITY.md,
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
import re
import shlex
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib  # noqa: E402
from cluster_drill import drill_cluster  # noqa: E402
from lib import (Actuator, Agent, DrillError, Env, Receivers, Server, Skip,  # noqa: E402
                 TcpProxy, fill_disk, log, pct, server_config, wait_until)

ORDER = ["sigkill", "partition", "receivers", "disk", "soak", "cluster"]


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
    # One fault, one action per kind and target: a restart must not make a
    # new incident for the same fault and act on its target again.
    per_target = collections.Counter((a["action"], a.get("job", ""), a.get("node", ""))
                                     for a in actions if a.get("verdict") == "run")
    again = [f"{k[0]} {k[1]}/{k[2]} x{n}" for k, n in per_target.items() if n > 1]
    res.check("no target acted on twice (same action, job and node)", not again,
              "; ".join(again) or f"{len(per_target)} targets")
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
        for i in final.values():  # every kind the fault raised, not only the main one
            if i.get("job") == a.job:
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
    time.sleep(15)  # the second escalation round (12 s)
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


# --- drill 2: partition -------------------------------------------------------

SILENCE_KINDS = ("node_down", "idle_node_down", "job_hang", "job_unreachable")


def drill_partition(env, res, short, seed):
    cut = OPTS.partition_seconds or (60 if short else 1800)
    res.injected = ("a TCP proxy between every agent and the server black-holes all traffic "
                    "(connections accepted, nothing forwarded or answered either way, as behind "
                    "a dead link), then lets it flow again; the server and detection keep running")
    res.times = f"1 cut of {cut:.0f} s"
    server = Server(env, server_config(env, env.dir / "data"))
    server.start()
    proxy = TcpProxy(env, server.grpc)
    agents = [Agent(env, proxy.addr, f"p{i:02d}", f"pjob{i // 2}", seed=seed) for i in range(4)]
    res.load = "4 simulated 8-GPU nodes in 2 jobs at 1 Hz through the proxy, disk spools"
    if not wait_until(lambda: all(a.metric("vigil_agent_batches_acked_total", 0) >= 10 for a in agents), 60):
        raise DrillError("agents did not stream through the proxy")
    time.sleep(5)  # past the detector's first look at the nodes
    log(f"  cutting for {cut:.0f} s")
    proxy.cut()
    t_cut = time.time()
    peak = {}
    while time.time() - t_cut < cut:
        time.sleep(min(5, cut - (time.time() - t_cut)) if cut > 5 else cut)
        for a in agents:
            peak[a.node] = max(peak.get(a.node, 0), a.metric("vigil_agent_pending_batches", 0))
    m_before = server.metrics()
    res.check("the cut held back the agents' batches",
              all(v >= 0.8 * cut for v in peak.values()),
              f"pending batches at the end of the cut: {sorted(int(v) for v in peak.values())} "
              f"(>= {0.8 * cut:.0f} expected at 1 Hz)")
    proxy.restore()
    t_back = time.time()
    log("  restored")
    drained = wait_drained(agents, 60 + cut / 5)
    res.check("spools replayed after the cut", drained,
              f"drained in {time.time() - t_back:.1f} s" if drained else "still pending")
    time.sleep(10)  # the detector looks at the replayed frames and what follows them
    for a in agents:
        a.stop()
    m = server.metrics()
    check_exactly_once(res, server, agents, "tick spooled through the cut")
    ooo = m.get('vigil_ingest_dropped_samples_total{reason="out_of_order"}', 0)
    dup = m.get('vigil_ingest_dropped_samples_total{reason="duplicate"}', 0)
    res.check("replay in order: no sample dropped as out of order", ooo == 0,
              f"out_of_order drops {ooo:.0f}, duplicate (resent) drops {dup:.0f}")
    incidents = server.incidents()
    silent = [f"{i['id']} {i['kind']} {i.get('node') or i.get('nodes')} ({i.get('job')})"
              for i in incidents if i["kind"] in SILENCE_KINDS]
    res.check("no node_down (or hang) for nodes whose late frames came from the spool", not silent,
              "; ".join(silent) or f"{len(incidents)} incidents, none of {', '.join(SILENCE_KINDS)}")
    res.fact("other incidents", ", ".join(sorted(i["kind"] for i in incidents)) or "none")
    res.fact("proxy connections (agents reconnecting through the cut)", proxy.connections)
    res.fact("batches resent by the agents", sum(int(a.last_metrics.get("vigil_agent_batches_resent_total", 0)) for a in agents))


# --- drill 3: receivers and actuator down / 429 / 500 -------------------------

def token_bucket_violations(times, rate, start):
    """Replays request times through the server's bucket (capacity `rate`,
    refilled rate/60 per s, full at `start`); returns the requests sent
    without a token."""
    tokens, last, bad = float(rate), start, []
    for t in sorted(times):
        tokens = min(rate, tokens + max(0.0, t - last) * rate / 60)
        last = t
        if tokens < 0.95:
            bad.append(t)
        tokens = max(0.0, tokens - 1)
    return bad


def drill_receivers(env, res, short, seed):
    outage = OPTS.outage_seconds or (60 if short else 600)
    rate = 10
    actuator = Actuator(env)
    actuator.start()
    receivers = Receivers(env, forward_actions=actuator.url)
    cfg = server_config(env, env.dir / "data", receivers.url, receivers.url + "/v1/actions",
                        actuator.secret, rate_per_minute=rate)
    server = Server(env, cfg)
    server.start()
    t0 = time.time()
    phases = [("refused", "connection refused (no process)"), ("hang", "black hole (request read, never answered)"),
              ("429 3", "429 with Retry-After: 3"), ("500", "500")]
    res.injected = ("every receiver (Twilio SMS, Slack, PagerDuty) and the actuator (behind the same "
                    "stand-in, which forwards to it when healthy) fail for "
                    f"{outage:.0f} s in four phases — " + ", ".join(d for _, d in phases) +
                    " — while P2 and then P0 incidents page; then they answer normally")
    res.times = f"1 outage of {outage:.0f} s ({len(phases)} phases of {outage / len(phases):.0f} s)"
    watcher = Watcher(server)
    agents = [Agent(env, server.grpc, "x0", "rx-xid", "xid_storm", "x0", 3, seed=3),
              Agent(env, server.grpc, "x1", "rx-xid", "xid_storm", "x0", 3, seed=3),
              Agent(env, server.grpc, "e0", "rx-ecc", "ecc_dbe", "e0", 14, seed=seed),
              Agent(env, server.grpc, "l0", "rx-nan", "loss_nan", "l0", 16, seed=seed)]
    res.load = "4 simulated nodes: an XID storm (P2) at +3 s, a double-bit ECC error (P0) at +14 s, NaN loss (P0) at +16 s"
    for mode, _ in phases:
        if mode == "refused":
            receivers.stop()
        else:
            receivers.set_mode(mode)
            if receivers.proc is None:
                receivers.start()
        end = t0 + outage * (1 + [m for m, _ in phases].index(mode)) / len(phases)
        while time.time() < end:
            watcher.poll()
            time.sleep(0.5)
    pending_at_recovery = [d for d in server.deliveries() if d["state"] == "pending"]
    receivers.set_mode("ok")
    t_rec = time.time()
    log(f"  receivers healthy again; {len(pending_at_recovery)} deliveries pending")
    res.check("deliveries queued up during the outage", len(pending_at_recovery) >= 6,
              f"{len(pending_at_recovery)} pending when the receivers came back")
    time.sleep(15)  # the second escalation round (12 s) of the last incidents
    empty = wait_outbox_empty(server, 180)
    res.check("outbox drained after recovery", empty, "")
    watcher.poll()
    final = check_pages(res, server, receivers, [], watcher.deliveries, allow_dup_per_crash=False)
    # P0 first: of the pages that waited out the outage, per receiver, no
    # lower-severity page may be delivered before a P0 page.
    sev = {i["id"]: i["severity"] for i in server.incidents()}
    waiting = {d["key"]: d for d in pending_at_recovery if d["kind"] == "page"}
    firsts = {}
    for r in receivers.receipts():
        k = r["idempotency_key"]
        if k in waiting and 200 <= r.get("status", 200) < 300 and r["time"] >= t_rec - 0.5:
            firsts.setdefault(k, r["time"])
    if firsts:
        res.fact("pages waiting at recovery: all received within (s)",
                 f"{max(firsts.values()) - t_rec:.1f} ({len(firsts)} of {len(waiting)})")
    # A page's urgency is its incident's severity when it was enqueued (the
    # first word of its description, "P2 trigger via ..."): an incident that
    # rose to P0 later pages again at P0, its earlier P2 page stays P2.
    def page_severity(d):
        word = d.get("description", "").split(" ", 1)[0]
        return word if re.fullmatch(r"P[0-3]", word) else sev.get(d["incident_id"], "?")
    order_bad, orders = [], []
    for recv in sorted({d["receiver"] for d in waiting.values()}):
        seq = sorted((t, page_severity(waiting[k])) for k, t in firsts.items()
                     if waiting[k]["receiver"] == recv)
        sevs = [s for _, s in seq]
        orders.append(f"{recv}: {' '.join(sevs)}")
        if "P0" in sevs and any(s != "P0" for s in sevs[:max(i for i, s in enumerate(sevs) if s == "P0")]):
            order_bad.append(recv)
    res.check("P0 pages delivered first after the outage", not order_bad,
              "; ".join(orders) + (f" — lower severity before P0 at {order_bad}" if order_bad else ""))
    slack_times = [r["time"] for r in receivers.receipts() if r.get("path") == "/slack"]
    bad = token_bucket_violations(slack_times, rate, t0)
    per_min = collections.Counter(int((t - t0) // 60) for t in slack_times)
    res.check(f"rate limit respected (slack: rate_per_minute {rate}, token bucket replayed)", not bad,
              f"{len(slack_times)} requests (all answers), busiest minute {max(per_min.values(), default=0)}"
              + (f"; {len(bad)} sent without a token" if bad else ""))
    modes = collections.Counter(r.get("mode", "ok") for r in receivers.receipts())
    res.fact("requests seen by the stand-ins by mode", dict(modes))
    check_actions(res, server, actuator, watcher.actions)
    for a in agents:
        a.stop()


# --- drill 4: disk full and read-only data dir ----------------------------------

def storage_signals(server):
    """(ready status, ready body, health status, metrics, storage_degraded incidents)."""
    rs, rb = server.get("/readyz", timeout=3)
    hs, hb = server.get("/healthz", timeout=3)
    m = server.metrics()
    try:
        inc = [i for i in server.incidents() if i["kind"] == "storage_degraded"]
    except DrillError:
        inc = []
    return rs, rb, hs, hb, m, inc


def watch_fault(res, phase, server, agents, seconds=25):
    """Watches the loud signals of a storage fault for up to `seconds`;
    records one check per signal. Returns whether the server is alive."""
    t = time.time()
    seen = {}
    pend0 = sum(a.metric("vigil_agent_pending_batches", 0) for a in agents)
    rs = rb = hs = hb = None
    m = {}
    while time.time() - t < seconds:
        if not server.proc.alive():
            break
        rs, rb, hs, hb, m, inc = storage_signals(server)
        if rs == 503 and isinstance(rb, dict) and rb.get("ready") is False and rb.get("storage"):
            seen.setdefault("readyz", (time.time() - t, rb.get("storage")))
        if hs == 200 and isinstance(hb, dict) and hb.get("status") == "degraded":
            seen.setdefault("healthz", (time.time() - t, ""))
        if m.get("vigil_storage_healthy") == 0 and m.get("vigil_storage_write_errors_total", 0) > 0:
            seen.setdefault("metrics", (time.time() - t, m.get("vigil_storage_write_errors_total")))
        if any(i["severity"] == "P1" and i.get("state") != "resolved" for i in inc):
            seen.setdefault("incident", (time.time() - t, ""))
        if len(seen) == 4 and time.time() - t > 8:
            break
        time.sleep(0.5)
    alive = server.proc.alive()
    pend = sum(a.metric("vigil_agent_pending_batches", 0) for a in agents)
    res.check(f"{phase}: the server stays up", alive,
              "" if alive else f"it exited (status {server.proc.p.returncode}): "
              + server.proc.tail(3).replace("\n", " / ")[-300:])
    res.check(f"{phase}: /readyz 503 naming the storage problem", "readyz" in seen,
              f"after {seen['readyz'][0]:.1f} s: {seen['readyz'][1]}" if "readyz" in seen
              else f"last answer {rs} {str(rb)[:100]}")
    res.check(f"{phase}: /healthz 200 with status degraded", "healthz" in seen,
              f"after {seen['healthz'][0]:.1f} s" if "healthz" in seen else f"last answer {hs} {str(hb)[:100]}")
    res.check(f"{phase}: /metrics vigil_storage_healthy 0, vigil_storage_write_errors_total > 0",
              "metrics" in seen, f"errors {seen['metrics'][1]}" if "metrics" in seen
              else f"vigil_storage_healthy={m.get('vigil_storage_healthy')} "
                   f"errors={m.get('vigil_storage_write_errors_total')}")
    res.check(f"{phase}: a P1 storage_degraded incident fires", "incident" in seen,
              f"after {seen['incident'][0]:.1f} s" if "incident" in seen else "none")
    res.check(f"{phase}: agents are refused and keep their batches", alive and pend > pend0 + 5,
              f"agents' pending batches {pend0:.0f} -> {pend:.0f}")
    codes = collections.Counter()
    for a in agents:
        lines = a.proc.log_path.read_text(errors="replace").splitlines()
        for line in lines[a.__dict__.get("_seen", 0):]:
            mm = re.search(r"ended \(code (\d+): ([^)]{0,80})", line)
            if mm:
                codes[f"code {mm.group(1)}: {mm.group(2)[:60]}"] += 1
        a._seen = len(lines)
    res.check(f"{phase}: the refusal is gRPC UNAVAILABLE (code 14), a clear retry-later",
              codes and all(c.startswith("code 14") for c in codes),
              "; ".join(f"{k}... x{n}" for k, n in codes.items()) or "no refusal in the agents' logs")
    return alive


def drill_disk(env, res, short, seed):
    res.injected = ("(1) the server's data dir is a 256 MiB tmpfs, filled to ENOSPC by another "
                    "file, then freed, without restarting the server; (2) the data dir is an ext4 "
                    "image mounted with errors=remount-ro whose file system is then failed "
                    "(trigger_fs_error), so the kernel turns it read-only under the running "
                    "server - files already open included -, then the operator's repair: stop, "
                    "fsck, mount read-write, start")
    res.times = "1 disk full + 1 read-only file system"
    if os.geteuid() != 0:
        raise Skip("needs root to mount a tmpfs and an ext4 image for the data dir (CI runs as root)")
    extra = {"storage": {"incident_after_seconds": 3}}

    # Phase 1: disk full, recovery without a restart.
    data = env.dir / "data"
    data.mkdir()
    # RocksDB clears a background write error itself only once the disk has
    # its reserved buffer free again (64 MiB with our options): a smaller
    # file system never recovers, as a real disk that stays nearly full.
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(data)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    env.mounts.append(data)
    server = Server(env, server_config(env, data, extra=extra))
    server.start()
    agents = [Agent(env, server.grpc, f"d{i}", "djob", seed=seed) for i in range(2)]
    res.load = "2 simulated 8-GPU nodes at 1 Hz with disk spools (outside the data dir)"
    wait_until(lambda: all(a.metric("vigil_agent_batches_acked_total", 0) >= 5 for a in agents), 30)
    rs, rb, *_ = storage_signals(server)
    res.check("healthy: GET /readyz is 200 {\"ready\": true}", rs == 200 and isinstance(rb, dict) and rb.get("ready") is True,
              f"{rs} {str(rb)[:120]}")
    pid = server.proc.pid
    log("  disk full")
    filler = data / "filler"
    n = fill_disk(filler)
    res.fact("filler written until ENOSPC (MiB)", f"{n / 2**20:.1f}")
    watch_fault(res, "disk full", server, agents)
    filler.unlink()
    ok = wait_until(lambda: (lambda s: s[0] == 200 and s[4].get("vigil_storage_healthy") == 1
                             and s[4].get("vigil_storage_recoveries_total", 0) >= 1)(storage_signals(server)), 30, 0.5)
    rs, rb, hs, hb, m, inc = storage_signals(server)
    res.check("disk full: recovers without a restart once space returns",
              bool(ok) and server.proc.pid == pid and server.proc.alive(),
              f"readyz {rs}, vigil_storage_healthy={m.get('vigil_storage_healthy')}, "
              f"recoveries={m.get('vigil_storage_recoveries_total')}, same process: {server.proc.pid == pid}")
    resolved = wait_until(lambda: (lambda inc: inc and all(i.get("state") == "resolved" for i in inc))(
        [x for x in server.incidents() if x["kind"] == "storage_degraded"]), 15)
    res.check("disk full: the storage_degraded incident resolves", bool(resolved), "")
    res.check("disk full: agents' spools drain", wait_drained(agents, 60), "")
    for a in agents:
        a.stop()
    check_exactly_once(res, server, agents, "acked sample of the disk-full phase")
    server.sigkill()
    try:
        server.start()
        check_exactly_once(res, server, agents, "acked sample of the disk-full phase after a restart")
    except DrillError as e:
        res.check("the data dir opens again after the disk-full phase", False, str(e)[-300:])
    server.sigkill()

    # Phase 2: the file system turns read-only under the server.
    log("  read-only file system")
    image, ro = env.dir / "ext4.img", env.dir / "ro"
    ro.mkdir()
    steps = [["truncate", "-s", "128M", str(image)], ["mkfs.ext4", "-q", "-F", str(image)],
             ["mount", "-o", "loop,errors=remount-ro", str(image), str(ro)]]
    for step in steps:
        out = subprocess.run(step, capture_output=True, text=True)
        if out.returncode != 0:
            res.notes.append(f"Read-only phase skipped: `{' '.join(step)}` failed: {out.stderr.strip()}")
            return
    env.mounts.append(ro)
    device = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(ro)], capture_output=True,
                            text=True).stdout.strip()
    trigger = Path(f"/sys/fs/ext4/{os.path.basename(device)}/trigger_fs_error")
    if not trigger.exists():
        res.notes.append(f"Read-only phase skipped: {trigger} is missing (kernel without it)")
        return
    # A failing file system drops what is only in the page cache: acked
    # samples survive it only with sync_frame_log (see the README).
    server = Server(env, server_config(env, ro / "data", extra={
        "storage": {"incident_after_seconds": 3, "sync_frame_log": True}}), name="server-ro")
    server.start()
    agents = [Agent(env, server.grpc, f"r{i}", "rjob", seed=seed + 1) for i in range(2)]
    wait_until(lambda: all(a.metric("vigil_agent_batches_acked_total", 0) >= 5 for a in agents), 30)
    trigger.write_text("1")
    watch_fault(res, "read-only", server, agents)
    # No remount read-write is possible after a file system error: the
    # operator stops the server, repairs and remounts, and starts it.
    server.sigkill()
    subprocess.run(["umount", str(ro)], capture_output=True)
    fsck = subprocess.run(["fsck.ext4", "-p", str(image)], capture_output=True, text=True)
    out = subprocess.run(["mount", "-o", "loop", str(image), str(ro)], capture_output=True, text=True)
    if out.returncode != 0:
        res.check("read-only: the repaired file system mounts read-write", False,
                  f"fsck {fsck.returncode}: {out.stderr.strip()}")
        return
    try:
        server.start()
    except DrillError as e:
        res.check("read-only: the server starts again on its repaired data dir", False, str(e)[-300:])
        raise
    res.check("read-only: the server starts again on its repaired data dir", True, f"fsck exit {fsck.returncode}")
    res.check("read-only: agents' spools drain after the repair", wait_drained(agents, 90), "")
    for a in agents:
        a.stop()
    check_exactly_once(res, server, agents, "acked sample of the read-only phase")
    server.sigkill()
    subprocess.run(["umount", str(ro)], capture_output=True)


# --- drill 5: soak --------------------------------------------------------------

def proc_stats(pid):
    rss = fds = cpu = None
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        pass
    return rss, fds, cpu


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def drill_soak(env, res, short, seed):
    minutes = OPTS.soak_minutes or (1.25 if short else 30)
    # The full form runs the design load (1,250 nodes), the most this 2-core
    # machine holds at 1 Hz with every agent a process of its own: at 1,600
    # the agents fell behind (bench/RESULTS.md, soak).
    nodes = OPTS.soak_nodes or (40 if short else 1250)
    churn_s = 20 if short else 180
    per_job = 8
    duration = minutes * 60
    # RSS legitimately grows until the first blocks close (block_samples at
    # 1 Hz): the short form closes blocks every 30 s, the full form keeps the
    # defaults (720 samples) and warms up for 15 min.
    warm = 35 if short else max(900, duration * 0.5)
    res.injected = (f"{nodes} simulated 8-GPU nodes (229 series each) at 1 Hz for {minutes:g} min; "
                    f"every {churn_s} s one job's nodes restart under a new job name (churn) and a "
                    "probe node with a double-bit ECC fault joins (frame->incident latency); two "
                    "probe nodes stream through a timing proxy (ack latency)")
    res.times = f"{duration:.0f} s continuous"
    extra = {"storage": {"block_samples": 30, "block_seconds": 30}} if short else None
    server = Server(env, server_config(env, env.dir / "data", extra=extra))
    server.start()
    proxy = TcpProxy(env, server.grpc)
    jobs = []
    for j in range((nodes + per_job - 1) // per_job):
        names = [f"s{j:03d}n{k}" for k in range(min(per_job, nodes - j * per_job))]
        jobs.append({"nodes": names, "gen": 0, "agents": [
            Agent(env, server.grpc, n, f"soak{j:03d}-g0", seed=seed + j, spool=False, metrics=False)
            for n in names]})
    probes = [Agent(env, proxy.addr, f"ack{k}", "ackprobe", seed=seed, spool=False) for k in range(2)]
    res.load = (f"{nodes} + 2 nodes, {nodes * 229 / 1000:.1f} k samples/s expected "
                f"(design load: 1,250 nodes; twice that does not fit on this machine's 2 cores "
                f"beside the agents' own processes: at 1,600 they fell behind 1 Hz; see the "
                f"measured per-node cost below)")
    t0 = time.time()
    samples, lat_incident, churns, probe_n = [], [], 0, 0
    fault_probes = []
    next_churn = t0 + churn_s
    series_expected_growth = 0
    while time.time() - t0 < duration:
        now = time.time()
        if now >= next_churn:
            next_churn += churn_s
            job = jobs[churns % len(jobs)]
            churns += 1
            job["gen"] += 1
            j = jobs.index(job)
            for a in job["agents"]:
                a.proc.stop()
            job["agents"] = [Agent(env, server.grpc, n, f"soak{j:03d}-g{job['gen']}", seed=seed + j,
                                   spool=False, metrics=False) for n in job["nodes"]]
            probe_n += 1
            fault_probes.append({"agent": Agent(env, server.grpc, f"probe{probe_n}", f"probe{probe_n}",
                                                "ecc_dbe", f"probe{probe_n}", 4, seed=seed, spool=False,
                                                metrics=False), "seen": None})
            if now - t0 >= warm:
                series_expected_growth += (len(job["nodes"]) + 1) * 240
        for fp in fault_probes:
            if fp["seen"] is None:
                st, body = server.get(f"/api/v1/incidents?state=all&job={fp['agent'].job}")
                if st == 200 and body.get("incidents"):
                    first = min(body["incidents"], key=lambda i: i["ts"])
                    fp["seen"] = time.time()
                    lat_incident.append(fp["seen"] - first["ts"])
                    fp["agent"].proc.stop()
        rss, fds, cpu = proc_stats(server.proc.pid)
        m = server.metrics()
        samples.append({"t": now - t0, "rss": rss, "fds": fds, "cpu": cpu,
                        "series": m.get("vigil_series"), "rate": m.get("vigil_ingest_rate_samples_per_second"),
                        "agents": m.get("vigil_connected_agents"),
                        "disk": dir_bytes(env.dir / "data"), "samples": m.get("vigil_ingest_samples_total")})
        time.sleep(0.25 if any(fp["seen"] is None for fp in fault_probes) else 2)
    alive = server.proc.alive()
    res.check("server alive through the soak", alive, "")
    post = [s for s in samples if s["t"] >= warm and s["rss"]]
    w = post[0]
    rss_max = max(s["rss"] for s in post)
    rss_bound = 1.3 * w["rss"]
    res.check("RSS flat after warm-up (max <= 1.3 x its value at the end of warm-up)", rss_max <= rss_bound,
              f"{w['rss'] / 2**20:.0f} MiB at {w['t']:.0f} s, max {rss_max / 2**20:.0f} MiB, "
              f"end {post[-1]['rss'] / 2**20:.0f} MiB")
    fd_max = max(s["fds"] for s in post)
    res.check("open files flat after warm-up (max <= warm-up + 32)", fd_max <= w["fds"] + 32,
              f"{w['fds']} at warm-up, max {fd_max}, end {post[-1]['fds']}")
    growth = (post[-1]["series"] or 0) - (w["series"] or 0)
    res.check("index (series) grows only by the churned jobs' new series "
              "(<= 240 per new node/job pair after warm-up)", growth <= series_expected_growth,
              f"{w['series']:.0f} -> {post[-1]['series']:.0f} (+{growth:.0f}; allowed +{series_expected_growth})")
    rates = [s["rate"] for s in post if s["rate"]]
    expect = nodes * 229
    med = pct(rates, 50) or 0
    res.check("the server keeps up (median ingest rate within 15 % of the offered load)",
              abs(med - expect) <= 0.15 * expect, f"median {med:.0f} samples/s, offered ~{expect}")
    cpu_s = (post[-1]["cpu"] - w["cpu"]) / max(1e-9, post[-1]["t"] - w["t"])
    res.fact("server CPU after warm-up", f"{100 * cpu_s:.1f} % of one core "
             f"({100 * cpu_s / max(1, nodes) * 1000:.1f} % per 1,000 nodes)")
    dgrowth = (post[-1]["disk"] - w["disk"]) / max(1e-9, post[-1]["t"] - w["t"])
    res.fact("data dir", f"{post[-1]['disk'] / 2**20:.1f} MiB at the end, growing {dgrowth / 1024:.0f} KiB/s "
             f"({dgrowth / max(1, med):.2f} B/sample incl. frame log)")
    if len(post) > 2:
        ts = [s["t"] for s in post]
        rs = [s["rss"] / 2**20 for s in post]
        mt, mr = sum(ts) / len(ts), sum(rs) / len(rs)
        slope = sum((a - mt) * (b - mr) for a, b in zip(ts, rs)) / max(1e-9, sum((a - mt) ** 2 for a in ts))
        res.fact("RSS trend after warm-up", f"{slope * 3600:+.0f} MiB/hour")
    lat = proxy.latencies[5:]
    res.fact("ack latency p50 / p99 (probe agents through the proxy)",
             f"{1000 * pct(lat, 50):.1f} / {1000 * pct(lat, 99):.1f} ms (n={len(lat)})" if lat else "no samples")
    res.check("ack latency measured", bool(lat), f"n={len(lat)}")
    res.fact("frame->incident latency p50 / p99 (ecc_dbe probes, incl. 0.25 s polling)",
             f"{pct(lat_incident, 50):.2f} / {pct(lat_incident, 99):.2f} s (n={len(lat_incident)})"
             if lat_incident else "no samples")
    res.check("every fault probe raised its incident", len(lat_incident) >= len(fault_probes) - 1 and lat_incident,
              f"{len(lat_incident)} of {len(fault_probes)} probes (the last may be too young)")
    res.fact("job churns", churns)
    res.notes.append("Samples (t s, RSS MiB, fds, series, ingest samples/s): " + "; ".join(
        f"{s['t']:.0f}, {s['rss'] / 2**20:.0f}, {s['fds']}, {s['series'] or 0:.0f}, {s['rate'] or 0:.0f}"
        for s in samples[::max(1, len(samples) // 12)]))


DRILLS = {
    "sigkill": ("Server SIGKILL under load", drill_sigkill),
    "partition": ("Agents partitioned from the server", drill_partition),
    "receivers": ("Receivers and actuator down, 429, 500", drill_receivers),
    "disk": ("Disk full and read-only data dir", drill_disk),
    "soak": ("Soak with job churn", drill_soak),
    "cluster": ("Shards and pairs over etcd: leader killed, pair stopped, shard joined",
                drill_cluster),
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
    except KeyboardInterrupt as e:
        res.error = f"interrupted ({e})"
        raise
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


# What the drills have shown but the code does not handle yet; printed in
# docs/RELIABILITY.md until fixed. Seed 30109 (sigkill) once showed an ECC
# jump missed across a kill; fixed by priming counters from the store
# (docs/DETECTION.md, Restarts). The first full receivers drill (10 min at
# a 4-s retry cap) lost 14 of 24 pages and every action to the outbox's
# 50-send limit; items now give up by time alone (server/delivery/outbox.h).
KNOWN_GAPS = []


def render_doc(results, args, command):
    """The whole Markdown document for `results`."""
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
        f"- Command: `{command}` (seed {args.seed}).",
        "- Short form (CI, `ctest -R drill_`, also part of `.ci/run`): "
        "`tests/drills/drills.py --build build --short` (about 5 minutes).",
        "- Full form (issue 13's durations: >= 20 kills, 30 min partition, 10 min receiver "
        "outage, 30 min soak; about 80 minutes): "
        "`tests/drills/drills.py --build build --write-doc docs/RELIABILITY.md` "
        "(as root for the disk drill). With `--only NAME`, `--write-doc` replaces just that "
        "drill's row and section, marked as run again alone.",
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
    lines += ["", "## Known gaps", ""] + ([f"- {g}" for g in KNOWN_GAPS] or ["None known."])
    return "\n".join(lines) + "\n"


def _section(text, name):
    """(start, end) of the section "## name" in text, or None."""
    m = re.search(rf"^## {re.escape(name)}\n", text, re.M)
    if not m:
        return None
    nxt = re.search(r"^## ", text[m.end():], re.M)
    return m.start(), (m.end() + nxt.start()) if nxt else len(text)


def write_doc(path, results, args, command):
    """Writes the document. With --only, the drills run replace their own
    summary row and section in an existing document of the same form, each
    marked with when and how it was run again; the others stay as they were."""
    new = render_doc(results, args, command)
    old = Path(path).read_text() if Path(path).exists() else ""
    form_line = f"{'short (CI)' if args.short else 'full'} form, on"
    if not args.only or not old:
        Path(path).write_text(new)
        log(f"wrote {path}")
        return
    if form_line not in old:
        raise DrillError(f"{path} holds the other form's results; run every drill to replace it")
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for r in results:
        row = re.compile(rf"^\| \[{re.escape(r.name)}\]\(#{re.escape(r.name)}\) \|.*$", re.M)
        new_row = row.search(new).group(0)
        span_new = _section(new, r.name)
        section = new[span_new[0]:span_new[1]]
        title_end = section.index("\n\n", section.index("**")) + 2
        section = (section[:title_end] + f"- Run again alone: {today}, seed {args.seed}, "
                   f"`{command}`.\n" + section[title_end:])
        span_old = _section(old, r.name)
        if not row.search(old) or span_old is None:
            raise DrillError(f"{path} has no {r.name} drill to replace; run every drill")
        old = row.sub(lambda _m: new_row, old, count=1)
        span_old = _section(old, r.name)
        old = old[:span_old[0]] + section + old[span_old[1]:]
    Path(path).write_text(old)
    log(f"updated {path}: {', '.join(r.name for r in results)}")


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

    def stop(sig, _frame):  # SIGTERM/SIGINT: unwind, so each drill cleans up
        raise KeyboardInterrupt(f"signal {sig}")
    signal.signal(signal.SIGTERM, stop)
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
        try:
            write_doc(args.write_doc, results, args, " ".join(shlex.quote(a) for a in argv))
        except DrillError as e:
            print(f"drills: {e}", file=sys.stderr)
            return 2
    return 0 if all(r.passed or r.skipped for r in results) else 1


OPTS = None

if __name__ == "__main__":
    sys.exit(main())
