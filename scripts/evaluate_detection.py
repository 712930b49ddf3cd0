#!/usr/bin/env python3
"""Detection quality over the simulated fault suite.

For every fault scenario of vigil-sim x a few seeds x cluster shapes, runs
vigil-sim (frames + truth), vigil-replay (incidents), and scores the
incidents against the truth with the criteria of docs/DETECTION.md (the same
as tests/server/replay/scenario_replay.cc):

  - an expected incident is met by the first output line at or after the
    fault's start whose severity is the expected one, whose kind is one of
    the expected kinds (or whose id is that of the incident meeting the
    fault's first expected incident: grouping raised it), and which carries
    the truth's node/GPU where the truth asks for them;
  - a run recalls its fault when every expected incident is met;
  - a false alarm is a P0-P2 incident the fault does not explain (its kind
    is neither expected, with a localisation not contradicting the truth,
    nor a listed side effect); in healthy runs every P0-P2 incident is one;
  - the delay is (ts of the line meeting the first expected incident) -
    (fault start).

Prints a markdown table and, with --write-doc, puts it into
docs/DETECTION.md between the evaluation markers. Python 3 stdlib only.

  scripts/evaluate_detection.py --build build [--jobs 2] [--write-doc]

With --multi-job it evaluates a cluster living its ordinary life instead
(vigil-sim --multi-job: job churn, idle nodes, every fault kind at random
times; agent/sim/multi_job_sim.h). By default two long runs, in parallel, each
streamed straight into vigil-replay (no frame files): 7 days at 10-s frames
(seed 1) and 1 day at 1-s frames (seed 2), 64 nodes x 8 GPUs; --days and
--interval (and --seed) make it one run of that shape instead. Scoring
against the truth file:

  - a fault's expected entry is met by the first incident line with ts in
    [fault start, fault end + 900 s], the fault's job, the entry's severity,
    a kind among the entry's kinds (or the id of the incident that met the
    fault's first entry), and the entry's node/GPU where it names them (its
    "nodes": the line's "nodes" as a set); a fault is recalled when every
    entry is met;
  - detected: a line of an expected kind of the fault's job in its window,
    at any severity; severity right: the highest severity the fault's
    incidents reached is the truth's; localised: a line of an expected kind
    (or a meeting incident) names the truth's node/GPU/nodes (where the
    truth names them); delay: first meeting line ts - fault start;
  - the fault's incidents: distinct incident ids with a P0-P2 line of the
    fault's job in its window whose kind is expected or a side effect, or
    that met an entry (goal <= 1.2 per fault);
  - false P0-P2: every other incident id with a P0-P2 line, except
    lemon_node incidents naming a node that is a repeat offender in the
    truth: the simulator's lemon, or a node whose injected node-level
    faults (NODE_FAULT_KINDS) fell in 3 different jobs within 7 days, which
    random faults do by chance and which the rule (docs/DETECTION.md,
    "Repeat offenders") exists to find; listed by kind and by what the job
    was doing.

  scripts/evaluate_detection.py --multi-job --build build [--days 1
      --interval 10] [--seed N] [--check] [--write-doc] [--keep DIR]

--check exits 1 unless there is no false P0-P2 incident and every fault is
recalled; --write-doc puts the report into docs/DETECTION.md between the
cluster evaluation markers (the section is added at the end if missing).
"""

import argparse
import concurrent.futures
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

FAULT_AT_S = 3000  # after the 1000 learning steps (~1700 s at 1.7 s/step)
AFTER_FAULT_S = 1800
HEALTHY_S = 4 * 3600

# (label, nodes, interval seconds, seeds)
SHAPES = [
    ("4x8 @1s", 4, 1.0, [1, 2]),
    ("16x8 @1s", 16, 1.0, [3]),
    ("4x8 @10s", 4, 10.0, [4]),
]

BEGIN = "<!-- BEGIN evaluation (scripts/evaluate_detection.py) -->"
END = "<!-- END evaluation -->"
CLUSTER_BEGIN = ("<!-- BEGIN cluster evaluation "
                 "(scripts/evaluate_detection.py --multi-job) -->")
CLUSTER_END = "<!-- END cluster evaluation -->"

# Multi-job defaults: (days, frame interval s, seed).
LONG_RUNS = [(7, 10.0, 1), (1, 1.0, 2)]
WINDOW_AFTER_S = 900   # a fault's incidents may come this long after its end
PHASE_S = 600          # "just after a job started/ended"
EXAMPLES = 5           # false incidents listed per (kind, class)


