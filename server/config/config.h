// vigil-server configuration: the ServerOptions struct with documented
// defaults, and loading it from a JSON config file. Flags (main.cc) are
// applied on top of what the file sets.
#ifndef VIGIL_SERVER_CONFIG_CONFIG_H_
#define VIGIL_SERVER_CONFIG_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "detector/options.h"
#include "escalation/escalation.h"
#include "nlohmann/json.hpp"
#include "notify/notify.h"
#include "rules/rule.h"
#include "server/config/auth.h"
#include "server/cluster/cluster_member.h"
#include "server/alertmanager/alertmanager.h"
#include "server/config/receiver_config.h"
#include "server/remote_write/remote_write.h"
#include "server/watchdog/watchdog.h"

namespace vigil {

// Everything vigil-server can be configured with. Plain data; copyable.
//
// JSON config file form (every key optional, unknown keys are errors; every
// key with its type, default, range and meaning: docs/CONFIG.md, generated
// from the parser by ServerConfigReference):
//   {"data_dir": "...", "grpc_listen": "H:P", "http_listen": "H:P",
//    "memory": false, "web_dir": "...",
//    "grpc_tls": {"cert_file": "/etc/vigil/tls/server.crt",
//                 "key_file": "/etc/vigil/tls/server.key",
//                 "client_ca_file": "/etc/vigil/tls/ca.crt",
//                 "require_client_cert": true, "node_identity": "none",
//                 "reload_seconds": 60},
//    "grpc_insecure": false,
//    "node_tokens": {"file": "/etc/vigil/node-tokens",
//                    "sha256": {"n001": "<hex sha256 of n001's token>",
//                               "*": "<hex sha256 of a fleet-wide token>"}},
//    "storage": {"raw_retention_days": 7, "rollup_retention_days": 183,
//                "sync_frame_log": false, "block_samples": 720,
//                "block_seconds": 7200, "max_series": 10000000,
//                "frame_log_checkpoint_mb": 96},
//    "ingest": {"max_future_skew_seconds": 300, "max_message_mb": 4,
//               "max_series_per_stream": 50000,
//               "max_new_series_per_node": 100000,
//               "max_new_series_per_job": 5000000},
//    "http": {"max_points": 1000000, "threads": 32},
//    "detection": {"enabled": true, "rules_file": "...",
//                  "learn_steps": 1000, "k_sigma": 3,
//                  "learn_max_seconds": 3600, "rewarm_seconds": 90,
//                  "warmup_steps": 200, "warmup_max_seconds": 600,
//                  "family_pattern": "^(.*[^-_.])[-_.](?:r|run|...)\\d+$",
//                  "snapshot_seconds": 60, "scheduler_poll_seconds": 15,
//                  "await_scheduler_seconds": 45,
//                  "restart_resolve_seconds": 1800},
//    "auth": {"anonymous_read": true,
//             "tokens": [{"name": "alice", "role": "operator",
//                         "sha256": "<hex sha256 of the token>"}]},
//    "escalation": {...see escalation/escalation.h...},
//    "notifications": {"public_url": "http://vigil.example:8080",
//        "retry_base_seconds": 2, "retry_max_seconds": 300,
//        "receivers": [{"name": "slack", "type": "slack",
//                       "settings": {...see notify/notify.h...},
//                       "rate_per_minute": 60}],
//        "channels": {"phone": {"receivers": ["twilio-voice"]},
//                     "sms": {"receivers": ["twilio-sms", "aliyun"],
//                             "failover": true},
//                     "im": {"receivers": ["slack", "feishu"]}, ...}},
//    "actuator": {"url": "http://127.0.0.1:9191/v1/actions",
//                 "secret_file": "/etc/vigil/actuator.secret",
//                 "checkpoint_timeout_seconds": 300},
//    "watchdog": {...see server/watchdog/watchdog.h...},
//    "remote_write": {...see server/remote_write/remote_write.h...},
//    "remote_write_receiver": {...see server/config/receiver_config.h...},
//    "alertmanager": {...see server/alertmanager/alertmanager.h...},
//    "cluster": {...see server/cluster/cluster_config.h...}}

// Where the pages of one escalation channel ("phone", "sms", "im",
// "email", "pagerduty", "webhook", "ticket") go.
struct ChannelRoute {
  // Receiver names (NotificationOptions::receivers).
  std::vector<std::string> receivers;
  // False: every receiver gets the page. True: the first that works does
  // (the next is tried when one fails for good).
  bool failover = false;
};

// Notification receivers and channel routing.
struct NotificationOptions {
  std::vector<ReceiverConfig> receivers;
  // Channel name -> route; a channel with no route sends nothing (the
  // timeline says so).
  std::map<std::string, ChannelRoute> channels;
  // Base URL of the UI for links in messages; empty: the http_listen
  // address.
  std::string public_url;
  // Retry backoff of undelivered pages: exponential from the base, capped.
  double retry_base_seconds = 2;
  double retry_max_seconds = 300;
};

// Where automatic actions are sent (vigil-actuator, see actuator/README.md).
struct ActuatorOptions {
  // POST target; empty: actions are decided and recorded but not sent.
  std::string url;
  // File holding the shared HMAC secret (read by VigilServer::Start).
  std::string secret_file;
  // The secret itself (from secret_file; tests may set it directly).
  std::string secret;
  // How long the actuator waits for a job's checkpoint before pausing.
  double checkpoint_timeout_seconds = 300;
};

// How Hello.node is tied to the agent's TLS client certificate.
enum class NodeIdentity {
  kNone,         // any node name (tokens may still bind it)
  kCertificate,  // Hello.node must be the certificate's CN or a DNS SAN
};

// TLS on the gRPC ingest listener. The files are checked at start (a bad or
// unreadable one stops the server, naming it) and re-read every
// reload_seconds afterwards, so renewed certificates apply to new
// connections without a restart; replace them atomically (write, then
// rename into place).
struct GrpcTlsOptions {
  // PEM certificate chain (leaf first) and private key of the server.
  // Required.
  std::string cert_file;
  std::string key_file;
  // PEM CA bundle that agents' client certificates must chain to. Required
  // when require_client_cert; otherwise, when set, a client certificate is
  // asked for and verified if the agent sends one.
  std::string client_ca_file;
  // Refuse agents without a valid client certificate (mTLS). Default true.
  bool require_client_cert = true;
  // kCertificate refuses a stream whose Hello.node is neither the client
  // certificate's CN nor one of its DNS SANs (PERMISSION_DENIED); needs
  // require_client_cert. Default: kCertificate when require_client_cert
  // (mTLS), else kNone; "node_identity": "none" opts out.
  NodeIdentity node_identity = NodeIdentity::kNone;
  // How often the files are re-read, in whole seconds. Default 60.
  int reload_seconds = 60;
};

// Bearer tokens of the agents: when any is configured, every ingest stream
// must carry `authorization: Bearer <token>` for its Hello.node. Only the
// SHA-256 of each token is kept (`vigilctl hash-token TOKEN`, or
// `printf %s TOKEN | sha256sum`).
struct NodeTokenOptions {
  // File of "NODE SHA256HEX" lines ('#' starts a comment); read at start
  // (errors stop the server, naming file and line) and again when it
  // changes (a bad new version is logged and the previous one kept).
  // Empty: none.
  std::string file;
  // Inline entries: node -> lower-case hex SHA-256 of its token. The node
  // "*" holds a fleet-wide token, accepted for every node without an entry
  // of its own. Entries of `file` add to these.
  std::map<std::string, std::string> sha256;

