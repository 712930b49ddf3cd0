#!/usr/bin/env python3
"""Offline checks of the Grafana dashboards in deploy/grafana/.

Every deploy/grafana/*.json:
  - is valid JSON with what Grafana needs to load it: a uid (unique across
    the files, at most 40 of [A-Za-z0-9_-]), a title (unique), schemaVersion
    37-39, the tag "vigil" (the dashboards link to each other by it),
    templating.list, annotations.list and panels;
  - panels (rows' nested panels included) have unique integer ids, a type
    Grafana ships, a title, a gridPos inside the 24-column grid, and do not
    overlap; every query panel and every target uses the datasource
    variable ${datasource}, which is a "datasource" variable of type
    prometheus (so one file works with Prometheus and VictoriaMetrics);
  - query variables use ${datasource} and label_values(); the overview has
    job and node variables filled from label_values(..., job/node); every
    $variable an expression uses is defined (or is one of Grafana's own);
  - one dashboard has the three zones of the requirements (seeds: 红线告警区,
    性能调优区, 容量规划区) as rows titled "Red lines...", "Performance...",
    "Capacity...".
Every PromQL expression (panel targets, variable queries, annotations):
  - names only metrics Vigil produces. The expressions are tokenized
    (string literals, label matchers, ranges, numbers, durations, PromQL
    functions, aggregations and keywords skipped; by/without/on/ignoring/
    group_left/group_right label lists read as labels) and each remaining
    identifier is a metric name. Names of node series must carry a rollup
    suffix (:min_1m, :max_1m, :avg_1m, :count_1m: what vigil-server
    remote-writes; raw samples exist only for the metrics a deployment
    lists in remote_write.raw_metrics) and their base must be in the metric
    catalogue or a collector; vigil-server's self-metrics are scraped from
    its /metrics and must carry no suffix. The known names come from the
    sources, not from a list here: detector/metric_catalog.cc, quoted
    gpu_/net_/disk_/host_/train_/torch_ literals in the agent's collectors
    and training endpoint, python/vigil/client.py's step fields, and the
    families server/**/*.cc writes to /metrics (AppendFamily, family(),
    "# TYPE ..." lines). A typo or an invented metric fails;
  - counters (*_total, other than :count_1m) are read only through
    rate/irate/increase/resets over a range, and their rollup is :max_1m
    (the counter's value at the minute's end); gauges are never rate()d;
  - label names in matchers and grouping clauses are labels those series
    carry (node series: job, node and the collectors' gpu/dev; self-metrics:
    the labels server/**/*.cc writes, plus the scrape's instance and job);
  - parses as PromQL (promtool check rules, when promtool is installed;
    Debian: prometheus), with Grafana's variables substituted.
deploy/grafana/provisioning/{datasources,dashboards}.yaml (PyYAML; skipped
without it): a prometheus datasource with a URL and a file provider whose
path is absolute.

Then it breaks in-memory copies one check at a time and checks that each
break is reported (so the checks can fail).

Usage: grafana_dashboards_test.py [DIR]   DIR: the dashboards (default
deploy/grafana). Exit 0: passed, 1: a check failed.
"""
import contextlib
import copy
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import yaml
except ImportError:
    yaml = None

SRC = Path(__file__).resolve().parents[2]
ROLLUPS = (":min_1m", ":max_1m", ":avg_1m", ":count_1m")
DS_VARIABLES = ("${datasource}", "$datasource")
ZONES = (("red lines", r"^red lines\b"), ("performance", r"^performance\b"),
         ("capacity", r"^capacity\b"))
PANEL_TYPES = {"row", "timeseries", "stat", "table", "status-history",
               "state-timeline", "heatmap", "bargauge", "gauge", "text",
               "barchart", "piechart"}
# Grafana's own variables (no definition needed).
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__interval_ms", "__range",
                     "__range_s", "__range_ms", "__dashboard", "__from", "__to",
                     "__user", "__org", "__name", "timeFilter"}

# PromQL (Prometheus 2.42).
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile"}
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan",
    "atanh", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "cos", "cosh", "count_over_time", "days_in_month", "day_of_month", "day_of_week",
    "day_of_year", "deg", "delta", "deriv", "exp", "floor", "histogram_count",
    "histogram_fraction", "histogram_quantile", "histogram_sum", "holt_winters",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time",
    "ln", "log10", "log2", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate",
    "resets", "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_desc", "sqrt",
    "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time",
    "timestamp", "vector", "year"}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
OPERATOR_KEYWORDS = {"and", "or", "unless", "atan2", "bool", "offset"}
NUMBER_WORDS = {"inf", "nan"}
COUNTER_FUNCTIONS = {"rate", "irate", "increase", "resets"}
RATE_FUNCTIONS = {"rate", "irate", "increase"}


