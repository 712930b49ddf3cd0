// Fuzzes the Alertmanager alert intake (server/alertmanager/alertmanager.h,
// AlertIntake) end to end: a real in-process server (memory store,
// detection on, alertmanager.intake on) on loopback, fed POST
// /api/v1/alerts (an Alertmanager webhook body, version 4) and POST
// /api/v2/alerts (an array of alerts, as a Prometheus sends them) as any
// holder of a remote_write token could send them: the JSON, the alerts'
// labels and times, incidents opened, updated and resolved, and (as the
// fake clock moves) alerts whose endsAt passed expiring. Every request must
// be answered: 2xx, 4xx, or 503 - never another 5xx, a crash, a hang or an
// ASan/UBSan report - and /healthz must stay 200 "ok" after each. A
// request refused with a 4xx takes nothing (AlertIntake::Receive: "nothing
// of the request is taken then"): the intake's count of received alerts
// (vigil_alert_intake_alerts_total{outcome="received"} on /metrics) does
// not move.
//
// Input: one byte, then the body. The byte's bit 0 picks the route (clear:
// /api/v1/alerts, set: /api/v2/alerts); bits 1-3: seconds the fake clock
// moves on after the request (expiry runs every 5 s).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "httplib.h"
#include "server/server.h"
#include "tests/fuzz/loopback_server.h"

namespace {

// The options of the server this target fuzzes.
vigil::ServerOptions Options() {
  vigil::ServerOptions o = vigil::fuzz::LoopbackServerOptions(2);
  o.alertmanager.intake = true;
  // One rule, so both the rule's and the severity label's paths run.
  o.alertmanager.rules = {{"GpuTooHot", "P1", {vigil::Response::kNotifySre}, false}};
  vigil::fuzz::AddRemoteWriteToken(&o);
  return o;
}

[[noreturn]] void Fail(const std::string& what, const httplib::Result& r) {
  vigil::fuzz::Fail("alert_intake_fuzz", what, r);
}

// The intake's count of alerts taken so far, from /metrics.
uint64_t Received(httplib::Client& client) {
  static constexpr char kLine[] = "\nvigil_alert_intake_alerts_total{outcome=\"received\"} ";
  httplib::Result r = client.Get("/metrics");
  if (!r || r->status != 200) Fail("GET /metrics", r);
  const size_t at = r->body.find(kLine);
  if (at == std::string::npos) Fail("GET /metrics has no received count", r);
  return std::strtoull(r->body.c_str() + at + sizeof(kLine) - 1, nullptr, 10);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* fixture = new vigil::fuzz::LoopbackFixture(Options());  // lives for the process
  // The received count before this request; read again only after a
  // request that may have moved it.
  static std::optional<uint64_t> received;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string path = (mode & 1) ? "/api/v2/alerts" : "/api/v1/alerts";
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  const httplib::Headers headers = {{"Authorization", vigil::fuzz::RemoteWriteBearer()}};
  if (!received) received = Received(*fixture->client);
  httplib::Result r = fixture->client->Post(path, headers, body, "application/json");
  if (!vigil::fuzz::Answered(r)) Fail("POST " + path, r);
  if (r->status >= 400 && r->status < 500) {
    if (Received(*fixture->client) != *received)
      Fail("POST " + path + " was refused but took alerts", r);
  } else {
    received.reset();
  }
  fixture->clock.Advance((mode >> 1) & 7);
  httplib::Result health = fixture->client->Get("/healthz");
  if (!health || health->status != 200 ||
      health->body.find("\"status\":\"ok\"") == std::string::npos)
    Fail("GET /healthz", health);
  return 0;
}
