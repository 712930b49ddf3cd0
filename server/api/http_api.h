// The HTTP API of vigil-server (cpp-httplib, kept out of this header):
//   GET /healthz                 liveness, JSON: "status" ok | degraded
//                                (the store refuses writes; still 200)
//   GET /readyz                  readiness: 200 {"ready": true}, or 503
//                                {"ready": false, "storage": why}
//   GET /metrics                 Prometheus text exposition
//   GET /api/v1/series?job=&node=&metric=
//   GET /api/v1/query?series=ID&from=&to=&step=
//   GET /api/v1/incidents?state=firing|resolved|all&severity=P0,P1&job=
//       &node=&limit=        incidents, newest first
//   GET /api/v1/incidents/ID one incident with full evidence (the series
//                            of GPU-wide evidence named) and timeline
//   POST /api/v1/write       Prometheus remote write 1.0 in (a
//                            remote_write token; 204 when stored)
//   POST /api/v1/alerts      Alertmanager webhook (v4) in, as incidents
//   POST /api/v2/alerts      alerts in the shape Prometheus sends them
//   GET /                        files of the web dir (index.html)
// and, with escalation, the operator API of server/api/http_escalation.cc
// (acknowledge, silences, deliveries, actions, audit, on-call), and the
// web UI's API of server/api/http_ui.cc (sessions, live events, baselines,
// jobs, nodes).
// Bad parameters get 400 with {"error": "..."} naming the parameter;
// unknown ids get 404 with the same form.
#ifndef VIGIL_SERVER_API_HTTP_API_H_
#define VIGIL_SERVER_API_HTTP_API_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"
#include "server/config/auth.h"
#include "server/config/client_address.h"
#include "server/detection/detection_service.h"
#include "server/escalation/event_hub.h"
#include "server/fleet/fleet_view.h"
#include "server/ingest/ingest_metrics.h"
#include "server/ingest/remote_write_receiver.h"
#include "server/alertmanager/alertmanager.h"
#include "server/api/web_sessions.h"
#include "server/cluster/cluster_member.h"
#include "server/cluster/ownership.h"
#include "server/cluster/profile_backups.h"
#include "storage/series_store.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace vigil {

class EscalationService;

// What HttpApi needs. Pointers are not owned and must outlive it.
struct HttpApiOptions {
  SeriesStore* store = nullptr;           // required
  Clock* clock = nullptr;                 // required: default query range
  const IngestMetrics* metrics = nullptr; // required
  const DetectionService* detection = nullptr;  // required
  // Operator API and incident lifecycle; null: read-only detection API.
  EscalationService* escalation = nullptr;
  // Token checks; null: no checks (tests of the read API only).
  const Authenticator* auth = nullptr;
  // Browser sessions of the web UI (signed in with a token of `auth`).
  WebSessionOptions sessions;
  // Incident changes for /api/v1/events; null: no live stream (404).
  EventHub* changes = nullptr;
  // Latest node and job state for /api/v1/jobs and /api/v1/nodes; null:
  // those answer 404.
  const FleetView* fleet = nullptr;
  // Prometheus remote write in (POST /api/v1/write, remote_write tokens
  // only); null: that path answers 404.
  RemoteWriteReceiver* remote_write_receiver = nullptr;
  // Alerts of Prometheus rules in (POST /api/v1/alerts: Alertmanager's
  // webhook; POST /api/v2/alerts: the shape Prometheus sends an
  // Alertmanager), for remote_write or operator tokens; null: 404.
  AlertIntake* alert_intake = nullptr;
  // More Prometheus text appended to /metrics (e.g. the watchdog's);
  // called from request threads, so it must be thread-safe. Null: none.
  std::function<std::string()> more_metrics;
  // POST /-/reload (admin role): reads the config again and applies it
  // (VigilServer::Reload), answering what changed; null: 404. Needs
  // `escalation`.
  std::function<absl::StatusOr<nlohmann::json>(const Identity& who)> reload;
  // Directory whose files are served under / ; empty or missing: none.
  std::string web_dir;
  // Most points one query answer may hold; more gets 400 asking for a step.
  uint64_t max_points = 1'000'000;
  // Threads serving requests. Each open /api/v1/events stream holds one;
  // at most half of them stream, the rest keep answering.
  int threads = 32;
  // Largest request body accepted; a larger one gets 413 and is discarded
  // as it arrives, never held (no route needs more than a few KB).
  size_t max_body_bytes = 1 << 20;
  // Requests one client address may have in flight (live-event streams
  // included); more get 429. 0: max(4, threads / 2), so no one client can
  // take every thread.
  int max_requests_per_client = 0;
  // Reverse proxies whose X-Forwarded-For names the client (server/
  // client_address.h); the per-client cap and the sign-in limit count that
  // client. Empty: every request is its connection's address.
  TrustedProxies trusted_proxies;
  // Seconds one read or write of a request or response may wait; an idle
  // keep-alive connection is closed after keep_alive_seconds.
  int io_timeout_seconds = 5;
  int keep_alive_seconds = 5;
  // Cluster mode (docs/SCALING.md); all null for a single server. The
  // member answers /api/v1/cluster and names the shards the lists fan out
  // to (through `transport`); ownership answers /api/v1/cluster?job=.
  cluster::ClusterMember* cluster = nullptr;
  const cluster::Ownership* ownership = nullptr;
  Transport* transport = nullptr;
  // Seconds a fanned-out request may take before its shard is marked.
  double fan_out_timeout_seconds = 3;
  // Cluster mode: takes the learned profiles other shards send for the
  // jobs that would move here if their pair died (POST
  // /api/v1/cluster/profiles, signed with sessions.peer_secret). Null:
  // such requests are refused.
  cluster::ProfileBackups* profile_backups = nullptr;
  // Mark the session cookie Secure (the UI is served over TLS, e.g. behind
  // a proxy). It is also Secure when a request says X-Forwarded-Proto: https.
  bool secure_cookies = false;
};