class Report:
    """Collects failed checks; prints each check when verbose."""

    def __init__(self, verbose):
        self.verbose = verbose
        self.failures = []
        self.checks = 0

    def check(self, what, ok, detail=""):
        self.checks += 1
        if not ok:
            print(f"FAIL {what}{': ' + detail if detail else ''}", flush=True)
            self.failures.append(what)
        elif self.verbose:
            print(f"ok   {what}", flush=True)
        return ok


# ---------------------------------------------------------------------------
# What Vigil produces, read from its sources.
# ---------------------------------------------------------------------------
NODE_PREFIXES = r"(?:gpu|net|disk|host|train|torch)_"
AGENT_SOURCES = ("agent/nvml_collector.cc", "agent/infiniband_collector.cc",
                 "agent/disk_collector.cc", "agent/cpu_collector.cc",
                 "agent/training_ranks.cc", "agent/training_endpoint.cc",
                 "agent/training_protocol.cc")
# Files whose {{"label", ...}} initialisers are series labels.
LABEL_SOURCES = ("agent/nvml_collector.cc", "agent/infiniband_collector.cc",
                 "agent/disk_collector.cc", "agent/cpu_collector.cc",
                 "agent/training_ranks.cc")


class Known:
    """Metric and label names found in the sources."""

    def __init__(self, src):
        self.problems = []
        read = self._reader(src)
        catalog = read("detector/metric_catalog.cc")
        self.catalog = set(re.findall(
            r'\{\s*"([a-z][a-z0-9_]*)"\s*,\s*(?:T|Train|Precise|Relearn|NodeErrors)\(', catalog))
        collected = set()
        for path in AGENT_SOURCES:
            collected |= set(re.findall(rf'"({NODE_PREFIXES}[a-z0-9_]+)"', read(path)))
        client = read("python/vigil/client.py")
        fields = re.search(r"STEP_FIELDS\s*=\s*\(([^)]*)\)", client)
        if fields is None:
            self.problems.append("python/vigil/client.py: no STEP_FIELDS")
        else:
            for f in re.findall(r'"(\w+)"', fields.group(1)):
                collected.add(f if f.startswith("torch_") else "train_" + f)
        self.node = self.catalog | collected
        labels = set()
        for path in LABEL_SOURCES:
            labels |= set(re.findall(r'\{\{\s*"([a-z_]+)"\s*,', read(path)))
        # job comes from the frame, node from the stream's hello
        # (server/ingest/ingest_service.cc); remote write keeps both.
        self.node_labels = labels | {"job", "node"}
        self.self_metrics = set()
        self.self_labels = {"instance", "job"}  # added by the scrape
        server = sorted((src / "server").rglob("*.cc"))
        if not server:
            self.problems.append("no server/**/*.cc")
        for path in server:
            text = path.read_text(errors="replace")
            self.self_metrics |= set(re.findall(
                r'AppendFamily\(\s*&?\w+\s*,\s*"(vigil_\w+)"', text))
            self.self_metrics |= set(re.findall(r'\bfamily\(\s*"(vigil_\w+)"', text))
            self.self_metrics |= set(re.findall(r"# TYPE (vigil_\w+) ", text))
            self.self_labels |= set(re.findall(r'[{,](\w+)=\\"', text))

    def _reader(self, src):
        def read(rel):
            try:
                return (src / rel).read_text(errors="replace")
            except OSError as e:
                self.problems.append(f"{rel}: {e.strerror}")
                return ""
        return read

    def family(self, base):
        if base in self.self_metrics:
            return "self"
        if base in self.node:
            return "node"
        return None


# ---------------------------------------------------------------------------
# PromQL tokenizer.
# ---------------------------------------------------------------------------
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
                    r"(?:(?:ms|s|m|h|d|w|y)(?:\d+(?:ms|s|m|h|d|w|y))*)?")
MATCHER_LABEL = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")
GRAFANA_VAR = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")


def variables_in(text):
    return {a or b or c for a, b, c in GRAFANA_VAR.findall(text)}


