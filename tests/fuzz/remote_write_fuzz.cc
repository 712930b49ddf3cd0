// Fuzzes the Prometheus remote-write receiver (server/ingest/
// remote_write_receiver.h) end to end: a real in-process server (memory
// store, detection on, the remote_write_receiver section on) on loopback,
// fed POST /api/v1/write as any holder of a remote_write token - a
// Prometheus, a vmagent, or whoever has its credential - could send it:
// snappy, the WriteRequest protobuf, the mapping, the frames' validation
// and storage, and (as the fake clock moves past the frame grace) frame
// assembly and detection. Every request must be answered: 2xx, 4xx, or 503
// when detection is behind - never another 5xx, a crash, a hang or an
// ASan/UBSan report - and /healthz must stay 200 "ok" after each.
//
// Input: one byte, then the body. The byte's bit 0 clear: the body is a
// prometheus.WriteRequest (proto/prometheus/remote_write.proto) that the
// harness snappy-compresses, so most inputs reach the protobuf decoder
// and the mapping; set: the body is sent as it is (the snappy decoder's
// and the size limit's input). Bits 1-2: seconds the fake clock moves on
// after the request (the frame grace is 1 s).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/clock.h"
#include "httplib.h"
#include "server/server.h"
#include "tests/fuzz/loopback_server.h"
#include "snappy.h"

namespace {

// The options of the server this target fuzzes.
vigil::ServerOptions Options() {
  vigil::ServerOptions o = vigil::fuzz::LoopbackServerOptions(2);
  vigil::RemoteWriteReceiverOptions receiver;
  receiver.frame_grace_seconds = 1;      // frames reach detection as the clock moves
  receiver.max_decoded_bytes = 1 << 20;  // a claimed 64 MiB body costs its allocation
  o.remote_write_receiver = receiver;
  vigil::fuzz::AddRemoteWriteToken(&o);
  return o;
}

[[noreturn]] void Fail(const std::string& what, const httplib::Result& r) {
  vigil::fuzz::Fail("remote_write_fuzz", what, r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* fixture = new vigil::fuzz::LoopbackFixture(Options());  // lives for the process
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const char* rest = reinterpret_cast<const char*>(data + 1);
  std::string body;
  if (mode & 1) {
    body.assign(rest, size - 1);
  } else {
    snappy::Compress(rest, size - 1, &body);
  }
  const httplib::Headers headers = {
      {"Authorization", vigil::fuzz::RemoteWriteBearer()},
      {"Content-Encoding", "snappy"},
      {"X-Prometheus-Remote-Write-Version", "0.1.0"}};
  httplib::Result r =
      fixture->client->Post("/api/v1/write", headers, body, "application/x-protobuf");
  if (!vigil::fuzz::Answered(r)) Fail("POST /api/v1/write", r);
  fixture->clock.Advance((mode >> 1) & 3);
  httplib::Result health = fixture->client->Get("/healthz");
  if (!health || health->status != 200 ||
      health->body.find("\"status\":\"ok\"") == std::string::npos)
    Fail("GET /healthz", health);
  return 0;
}