def scenarios(sim):
    """Fault kinds vigil-sim knows, from its error message on a bad name."""
    out = subprocess.run([sim, "--scenario", "?", "--output", os.devnull],
                         capture_output=True, text=True).stderr
    known = out.split("known: ", 1)[1].split(")", 1)[0]
    return [k.strip() for k in known.split(",") if k.strip() != "healthy"]


def rank(severity):
    return int(severity[1]) if isinstance(severity, str) else 9


def localised(line, entry, fault, required):
    for field in ("node", "gpu"):
        if entry[field] is None:
            continue
        if line[field] is None:
            if required:
                return False
        elif line[field] != fault[field]:
            return False
    # rack_down: one incident naming exactly the nodes that went down.
    if entry.get("nodes") is not None:
        if line.get("nodes") is None:
            if required:
                return False
        elif sorted(line["nodes"]) != sorted(entry["nodes"]):
            return False
    return True


def score(lines, truth):
    """Returns (recalled or None for healthy, false alarms, delay, missed)."""
    explained = set()
    recalled = None
    delay = None
    missed = []
    for fault in truth["faults"]:
        if fault["start_ts"] is None:
            recalled = False
            missed.append("fault never started")
            continue
        start = fault["start_ts"]
        primary = None
        recalled = True
        for i, entry in enumerate(fault["expected"]):
            hit = None
            for line in lines:
                if line["ts"] < start or line["severity"] != entry["severity"]:
                    continue
                kind_ok = (line["kind"] in entry["kinds"] or
                           (primary is not None and line["id"] == primary))
                if kind_ok and localised(line, entry, fault, True):
                    hit = line
                    break
            if hit is None:
                recalled = False
                missed.append("%s %s" % (entry["severity"],
                                         "/".join(entry["kinds"])))
                continue
            explained.add(hit["id"])
            if i == 0:
                primary = hit["id"]
                delay = hit["ts"] - start
    false_alarms = set()
    for line in lines:
        if rank(line["severity"]) > 2 or line["id"] in explained:
            continue
        ok = False
        for fault in truth["faults"]:
            if fault["start_ts"] is None or line["ts"] < fault["start_ts"]:
                continue
            if line["kind"] in fault["side_effect_kinds"]:
                ok = True
            for entry in fault["expected"]:
                if (line["kind"] in entry["kinds"] and
                        localised(line, entry, fault, False)):
                    ok = True
        if not ok:
            false_alarms.add((line["id"], line["severity"], line["kind"],
                              line["node"], line["gpu"]))
    return recalled, false_alarms, delay, missed


def run_one(args, scenario, shape, seed, tmp):
    label, nodes, interval, _ = shape
    base = os.path.join(tmp, "%s-%d-%d-%g" % (scenario, seed, nodes, interval))
    sim_cmd = [args.sim, "--scenario", scenario, "--nodes", str(nodes),
               "--interval", str(interval), "--seed", str(seed),
               "--output", base + ".jsonl", "--truth", base + ".truth.json"]
    if scenario == "healthy":
        sim_cmd += ["--seconds", str(HEALTHY_S)]
    else:
        # Vary the faulty node and GPU with the seed.
        sim_cmd += ["--fault-node", "n%03d" % (seed % nodes),
                    "--fault-gpu", str((3 * seed) % 8)]
        if scenario == "low_mfu":  # a property of the job from its start
            sim_cmd += ["--seconds", str(AFTER_FAULT_S)]
        else:
            sim_cmd += ["--fault-at", str(FAULT_AT_S),
                        "--seconds", str(FAULT_AT_S + AFTER_FAULT_S)]
    subprocess.run(sim_cmd, check=True, capture_output=True)
    rep = subprocess.run([args.replay, "--input", base + ".jsonl",
                          "--output", base + ".out.jsonl"],
                         check=True, capture_output=True, text=True)
    with open(base + ".truth.json") as f:
        truth = json.load(f)
    with open(base + ".out.jsonl") as f:
        lines = [json.loads(l) for l in f if l.strip()]
    for suffix in (".jsonl", ".out.jsonl", ".truth.json"):
        os.remove(base + suffix)
    bad = [l for l in rep.stderr.splitlines() if l.startswith("line ")]
    recalled, false_alarms, delay, missed = score(lines, truth)
    hours = (truth["end_ts"] - truth["start_ts"]) / 3600
    return {"scenario": scenario, "shape": label, "seed": seed,
            "recalled": recalled, "false_alarms": sorted(false_alarms,
                                                         key=str),
            "delay": delay, "missed": missed, "bad_lines": len(bad),
            "hours": hours,
            "lines": [(l["severity"], l["kind"], l["node"], l["gpu"])
                      for l in lines if rank(l["severity"]) <= 2]}


