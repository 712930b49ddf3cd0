#!/usr/bin/env python3
"""Local stand-ins for Twilio, Slack, Feishu, DingTalk and PagerDuty.

Each request is checked against the provider's documented wire format
(paths, auth, fields, signatures) and recorded as one JSON line in the log
file: {"service", "path", "ok", "errors", "idempotency_key", "fields"}.
A request that breaks the format is still recorded (ok false) and answered
with the provider's error status, so the test sees both sides.

Usage: receivers.py --port P --log FILE --twilio-sid AC.. --twilio-token T
                    --feishu-secret S --dingtalk-secret S
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()


def record(entry):
    with LOCK, open(ARGS.log, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


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

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        url = urllib.parse.urlsplit(self.path)
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
                "fields": fields, "time": time.time()})
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
    ARGS = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    print(f"receivers listening on 127.0.0.1:{ARGS.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
