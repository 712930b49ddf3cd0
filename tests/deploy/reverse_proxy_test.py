#!/usr/bin/env python3
"""deploy/nginx/vigil.conf in front of a real vigil-server, with a real nginx.

Checks that the shipped reverse-proxy configuration does what
docs/SECURITY.md says it does:
  1. nginx accepts it (nginx -t);
  2. clients that drip header bytes (more of them than the server has HTTP
     threads) do not stop others from being answered, and nginx closes them
     after client_header_timeout;
  3. live-event streams pass through unbuffered;
  4. with http.trusted_proxies, Vigil's per-client cap counts the client
     nginx names in X-Forwarded-For (not nginx, not what the client wrote).
Prints, without checking it, whether the same drip clients hold the
server's own port (the limitation the proxy is for).

Usage: reverse_proxy_test.py BUILD_DIR   (exit 77: no nginx installed)
"""
import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "drills"))
import lib  # noqa: E402

SRC = Path(__file__).resolve().parents[2]
HEADER_TIMEOUT_S = 10  # client_header_timeout in deploy/nginx/vigil.conf
HTTP_THREADS = 8
failures = []


def check(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(what)


def request(host, port, path, source="127.0.0.1", headers=None, timeout=5):
    """(status, body, seconds); status 0 when it failed or timed out."""
    t0 = time.time()
    try:
        c = http.client.HTTPConnection(host, port, timeout=timeout, source_address=(source, 0))
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        body = r.read().decode(errors="replace")
        c.close()
        return r.status, body, time.time() - t0
    except OSError as e:
        return 0, str(e), time.time() - t0


def drip_clients(host, port, n):
    """n connections that send a request line and then nothing whole."""
    socks = []
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(b"GET /api/v1/incidents HTTP/1.1\r\nHost: vigil\r\nX-a: ")
        socks.append(s)
    return socks


def drip(socks):
    """One more header byte on each connection still open; returns how many are open."""
    alive = 0
    for s in socks:
        try:
            s.sendall(b"a")
            s.setblocking(False)
            try:
                if s.recv(256) == b"":
                    raise OSError("closed")
            except BlockingIOError:
                pass  # nothing to read: still open
            finally:
                s.setblocking(True)
            alive += 1
        except OSError:
            pass
    return alive


class EventStream:
    """A live-event stream through the proxy, read until its hello arrives."""

    def __init__(self, host, port, source, forged):
        self.c = http.client.HTTPConnection(host, port, timeout=10, source_address=(source, 0))
        self.c.request("GET", "/api/v1/events", headers={"X-Forwarded-For": forged})
        self.r = self.c.getresponse()
        self.text = ""
        while "event: hello" not in self.text:
            chunk = self.r.fp.readline()
            if not chunk:
                break
            self.text += chunk.decode(errors="replace")

    def close(self):
        self.c.close()


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else str(SRC / "build")
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not nginx:
        print("SKIP: nginx is not installed (deploy/install-deps.sh installs nginx-light)")
        return 77
    bins = {"vigil-server": lib.find_binary(build, "vigil-server")}
    env = lib.Env("reverse-proxy", bins)
    try:
        cfg = lib.server_config(env, env.dir / "data")
        cfg["http"] = {"threads": HTTP_THREADS, "max_requests_per_client": 1,
                       "trusted_proxies": ["127.0.0.1"]}
        server = lib.Server(env, cfg)
        server.start()
        vhost, vport = cfg["http_listen"].rsplit(":", 1)
        vport = int(vport)

        # The shipped file, pointed at this server and a free port.
        proxy_port = lib.free_port()
        conf = (SRC / "deploy" / "nginx" / "vigil.conf").read_text()
        conf, n_up = re.subn(r"server 127\.0\.0\.1:8080;", f"server {cfg['http_listen']};", conf)
        conf, n_listen = re.subn(r"listen 8443;", f"listen 127.0.0.1:{proxy_port};", conf)
        check("the shipped config names the upstream and listen lines the test adjusts",
              n_up == 1 and n_listen == 1)
        (env.dir / "vigil.conf").write_text(conf)
        for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (env.dir / "nginx-tmp" / d).mkdir(parents=True, exist_ok=True)
        top = [f"pid {env.dir}/nginx.pid;", f"error_log {env.dir}/nginx-error.log info;",
               "daemon off;", "worker_processes 1;", "events { worker_connections 512; }",
               "http {", "  access_log off;"]
        if os.geteuid() == 0:
            top.insert(0, "user root;")
        top += [f"  {k}_temp_path {env.dir}/nginx-tmp/{d};" for k, d in
                (("client_body", "body"), ("proxy", "proxy"), ("fastcgi", "fastcgi"),
                 ("uwsgi", "uwsgi"), ("scgi", "scgi"))]
        top += [f"  include {env.dir}/vigil.conf;", "}"]
        main_conf = env.dir / "nginx.conf"
        main_conf.write_text("\n".join(top) + "\n")
        t = subprocess.run([nginx, "-t", "-p", str(env.dir), "-c", str(main_conf)],
                           capture_output=True, text=True)
        check("nginx -t accepts deploy/nginx/vigil.conf", t.returncode == 0, t.stderr.strip()[-300:])
        if t.returncode != 0:
            return 1
        proc = env.spawn("nginx", [nginx, "-p", str(env.dir), "-c", str(main_conf)])
        if not lib.wait_until(lambda: request("127.0.0.1", proxy_port, "/healthz")[0] == 200, 20, 0.2):
            check("nginx answers /healthz", False, proc.tail())
            return 1

        # 2. Drip clients, four times the server's threads, at the proxy.
        socks = drip_clients("127.0.0.1", proxy_port, 4 * HTTP_THREADS)
        time.sleep(1)
        drip(socks)
        st, body, took = request("127.0.0.1", proxy_port, "/api/v1/incidents")
        check(f"with {len(socks)} drip clients at the proxy, a request is answered in < 2 s",
              st == 200 and took < 2, f"status {st} in {took:.2f} s")
        t0 = time.time()
        alive = len(socks)
        while alive and time.time() - t0 < HEADER_TIMEOUT_S + 10:
            time.sleep(2)
            alive = drip(socks)
        check(f"nginx closes drip clients after client_header_timeout ({HEADER_TIMEOUT_S} s)",
              alive == 0, f"{alive} still open after {time.time() - t0:.0f} s")
        for s in socks:
            s.close()

        # 3 and 4. A client at 127.0.0.5 holds a live-event stream (its one
        # request in flight) through the proxy and forges X-Forwarded-For.
        stream = EventStream("127.0.0.1", proxy_port, "127.0.0.5", "198.51.100.1")
        check("live events pass through the proxy unbuffered", "event: hello" in stream.text,
              stream.text[:80])
        st, body, _ = request("127.0.0.1", proxy_port, "/api/v1/incidents", source="127.0.0.5",
                              headers={"X-Forwarded-For": "198.51.100.2"})
        check("the same client, under another forged address, is at its cap (429 naming it)",
              st == 429 and "from 127.0.0.5" in body, f"{st} {body[:120]}")
        st, body, _ = request("127.0.0.1", proxy_port, "/api/v1/incidents", source="127.0.0.6")
        check("another client behind the same proxy is served", st == 200, f"{st} {body[:120]}")
        stream.close()

        # The limitation itself, for the record: drip clients straight at
        # the server's port.
        socks = drip_clients(vhost, vport, HTTP_THREADS + 2)
        time.sleep(1)
        drip(socks)
        st, _, took = request(vhost, vport, "/healthz", timeout=4)
        print(f"info: with {len(socks)} drip clients straight at vigil-server's port, /healthz "
              f"{'answered ' + str(st) if st else 'did not answer'} in {took:.1f} s "
              "(the reason for the proxy)", flush=True)
        for s in socks:
            s.close()
    finally:
        env.failed = bool(failures)
        env.cleanup()
    print("PASS" if not failures else f"FAILED: {len(failures)} check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