def table(results, kinds):
    rows = ["| scenario | runs | recall | false alarms | delay median (s) "
            "| delay max (s) | misses (shape seed: expected -> P0-P2 lines) |",
            "|---|---|---|---|---|---|---|"]
    for kind in kinds + ["healthy"]:
        rs = [r for r in results if r["scenario"] == kind]
        if not rs:
            continue
        fa = sum(len(r["false_alarms"]) for r in rs)
        if kind == "healthy":
            hours = sum(r["hours"] for r in rs)
            rows.append("| healthy (%.0f job-hours) | %d | - | %d | - | - | %s |"
                        % (hours, len(rs), fa, "; ".join(
                            "%s s%d: %s" % (r["shape"], r["seed"],
                                            r["false_alarms"])
                            for r in rs if r["false_alarms"]) or "-"))
            continue
        hit = [r for r in rs if r["recalled"]]
        delays = [r["delay"] for r in rs if r["delay"] is not None]
        misses = "; ".join(
            "%s s%d: %s -> %s" % (r["shape"], r["seed"], ", ".join(r["missed"]),
                                  ", ".join("%s %s %s/%s" % l
                                            for l in r["lines"][:3]) or "none")
            for r in rs if not r["recalled"])
        rows.append("| %s | %d | %d/%d | %d | %s | %s | %s |" % (
            kind, len(rs), len(hit), len(rs), fa,
            "%.0f" % statistics.median(delays) if delays else "-",
            "%.0f" % max(delays) if delays else "-", misses or "-"))
    return "\n".join(rows)


# ---------------------------------------------------------------------------
# --multi-job


def run_pipeline(args, days, interval, seed, tmp):
    """vigil-sim --multi-job | vigil-replay; returns the run's record."""
    base = os.path.join(tmp, "cluster-%gd-%gs-%d" % (days, interval, seed))
    sim_cmd = [args.sim, "--multi-job", "--nodes", str(args.nodes),
               "--gpus", str(args.gpus), "--hours", "%g" % (24 * days),
               "--interval", "%g" % interval, "--seed", str(seed),
               "--output", "-", "--truth", base + ".truth.json"]
    if args.faults_per_day is not None:
        sim_cmd += ["--faults-per-day", "%g" % args.faults_per_day]
    # vigil-replay reads a file; /dev/stdin is the pipe.
    rep_cmd = [args.replay, "--input", "/dev/stdin",
               "--output", base + ".incidents.jsonl"]
    started = time.monotonic()
    with open(base + ".sim.err", "w") as sim_err, \
            open(base + ".replay.err", "w") as rep_err:
        sim = subprocess.Popen(sim_cmd, stdout=subprocess.PIPE,
                               stderr=sim_err)
        rep = subprocess.Popen(rep_cmd, stdin=sim.stdout, stderr=rep_err)
        sim.stdout.close()
        rep_rc = rep.wait()
        sim_rc = sim.wait()
    wall = time.monotonic() - started
    with open(base + ".sim.err") as f:
        sim_log = f.read()
    with open(base + ".replay.err") as f:
        rep_log = f.read()
    if sim_rc != 0 or rep_rc != 0:
        raise RuntimeError("pipeline failed (vigil-sim %d, vigil-replay %d):"
                           "\n%s\n%s" % (sim_rc, rep_rc, sim_log[-2000:],
                                          rep_log[-2000:]))
    with open(base + ".truth.json") as f:
        truth = json.load(f)
    with open(base + ".incidents.jsonl") as f:
        lines = [json.loads(l) for l in f if l.strip()]
    bad = [l for l in rep_log.splitlines() if l.startswith("line ")]
    command = "%s | %s" % (" ".join(shlex.quote(c) for c in sim_cmd),
                           " ".join(shlex.quote(c) for c in rep_cmd))
    meta = {"days": days, "interval": interval, "seed": seed, "wall": wall,
            "bad_lines": len(bad),
            "sim_log": sim_log.strip().splitlines()[-1:] if sim_log else [],
            "replay_log": [l for l in rep_log.splitlines()
                           if l.startswith("vigil-replay:")][-1:],
            "command": command, "base": base}
    with open(base + ".meta.json", "w") as f:
        json.dump(meta, f)
    return dict(meta, truth=truth, lines=lines)