  // True when streams must carry a token.
  bool enabled() const { return !file.empty() || !sha256.empty(); }
};

struct ServerOptions {
  // Directory of the RocksDB store; required unless `memory`.
  std::string data_dir;
  // Keep everything in memory (no durability); for tests and demos.
  bool memory = false;
  // Where the gRPC ingest service listens; port 0 picks a free port.
  std::string grpc_listen = "127.0.0.1:7070";
  // TLS for agents. Exactly one of grpc_tls and grpc_insecure must be set:
  // the server refuses to start with neither, so plaintext is never an
  // accident.
  std::optional<GrpcTlsOptions> grpc_tls;
  // Accept agents over plaintext gRPC (tests, demos, a trusted network).
  bool grpc_insecure = false;
  // Per-node bearer tokens; none by default.
  NodeTokenOptions node_tokens;
  // Where the HTTP API listens; port 0 picks a free port.
  std::string http_listen = "127.0.0.1:8080";
  // Directory served under GET / (index.html); empty serves nothing.
  std::string web_dir;

  // Raw samples older than this are expired and refused on ingest.
  double raw_retention_seconds = 7 * 86400.0;
  // 1-minute rollups older than this are expired.
  double rollup_retention_seconds = 183 * 86400.0;
  // fsync the frame log on every append (survives power loss; slower).
  bool sync_frame_log = false;
  // An open block is flushed after this many samples...
  uint32_t block_samples = 720;
  // ...or once it spans this many seconds.
  double block_seconds = 2 * 3600.0;
  // Series beyond this count are refused (RESOURCE_EXHAUSTED).
  uint32_t max_series = 10'000'000;
  // Frame log size that triggers a checkpoint of the open blocks (a piece
  // per open series: at 1 Hz, 96 MiB is ~80 s of a 1,250-node cluster at
  // ~4.2 bytes a sample).
  uint64_t frame_log_checkpoint_bytes = 96ull << 20;
  // Memory all RocksDB memtables together may hold ("storage.memtable_mb";
  // 0: RocksDB's limits per column family).
  uint64_t memtable_budget_bytes = 32ull << 20;
  // Seconds without a sample after which a series' open block is written
  // out and its memory freed ("storage.idle_block_seconds"; 0: never).
  double idle_block_seconds = 900;
  // How long the store must refuse writes (a full disk, a read-only data
  // dir) before the P1 self-incident "storage_degraded" opens.
  double storage_incident_after_seconds = 30;