def tokenize(expr):
    """[(kind, value)]: kinds ident, number, str, selector (label names),
    range, '(' ')' ',' and op. Raises ValueError on what cannot be scanned."""
    out, i, n = [], 0, len(expr)
    while i < n:
        c = expr[i]
        if c.isspace():
            i += 1
        elif c in "\"'`":
            j = i + 1
            while j < n and expr[j] != c:
                j += 2 if expr[j] == "\\" and c != "`" else 1
            if j >= n:
                raise ValueError(f"unterminated string at {i}")
            out.append(("str", expr[i:j + 1]))
            i = j + 1
        elif c == "{":
            j, body = i + 1, []
            while j < n and expr[j] != "}":
                if expr[j] in "\"'`":
                    q, k = expr[j], j + 1
                    while k < n and expr[k] != q:
                        k += 2 if expr[k] == "\\" else 1
                    body.append(" S ")
                    j = k + 1
                else:
                    body.append(expr[j])
                    j += 1
            if j >= n:
                raise ValueError(f"unclosed '{{' at {i}")
            out.append(("selector", MATCHER_LABEL.findall("".join(body))))
            i = j + 1
        elif c == "[":
            j = expr.find("]", i)
            if j < 0:
                raise ValueError(f"unclosed '[' at {i}")
            out.append(("range", expr[i + 1:j]))
            i = j + 1
        elif c in "(),":
            out.append((c, c))
            i += 1
        elif c == "@":
            out.append(("op", c))
            i += 1
        elif IDENT.match(expr, i) and not c.isdigit():
            m = IDENT.match(expr, i)
            out.append(("ident", m.group()))
            i = m.end()
        elif NUMBER.match(expr, i):
            m = NUMBER.match(expr, i)
            out.append(("number", m.group()))
            i = m.end()
        elif expr.startswith(("==", "!=", ">=", "<=", "=~", "!~"), i):
            out.append(("op", expr[i:i + 2]))
            i += 2
        elif c in "+-*/%^<>":
            out.append(("op", c))
            i += 1
        else:
            raise ValueError(f"unexpected {c!r} at {i}")
    return out


class Use:
    """One metric selector in an expression."""

    def __init__(self, name, labels, has_range, function):
        self.name = name
        self.labels = labels
        self.has_range = has_range
        self.function = function  # innermost enclosing function call, or ""


def parse(expr):
    """(uses, grouping_labels, errors) of a PromQL expression."""
    try:
        toks = tokenize(expr)
    except ValueError as e:
        return [], [], [str(e)]
    uses, grouping, errors = [], [], []
    stack = []        # one entry per open '(': the function's name or ""
    pending = ""      # a function or aggregation waiting for its '('
    i = 0
    while i < len(toks):
        kind, value = toks[i]
        nxt = toks[i + 1][0] if i + 1 < len(toks) else None
        if kind == "ident" and value in LABEL_LIST_KEYWORDS:
            if nxt != "(":
                if value in ("group_left", "group_right"):
                    i += 1
                    continue
                errors.append(f"'{value}' without a label list")
                i += 1
                continue
            j = i + 2
            while j < len(toks) and toks[j][0] != ")":
                if toks[j][0] == "ident":
                    grouping.append(toks[j][1])
                elif toks[j][0] != ",":
                    errors.append(f"unexpected {toks[j][1]!r} in {value}(...)")
                j += 1
            if j >= len(toks):
                errors.append(f"unclosed {value}(")
            i = j + 1
            continue
        if kind == "ident" and value.lower() in OPERATOR_KEYWORDS | NUMBER_WORDS:
            i += 1
            continue
        if kind == "ident" and value in ("start", "end") and i > 0 and toks[i - 1][1] == "@":
            pending = value
            i += 1
            continue
        if kind == "ident" and (nxt == "(" or value in AGGREGATIONS):
            if value not in AGGREGATIONS and value not in FUNCTIONS:
                errors.append(f"unknown function {value}()")
            pending = value
            i += 1
            continue
        if kind == "ident":
            labels, has_range, j = [], False, i + 1
            if j < len(toks) and toks[j][0] == "selector":
                labels = toks[j][1]
                j += 1
            if j < len(toks) and toks[j][0] == "range":
                has_range = True
                j += 1
            function = next((f for f in reversed(stack) if f), "")
            uses.append(Use(value, labels, has_range, function))
            i = j
            continue
        if kind == "selector":
            errors.append("a selector without a metric name ({...}): its metric cannot be checked")
        elif kind == "(":
            stack.append(pending)
            pending = ""
        elif kind == ")":
            if not stack:
                errors.append("unbalanced ')'")
            else:
                stack.pop()
        i += 1
    if stack:
        errors.append("unclosed '('")
    return uses, grouping, errors