def load_kept(base):
    """A run kept by --keep, for --rescore."""
    with open(base + ".meta.json") as f:
        run = json.load(f)
    with open(base + ".truth.json") as f:
        run["truth"] = json.load(f)
    with open(base + ".incidents.jsonl") as f:
        run["lines"] = [json.loads(l) for l in f if l.strip()]
    return run


def matches_place(line, entry):
    """Whether `line` carries the node/GPU/nodes the entry names."""
    if entry.get("node") is not None and line.get("node") != entry["node"]:
        return False
    if entry.get("gpu") is not None and line.get("gpu") != entry["gpu"]:
        return False
    if entry.get("nodes") is not None and \
            sorted(line.get("nodes") or []) != sorted(entry["nodes"]):
        return False
    return True


def score_fault(fault, lines):
    """Scores one fault of a multi-job truth against all incident lines."""
    start, end = fault["start_ts"], fault["end_ts"] + WINDOW_AFTER_S
    mine = [l for l in lines
            if l.get("job") == fault["job"] and start <= l["ts"] <= end]
    expected_kinds = set()
    for entry in fault["expected"]:
        expected_kinds.update(entry["kinds"])
    hits = []
    primary = None
    for entry in fault["expected"]:
        hit = None
        for line in mine:
            if line["severity"] != entry["severity"]:
                continue
            kind_ok = (line["kind"] in entry["kinds"] or
                       (primary is not None and line["id"] == primary))
            if kind_ok and matches_place(line, entry):
                hit = line
                break
        hits.append(hit)
        if primary is None and hit is not None:
            primary = hit["id"]
    hit_ids = {h["id"] for h in hits if h is not None}
    side = set(fault["side_effect_kinds"])
    attributed = set()
    for line in mine:
        if rank(line["severity"]) > 2:
            continue
        if line["id"] in hit_ids or line["kind"] in expected_kinds or \
                line["kind"] in side:
            attributed.add(line["id"])
    # The highest severity the fault's incidents reached (P0-P3 lines of
    # the attributed or meeting incidents, and of expected kinds).
    reached = [l["severity"] for l in mine
               if l["id"] in attributed or l["id"] in hit_ids or
               l["kind"] in expected_kinds]
    best = min(reached, key=rank) if reached else None
    named = [e for e in fault["expected"]
             if e.get("node") is not None or e.get("gpu") is not None or
             e.get("nodes") is not None]
    localised = None
    if named:
        localised = any(
            matches_place(l, e) for e in named for l in mine
            if l["kind"] in e["kinds"] or l["id"] in hit_ids)
    return {
        "fault": fault,
        "recalled": all(h is not None for h in hits),
        "hits": hits,
        "detected": any(l["kind"] in expected_kinds for l in mine),
        "severity_right": best == fault["severity"],
        "reached": best,
        "localised": localised,
        "delay": hits[0]["ts"] - start if hits and hits[0] else None,
        "incidents": attributed,
        "mine": mine,
    }


