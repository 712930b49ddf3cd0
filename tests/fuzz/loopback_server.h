// What the fuzz targets that drive a real in-process vigil-server share:
// its options, a remote_write token, an HTTP client to it and what counts
// as an answer.
#ifndef VIGIL_TESTS_FUZZ_LOOPBACK_SERVER_H_
#define VIGIL_TESTS_FUZZ_LOOPBACK_SERVER_H_

#include <cstdio>
#include <memory>
#include <string>

#include "common/clock.h"
#include "httplib.h"
#include "notify/signing.h"
#include "server/config/auth.h"
#include "server/server.h"

namespace vigil::fuzz {

// A server for fuzzing: memory store, plaintext gRPC and HTTP on free
// loopback ports, `http_threads` HTTP threads, at most 100,000 series.
inline ServerOptions LoopbackServerOptions(int http_threads) {
  ServerOptions o;
  o.memory = true;
  o.grpc_listen = "127.0.0.1:0";
  o.http_listen = "127.0.0.1:0";
  o.grpc_insecure = true;
  o.http_threads = http_threads;
  o.max_series = 100'000;
  return o;
}

// An HTTP client to `server` that gives up after `timeout_seconds` to
// connect, send or read: a hang is a finding, not a stuck fuzzer.
inline std::unique_ptr<httplib::Client> LoopbackClient(const VigilServer& server,
                                                       int timeout_seconds) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", server.http_port());
  client->set_connection_timeout(timeout_seconds);
  client->set_read_timeout(timeout_seconds);
  client->set_write_timeout(timeout_seconds);
  return client;
}

// A target's server for the life of its process: started with `options`
// on a fake clock, with an HTTP client (LoopbackClient, 5 s); traps when the
// server does not start.
struct LoopbackFixture {
  explicit LoopbackFixture(const ServerOptions& options) : server(options, &clock) {
    if (!server.Start().ok()) __builtin_trap();
    client = LoopbackClient(server, 5);
  }
  FakeClock clock{1764000000.0};
  VigilServer server;
  std::unique_ptr<httplib::Client> client;
};

// The token of the remote_write role AddRemoteWriteToken gives a server.
inline constexpr char kRemoteWriteToken[] = "fuzz-remote-write-token";

// Lets the holder of kRemoteWriteToken write (POST /api/v1/write and the
// alert intake) and anyone read, as a site's Prometheus would be set up.
inline void AddRemoteWriteToken(ServerOptions* o) {
  o->auth.tokens = {{"prometheus", Role::kRemoteWrite, HexEncode(Sha256(kRemoteWriteToken))}};
  o->auth.anonymous_read = true;
}

// The Authorization header value for kRemoteWriteToken.
inline std::string RemoteWriteBearer() { return std::string("Bearer ") + kRemoteWriteToken; }

// True when the server answered as it may to any input: a success, a
// refusal of the request (4xx) or "busy" (503). A 5xx or no answer at all
// is a finding.
inline bool Answered(const httplib::Result& r) {
  if (!r) return false;
  return (r->status >= 200 && r->status < 300) || (r->status >= 400 && r->status < 500) ||
         r->status == 503;
}

// Reports `what` went wrong for `target` with the server's answer and stops
// the fuzzer (a crash it records as a finding).
[[noreturn]] inline void Fail(const char* target, const std::string& what,
                              const httplib::Result& r) {
  std::fprintf(stderr, "%s: %s -> %d %s\n", target, what.c_str(), r ? r->status : -1,
               r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
  __builtin_trap();
}

}  // namespace vigil::fuzz

#endif  // VIGIL_TESTS_FUZZ_LOOPBACK_SERVER_H_