def check_expr(r, where, expr, known, values=True):
    """Checks one PromQL expression (Grafana variables allowed). values:
    False for a variable's label_values(), whose values are not read."""
    # Variables in strings and ranges are skipped with them; a bare one
    # stands for a number.
    plain = GRAFANA_VAR.sub("1", expr)
    uses, grouping, errors = parse(plain)
    r.check(f"{where}: parses", not errors, "; ".join(errors) + f" in {expr!r}")
    r.check(f"{where}: names a metric", bool(uses), expr)
    families, unknown = set(), False
    for u in uses:
        base, suffix = u.name, ""
        if ":" in u.name:
            base, _, rest = u.name.partition(":")
            suffix = ":" + rest
        if suffix and not r.check(f"{where}: {u.name}: a rollup Vigil writes",
                                  suffix in ROLLUPS, f"suffix {suffix} not one of {ROLLUPS}"):
            continue
        family = known.family(base)
        unknown |= family is None
        if not r.check(f"{where}: {base}: a metric Vigil produces", family is not None,
                       f"{base!r} is in no catalogue, collector or /metrics family "
                       f"(in {expr!r})"):
            continue
        families.add(family)
        if family == "self":
            r.check(f"{where}: {u.name}: self-metric scraped as is", not suffix,
                    "vigil-server's /metrics is scraped, not rolled up: drop the suffix")
            allowed = known.self_labels
        else:
            r.check(f"{where}: {u.name}: a node series with a rollup suffix", bool(suffix),
                    f"raw {base} exists only if remote_write.raw_metrics lists it: "
                    f"use {base}:avg_1m (or min/max/count)")
            allowed = known.node_labels
        counter = base.endswith("_total") and suffix != ":count_1m"
        if values and counter:
            r.check(f"{where}: {u.name}: counter read through rate/increase",
                    u.has_range and u.function in COUNTER_FUNCTIONS,
                    f"a counter's value is its count since the agent/server started: "
                    f"wrap it as rate({u.name}[...]) or increase(...) (in {expr!r})")
            if suffix:
                r.check(f"{where}: {u.name}: counter rollup is :max_1m", suffix == ":max_1m",
                        "the minute's last counter value is its :max_1m")
        elif values:
            r.check(f"{where}: {u.name}: gauge not rate()d",
                    u.function not in RATE_FUNCTIONS,
                    f"{u.function}() of a gauge (in {expr!r})")
        bad = sorted(set(u.labels) - allowed)
        r.check(f"{where}: {u.name}: matcher labels exist", not bad,
                f"{bad} not among {sorted(allowed)}")
    if unknown:
        return  # the labels of an unknown metric are unknown too
    allowed = set()
    for f in families:
        allowed |= known.self_labels if f == "self" else known.node_labels
    bad = sorted(set(grouping) - allowed)
    r.check(f"{where}: grouping labels exist", not bad,
            f"{bad} not among {sorted(allowed)} (in {expr!r})")


def for_promtool(expr):
    """The expression with Grafana's variables replaced by valid PromQL."""
    def in_strings(m):
        return GRAFANA_VAR.sub(".*", m.group())
    expr = re.sub(r'"(?:\\.|[^"\\])*"', in_strings, expr)
    expr = re.sub(r"\$\{?__\w+\}?", "5m", expr)
    return GRAFANA_VAR.sub("1", expr)


