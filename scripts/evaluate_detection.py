#!/usr/bin/env python3
"""Detection quality over the simulated fault suite.

For every fault scenario of vigil-sim x a few seeds x cluster shapes, runs
vigil-sim (frames + truth), vigil-replay (incidents), and scores the
incidents against the truth with the criteria of docs/DETECTION.md (the same
as tests/replay/scenario_replay.cc):

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
"""

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile

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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build", help="CMake build directory")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--write-doc", action="store_true",
                   help="write the table into docs/DETECTION.md")
    p.add_argument("--only", help="comma-separated scenarios (debugging)")
    args = p.parse_args()
    args.sim = os.path.join(args.build, "agent", "vigil-sim")
    args.replay = os.path.join(args.build, "server", "vigil-replay")
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
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                            "docs", "DETECTION.md")
        with open(path) as f:
            doc = f.read()
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(path, "w") as f:
            f.write(head + BEGIN + "\n" + text + "\n" + END + tail)


if __name__ == "__main__":
    sys.exit(main())
