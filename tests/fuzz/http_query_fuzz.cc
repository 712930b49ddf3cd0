// Fuzzes the HTTP API's query parameters (server/api/http_api.h and the UI's
// routes): a real in-process server (memory store with a few series and
// one incident) answers GETs whose path and parameters come from the
// input. A bad parameter is the client's mistake - 4xx with a reason -,
// never a 5xx, a crash or a hang.
//
// Input: one byte picks the route, the rest is its query string (bytes
// outside a safe set are percent-encoded, so the request line stays
// valid and the parameters reach the handlers).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "httplib.h"
#include "server/server.h"
#include "tests/fuzz/loopback_server.h"
#include "storage/series_store.h"

namespace {

constexpr const char* kRoutes[] = {
    "/api/v1/query",     "/api/v1/series",        "/api/v1/incidents",
    "/api/v1/baseline",  "/api/v1/jobs",          "/api/v1/jobs/llm",
    "/api/v1/nodes",     "/api/v1/incidents/inc-000001", "/api/v1/deliveries",
    "/api/v1/actions",   "/api/v1/audit",         "/api/v1/silences",
    "/metrics",          "/readyz",               "/api/v1/incidents/%ff%00"};

struct Fixture {
  Fixture() : server(Options(), &clock) {
    if (!server.Start().ok()) __builtin_trap();
    vigil::SeriesStore& store = *server.store();
    std::vector<vigil::SeriesId> ids;
    for (const char* metric : {"gpu_power_watts", "train_loss"}) {
      vigil::SeriesKey key{.metric = metric,
                           .labels = {{"job", "llm"}, {"node", "n1"}, {"gpu", "0"}}};
      (void)vigil::NormalizeSeriesKey(&key);
      ids.push_back(*store.Resolve(key));
    }
    for (int i = 0; i < 100; ++i) {
      std::vector<double> values = {250.0 + i, 2.0 - i * 0.01};
      vigil::FrameColumns frame{.ts = clock.Now() - 100 + i, .ids = ids, .values = values};
      (void)store.Append({&frame, 1}, nullptr);
    }
    client = std::make_unique<httplib::Client>("127.0.0.1", server.http_port());
    client->set_read_timeout(10);
  }
  static vigil::ServerOptions Options() {
    return vigil::fuzz::LoopbackServerOptions(4);
  }
  vigil::FakeClock clock{1764000000.0};
  vigil::VigilServer server;
  std::unique_ptr<httplib::Client> client;
};

bool Safe(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '=' || c == '&' || c == '.' || c == '-' || c == '_' || c == ',';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture();  // lives for the process
  if (size == 0) return 0;
  std::string path = kRoutes[data[0] % (sizeof(kRoutes) / sizeof(kRoutes[0]))];
  path.push_back('?');
  for (size_t i = 1; i < size && i < 4096; ++i) {
    if (Safe(data[i])) {
      path.push_back(static_cast<char>(data[i]));
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", data[i]);
      path.append(hex);
    }
  }
  httplib::Result r = fixture->client->Get(path);
  if (!r || r->status >= 500) {
    std::fprintf(stderr, "GET %s -> %d %s\n", path.c_str(), r ? r->status : -1,
                 r ? r->body.c_str() : httplib::to_string(r.error()).c_str());
    __builtin_trap();
  }
  return 0;
}