def job_context(line, truth):
    """What the incident's job was doing when the line came, in words."""
    job, node, ts = line.get("job"), line.get("node"), line["ts"]
    if job == "idle":
        ended = [r for r in truth["jobs"]
                 if node in r["nodes"] and r["end_ts"] is not None and
                 0 <= ts - r["end_ts"] <= PHASE_S]
        if ended:
            return "idle node, within 10 min after %s ended" % ended[0]["job"]
        return "idle node"
    runs = [r for r in truth["jobs"] if r["job"] == job and
            (node is None or node in r["nodes"])]
    if not runs:
        return "unknown job"
    # The run the line falls in, else the last one before it.
    run = None
    for r in runs:
        end = r["end_ts"] if r["end_ts"] is not None else float("inf")
        if r["start_ts"] <= ts < end + PHASE_S:
            run = r
    if run is None:
        run = runs[-1]
    words = []
    if run["end_ts"] is not None and ts >= run["end_ts"]:
        words.append("within 10 min after the job ended (%s, agent %s)" %
                     (run["end"], run["agent"]))
    elif ts - run["start_ts"] <= PHASE_S:
        words.append("within 10 min after the job %s" %
                     ("resumed" if run["resumed_from"] else "started"))
    if run["noisy"]:
        words.append("noisy job")
    if run["precision"] == "fp16":
        words.append("fp16")
    if run["step_seconds"] >= 20:
        words.append("slow steps (%.0f s)" % run["step_seconds"])
    if not run["phase_markers"]:
        words.append("no phase markers")
    if run["fault"]:
        fault = next(f for f in truth["faults"] if f["id"] == run["fault"])
        if ts < fault["start_ts"]:
            words.append("before its fault %s" % fault["id"])
        elif ts <= fault["end_ts"] + WINDOW_AFTER_S:
            words.append("during its fault %s (%s), not expected" %
                         (fault["id"], fault["kind"]))
        else:
            words.append("after its fault %s (%s) window" %
                         (fault["id"], fault["kind"]))
    return ", ".join(words) or "steady training"


def primary_class(line, truth):
    """The one class of ordinary life a false incident falls in."""
    job, node, ts = line.get("job"), line.get("node"), line["ts"]
    if job == "idle":
        for f in truth["faults"]:
            where = f["nodes"] or [f["injected_on"]["node"]]
            if node in where and f["start_ts"] <= ts:
                return "idle node, after a hardware fault on it"
        return "idle node"
    runs = [r for r in truth["jobs"] if r["job"] == job and
            (node is None or node in r["nodes"])]
    run = None
    for r in runs:
        end = r["end_ts"] if r["end_ts"] is not None else float("inf")
        if r["start_ts"] <= ts < end + PHASE_S:
            run = r
    if run is None:
        return "unknown job"
    if run["end_ts"] is not None and ts >= run["end_ts"]:
        return "within 10 min after the job ended (%s agent)" % run["agent"]
    if ts - run["start_ts"] <= PHASE_S:
        return "within 10 min after the job %s" % (
            "resumed" if run["resumed_from"] else "started")
    if run["fault"]:
        fault = next(f for f in truth["faults"] if f["id"] == run["fault"])
        if fault["start_ts"] <= ts <= fault["end_ts"] + WINDOW_AFTER_S:
            return "during a fault of the job (%s), not an expected kind" % \
                fault["kind"]
    if run["noisy"]:
        return "noisy job"
    if run["step_seconds"] >= 20:
        return "slow steps (>= 20 s)"
    if run["precision"] == "fp16":
        return "fp16 job"
    if not run["phase_markers"]:
        return "no train_phase markers"
    return "steady training"


# Simulated fault kinds whose incidents implicate their node (GPU hardware,
# communication, node: rules/engine.cc Implicate) at P0-P2. Not rack_down:
# a rack's power is not its nodes' defect (its incident names no one node).
NODE_FAULT_KINDS = {"thermal_throttle", "nvlink_degradation", "packet_loss_hang", "ecc_dbe",
                    "ecc_sbe_storm", "gpu_fell_off_bus", "node_down", "gpu_power_low_55w",
                    "nvlink_bandwidth_degraded", "xid_storm"}


def repeat_offenders(truth, jobs_needed=3, window_s=7 * 86400):
    """Nodes whose injected node-level faults hit `jobs_needed` different
    jobs within `window_s` (the lemon rule's defaults)."""
    hits = {}
    for f in truth["faults"]:
        if f["kind"] not in NODE_FAULT_KINDS:
            continue
        for node in (f.get("nodes") or [f.get("node")]):
            if node:
                hits.setdefault(node, []).append((f["start_ts"], f["job"]))
    out = set()
    for node, h in hits.items():
        h.sort()
        for i, (ts, _) in enumerate(h):
            if len({job for t, job in h[i:] if t - ts <= window_s}) >= jobs_needed:
                out.add(node)
                break
    return out


