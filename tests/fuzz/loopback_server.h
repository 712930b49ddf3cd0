// What the fuzz targets that drive a real in-process vigil-server share:
// its options and an HTTP client to it.
#ifndef VIGIL_TESTS_FUZZ_LOOPBACK_SERVER_H_
#define VIGIL_TESTS_FUZZ_LOOPBACK_SERVER_H_

#include <memory>

#include "httplib.h"
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

}  // namespace vigil::fuzz

#endif  // VIGIL_TESTS_FUZZ_LOOPBACK_SERVER_H_
