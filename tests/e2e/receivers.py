#!/usr/bin/env python3
"""Local stand-ins for Twilio, Slack, Feishu, DingTalk and PagerDuty.

Each request is checked against the provider's documented wire format
(paths, auth, fields, signatures) and recorded as one JSON line in the log
file: {"service", "path", "ok", "errors", "idempotency_key", "fields"}.
A request that breaks the format is still recorded (ok false) and answered
with the provider's error status, so the test sees both sides.

Usage: receivers.py --port P --log FILE --twilio-sid AC.. --twilio-token T
                    --feishu-secret S --dingtalk-secret S
                    [--mode-file FILE] [--forward-actions http://HOST:PORT]

Fault injection (the reliability drills, tests/drills/): with --mode-file the
file's first word, read at every request, says how to answer: "ok" (or no
file) as above; "429 [SECONDS]" with Retry-After; "500"; "hang" (a black
hole: the request is read, then held unanswered until the mode changes or
120 s pass, and the connection is closed without an answer). Such requests
are recorded too, with "status" (0 for hang) and "mode". With
--forward-actions, requests under /v1/ are forwarded to the actuator at
that address in mode "ok" (service "actuator"), so the actuator can be made
to look down or overloaded the same way.
"""
import argparse
import base64
import hashlib
import hmac
import json
import re
import sys
import threading
import time
import urllib.parse
import urllib.request
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()