  // Ingest streams served at once, and how long a new stream may take to
  // send its first batch (server/ingest/ingest_service.h).
  int max_streams = 10'000;
  double first_batch_seconds = 10;
  // Threads serving the agents' gRPC streams (IngestOptions::threads).
  int ingest_threads = 1;

  // Frames stamped more than this far ahead of the server clock are refused.
  double max_future_skew_seconds = 300;
  // Largest FrameBatch accepted; larger ones get RESOURCE_EXHAUSTED.
  int max_message_bytes = 4 << 20;
  // gRPC's bandwidth-delay-product probe on the agents' streams: off, a 1 Hz
  // agent's batch costs no ping, and a batch over 64 KiB waits a round trip
  // for its window (bench/RESULTS.md, "gRPC's bandwidth probe off").
  bool grpc_bdp_probe = false;
  // Series limits (0: none); refused series lose their samples, the rest of
  // the batch is kept (server/ingest/ingest_service.h). Series one agent stream
  // may define; new series one node, and one job over all its nodes, may
  // create within the raw retention.
  uint32_t max_series_per_stream = 50'000;
  uint64_t max_new_series_per_node = 100'000;
  uint64_t max_new_series_per_job = 5'000'000;

  // Most points one /api/v1/query answer may hold (400 beyond, asking for
  // a step).
  uint64_t max_query_points = 1'000'000;
  // Threads serving HTTP requests.
  int http_threads = 32;
  // Requests one client address may have in flight; 0: half the threads
  // (at least 4).
  int http_max_requests_per_client = 0;
  // Reverse proxies (addresses or CIDR networks) whose X-Forwarded-For
  // header names the client (server/config/client_address.h); checked when the
  // config is parsed.
  std::vector<std::string> http_trusted_proxies;
  // The session cookie carries Secure (set when the UI is reached over TLS).
  bool http_secure_cookies = false;

  // Run detection on every accepted frame. When false, stored incidents
  // are still served but no new ones are raised.
  bool detection_enabled = true;
  // JSON rule document applied on top of the built-in catalogue (see
  // rules/rule.h); empty: the catalogue alone. A file with errors makes
  // VigilServer::Start() fail.
  std::string rules_file;
  // Detector tunables; the config file sets baseline.learn_steps
  // ("learn_steps"), baseline.k_sigma ("k_sigma"), baseline.learn_max_s
  // ("learn_max_seconds"), lifecycle.rewarm_s ("rewarm_seconds") and
  // lifecycle.family_pattern ("family_pattern"); the rest keep the
  // defaults of detector/options.h.
  DetectorOptions detector;
  // Seconds between snapshots of learned baselines (and one at shutdown)
  // while some series are still to learn; 0 disables them.
  double detection_snapshot_seconds = 60;
  // ... and once none does (at least detection_snapshot_seconds).
  double detection_learned_snapshot_seconds = 300;
  // After a restart, an incident firing before it that detection does not
  // raise again within this many seconds of its nodes' frames resolves
  // (DetectionOptions::restart_resolve_seconds).
  double restart_resolve_seconds = 1800;
  // With an actuator configured: how often the scheduler is asked about
  // the jobs that report (0: never), and how long a job whose nodes all
  // stopped waits for its answer before the stop is read as its end.
  double scheduler_poll_seconds = 15;
  double await_scheduler_seconds = 45;
  // Frame worker threads, one per detection shard: jobs (whole families)
  // are split among them, so detection uses this many cores; the gRPC
  // threads only validate, store and hand over. Changing it re-learns what
  // the snapshot held (DetectionOptions::shards). Repeat offenders are
  // found among the jobs of one shard.
  int detection_workers = 1;
  // Batches one worker's queue may hold before ingest refuses the batches
  // of its shard with UNAVAILABLE (IngestOptions::worker_queue_batches).
  size_t detection_queue_batches = 10'000;
  // While batches come more often than this, a worker takes them in
  // bursts this far apart instead of waking for each: a fifth less server
  // CPU at 1,250 agents ticking at their own phase, but twice the CPU and
  // an eighth of the speed for streams that send as soon as their ack
  // comes (a backlog after an outage; bench/RESULTS.md). Detection and
  // acks up to this much later (IngestOptions::worker_linger). 0: off.
  int detection_worker_linger_ms = 0;