def score_cluster(run):
    truth, lines = run["truth"], run["lines"]
    scores = [score_fault(f, lines) for f in truth["faults"]]
    explained = set()
    for s in scores:
        explained |= s["incidents"]
        explained |= {h["id"] for h in s["hits"] if h is not None}
    lemon_nodes = {l["node"] for l in truth.get("lemons", [])} | repeat_offenders(truth)
    false = {}
    for line in lines:
        if rank(line["severity"]) > 2 or line["id"] in explained:
            continue
        if line["kind"] == "lemon_node" and line.get("node") in lemon_nodes:
            continue
        if line["id"] not in false:
            false[line["id"]] = dict(line, context=job_context(line, truth),
                                     cls=primary_class(line, truth))
        elif rank(line["severity"]) < rank(false[line["id"]]["severity"]):
            false[line["id"]]["severity"] = line["severity"]
    run["scores"] = scores
    run["false"] = sorted(false.values(), key=lambda l: l["ts"])
    return run


def fmt_delay(values):
    if not values:
        return "-", "-"
    return "%.0f" % statistics.median(values), "%.0f" % max(values)


def cluster_table(runs, kinds):
    rows = ["| fault kind | faults | recall | detected (any severity) | "
            "severity right | localised | delay median (s) | delay max (s) "
            "| incidents per fault | misses (fault: expected -> P0-P2 lines "
            "of its job in its window) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    scores = [s for r in runs for s in r["scores"]]
    present = [k for k in kinds if any(s["fault"]["kind"] == k
                                        for s in scores)]
    present += sorted({s["fault"]["kind"] for s in scores} - set(present))
    for kind in present:
        ss = [s for s in scores if s["fault"]["kind"] == kind]
        n = len(ss)
        loc = [s for s in ss if s["localised"] is not None]
        med, mx = fmt_delay([s["delay"] for s in ss if s["delay"] is not None])
        misses = []
        for s in ss:
            if s["recalled"]:
                continue
            want = ", ".join("%s %s" % (e["severity"], "/".join(e["kinds"]))
                             for e, h in zip(s["fault"]["expected"],
                                             s["hits"]) if h is None)
            got = ["%s %s%s" % (l["severity"], l["kind"],
                                (" " + l["node"]) if l.get("node") else "")
                   for l in s["mine"] if rank(l["severity"]) <= 2]
            got = sorted(set(got))
            misses.append("%s: %s -> %s" % (
                s["fault"]["id"], want,
                ", ".join(got[:3]) + (" ..." if len(got) > 3 else "")
                if got else "none"))
        rows.append("| %s | %d | %d/%d | %d/%d | %d/%d | %s | %s | %s | %.2f "
                    "| %s |" % (
                        kind, n, sum(s["recalled"] for s in ss), n,
                        sum(s["detected"] for s in ss), n,
                        sum(s["severity_right"] for s in ss), n,
                        "%d/%d" % (sum(bool(s["localised"]) for s in loc),
                                   len(loc)) if loc else "-",
                        med, mx,
                        sum(len(s["incidents"]) for s in ss) / n,
                        "; ".join(misses) or "-"))
    return "\n".join(rows)


def false_table(runs, node_days):
    false = [dict(l, run="%gd@%gs" % (r["days"], r["interval"]))
             for r in runs for l in r["false"]]
    out = ["False P0-P2 incidents: **%d** in %.0f node-days (%.1f per 1,000 "
           "node-days)." % (len(false), node_days,
                            1000.0 * len(false) / node_days)]
    if not false:
        return "\n".join(out)
    def counts(ls, field):
        c = {}
        for l in ls:
            c[l[field]] = c.get(l[field], 0) + 1
        return "; ".join("%s (%d)" % kv for kv in
                         sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
    by_class = {}
    for l in false:
        l["sev_kind"] = "%s %s" % (l["severity"], l["kind"])
        by_class.setdefault(l["cls"], []).append(l)
    out += ["", "By what the job was doing (the first that applies: idle "
            "node; within 10 min after the job ended, started or resumed; "
            "during a fault of its job; noisy job; slow steps; fp16; no "
            "train_phase markers; else steady training):", "",
            "| class | incidents | kinds (incidents) |", "|---|---|---|"]
    for cls, ls in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
        out.append("| %s | %d | %s |" % (cls, len(ls), counts(ls, "sev_kind")))
    by_kind = {}
    for l in false:
        by_kind.setdefault((l["severity"], l["kind"]), []).append(l)
    out += ["", "By kind:", "", "| severity | kind | incidents | classes "
            "(incidents) |", "|---|---|---|---|"]
    for (sev, kind), ls in sorted(by_kind.items(),
                                  key=lambda kv: (-len(kv[1]), kv[0])):
        out.append("| %s | %s | %d | %s |" % (sev, kind, len(ls),
                                              counts(ls, "cls")))
    out += ["", "<details><summary>Examples: up to %d false P0-P2 incidents "
            "of each kind and class</summary>" % EXAMPLES, "",
            "| run | id | severity | kind | job | node | gpu | t (h) | "
            "context |", "|---|---|---|---|---|---|---|---|---|"]
    shown, left = {}, 0
    for r in runs:
        for l in r["false"]:
            group = (l["severity"], l["kind"], l["cls"])
            shown[group] = shown.get(group, 0) + 1
            if shown[group] > EXAMPLES:
                left += 1
                continue
            out.append("| %gd@%gs | %s | %s | %s | %s | %s | %s | %.2f | %s |"
                       % (r["days"], r["interval"], l["id"], l["severity"],
                          l["kind"], l.get("job"), l.get("node"),
                          l.get("gpu"),
                          (l["ts"] - r["truth"]["start_ts"]) / 3600,
                          l["context"]))
    if left:
        out += ["", "(%d more; --keep DIR keeps every incident line and the "
                "truth)" % left]
    out += ["", "</details>"]
    return "\n".join(out)


def multi_job_main(args):
    if args.days is not None or args.interval is not None:
        shapes = [(args.days if args.days is not None else 1,
                   args.interval if args.interval is not None else 10.0,
                   args.seed if args.seed is not None else 1)]
    else:
        shapes = LONG_RUNS
    kinds = scenarios(args.sim)
    if args.rescore is not None:  # the runs kept in a directory
        bases = sorted(os.path.join(args.rescore, n[:-len(".meta.json")])
                       for n in os.listdir(args.rescore)
                       if n.endswith(".meta.json"))
        results = sorted((load_kept(b) for b in bases),
                         key=lambda r: (-r["days"], -r["interval"]))
        return report_cluster(args, results, kinds,
                              max(r["wall"] for r in results))
    started = time.monotonic()
    tmp_ctx = (tempfile.TemporaryDirectory() if args.keep is None else None)
    tmp = args.keep if args.keep is not None else tmp_ctx.name
    os.makedirs(tmp, exist_ok=True)
    try:
        results = [None] * len(shapes)
        errors = []

        def work(i, shape):
            try:
                results[i] = run_pipeline(args, shape[0], shape[1],
                                          shape[2], tmp)
            except Exception as e:  # reported below
                errors.append(e)
        threads = [threading.Thread(target=work, args=(i, shape))
                   for i, shape in enumerate(shapes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
    return report_cluster(args, results, kinds, time.monotonic() - started)


def report_cluster(args, results, kinds, wall):
    runs = [score_cluster(r) for r in results]
    scores = [s for r in runs for s in r["scores"]]
    node_days = sum(r["truth"]["node_days"] for r in runs)
    n_false = sum(len(r["false"]) for r in runs)
    recalled = sum(s["recalled"] for s in scores)
    runs_text = []
    for r in runs:
        t = r["truth"]
        runs_text.append(
            "- %g day(s) at %g-s frames, seed %d, %d nodes x %d GPUs: "
            "%d frames, %d samples, %.0f node-days, %d job runs (busy "
            "%.0f %% of node-time), %d faults (lemon: %s); pipeline wall "
            "time %.0f s; bad input lines %d.\n  `%s`" % (
                r["days"], r["interval"], r["seed"], len(t["nodes"]),
                t["gpus_per_node"], t["frames"], t["samples"],
                t["node_days"], len(t["jobs"]),
                100 * t.get("busy_fraction", 0), len(t["faults"]),
                ", ".join("%s gpu%d %s" % (l["node"], l["gpu"],
                                           "/".join(l["faults"]))
                          for l in t.get("lemons", [])) or "none",
                r["wall"], r["bad_lines"], r["command"]))
    cmd = "scripts/evaluate_detection.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:])
    # Repeat offenders: the truth's (the simulator's lemon and nodes whose
    # random faults made one) against the lemon_node incidents raised.
    offenders = []
    for r in runs:
        truth_nodes = ({l["node"] for l in r["truth"].get("lemons", [])} |
                       repeat_offenders(r["truth"]))
        raised = {line.get("node") for line in r["lines"] if line["kind"] == "lemon_node"}
        offenders.append("%g d: %d of %d found (%s)%s" % (
            r["days"], len(truth_nodes & raised), len(truth_nodes),
            ", ".join(sorted(truth_nodes)) or "none",
            "; not in the truth: " + ", ".join(sorted(raised - truth_nodes))
            if raised - truth_nodes else ""))
    text = ("Produced by `%s` in %.0f s of wall time (the pipelines ran in "
            "parallel):\n\n%s\n\n%s\n\n%d faults, recall %d/%d (%.0f %%).\n"
            "\nRepeat offenders (lemon_node): %s.\n"
            "\n%s" % (cmd, wall, "\n".join(runs_text),
                      cluster_table(runs, kinds), len(scores), recalled,
                      len(scores),
                      100.0 * recalled / len(scores) if scores else 100.0,
                      "; ".join(offenders), false_table(runs, node_days)))
    print(text)
    for r in runs:
        for line in r["sim_log"] + r["replay_log"]:
            print(line, file=sys.stderr)
    if args.write_doc:
        write_section(args.doc, CLUSTER_BEGIN, CLUSTER_END,
                      "### Cluster evaluation\n\n" + text, append=True)
    if args.check and (n_false != 0 or recalled != len(scores)):
        print("check failed: %d false P0-P2 incidents, recall %d/%d" %
              (n_false, recalled, len(scores)), file=sys.stderr)
        return 1
    return 0


def write_section(path, begin, end, text, append=False):
    """Replaces the text between `begin` and `end` in `path`; with
    `append`, adds the markers at the end of the file when missing."""
    with open(path) as f:
        doc = f.read()
    if begin not in doc:
        if not append:
            raise RuntimeError("%s: no %s" % (path, begin))
        doc = doc + ("" if doc.endswith("\n") else "\n") + "\n" + begin + \
            "\n" + end + "\n"
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(head + begin + "\n" + text + "\n" + end + tail)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build", help="CMake build directory")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--write-doc", action="store_true",
                   help="write the table into docs/DETECTION.md")
    p.add_argument("--only", help="comma-separated scenarios (debugging)")
    p.add_argument("--multi-job", action="store_true",
                   help="evaluate long multi-job cluster runs instead")
    p.add_argument("--days", type=float,
                   help="--multi-job: one run of this many days")
    p.add_argument("--interval", type=float,
                   help="--multi-job: one run with this frame interval (s)")
    p.add_argument("--seed", type=int, help="--multi-job: seed of that run")
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--faults-per-day", type=float,
                   help="--multi-job: vigil-sim's --faults-per-day")
    p.add_argument("--check", action="store_true",
                   help="--multi-job: exit 1 unless no false P0-P2 "
                   "incident and 100 %% recall")
    p.add_argument("--keep", metavar="DIR",
                   help="--multi-job: keep truth and incident files in DIR")
    p.add_argument("--rescore", metavar="DIR",
                   help="--multi-job: score the runs kept in DIR again "
                   "instead of running them")
    p.add_argument("--doc", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "docs",
        "DETECTION.md"), help=argparse.SUPPRESS)
    args = p.parse_args()
    args.sim = os.path.join(args.build, "agent", "vigil-sim")
    args.replay = os.path.join(args.build, "server", "vigil-replay")
    if args.multi_job:
        return multi_job_main(args)
    kinds = scenarios(args.sim)
    chosen = args.only.split(",") if args.only else kinds + ["healthy"]
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, args, s, shape, seed, tmp)
                   for s in chosen for shape in SHAPES for seed in shape[3]]
        results = [f.result() for f in futures]
    recall = [r for r in results if r["scenario"] != "healthy"]
    summary = ("%d fault runs, recall %d/%d; %d healthy runs; false alarms "
               "%d; bad input lines %d." % (
                   len(recall), sum(1 for r in recall if r["recalled"]),
                   len(recall), len(results) - len(recall),
                   sum(len(r["false_alarms"]) for r in results),
                   sum(r["bad_lines"] for r in results)))
    shapes = ", ".join("%s seeds %s" % (s[0], s[3]) for s in SHAPES)
    text = ("Shapes (nodes x GPUs @ frame interval): %s. Faults start %d s "
            "into the run (low_mfu: at the start) and get %d s; healthy runs "
            "last %d s.\n\n%s\n\n%s" % (shapes, FAULT_AT_S, AFTER_FAULT_S,
                                        HEALTHY_S, table(results, kinds),
                                        summary))
    print(text)
    if args.write_doc:
        write_section(args.doc, BEGIN, END, text)


if __name__ == "__main__":
    sys.exit(main())