def record(entry):
    with LOCK, open(ARGS.log, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def current_mode():
    if not ARGS.mode_file:
        return ["ok"]
    try:
        with open(ARGS.mode_file, encoding="utf-8") as f:
            words = f.read().split()
    except OSError:
        words = []
    return words or ["ok"]


def b64_hmac(key, message, digest=hashlib.sha256):
    return base64.b64encode(hmac.new(key, message, digest).digest()).decode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def reply(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fault(self, raw, url):
        """Answers per the mode file; returns True when the request is done."""
        mode = current_mode()
        if mode[0] == "ok":
            return False
        entry = {"service": "actuator" if url.path.startswith("/v1/") else "fault",
                 "path": url.path, "ok": False, "errors": [], "mode": mode[0],
                 "idempotency_key": self.headers.get("Idempotency-Key", ""),
                 "fields": {}, "time": time.time()}
        if mode[0] == "hang":
            entry["status"] = 0
            record(entry)
            deadline = time.time() + 120
            while time.time() < deadline and current_mode()[0] == "hang":
                time.sleep(0.2)
            self.close_connection = True
            return True
        status = 429 if mode[0] == "429" else 500
        entry["status"] = status
        record(entry)
        data = json.dumps({"error": "injected %d" % status}).encode()
        self.send_response(status)
        if status == 429 and len(mode) > 1:
            self.send_header("Retry-After", mode[1])
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return True

    def forward(self, raw, url):
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "content-length", "connection")}
        request = urllib.request.Request(ARGS.forward_actions + self.path, data=raw,
                                         headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                status, body, ctype = r.status, r.read(), r.headers.get("Content-Type")
        except urllib.error.HTTPError as e:
            status, body, ctype = e.code, e.read(), e.headers.get("Content-Type")
        except OSError as e:
            status, body, ctype = 502, json.dumps({"error": str(e)}).encode(), None
        record({"service": "actuator", "path": url.path, "ok": status < 300, "errors": [],
                "idempotency_key": self.headers.get("Idempotency-Key", ""),
                "fields": {}, "status": status, "mode": "ok", "time": time.time()})
        self.reply(status, body, ctype or "application/json")

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        url = urllib.parse.urlsplit(self.path)
        if self.fault(raw, url):
            return
        if ARGS.forward_actions and url.path.startswith("/v1/"):
            self.forward(raw, url)
            return
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        errors, fields, service = [], {}, "unknown"
        status, answer = 200, "ok"
        m = re.fullmatch(r"/twilio/2010-04-01/Accounts/([^/]+)/(Calls|Messages)\.json", url.path)
        if m:
            service = "twilio_voice" if m.group(2) == "Calls" else "twilio_sms"
            if m.group(1) != ARGS.twilio_sid:
                errors.append("account sid in the path is wrong")
            expected = "Basic " + base64.b64encode(
                f"{ARGS.twilio_sid}:{ARGS.twilio_token}".encode()).decode()
            if self.headers.get("Authorization") != expected:
                errors.append("basic auth is not sid:token")
            if not self.headers.get("Content-Type", "").startswith(
                    "application/x-www-form-urlencoded"):
                errors.append("not form-encoded")
            fields = dict(urllib.parse.parse_qsl(raw.decode(), keep_blank_values=True))
            for name in ("To", "From"):
                if not fields.get(name, "").startswith("+"):
                    errors.append(f"{name} is not an E.164 number")
            if service == "twilio_voice":
                twiml = fields.get("Twiml", "")
                if '<Gather numDigits="1"' not in twiml or "<Say>" not in twiml:
                    errors.append("Twiml lacks <Gather numDigits=\"1\"> with <Say>")
                status, answer = 201, json.dumps({"sid": "CA" + "0" * 32, "status": "queued"})
            else:
                if not fields.get("Body"):
                    errors.append("Body is empty")
                status, answer = 201, json.dumps({"sid": "SM" + "0" * 32, "status": "queued"})
        elif url.path == "/slack":
            service = "slack"
            fields = json.loads(raw or b"null")
            if not isinstance(fields, dict) or not fields.get("text") or \
                    not isinstance(fields.get("blocks"), list) or not fields["blocks"]:
                errors.append("slack message needs text and blocks")
            else:
                for block in fields["blocks"]:
                    if "type" not in block:
                        errors.append("block without type")
        elif url.path == "/feishu":
            service = "feishu"
            fields = json.loads(raw or b"null")
            ts = str(fields.get("timestamp", ""))
            want = b64_hmac(f"{ts}\n{ARGS.feishu_secret}".encode(), b"")
            if fields.get("sign") != want:
                errors.append("feishu sign does not match")
            elif abs(time.time() - int(ts)) > 3600:
                errors.append("feishu timestamp is more than 1 h off")
            if fields.get("msg_type") not in ("text", "post", "interactive"):
                errors.append("feishu msg_type missing")
            answer = json.dumps({"code": 19021 if errors else 0, "msg": "; ".join(errors) or "success"})
        elif url.path == "/dingtalk/robot/send":
            service = "dingtalk"
            fields = json.loads(raw or b"null")
            ts = query.get("timestamp", "")
            want = b64_hmac(ARGS.dingtalk_secret.encode(), f"{ts}\n{ARGS.dingtalk_secret}".encode())
            if query.get("sign") != want:
                errors.append("dingtalk sign does not match")
            if fields.get("msgtype") not in ("text", "markdown", "actionCard"):
                errors.append("dingtalk msgtype missing")
            answer = json.dumps({"errcode": 310000 if errors else 0, "errmsg": "; ".join(errors) or "ok"})
        elif url.path == "/pagerduty/v2/enqueue":
            service = "pagerduty"
            fields = json.loads(raw or b"null")
            if fields.get("event_action") not in ("trigger", "acknowledge", "resolve"):
                errors.append("bad event_action")
            if not fields.get("dedup_key") or not fields.get("routing_key"):
                errors.append("dedup_key and routing_key are required")
            if fields.get("event_action") == "trigger":
                payload = fields.get("payload", {})
                for name in ("summary", "source", "severity"):
                    if not payload.get(name):
                        errors.append(f"payload.{name} missing")
            status = 400 if errors else 202
            answer = json.dumps({"status": "invalid event" if errors else "success",
                                 "dedup_key": fields.get("dedup_key")})
        else:
            errors.append("unknown path")
            status, answer = 404, json.dumps({"error": "unknown path"})
        if errors and status < 400 and service not in ("feishu", "dingtalk"):
            status = 400
            answer = json.dumps({"errors": errors})
        record({"service": service, "path": url.path, "ok": not errors, "errors": errors,
                "idempotency_key": self.headers.get("Idempotency-Key", ""),
                "fields": fields, "status": status, "mode": "ok", "time": time.time()})
        self.reply(status, answer)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--twilio-sid", default="AC00000000000000000000000000000001")
    p.add_argument("--twilio-token", default="twilio-token")
    p.add_argument("--feishu-secret", default="feishu-secret")
    p.add_argument("--dingtalk-secret", default="dingtalk-secret")
    p.add_argument("--mode-file", default="")
    p.add_argument("--forward-actions", default="")
    ARGS = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    print(f"receivers listening on 127.0.0.1:{ARGS.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
