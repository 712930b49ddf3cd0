"""Shared machinery of the reliability drills: real binaries on loopback.

Everything a drill starts lives in its own process group and is killed
(SIGKILL to the group) when the drill ends, passes or fails; mounts it made
are undone; its temporary directory is removed unless it failed or --keep
was given.
"""
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]
RECEIVERS = SRC / "tests" / "e2e" / "receivers.py"

BINARIES = {  # name -> subdirectory of a CMake build
    "vigil-server": "server", "vigil-agent": "agent", "vigil-sim": "agent",
    "vigil-actuator": "actuator", "vigilctl": "ctl", "vigil-replay": "server",
}


class DrillError(Exception):
    """A drill could not run (setup broke); checks that fail are recorded."""


class Skip(Exception):
    pass


def find_binary(build, name):
    for candidate in (Path(build) / BINARIES[name] / name, Path(build) / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise DrillError(f"{name} not found under {build} (looked in {BINARIES[name]}/ and .)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def http(url, method="GET", body=None, timeout=10, headers=None):
    """Returns (status, parsed JSON or text); status 0 when unreachable."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (OSError, ValueError):
        return 0, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def parse_metrics(text):
    out = {}
    for line in (text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def wait_until(predicate, timeout, interval=0.5):
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() >= deadline:
            return value
        time.sleep(interval)


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))]


def _die_with_parent():
    """Children die with the runner even when it is SIGKILLed (a ctest timeout)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


class Proc:
    def __init__(self, env, name, argv, extra_env=None):
        self.name, self.argv = name, argv
        self.log_path = env.dir / f"{name}.log"
        e = dict(os.environ)
        e.update(extra_env or {})
        # The child keeps its own copy of the log; the runner closes its
        # one at once, or a soak of 1,000+ agents runs it out of descriptors
        # (its proxy's sockets then fail to open).
        with open(self.log_path, "ab") as logf:
            self.p = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=e, start_new_session=True,
                                      preexec_fn=_die_with_parent)
        self.pid = self.p.pid

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self):
        self.signal(signal.SIGKILL)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, timeout=15):
        self.signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        return self.p.returncode

    def tail(self, n=20):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class Env:
    """One drill's processes, threads, mounts and temporary directory."""

    def __init__(self, name, bins, keep=False):
        self.name, self.bins, self.keep = name, bins, keep
        self.dir = Path(tempfile.mkdtemp(prefix=f"vigil-drill-{name}."))
        self.procs, self.mounts, self.closers = [], [], []
        self.failed = False

    def spawn(self, name, argv, extra_env=None):
        p = Proc(self, name, argv, extra_env)
        self.procs.append(p)
        return p

    def cleanup(self):
        for c in reversed(self.closers):
            try:
                c()
            except Exception:  # noqa: BLE001 - cleanup goes on
                pass
        for p in self.procs:
            if p.alive():
                p.signal(signal.SIGKILL)
        for p in self.procs:
            try:
                p.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
        if self.keep or self.failed:
            log(f"{self.name}: kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


# --- the pieces -------------------------------------------------------------

P_POLICY = {"steps": [{"targets": ["schedule:primary"], "channels": ["sms", "im", "pagerduty"],
                       "wait_minutes": 0.2, "repeat": 2}]}


def server_config(env, data_dir, receivers_url=None, actuator_url=None, secret_file=None,
                  rate_per_minute=None, extra=None):
    gport, hport = free_port(), free_port()
    cfg = {"data_dir": str(data_dir), "grpc_listen": f"127.0.0.1:{gport}",
           "http_listen": f"127.0.0.1:{hport}", "grpc_insecure": True}
    if receivers_url:
        r = receivers_url
        slack = {"name": "slack", "type": "slack", "settings": {"url": f"{r}/slack"}}
        if rate_per_minute:
            slack["rate_per_minute"] = rate_per_minute
        cfg["escalation"] = {
            "users": [{"name": "alice", "phone": "+15550001"}],
            "schedules": [{"name": "primary", "layers": [{
                "name": "w", "rotation": "weekly", "start": "2026-01-05T09:00:00Z",
                "users": ["alice"]}]}],
            "policies": {s: P_POLICY for s in ("P0", "P1", "P2")}}
        cfg["notifications"] = {
            "retry_base_seconds": 1, "retry_max_seconds": 4,
            "receivers": [
                {"name": "twilio-sms", "type": "twilio_sms", "settings": {
                    "account_sid": "AC00000000000000000000000000000001",
                    "auth_token": "twilio-token", "from": "+15550000",
                    "base_url": f"{r}/twilio"}},
                slack,
                {"name": "pagerduty", "type": "pagerduty", "settings": {
                    "routing_key": "R0UTINGKEY", "url": f"{r}/pagerduty/v2/enqueue"}}],
            "channels": {"sms": {"receivers": ["twilio-sms"]}, "im": {"receivers": ["slack"]},
                         "pagerduty": {"receivers": ["pagerduty"]}}}
    if actuator_url:
        cfg["actuator"] = {"url": actuator_url, "secret_file": str(secret_file)}
    if extra:
        cfg.update(extra)
    return cfg


class Server:
    def __init__(self, env, cfg, name="server"):
        self.env, self.cfg, self.name = env, cfg, name
        self.path = env.dir / f"{name}.json"
        self.path.write_text(json.dumps(cfg, indent=1))
        self.grpc = cfg["grpc_listen"]
        self.base = "http://" + cfg["http_listen"]
        self.proc = None
        self.starts = 0

    def start(self, timeout=60):
        self.proc = self.env.spawn(self.name, [self.env.bins["vigil-server"], "--config",
                                               str(self.path)])
        self.starts += 1
        t0 = time.time()
        ok = wait_until(lambda: not self.proc.alive() or self.get("/healthz")[0] == 200,
                        timeout, 0.1)
        if not self.proc.alive() or not ok:
            raise DrillError(f"{self.name} did not start:\n{self.proc.tail()}")
        return time.time() - t0

    def sigkill(self):
        self.proc.kill()

    def get(self, path, timeout=10):
        return http(self.base + path, timeout=timeout)

    def api(self, path):
        status, body = self.get(path)
        if status != 200 or not isinstance(body, dict):
            raise DrillError(f"GET {path}: {status} {str(body)[:200]}")
        return body

    def metrics(self):
        status, body = self.get("/metrics")
        return parse_metrics(body) if status == 200 and isinstance(body, str) else {}

    def incidents(self):
        return self.api("/api/v1/incidents?state=all&limit=10000")["incidents"]

    def deliveries(self):
        return self.api("/api/v1/deliveries?limit=10000")["deliveries"]

    def actions(self):
        return self.api("/api/v1/actions")["actions"]

    def points(self, node, metric="gpu_power_watts", gpu=None):
        """{series id: [ts, ...]} of one node's series of a metric."""
        out = {}
        for s in self.api(f"/api/v1/series?metric={metric}&node={node}")["series"]:
            labels = s.get("labels", {})
            if gpu is not None and str(labels.get("gpu", s.get("gpu"))) != str(gpu):
                continue
            q = self.api(f"/api/v1/query?series={s['id']}&from=0&to=4102444800")
            out[s["id"]] = [p[0] for p in q["points"]]
        return out


class Agent:
    """A simulated node: vigil-agent --simulate, with a disk spool and /metrics."""

    def __init__(self, env, server_addr, node, job, scenario="healthy", fault_node=None,
                 fault_at=None, seed=1, interval=1.0, spool=True, gpus=8, metrics=True):
        self.env, self.node, self.job, self.scenario = env, node, job, scenario
        self.mport = free_port() if metrics else None
        argv = [env.bins["vigil-agent"], "--server", server_addr, "--insecure",
                "--node", node, "--job", job, f"--simulate={scenario}",
                "--interval", str(interval), "--seed", str(seed), "--gpus", str(gpus)]
        if metrics:
            argv += ["--metrics-listen", f"127.0.0.1:{self.mport}"]
        if spool:
            argv += ["--spool-dir", str(env.dir / f"spool-{node}-{job}"), "--spool-max-mb", "64"]
        if fault_node:
            argv += ["--fault-node", fault_node]
        if fault_at is not None:
            argv += ["--fault-at", str(fault_at)]
        self.started = time.time()
        self.proc = env.spawn(f"agent-{node}-{job}", argv)
        self.exit = None
        self.last_metrics = {}

    def metrics(self):
        if not self.mport:
            return {}
        status, body = http(f"http://127.0.0.1:{self.mport}/metrics", timeout=5)
        if status == 200 and isinstance(body, str):
            self.last_metrics = parse_metrics(body)
            return self.last_metrics
        return {}

    def metric(self, name, default=None):
        return self.metrics().get(name, default)

    def stop(self):
        """SIGTERM; returns {enqueued, sent, acked, pending} from its exit line."""
        self.metrics()
        self.proc.stop()
        import re
        m = None
        for line in self.proc.log_path.read_text(errors="replace").splitlines():
            mm = re.search(r"exiting: enqueued (\d+) sent (\d+) acked (\d+) pending (\d+)", line)
            if mm:
                m = mm
        if not m:
            raise DrillError(f"agent {self.node} left no exit line:\n{self.proc.tail()}")
        self.exit = dict(zip(("enqueued", "sent", "acked", "pending"), map(int, m.groups())))
        self.exit["event_frames"] = int(self.last_metrics.get("vigil_agent_event_frames_total", 0))
        self.exit["ticks"] = self.exit["enqueued"] - self.exit["event_frames"]
        return self.exit


class Actuator:
    def __init__(self, env, name="actuator"):
        self.env = env
        self.secret = env.dir / "actuator.secret"
        if not self.secret.exists():
            self.secret.write_text(os.urandom(24).hex())
        self.audit = env.dir / "actuator-audit.jsonl"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = name
        self.proc = None

    def start(self):
        self.proc = self.env.spawn(self.name, [
            self.env.bins["vigil-actuator"], "--listen", f"127.0.0.1:{self.port}",
            "--secret-file", str(self.secret), "--backend", "noop",
            "--audit-log", str(self.audit), "--quiet"])
        if not wait_until(lambda: http(self.url + "/healthz")[0] == 200, 20, 0.2):
            raise DrillError(f"actuator did not start:\n{self.proc.tail()}")

    def records(self):
        if not self.audit.exists():
            return []
        out = []
        for line in self.audit.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out


class Receivers:
    """tests/e2e/receivers.py with a mode file (ok / 429 N / 500 / hang)."""

    def __init__(self, env, forward_actions=None):
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = env.dir / "receipts.jsonl"
        self.mode_file = env.dir / "receivers.mode"
        self.mode_file.write_text("ok\n")
        self.forward = forward_actions
        self.proc = None
        self.n = 0

    def set_mode(self, mode):
        tmp = self.mode_file.with_suffix(".tmp")
        tmp.write_text(mode + "\n")
        tmp.replace(self.mode_file)

    def start(self):
        self.n += 1
        argv = ["python3", str(RECEIVERS), "--port", str(self.port), "--log", str(self.log),
                "--mode-file", str(self.mode_file)]
        if self.forward:
            argv += ["--forward-actions", self.forward]
        self.proc = self.env.spawn(f"receivers{self.n}", argv)
        if not wait_until(lambda: _port_open(self.port), 20, 0.1):
            raise DrillError(f"receivers did not start:\n{self.proc.tail()}")

    def stop(self):
        if self.proc:
            self.proc.kill()
            self.proc = None

    def receipts(self):
        if not self.log.exists():
            return []
        return [json.loads(l) for l in self.log.read_text().splitlines() if l.strip()]


def _port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class H2DataScanner:
    """Follows one direction of a plaintext HTTP/2 connection chunk by chunk
    and says whether a chunk carried (part of) a DATA frame: a gRPC message,
    as opposed to the PINGs, SETTINGS and WINDOW_UPDATEs around it."""

    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    def __init__(self, client_side):
        self.skip = len(self.PREFACE) if client_side else 0  # bytes to pass over
        self.header = b""          # a frame header split across chunks
        self.in_data = False       # the bytes being skipped are a DATA payload

    def feed(self, data):
        seen = False
        i = 0
        while i < len(data):
            if self.skip > 0:
                n = min(self.skip, len(data) - i)
                seen = seen or (self.in_data and n > 0)
                self.skip -= n
                i += n
                continue
            need = 9 - len(self.header)
            self.header += data[i:i + need]
            i += min(need, len(data) - i)
            if len(self.header) < 9:
                break
            length = int.from_bytes(self.header[:3], "big")
            self.in_data = self.header[3] == 0
            seen = seen or (self.in_data and length > 0)
            self.skip = length
            self.header = b""
        return seen


class TcpProxy:
    """Forwards 127.0.0.1:port to an upstream address. cut(): a black hole —
    connections are accepted but nothing is forwarded or answered either way
    (bytes wait in the kernel, as behind a dead link); restore(): traffic
    flows again. Also times each client->server write that carries a gRPC
    message to the next server->client one (ack latency as an agent sees
    it; the gRPC connection must be plaintext). Transport frames (pings,
    window updates) are not messages: counting them timed gRPC's ping
    replies, not acks."""

    def __init__(self, env, upstream):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"
        self.flowing = threading.Event()
        self.flowing.set()
        self.stopping = False
        self.latencies = []
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()
        env.closers.append(self.close)

    def cut(self):
        self.flowing.clear()

    def restore(self):
        self.flowing.set()

    def close(self):
        self.stopping = True
        self.flowing.set()
        try:
            self.sock.close()
        except OSError:
            pass

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        self.flowing.wait()
        if self.stopping:
            c.close()
            return
        try:
            u = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            c.close()
            return
        u.settimeout(None)
        pending_since = None
        to_server = H2DataScanner(client_side=True)
        to_client = H2DataScanner(client_side=False)
        # poll, not select: select() fails on descriptors past 1,024.
        poller = select.poll()
        by_fd = {c.fileno(): c, u.fileno(): u}
        for s in by_fd.values():
            poller.register(s, select.POLLIN)
        try:
            while not self.stopping:
                if not self.flowing.is_set():
                    self.flowing.wait()
                    pending_since = None
                    continue
                r = [by_fd[fd] for fd, _ in poller.poll(200)]
                for s in r:
                    if not self.flowing.is_set():
                        break
                    data = s.recv(65536)
                    if not data:
                        return
                    now = time.monotonic()
                    if s is c:
                        u.sendall(data)
                        if to_server.feed(data) and pending_since is None:
                            pending_since = now
                    else:
                        c.sendall(data)
                        if to_client.feed(data) and pending_since is not None:
                            self.latencies.append(now - pending_since)
                            pending_since = None
        except OSError:
            pass
        finally:
            c.close()
            u.close()


def fill_disk(path, chunk=1 << 20):
    """Writes zeros to path until ENOSPC (or another error); returns bytes written."""
    written = 0
    buf = b"\0" * chunk
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                n = f.write(buf)
            except OSError:
                if chunk > 4096:
                    chunk //= 4
                    buf = b"\0" * chunk
                    continue
                break
            written += n
        try:
            os.fsync(f.fileno())
        except OSError:
            pass
    return written


def rng(seed):
    return random.Random(seed)