# ---------------------------------------------------------------------------
# Dashboards.
# ---------------------------------------------------------------------------
def load_dashboards(folder):
    """{file name: parsed JSON or the parse error (str)}."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        try:
            out[path.name] = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            out[path.name] = f"{type(e).__name__}: {e}"
    return out


def all_panels(panels):
    for p in panels or []:
        yield p
        if isinstance(p, dict) and p.get("type") == "row":
            yield from all_panels(p.get("panels"))


def uses_ds_variable(ds):
    if isinstance(ds, str):
        return ds in DS_VARIABLES
    return (isinstance(ds, dict) and ds.get("uid") in DS_VARIABLES
            and ds.get("type", "prometheus") == "prometheus")


def variable_query(v):
    q = v.get("query")
    if isinstance(q, dict):
        q = q.get("query")
    return q if isinstance(q, str) else ""


def exprs_of(board):
    """(where, expr, values) of every PromQL expression of a dashboard;
    values is False for label_values(), which reads only labels."""
    out = []
    for p in all_panels(board.get("panels")):
        if not isinstance(p, dict):
            continue
        for t in p.get("targets") or []:
            if isinstance(t, dict) and t.get("expr"):
                out.append((f"panel {p.get('id')} '{p.get('title')}' {t.get('refId')}",
                            t["expr"], True))
    for v in (board.get("templating") or {}).get("list") or []:
        if isinstance(v, dict) and v.get("type") == "query":
            q = variable_query(v)
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q, re.S)
            if m:
                out.append((f"variable ${v.get('name')}", m.group(1), False))
            elif (m := re.fullmatch(r"\s*query_result\((.*)\)\s*", q, re.S)):
                out.append((f"variable ${v.get('name')}", m.group(1), True))
    for a in (board.get("annotations") or {}).get("list") or []:
        if isinstance(a, dict) and not a.get("builtIn"):
            expr = a.get("expr") or (a.get("target") or {}).get("expr")
            if expr:
                out.append((f"annotation '{a.get('name')}'", expr, True))
    return out


def check_board(r, name, board, known):
    if not r.check(f"{name}: is a JSON object", isinstance(board, dict), str(board)):
        return
    uid = board.get("uid")
    r.check(f"{name}: uid", isinstance(uid, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid),
            repr(uid))
    r.check(f"{name}: title", isinstance(board.get("title"), str) and board["title"].strip(),
            repr(board.get("title")))
    sv = board.get("schemaVersion")
    r.check(f"{name}: schemaVersion 37-39", isinstance(sv, int) and 37 <= sv <= 39, repr(sv))
    r.check(f"{name}: tagged vigil", "vigil" in (board.get("tags") or []),
            repr(board.get("tags")))
    templating = (board.get("templating") or {}).get("list")
    annotations = (board.get("annotations") or {}).get("list")
    r.check(f"{name}: templating.list", isinstance(templating, list))
    r.check(f"{name}: annotations.list", isinstance(annotations, list))
    panels = board.get("panels")
    if not r.check(f"{name}: panels", isinstance(panels, list) and panels):
        return
    templating = [v for v in templating or [] if isinstance(v, dict)]
    annotations = [a for a in annotations or [] if isinstance(a, dict)]

    # Variables.
    defined = {v.get("name") for v in templating}
    ds = [v for v in templating if v.get("name") == "datasource"]
    r.check(f"{name}: $datasource is a prometheus datasource variable",
            len(ds) == 1 and ds[0].get("type") == "datasource"
            and ds[0].get("query") == "prometheus", repr(ds))
    for v in templating:
        if v.get("type") != "query":
            continue
        where = f"{name}: variable ${v.get('name')}"
        r.check(f"{where}: uses ${{datasource}}", uses_ds_variable(v.get("datasource")),
                repr(v.get("datasource")))
        r.check(f"{where}: label_values() query",
                re.match(r"\s*label_values\(", variable_query(v)) is not None,
                repr(variable_query(v)))
    referenced = set()
    for _, expr, _ in exprs_of(board):
        referenced |= variables_in(expr)
    for v in templating:
        referenced |= variables_in(variable_query(v))
    undefined = sorted(referenced - defined - BUILTIN_VARIABLES)
    r.check(f"{name}: every $variable used is defined", not undefined, repr(undefined))

    # Panels.
    flat = [p for p in all_panels(panels)]
    r.check(f"{name}: panels are objects", all(isinstance(p, dict) for p in flat))
    flat = [p for p in flat if isinstance(p, dict)]
    ids = [p.get("id") for p in flat]
    r.check(f"{name}: panel ids are integers", all(isinstance(i, int) for i in ids), repr(ids))
    dup = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    r.check(f"{name}: panel ids unique", not dup, repr(dup))
    for p in flat:
        where = f"{name}: panel {p.get('id')} '{p.get('title')}'"
        r.check(f"{where}: known type", p.get("type") in PANEL_TYPES, repr(p.get("type")))
        r.check(f"{where}: title", isinstance(p.get("title"), str) and p["title"].strip())
        g = p.get("gridPos")
        ok = (isinstance(g, dict) and all(isinstance(g.get(k), int) for k in "xywh")
              and g["x"] >= 0 and g["y"] >= 0 and g["w"] >= 1 and g["h"] >= 1
              and g["x"] + g["w"] <= 24)
        r.check(f"{where}: gridPos in the 24-column grid", ok, repr(g))
        if p.get("type") in ("row", "text"):
            continue
        r.check(f"{where}: datasource is ${{datasource}}", uses_ds_variable(p.get("datasource")),
                repr(p.get("datasource")))
        targets = p.get("targets")
        if not r.check(f"{where}: has targets", isinstance(targets, list) and targets):
            continue
        refs = [t.get("refId") for t in targets if isinstance(t, dict)]
        r.check(f"{where}: refIds unique", len(refs) == len(set(refs)) == len(targets),
                repr(refs))
        for t in targets:
            if not isinstance(t, dict):
                continue
            r.check(f"{where} {t.get('refId')}: has an expr",
                    isinstance(t.get("expr"), str) and t["expr"].strip())
            if "datasource" in t:
                r.check(f"{where} {t.get('refId')}: datasource is ${{datasource}}",
                        uses_ds_variable(t["datasource"]), repr(t["datasource"]))
    check_overlaps(r, name, panels)
    for row in (p for p in panels if isinstance(p, dict) and p.get("type") == "row"):
        if row.get("collapsed"):
            check_overlaps(r, f"{name}: row '{row.get('title')}'", row.get("panels") or [])

    # Annotations.
    for a in annotations:
        if a.get("builtIn"):
            continue
        where = f"{name}: annotation '{a.get('name')}'"
        r.check(f"{where}: datasource is ${{datasource}}", uses_ds_variable(a.get("datasource")),
                repr(a.get("datasource")))
        r.check(f"{where}: has an expr",
                bool(a.get("expr") or (a.get("target") or {}).get("expr")))

    for where, expr, values in exprs_of(board):
        check_expr(r, f"{name}: {where}", expr, known, values)


def check_overlaps(r, name, panels):
    boxes = []
    for p in panels:
        g = p.get("gridPos") if isinstance(p, dict) else None
        if isinstance(g, dict) and all(isinstance(g.get(k), int) for k in "xywh"):
            boxes.append((p.get("id"), g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"]))
    clash = [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
             if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]]
    r.check(f"{name}: panels do not overlap", not clash, f"panel ids {clash}")


def check_dashboards(r, boards, known):
    if not r.check("deploy/grafana has dashboards", bool(boards)):
        return
    for name, board in boards.items():
        check_board(r, name, board, known)
    good = {n: b for n, b in boards.items() if isinstance(b, dict)}
    for field in ("uid", "title"):
        values = [b.get(field) for b in good.values()]
        dup = sorted({v for v in values if values.count(v) > 1}, key=str)
        r.check(f"dashboard {field}s unique across files", not dup, repr(dup))
    # The three zones, as rows of one dashboard.
    with_zones = []
    for name, b in good.items():
        rows = [p.get("title", "") for p in all_panels(b.get("panels"))
                if isinstance(p, dict) and p.get("type") == "row"]
        missing = [z for z, pattern in ZONES
                   if not any(re.search(pattern, t, re.I) for t in rows)]
        if not missing:
            with_zones.append(name)
    r.check("a dashboard has the rows Red lines, Performance and Capacity", bool(with_zones),
            "no dashboard has all three zone rows")
    # The overview's filters.
    for name in with_zones:
        variables = {v.get("name"): variable_query(v)
                     for v in (good[name].get("templating") or {}).get("list") or []
                     if isinstance(v, dict)}
        for var in ("job", "node"):
            r.check(f"{name}: ${var} from label_values(..., {var})",
                    re.fullmatch(rf"\s*label_values\(.*,\s*{var}\s*\)\s*",
                                 variables.get(var, ""), re.S) is not None,
                    repr(variables.get(var)))


def check_promql_syntax(r, boards):
    """promtool check rules over every expression; None when no promtool."""
    promtool = shutil.which("promtool")
    if promtool is None:
        print("SKIP PromQL syntax (no promtool; Debian: prometheus)")
        return
    exprs = [(f"{name}: {where}", expr) for name, b in boards.items() if isinstance(b, dict)
             for where, expr, _ in exprs_of(b)]
    if not exprs:
        return
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.yml"
        lines = ["groups:", "- name: dashboards", "  rules:"]
        for i, (_, expr) in enumerate(exprs):
            lines += [f"  - record: expr_{i}", f"    expr: {json.dumps(for_promtool(expr))}"]
        rules.write_text("\n".join(lines) + "\n")
        out = subprocess.run([promtool, "check", "rules", str(rules)],
                             capture_output=True, text=True, timeout=60)
    bad = {int(m) for m in re.findall(r'rule (\d+), "expr_', out.stdout + out.stderr)}
    for i, (where, expr) in enumerate(exprs):
        r.check(f"{where}: promtool parses it", i + 1 not in bad,
                f"{expr!r}: " + "; ".join(l for l in (out.stdout + out.stderr).splitlines()
                                          if f'"expr_{i}"' in l))
    r.check("promtool check rules passes", out.returncode == 0 or bad,
            (out.stdout + out.stderr)[-500:])


def check_provisioning(r, folder):
    prov = folder / "provisioning"
    if yaml is None:
        print("SKIP provisioning files (no PyYAML; Debian: python3-yaml)")
        return
    docs = {}
    for name in ("datasources.yaml", "dashboards.yaml"):
        try:
            docs[name] = yaml.safe_load((prov / name).read_text())
            r.check(f"provisioning/{name} parses", isinstance(docs[name], dict))
        except (OSError, yaml.YAMLError) as e:
            r.check(f"provisioning/{name} parses", False, str(e))
    ds = docs.get("datasources.yaml")
    if isinstance(ds, dict):
        entries = [d for d in ds.get("datasources") or [] if isinstance(d, dict)]
        prom = [d for d in entries if d.get("type") == "prometheus"]
        r.check("datasources.yaml: apiVersion 1", ds.get("apiVersion") == 1)
        r.check("datasources.yaml: a prometheus datasource with an http(s) url",
                any(re.match(r"https?://", str(d.get("url", ""))) for d in prom), repr(entries))
    db = docs.get("dashboards.yaml")
    if isinstance(db, dict):
        providers = [p for p in db.get("providers") or [] if isinstance(p, dict)]
        r.check("dashboards.yaml: apiVersion 1", db.get("apiVersion") == 1)
        r.check("dashboards.yaml: a file provider with an absolute path",
                any(p.get("type", "file") == "file"
                    and str((p.get("options") or {}).get("path", "")).startswith("/")
                    for p in providers), repr(providers))


def check_sources(r, known):
    """The extraction must have found what it looks for, or every name check
    below would fail (or, worse, pass) for the wrong reason."""
    r.check("the sources were read", not known.problems, "; ".join(known.problems))
    r.check("found the metric catalogue (detector/metric_catalog.cc)",
            {"gpu_power_watts", "gpu_ecc_dbe_total", "train_mfu_ratio"} <= known.catalog,
            f"{len(known.catalog)} names")
    r.check("found the collectors' metrics",
            {"net_link_up", "disk_write_bytes_total", "host_cpu_iowait_ratio",
             "torch_reserved_bytes", "train_step_time_seconds"} <= known.node,
            f"{len(known.node)} names")
    r.check("found vigil-server's /metrics families",
            {"vigil_incident_updates_total", "vigil_incidents_open",
             "vigil_remote_write_pending_samples", "vigil_watchdog_heartbeats_total",
             "vigil_ingest_agent_dropped_batches_total"} <= known.self_metrics,
            f"{len(known.self_metrics)} names")
    r.check("found the series labels", {"job", "node", "gpu", "dev"} <= known.node_labels,
            repr(sorted(known.node_labels)))
    r.check("found the self-metrics' labels", {"severity", "type", "reason"} <= known.self_labels,
            repr(sorted(known.self_labels)))


# ---------------------------------------------------------------------------
# Self-test: each break of a copy must be reported.
# ---------------------------------------------------------------------------
def first_target(boards, title_part=None):
    for b in boards.values():
        for p in all_panels(b.get("panels")):
            if p.get("targets") and (title_part is None or title_part in p.get("title", "")):
                return p["targets"][0]
    raise KeyError(title_part)


def first_panel(boards, kind):
    for b in boards.values():
        for p in all_panels(b.get("panels")):
            if p.get("type") == kind:
                return p
    raise KeyError(kind)


def sub_expr(target, old, new):
    if old not in target["expr"]:
        raise ValueError(f"{old!r} not in {target['expr']!r}")
    target["expr"] = target["expr"].replace(old, new, 1)


def overview(boards):
    for b in boards.values():
        if any(p.get("type") == "row" and re.search(ZONES[0][1], p.get("title", ""), re.I)
               for p in all_panels(b.get("panels"))):
            return b
    raise KeyError("no overview")


def annotation(boards):
    return next(a for b in boards.values() for a in b["annotations"]["list"]
                if not a.get("builtIn") and a.get("expr"))


def variable(boards, name):
    return next(v for v in overview(boards)["templating"]["list"] if v["name"] == name)


def set_variable_query(v, q):
    v["query"] = q if isinstance(v.get("query"), str) else {**v["query"], "query": q}
    v["definition"] = q


def mutations():
    """(what, change) pairs; each change breaks one check of a copy."""
    def power(b):
        return first_target(b, "minute mean")

    def renamed_row(b):
        row = next(p for p in overview(b)["panels"]
                   if p.get("type") == "row" and re.search("^capacity", p["title"], re.I))
        row["title"] = "Storage"

    return [
        ("misspelt metric", lambda b: sub_expr(power(b), "gpu_power_watts", "gpu_power_watt")),
        ("invented metric (disk free)",
         lambda b: power(b).__setitem__("expr", 'disk_free_bytes:avg_1m{node=~"$node"}')),
        ("misspelt self-metric",
         lambda b: sub_expr(first_target(b, "Open incidents by severity"),
                            "vigil_incidents_open", "vigil_incident_open")),
        ("unknown rollup suffix", lambda b: sub_expr(power(b), ":avg_1m", ":avg_5m")),
        ("raw node metric (no rollup)", lambda b: sub_expr(power(b), ":avg_1m", "")),
        ("self-metric with a rollup suffix",
         lambda b: sub_expr(first_target(b, "Open incidents by severity"),
                            "vigil_incidents_open", "vigil_incidents_open:avg_1m")),
        ("counter read without rate",
         lambda b: power(b).__setitem__("expr", 'gpu_xid_errors_total:max_1m{node=~"$node"} > 0')),
        ("counter rollup other than max",
         lambda b: sub_expr(first_target(b, "Disk read throughput"), ":max_1m", ":avg_1m")),
        ("rate of a gauge",
         lambda b: power(b).__setitem__("expr", 'rate(gpu_power_watts:avg_1m[5m])')),
        ("unknown label in a matcher", lambda b: sub_expr(power(b), "node=~", "host=~")),
        ("unknown label in by()",
         lambda b: sub_expr(first_target(b, "Disk read throughput"), "by (node, dev)",
                            "by (node, device)")),
        ("unknown function", lambda b: sub_expr(first_target(b, "Disk read throughput"),
                                                "rate(", "rat(")),
        ("unbalanced parentheses", lambda b: sub_expr(first_target(b, "Disk read throughput"),
                                                      "sum by (node, dev) (", "sum by (node, dev) ((")),
        ("selector without a metric name",
         lambda b: power(b).__setitem__("expr", '{__name__="gpu_power_watts:avg_1m"}')),
        ("misspelt metric in a variable query",
         lambda b: set_variable_query(variable(b, "node"), re.sub(
             r"gpu_\w+", "gpu_temprature_celsius", variable_query(variable(b, "node")), 1))),
        ("misspelt metric in an annotation",
         lambda b: annotation(b).__setitem__("expr", annotation(b)["expr"].replace(
             "vigil_", "vigl_", 1))),
        ("undefined variable", lambda b: sub_expr(power(b), "$node", "$nodes")),
        ("no $node variable",
         lambda b: overview(b)["templating"].__setitem__(
             "list", [v for v in overview(b)["templating"]["list"] if v["name"] != "node"])),
        ("job variable not from label_values",
         lambda b: set_variable_query(variable(b, "job"), "query_result(up)")),
        ("hard-coded datasource",
         lambda b: first_panel(b, "timeseries").__setitem__(
             "datasource", {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"})),
        ("hard-coded datasource in a target",
         lambda b: power(b).__setitem__("datasource", {"type": "prometheus", "uid": "abc"})),
        ("datasource variable of another type",
         lambda b: next(v for v in overview(b)["templating"]["list"]
                        if v["name"] == "datasource").__setitem__("query", "loki")),
        ("duplicate panel id",
         lambda b: first_panel(b, "stat").__setitem__("id", first_panel(b, "timeseries")["id"])),
        ("panel without gridPos", lambda b: first_panel(b, "stat").pop("gridPos")),
        ("panel wider than the grid",
         lambda b: first_panel(b, "stat")["gridPos"].__setitem__("x", 22)),
        ("overlapping panels",
         lambda b: first_panel(b, "table")["gridPos"].__setitem__(
             "y", first_panel(b, "stat")["gridPos"]["y"])),
        ("unknown panel type", lambda b: first_panel(b, "stat").__setitem__("type", "stats")),
        ("duplicate uid across files",
         lambda b: [d.__setitem__("uid", "vigil") for d in b.values()]),
        ("schemaVersion 16", lambda b: overview(b).__setitem__("schemaVersion", 16)),
        ("capacity zone gone", renamed_row),
        ("panel without targets", lambda b: first_panel(b, "timeseries").__setitem__("targets", [])),
    ]


def main():
    folder = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else SRC / "deploy" / "grafana"
    r = Report(verbose=True)
    known = Known(SRC)
    check_sources(r, known)
    boards = load_dashboards(folder)
    check_dashboards(r, boards, known)
    check_promql_syntax(r, boards)
    check_provisioning(r, folder)

    # The checks must be able to fail: each broken copy of dashboards that
    # pass must be reported.
    good = {n: b for n, b in boards.items() if isinstance(b, dict)}
    if r.failures:
        print("SKIP self-test: the dashboards fail already")
        good = None
    for what, change in mutations() if good else []:
        broken = copy.deepcopy(good)
        try:
            change(broken)
        except (KeyError, StopIteration, IndexError, ValueError, TypeError) as e:
            r.check(f"self-test: can break the dashboards: {what}", False, repr(e))
            continue
        quiet = Report(verbose=False)
        with contextlib.redirect_stdout(io.StringIO()):
            check_dashboards(quiet, broken, known)
        r.check(f"self-test: '{what}' is reported", bool(quiet.failures),
                "; ".join(quiet.failures[:3]))

    if r.failures:
        print(f"{len(r.failures)} of {r.checks} checks failed")
        return 1
    print(f"all {r.checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