// Serves the HTTP API on a background thread. Start/Stop are not
// thread-safe with each other; request handlers run concurrently.
class HttpApi {
 public:
  explicit HttpApi(const HttpApiOptions& options);
  // Stops serving if still running.
  ~HttpApi();

  // Binds `host`:`port` (0 picks a free port), starts serving and returns
  // the bound port. kUnavailable if the address cannot be bound;
  // kFailedPrecondition if already started.
  absl::StatusOr<int> Start(const std::string& host, int port);
  // Stops accepting, waits for the serving thread. Idempotent.
  void Stop();

  // Cluster mode: the browser sessions every server shared
  // (RequestAuthorizer::AdoptSharedSessions); returns the malformed count.
  int AdoptSharedSessions(const std::vector<std::pair<std::string, std::string>>& records) {
    return authorizer_.AdoptSharedSessions(records);
  }

 private:
  void InstallHandlers();
  // The operator API (server/api/http_escalation.cc).
  void InstallEscalationHandlers();
  // The web UI's API (server/api/http_ui.cc).
  void InstallUiHandlers();
  // GET /api/v1/cluster.
  void InstallClusterHandlers();
  // Cluster mode: when `id` (an incident's "inc-<shard>-N" or an action's
  // "act-<shard>~<replica>-N") names another shard, sends `req` (method, path,
  // query, body, the caller's credentials) on to that shard's members in
  // turn, replies with the first answer that is not a 404 or 5xx (an
  // action lives on the shard's leader only), and returns true. 503 when
  // the shard is not in the map, 502 when no member answered. False (and
  // nothing sent) for ids of this shard, single-server mode, or a request
  // that another server forwarded already.
  bool ForwardToShardOf(const std::string& id, const httplib::Request& req,
                        httplib::Response& res) const;
  // The headers that carry `req`'s caller to another server: its
  // Authorization header, or for a browser session its identity signed with
  // the fleet's peer secret (kOnBehalfOfHeader); none otherwise.
  std::vector<std::pair<std::string, std::string>> PassOnCredentials(
      const httplib::Request& req) const;
  // `local` (an object holding the array `list_key`), merged in cluster
  // mode with the same list from one member of every other shard (each
  // item labelled with its "shard", "shards" telling who answered), unless
  // the request asks for ?local=1. `newest_first` sorts the merged list by
  // "ts", newest first, and keeps the request's limit. `map_key`, if set,
  // names an object whose members the shards' answers add to (the first
  // answer holding a member keeps it).
  nlohmann::json MergeFleetWide(const httplib::Request& req, nlohmann::json local,
                                const char* list_key, bool newest_first,
                                const char* map_key = nullptr) const;
  // Replies MergeFleetWide's answer.
  void ReplyFleetWide(const httplib::Request& req, httplib::Response& res,
                      nlohmann::json local, const char* list_key, bool newest_first) const;

  // Counts a request against its client's cap; false (and not counted)
  // when the client is at its cap. Released by the request's log line.
  bool AdmitRequest(const httplib::Request& req);
  // The client `req` stands for: its connection's address, or the one a
  // trusted proxy forwarded.
  std::string ClientAddress(const httplib::Request& req) const;
  void ReleaseRequest(const httplib::Request& req);

  const HttpApiOptions options_;
  // Thread-safe; mutable so that const handlers can find out who calls.
  mutable RequestAuthorizer authorizer_;
  std::atomic<int> event_streams_{0};
  const int max_requests_per_client_;
  std::mutex clients_mu_;
  // Requests in flight by client address, and the address of each.
  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(clients_mu_);
  absl::flat_hash_map<const httplib::Request*, std::string> counted_
      ABSL_GUARDED_BY(clients_mu_);
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
};

}  // namespace vigil

#endif  // VIGIL_SERVER_API_HTTP_API_H_