  // API tokens and roles.
  AuthOptions auth;
  // Escalation policies, on-call schedules, interlocks.
  EscalationConfig escalation = DefaultEscalationConfig();
  // Receivers and channel routing.
  NotificationOptions notifications;
  // Remediation webhooks.
  ActuatorOptions actuator;
  // Dead-man's switch: heartbeats to a receiver outside Vigil while the
  // server works; off unless a URL is set (server/watchdog/watchdog.h).
  WatchdogConfig watchdog;
  // Rollups (and chosen raw series) to a Prometheus remote-write endpoint;
  // off when absent (server/remote_write/remote_write.h).
  std::optional<RemoteWriteOptions> remote_write;
  // Prometheus remote write in (POST /api/v1/write); off when absent
  // (server/ingest/remote_write_receiver.h).
  std::optional<RemoteWriteReceiverOptions> remote_write_receiver;
  // Alertmanager both ways: incidents forwarded as alerts, alerts of
  // Prometheus rules taken in (server/alertmanager/alertmanager.h).
  AlertmanagerOptions alertmanager;
  // Cluster mode: membership, shards and leaderships in etcd; absent (the
  // default) for a single server (server/cluster/cluster_config.h).
  std::optional<cluster::ClusterOptions> cluster;
};

// Applies the JSON config `text` on top of `*options`. On any problem
// returns kInvalidArgument listing every error, one per line, each starting
// with its key path (e.g. "storage.block_samples: must be an integer >= 1");
// `*options` is then left unchanged.
absl::Status ParseServerConfig(std::string_view text, ServerOptions* options);

// Every key of the config file, for `vigil-server --config-reference` and
// docs/CONFIG.md: {"program": "vigil-server", "keys": [{"path", "type",
// "range", "default", "meaning"}, ...]} (common/config_schema.h), defaults
// as ServerOptions has them. kInternal naming the keys the parser accepts
// without documenting them.
absl::StatusOr<nlohmann::json> ServerConfigReference();

// The whole text of the config or rules file at `path`; kNotFound
// ("<path>: cannot read") when it cannot be read.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path);

// Applies `text`, read from the file at `path`, as ParseServerConfig does;
// every error line starts with the path.
absl::Status ParseServerConfigFile(const std::string& path, std::string_view text,
                                   ServerOptions* options);

// Reads the file at `path` and applies it as ParseServerConfig does.
// kNotFound if it cannot be read; errors are prefixed with the path.
absl::Status LoadServerConfigFile(const std::string& path,
                                  ServerOptions* options);

// The rules a server runs from the rule document `text` (LoadRuleSet),
// read from the file at `path`: kInvalidArgument listing every error, one
// per line, each prefixed with the path and its position; also when its
// reopen window is not below the week after which escalation forgets a
// resolved incident (a later reopen would restart its page numbering and
// collide with pages already delivered).
absl::StatusOr<RuleSet> ParseServerRules(const std::string& path, std::string_view text);

// The rules a server with `options` runs: the built-in catalogue, or
// options.rules_file read and parsed by ParseServerRules (kNotFound if it
// cannot be read).
absl::StatusOr<RuleSet> LoadServerRules(const ServerOptions& options);

// Checks the combination of options (e.g. data_dir set unless memory,
// listen addresses of the form HOST:PORT, exactly one of grpc_tls and
// grpc_insecure). kInvalidArgument listing every problem otherwise. Files
// named in the options are read later, by VigilServer::Start().
absl::Status ValidateServerOptions(const ServerOptions& options);

}  // namespace vigil

#endif  // VIGIL_SERVER_CONFIG_CONFIG_H_
