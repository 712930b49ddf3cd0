#include "server/config/config.h"

#include "common/status_macros.h"

#include "detector/detector.h"

#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json_reader.h"
#include "common/json_syntax.h"
#include "nlohmann/json.hpp"
#include "server/cluster/cluster_config.h"
#include "server/config/client_address.h"

namespace vigil {
namespace {

using Json = nlohmann::json;


// Errors are collected with their key paths (common/json_reader.h).
using Reader = JsonConfigReader;

// True for the 64 hex digits of a SHA-256.
bool IsSha256Hex(const std::string& hex) {
  return hex.size() == 64 &&
         hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
}

// The "grpc_tls" section.
void ParseGrpcTls(const Json& section, Reader& r,
                  std::optional<GrpcTlsOptions>* out) {
  const std::string path = "grpc_tls";
  if (!r.CheckObject(section, path,
                     {"cert_file", "key_file", "client_ca_file",
                      "require_client_cert", "node_identity",
                      "reload_seconds"}))
    return;
  GrpcTlsOptions tls;
  r.String(section, path, "cert_file", &tls.cert_file,
           KeyDoc::Required("PEM certificate chain of the server, leaf first"));
  r.String(section, path, "key_file", &tls.key_file,
           KeyDoc::Required("PEM private key of the server"));
  r.String(section, path, "client_ca_file", &tls.client_ca_file,
           "PEM CA bundle that agents' client certificates must chain to; required "
           "with require_client_cert, otherwise a client certificate is verified "
           "when an agent sends one");
  r.Bool(section, path, "require_client_cert", &tls.require_client_cert,
         "Refuse agents without a valid client certificate (mTLS)");
  r.Integer(section, path, "reload_seconds", 1, 86400, 1, &tls.reload_seconds,
            "Seconds between re-reads of the three files, so renewed certificates "
            "apply to new connections without a restart (replace them atomically)");
  // With mTLS the certificate names the node unless told otherwise: a
  // node's token or certificate must not report for another node.
  std::string identity = tls.require_client_cert ? "certificate" : "none";
  r.String(section, path, "node_identity", &identity,
           {"\"certificate\": a stream's Hello.node must be the client certificate's "
            "CN or a DNS SAN (needs require_client_cert); \"none\": any node name. "
            "Default \"certificate\" with require_client_cert, else \"none\"",
            "\"none\", \"certificate\""});
  if (identity == "certificate") {
    tls.node_identity = NodeIdentity::kCertificate;
  } else if (identity != "none") {
    r.Error(path + ".node_identity", "must be \"none\" or \"certificate\"");
  }
  *out = std::move(tls);
}

// The "node_tokens" section.
void ParseNodeTokens(const Json& section, Reader& r, NodeTokenOptions* out) {
  const std::string path = "node_tokens";
  if (!r.CheckObject(section, path, {"file", "sha256"})) return;
  NodeTokenOptions tokens;
  r.String(section, path, "file", &tokens.file,
           "File of \"NODE SHA256HEX\" lines ('#' starts a comment), re-read when it "
           "changes (a bad new version is logged and the old one kept); empty: none");
  if (const Json* it = r.Value(
          section, path, "sha256", "map of node to string", Json::object(),
          {"Inline tokens: node name -> hex SHA-256 of its token (vigilctl "
           "hash-token TOKEN); the node \"*\" holds a fleet-wide token for every node "
           "without its own. Entries of file add to these",
           "64 hex digits each"})) {
    if (!it->is_object()) {
      r.Error(path + ".sha256", "must be an object of node -> hex SHA-256");
    } else {
      for (const auto& [node, hash] : it->items()) {
        const std::string where = absl::StrCat(path, ".sha256.", node);
        if (node.empty()) r.Error(where, "empty node name");
        if (!hash.is_string() || !IsSha256Hex(hash.get<std::string>())) {
          r.Error(where,
                  "must be the 64 hex digits of the token's SHA-256 (vigilctl "
                  "hash-token TOKEN)");
          continue;
        }
        tokens.sha256[node] = absl::AsciiStrToLower(hash.get<std::string>());
      }
    }
  }
  *out = std::move(tokens);
}

// http.trusted_proxies: an array of addresses or CIDR networks.
void ParseTrustedProxies(const Json& section, Reader& r, std::vector<std::string>* out) {
  const Json* it = r.Value(
      section, "http", "trusted_proxies", "string list", *out,
      {"Reverse proxies whose X-Forwarded-For names the client (for the per-client "
       "cap and the sign-in limit), e.g. [\"127.0.0.1\", \"10.0.0.0/8\"]",
       "addresses or CIDR networks"});
  if (it == nullptr) return;
  if (!it->is_array()) return r.Error("http.trusted_proxies", "must be an array");
  std::vector<std::string> entries;
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string path = absl::StrCat("http.trusted_proxies[", i, "]");
    if (!(*it)[i].is_string()) {
      r.Error(path, "must be a string (\"10.0.0.0/8\", \"::1\")");
      continue;
    }
    entries.push_back((*it)[i].get<std::string>());
    if (absl::StatusOr<TrustedProxies> one = TrustedProxies::Parse({entries.back()});
        !one.ok())
      r.Error(path, std::string(one.status().message()));
  }
  *out = std::move(entries);
}

// The "auth" section.
void ParseAuth(const Json& section, Reader& r, AuthOptions* auth) {
  if (!r.CheckObject(section, "auth", {"anonymous_read", "tokens"})) return;
  r.Bool(section, "auth", "anonymous_read", &auth->anonymous_read,
         "Let requests without a token read the API (GET, /metrics); false: every "
         "method under /api/ and /metrics needs a token");
  const Json* it = r.ObjectArray(
      section, "auth", "tokens", Json::array(),
      "API tokens and their roles (only their SHA-256 is kept); "
      "`vigilctl gen-token --name NAME` prints one with its config line");
  if (it == nullptr) return;
  if (!it->is_array()) return r.Error("auth.tokens", "must be an array");
  auth->tokens.clear();
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string path = absl::StrCat("auth.tokens[", i, "]");
    if (!r.CheckObject(t, path, {"name", "role", "sha256"})) continue;
    ApiToken token;
    std::string role = "viewer";
    r.String(t, path, "name", &token.name,
             KeyDoc::Required("Who holds the token (audit log, whoami)"));
    r.String(t, path, "role", &role,
             {"viewer reads; operator also acknowledges, silences, approves; admin also "
              "resets remediation; remote_write only sends samples and alerts in",
              "\"viewer\", \"operator\", \"admin\", \"remote_write\""});
    r.String(t, path, "sha256", &token.sha256_hex,
             KeyDoc::Required("Hex SHA-256 of the token (vigilctl hash-token TOKEN)",
                              "64 hex digits"));
    if (token.name.empty()) r.Error(path + ".name", "required");
    if (std::optional<Role> parsed = ParseRole(role)) {
      token.role = *parsed;
    } else {
      r.Error(path + ".role", "must be viewer, operator, admin or remote_write");
    }
    if (!IsSha256Hex(token.sha256_hex))
      r.Error(path + ".sha256",
              "must be the 64 hex digits of the token's SHA-256 (vigilctl "
              "hash-token TOKEN)");
    auth->tokens.push_back(std::move(token));
  }
}

// The receiver types, and "type {setting, optional?, ...}; ..." for each.
std::pair<std::string, std::string> ReceiverTypesAndSettings() {
  std::vector<std::string> types, settings;
  for (const auto& [type, keys] : ReceiverTypeSettings()) {
    types.push_back(type);
    settings.push_back(absl::StrCat(type, " {", absl::StrJoin(keys, ", "), "}"));
  }
  return {absl::StrJoin(types, ", "), absl::StrJoin(settings, "; ")};
}

// The "notifications" section; receivers are checked with ValidateReceiver
// and channel routes must name configured receivers.
void ParseNotifications(const Json& section, Reader& r,
                        NotificationOptions* out) {
  if (!r.CheckObject(section, "notifications",
                     {"public_url", "receivers", "channels", "retry_base_seconds",
                      "retry_max_seconds"}))
    return;
  NotificationOptions n;
  r.String(section, "notifications", "public_url", &n.public_url,
           "Base URL of the UI for the links in messages (and Alertmanager's "
           "generatorURL); empty: the http_listen address");
  r.Positive(section, "notifications", "retry_base_seconds", 1, 3600,
             &n.retry_base_seconds,
             "Seconds before the first retry of an undelivered page; retries back off "
             "exponentially from it, with jitter");
  r.Positive(section, "notifications", "retry_max_seconds", 1, 86400,
             &n.retry_max_seconds, "Cap of the retry backoff, in seconds");
  std::set<std::string> names;
  if (const Json* it = r.ObjectArray(section, "notifications", "receivers", Json::array(),
                                     "Where pages can go: one entry per destination");
      it != nullptr) {
    if (!it->is_array()) {
      r.Error("notifications.receivers", "must be an array");
    } else {
      const auto [type_values, settings_values] = ReceiverTypesAndSettings();
      for (size_t i = 0; i < it->size(); ++i) {
        const Json& j = (*it)[i];
        const std::string path = absl::StrCat("notifications.receivers[", i, "]");
        if (!r.CheckObject(j, path, {"name", "type", "settings", "rate_per_minute"}))
          continue;
        ReceiverConfig receiver;
        r.String(j, path, "name", &receiver.name,
                 KeyDoc::Required("Unique name that channel routes refer to"));
        r.String(j, path, "type", &receiver.type,
                 KeyDoc::Required("Receiver type: the wire format and how answers are "
                                  "judged (notify/README.md)",
                                  type_values.c_str()));
        r.Integer(j, path, "rate_per_minute", 0, 100000, 1,
                  &receiver.rate_per_minute,
                  "Most sends per minute (token bucket); 0: the type's default "
                  "(dingtalk and wecom 20, slack and twilio 60, others unlimited)");
        if (const Json* s = r.Value(j, path, "settings", "object", Json::object(),
                                    {"The type's settings ('?': optional; "
                                     "notify/README.md); unknown ones are errors",
                                     settings_values.c_str()}))
          receiver.settings = *s;
        if (receiver.name.empty()) {
          r.Error(path + ".name", "required");
        } else if (!names.insert(receiver.name).second) {
          r.Error(path + ".name", absl::StrCat("duplicate receiver \"",
                                               receiver.name, "\""));
        }
        if (absl::Status s = ValidateReceiver(receiver); !s.ok())
          r.Error(path, std::string(s.message()));
        n.receivers.push_back(std::move(receiver));
      }
    }
  }
  if (const Json* it = r.ObjectMap(
          section, "notifications", "channels", "channel",
          "Where each escalation channel's pages go; a channel without a route sends "
          "nothing (the timeline says so)");
      it != nullptr && r.CheckObject(*it, "notifications.channels",
                                     {"phone", "sms", "im", "email", "pagerduty",
                                      "webhook", "ticket"})) {
    for (const auto& [channel, j] : it->items()) {
      const std::string path = absl::StrCat("notifications.channels.", channel);
      if (!r.CheckObject(j, path, {"receivers", "failover"})) continue;
      ChannelRoute route;
      r.Bool(j, path, "failover", &route.failover,
             "false: every receiver gets the page; true: the first that works does "
             "(the next is tried when one fails for good)");
      auto list = r.Value(j, path, "receivers", "string list", nullptr,
                          KeyDoc::Required("Names of receivers "
                                           "(notifications.receivers[].name)"));
      if (list == nullptr || !list->is_array()) {
        r.Error(path + ".receivers", "must be an array of receiver names");
        continue;
      }
      for (const Json& name : *list) {
        if (!name.is_string() || !names.count(name.get<std::string>())) {
          r.Error(path + ".receivers",
                  absl::StrCat("unknown receiver ", name.dump()));
          continue;
        }
        route.receivers.push_back(name.get<std::string>());
      }
      n.channels[channel] = std::move(route);
    }
  }
  *out = std::move(n);
}

// HOST:PORT with a non-empty host and a port in [0, 65535].
bool ValidListenAddress(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  int port;
  return absl::SimpleAtoi(address.substr(colon + 1), &port) && port >= 0 &&
         port <= 65535;
}

// Every line of `text` prefixed with "`path`: ".
std::string PrefixLines(const std::string& path, absl::string_view text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (auto& line : lines) line = absl::StrCat(path, ": ", line);
  return absl::StrJoin(lines, "\n");
}

// Reads the config document `root` into `*o`.
void ReadServerConfig(const Json& root, Reader& r, ServerOptions* o) {
  if (!r.CheckObject(root, "", {"data_dir", "memory", "grpc_listen",
                                "grpc_tls", "grpc_insecure", "node_tokens",
                                "http_listen", "web_dir", "storage", "ingest",
                                "http", "detection", "auth", "escalation",
                                "notifications", "actuator", "watchdog",
                                "remote_write", "remote_write_receiver", "alertmanager",
                                "cluster"}))
    return;
  r.String(root, "", "data_dir", &o->data_dir,
           "Directory of the RocksDB store; required unless memory (--data-dir)");
  r.Bool(root, "", "memory", &o->memory,
         "Keep everything in memory, without durability: tests and demos (--memory)");
  r.String(root, "", "grpc_listen", &o->grpc_listen,
           {"Where agents stream frames (gRPC); port 0 picks a free port (--grpc-listen)",
            "HOST:PORT"});
  if (const Json* s = r.Object(
          root, "", "grpc_tls",
          "TLS for agents. The server refuses to start without it unless grpc_insecure; "
          "files are checked at start and re-read every reload_seconds"))
    ParseGrpcTls(*s, r, &o->grpc_tls);
  r.Bool(root, "", "grpc_insecure", &o->grpc_insecure,
         "Accept agents over plaintext gRPC (tests, demos, a trusted network); exactly "
         "one of grpc_tls and grpc_insecure must be set (--grpc-insecure)");
  if (const Json* s = r.Object(
          root, "", "node_tokens",
          "Bearer tokens of the agents: when any is configured, every ingest stream "
          "must carry its node's token; absent: none"))
    ParseNodeTokens(*s, r, &o->node_tokens);
  r.String(root, "", "http_listen", &o->http_listen,
           {"Where the HTTP API and UI listen; port 0 picks a free port (--http-listen)",
            "HOST:PORT"});
  r.String(root, "", "web_dir", &o->web_dir,
           "Directory served under GET / (the web UI); empty: none. vigil-server "
           "starts from the source tree's web/ (--web-dir)");
  constexpr double kDay = 86400;
  constexpr double kTenYears = 3660;
  if (const Json* s = r.Object(root, "", "storage", "The series store (RocksDB)");
      s != nullptr &&
      r.CheckObject(*s, "storage",
                    {"raw_retention_days", "rollup_retention_days",
                     "sync_frame_log", "block_samples", "block_seconds",
                     "max_series", "frame_log_checkpoint_mb",
                     "memtable_mb", "idle_block_seconds",
                     "incident_after_seconds"})) {
    r.Positive(*s, "storage", "raw_retention_days", kDay, kTenYears,
               &o->raw_retention_seconds,
               "Days raw samples are kept; older ones expire and are refused on ingest");
    r.Positive(*s, "storage", "rollup_retention_days", kDay, kTenYears,
               &o->rollup_retention_seconds,
               "Days 1-minute rollups (min, max, sum, count) are kept; at least "
               "raw_retention_days");
    r.Bool(*s, "storage", "sync_frame_log", &o->sync_frame_log,
           "fsync the frame log on every append: an acked sample then survives power "
           "loss, not only a crash (slower)");
    r.Integer(*s, "storage", "block_samples", 1, 1'000'000, 1, &o->block_samples,
              "Samples after which a series' open block is compressed and flushed");
    r.Positive(*s, "storage", "block_seconds", 1, kDay, &o->block_seconds,
               "Seconds an open block may span before it is flushed");
    r.Integer(*s, "storage", "max_series", 1,
              std::numeric_limits<uint32_t>::max() - 1, 1, &o->max_series,
              "Series the store holds at most; new series beyond are refused "
              "(RESOURCE_EXHAUSTED)");
    r.Integer(*s, "storage", "frame_log_checkpoint_mb", 1, 1 << 20, 1 << 20,
              &o->frame_log_checkpoint_bytes,
              "MiB of frame log that trigger a checkpoint of the open blocks: "
              "smaller writes more pieces per sample, larger replays more "
              "after a crash");
    r.Integer(*s, "storage", "memtable_mb", 0, 1 << 20, 1 << 20,
              &o->memtable_budget_bytes,
              "MiB all RocksDB memtables together may hold before the largest is "
              "flushed; 0: RocksDB's own limit per column family (64 MiB)");
    r.Integer(*s, "storage", "idle_block_seconds", 0, 86400, 1,
              &o->idle_block_seconds,
              "Seconds without a sample after which a series' open block is "
              "written out and its memory freed (a job ended, a node moved "
              "on); 0: never, open blocks then stay until raw retention");
    r.Positive(*s, "storage", "incident_after_seconds", 1, kDay,
               &o->storage_incident_after_seconds,
               "Seconds the store must refuse writes (full disk, read-only data dir) "
               "before the P1 self-incident storage_degraded opens");
  }
  if (const Json* s = r.Object(root, "", "ingest", "Limits of the agents' gRPC streams");
      s != nullptr &&
      r.CheckObject(*s, "ingest",
                    {"max_future_skew_seconds", "max_message_mb",
                     "max_series_per_stream", "max_new_series_per_node",
                     "max_new_series_per_job", "max_streams",
                     "first_batch_seconds", "threads", "grpc_bdp_probe"})) {
    r.Integer(*s, "ingest", "threads", 1, 256, 1, &o->ingest_threads,
              "Threads serving the agents' gRPC streams, each polling a completion "
              "queue of its own; one served 1,250 agents at 1 Hz with about a fifth "
              "of a core (bench/RESULTS.md)");
    r.Integer(*s, "ingest", "max_streams", 1, 1'000'000, 1, &o->max_streams,
              "Agent streams served at once; a new one past it gets UNAVAILABLE and "
              "the agent retries");
    r.Positive(*s, "ingest", "first_batch_seconds", 1, 3600,
               &o->first_batch_seconds,
               "Seconds a new stream may take to send its first batch before it is "
               "cancelled (once the ingest thread has nothing left to read: a "
               "batch that came in time is not cancelled for waiting behind "
               "others)");
    r.Positive(*s, "ingest", "max_future_skew_seconds", 1, kDay,
               &o->max_future_skew_seconds,
               "Frames stamped more than this many seconds ahead of the server's "
               "clock are refused");
    r.Integer(*s, "ingest", "max_series_per_stream", 0, 100'000'000, 1,
              &o->max_series_per_stream,
              "Series one agent stream may define; 0: no limit. Refused series lose "
              "their samples, the rest of the batch is kept");
    r.Integer(*s, "ingest", "max_new_series_per_node", 0, 1'000'000'000, 1,
              &o->max_new_series_per_node,
              "New series one node may create within the raw retention; 0: no limit");
    r.Integer(*s, "ingest", "max_new_series_per_job", 0, 1'000'000'000, 1,
              &o->max_new_series_per_job,
              "New series one job, over all its nodes, may create within the raw "
              "retention; 0: no limit");
    r.Integer(*s, "ingest", "max_message_mb", 1, 1024, 1 << 20,
              &o->max_message_bytes,
              "Largest batch (gRPC message) accepted, in MiB; larger ones get "
              "RESOURCE_EXHAUSTED");
    r.Bool(*s, "ingest", "grpc_bdp_probe", &o->grpc_bdp_probe,
           "gRPC's bandwidth-delay-product probe on the agents' streams: grows a "
           "stream's flow-control window past 64 KiB with a ping per batch read. "
           "Off, 1,250 agents cost ~9 % less server CPU and a catch-up batch over "
           "64 KiB waits one more round trip, which only links of several ms "
           "notice (bench/RESULTS.md)");
  }
  if (const Json* s = r.Object(root, "", "http", "The HTTP API and UI server");
      s != nullptr &&
      r.CheckObject(*s, "http", {"max_points", "threads", "max_requests_per_client",
                                 "secure_cookies", "trusted_proxies"})) {
    ParseTrustedProxies(*s, r, &o->http_trusted_proxies);
    r.Bool(*s, "http", "secure_cookies", &o->http_secure_cookies,
           "Mark the session cookie Secure (set it when the UI is reached over TLS)");
    r.Integer(*s, "http", "max_requests_per_client", 1, 256, 1,
              &o->http_max_requests_per_client,
              "Requests one client address may have in flight (live-event streams "
              "included); more get 429. Unset (0): half of threads, at least 4");
    r.Integer(*s, "http", "max_points", 1, 1'000'000'000, 1, &o->max_query_points,
              "Most points one /api/v1/query answer may hold; more get 400, asking "
              "for a step");
    r.Integer(*s, "http", "threads", 1, 256, 1, &o->http_threads,
              "Threads serving HTTP requests");
  }
  if (const Json* s = r.Object(root, "", "detection",
                               "Detection on every accepted frame (docs/DETECTION.md)");
      s != nullptr &&
      r.CheckObject(*s, "detection",
                    {"enabled", "rules_file", "learn_steps", "k_sigma",
                     "learn_max_seconds", "rewarm_seconds", "warmup_steps",
                     "warmup_max_seconds",
                     "family_pattern", "snapshot_seconds",
                     "learned_snapshot_seconds",
                     "scheduler_poll_seconds", "await_scheduler_seconds",
                     "restart_resolve_seconds", "workers",
                     "queue_batches", "worker_linger_ms"})) {
    r.Bool(*s, "detection", "enabled", &o->detection_enabled,
           "Run detection on every accepted frame; false: stored incidents are "
           "still served, no new ones are raised (--no-detect)");
    r.String(*s, "detection", "rules_file", &o->rules_file,
             "JSON rule document applied on top of the built-in catalogue "
             "(rules/README.md); empty: the catalogue alone. Errors stop the "
             "server (--rules)");
    r.Integer(*s, "detection", "learn_steps", 1, 100'000'000, 1,
              &o->detector.baseline.learn_steps,
              "Training steps over which a series' baseline is learned (samples when "
              "frames carry no step)");
    r.Positive(*s, "detection", "k_sigma", 1, 100, &o->detector.baseline.k_sigma,
               "A learned series raises beyond this many robust sigmas; must be above "
               "the clear band (k_clear of detector/options.h)");
    r.Positive(*s, "detection", "learn_max_seconds", 1, 30 * 86400,
               &o->detector.baseline.learn_max_s,
               "Learning also ends after this many seconds of data, whichever of it "
               "and learn_steps comes first");
    r.Integer(*s, "detection", "rewarm_seconds", 0, 3600, 1,
              &o->detector.lifecycle.rewarm_s,
              "Seconds a node (re)starting a run is out of learning and alerting while "
              "it warms up again");
    r.Integer(*s, "detection", "warmup_steps", 0, 100'000'000, 1,
              &o->detector.baseline.warmup_steps,
              "First steps of a job treated as its LR warm-up: out of learning and "
              "alerting");
    r.Integer(*s, "detection", "warmup_max_seconds", 0, 30 * 86400, 1,
              &o->detector.baseline.warmup_max_s,
              "Seconds from a job's first frame on a node after which its warm-up ends "
              "whatever the step");
    r.String(*s, "detection", "family_pattern",
             &o->detector.lifecycle.family_pattern,
             {"Its first capture group names a job's family (\"gpt13b-r2\" -> "
              "\"gpt13b\"); a new run starts from its family's baselines",
              "ECMAScript regex with a capture group"});
    r.Integer(*s, "detection", "snapshot_seconds", 0, 86400, 1,
              &o->detection_snapshot_seconds,
              "Seconds between snapshots of what detection learned (and one at "
              "shutdown), taken back at start, while some series are still to learn; 0: none");
    r.Integer(*s, "detection", "learned_snapshot_seconds", 0, 86400, 1,
              &o->detection_learned_snapshot_seconds,
              "Seconds between those snapshots once, at the last one, no running "
              "job's series was still to learn its baseline (at least "
              "snapshot_seconds): learned baselines only adapt slowly, and each "
              "snapshot rewrites them all");
    r.Integer(*s, "detection", "scheduler_poll_seconds", 0, 3600, 1,
              &o->scheduler_poll_seconds,
              "With an actuator: seconds between asking the scheduler which reporting "
              "jobs it still runs; 0: never");
    r.Integer(*s, "detection", "await_scheduler_seconds", 0, 3600, 1,
              &o->await_scheduler_seconds,
              "With an actuator: seconds a job whose nodes all stopped waits for the "
              "scheduler's answer before the stop is read as its end");
    r.Integer(*s, "detection", "restart_resolve_seconds", 1, 7 * 86400, 1,
              &o->restart_resolve_seconds,
              "After a restart, an incident from before it that is not raised again "
              "within this many seconds of its nodes' frames resolves");
    r.Integer(*s, "detection", "workers", 1, 256, 1, &o->detection_workers,
              "Frame worker threads, one detection shard each (jobs split by family); "
              "changing it re-learns what the snapshot held");
    r.Integer(*s, "detection", "queue_batches", 1, 10'000'000, 1,
              &o->detection_queue_batches,
              "Batches one worker's queue may hold; past it ingest refuses that "
              "shard's batches with UNAVAILABLE (the agents resend)");
    r.Integer(*s, "detection", "worker_linger_ms", 0, 100, 1,
              &o->detection_worker_linger_ms,
              "While batches come more often than this, a worker takes them in "
              "bursts this many milliseconds apart instead of waking for each (less "
              "CPU with many agents at 1 Hz, much slower catch-up of agents sending "
              "a backlog; detection and acks up to this much later); 0: off");
  }
  if (const Json* s = r.Object(root, "", "auth", "API tokens and roles"))
    ParseAuth(*s, r, &o->auth);
  if (const Json* s = r.Object(
          root, "", "escalation",
          "Who is paged when, on which channels, and the interlocks of automatic "
          "actions (escalation/README.md)")) {
    absl::StatusOr<EscalationConfig> escalation =
        ParseEscalationConfig(*s, r.schema(), "escalation");
    if (escalation.ok()) {
      o->escalation = *std::move(escalation);
    } else {
      for (absl::string_view line :
           absl::StrSplit(escalation.status().message(), '\n'))
        r.Error("escalation", std::string(line));
    }
  }
  if (const Json* s = r.Object(root, "", "notifications",
                               "Notification receivers and how channels route to them"))
    ParseNotifications(*s, r, &o->notifications);
  if (const Json* s = r.Object(root, "", "actuator",
                               "Where automatic actions go: vigil-actuator "
                               "(actuator/README.md)");
      s != nullptr &&
      r.CheckObject(*s, "actuator",
                    {"url", "secret_file", "checkpoint_timeout_seconds"})) {
    r.String(*s, "actuator", "url", &o->actuator.url,
             "Where action webhooks are POSTed; empty: actions are decided and "
             "recorded but not sent");
    r.String(*s, "actuator", "secret_file", &o->actuator.secret_file,
             "File holding the HMAC secret shared with the actuator, read at start");
    r.Positive(*s, "actuator", "checkpoint_timeout_seconds", 1, 86400,
               &o->actuator.checkpoint_timeout_seconds,
               "Seconds the actuator waits for a job's checkpoint before pausing it");
  }
  if (const Json* s = r.Object(
          root, "", "watchdog",
          "Dead-man's switch: heartbeats to a receiver outside Vigil while the server "
          "works; absent: off"))
    ReadWatchdogConfig(*s, r, &o->watchdog);
  if (const Json* s = r.Object(
          root, "", "remote_write",
          "Ship 1-minute rollups (and chosen raw series) to a Prometheus remote-write "
          "endpoint; absent: off"))
    ParseRemoteWriteSection(*s, r, &o->remote_write);
  if (const Json* s = r.Object(
          root, "", "alertmanager",
          "Alertmanager both ways: incidents forwarded as alerts, Prometheus rules' "
          "alerts taken in (docs/PROMETHEUS.md)"))
    ParseAlertmanagerSection(*s, r, &o->alertmanager);
  if (const Json* s = r.Object(
          root, "", "remote_write_receiver",
          "Prometheus remote write in (POST /api/v1/write, docs/PROMETHEUS.md); "
          "absent: off, present (even {}): on"))
    ParseRemoteWriteReceiverSection(*s, r, &o->remote_write_receiver);
  if (const Json* s = r.Object(
          root, "", "cluster",
          "Cluster mode: membership, shards and leaderships in etcd "
          "(docs/SCALING.md); absent: a single server. Flags may supply or override "
          "its keys"))
    cluster::ParseClusterSection(*s, r, &o->cluster);
}

}  // namespace

absl::Status ParseServerConfig(std::string_view text, ServerOptions* options) {
  Json root = Json::parse(text, nullptr, false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("(top level): not valid JSON: ", JsonSyntaxError(text)));
  }
  ServerOptions o = *options;
  Reader r;
  ReadServerConfig(root, r, &o);
  if (!r.errors().empty())
    return absl::InvalidArgumentError(absl::StrJoin(r.errors(), "\n"));
  *options = std::move(o);
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> ServerConfigReference() {
  ConfigSchema schema;
  Reader r(&schema);
  ServerOptions options;
  ReadServerConfig(Json::object(), r, &options);
  if (absl::Status s = schema.CheckComplete(); !s.ok()) return s;
  return schema.ToJson("vigil-server");
}

absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status LoadServerConfigFile(const std::string& path,
                                  ServerOptions* options) {
  VIGIL_ASSIGN_OR_RETURN(const std::string text, ReadConfigFile(path));
  return ParseServerConfigFile(path, text, options);
}

absl::Status ParseServerConfigFile(const std::string& path, std::string_view text,
                                   ServerOptions* options) {
  absl::Status s = ParseServerConfig(text, options);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(PrefixLines(path, s.message()));
}

absl::StatusOr<RuleSet> ParseServerRules(const std::string& path, std::string_view text) {
  absl::StatusOr<RuleSet> rules = LoadRuleSet(text);
  if (!rules.ok())
    return absl::InvalidArgumentError(PrefixLines(path, rules.status().message()));
  if (rules->settings.reopen_window_s >= Escalator::kForgetResolvedAfterSeconds)
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": settings.reopen_window_s must be below ",
        Escalator::kForgetResolvedAfterSeconds, " (7 days)"));
  return rules;
}

absl::StatusOr<RuleSet> LoadServerRules(const ServerOptions& options) {
  if (options.rules_file.empty()) return DefaultRuleSet();
  VIGIL_ASSIGN_OR_RETURN(const std::string text, ReadConfigFile(options.rules_file));
  return ParseServerRules(options.rules_file, text);
}

absl::Status ValidateServerOptions(const ServerOptions& options) {
  std::vector<std::string> errors;
  if (options.cluster.has_value()) {
    if (absl::Status s = cluster::ValidateClusterOptions(*options.cluster); !s.ok())
      errors.push_back(std::string(s.message()));
  }
  if (!options.memory && options.data_dir.empty())
    errors.push_back("data_dir: required unless memory is set");
  if (!ValidListenAddress(options.grpc_listen))
    errors.push_back(absl::StrCat("grpc_listen: '", options.grpc_listen,
                                  "' is not HOST:PORT"));
  if (!ValidListenAddress(options.http_listen))
    errors.push_back(absl::StrCat("http_listen: '", options.http_listen,
                                  "' is not HOST:PORT"));
  if (options.grpc_tls.has_value() && options.grpc_insecure)
    errors.push_back(
        "grpc_insecure: cannot be combined with grpc_tls; choose one");
  if (!options.grpc_tls.has_value() && !options.grpc_insecure)
    errors.push_back(
        "grpc_tls: required: agents connect over TLS (cert_file, key_file, "
        "client_ca_file; see deploy/make-test-ca.sh) unless plaintext is "
        "asked for explicitly with \"grpc_insecure\": true or "
        "--grpc-insecure");
  if (const std::optional<GrpcTlsOptions>& tls = options.grpc_tls) {
    if (tls->cert_file.empty())
      errors.push_back("grpc_tls.cert_file: required");
    if (tls->key_file.empty()) errors.push_back("grpc_tls.key_file: required");
    if (tls->require_client_cert && tls->client_ca_file.empty())
      errors.push_back(
          "grpc_tls.client_ca_file: required while require_client_cert is "
          "true (the CA bundle that signed the agents' certificates)");
    if (tls->node_identity == NodeIdentity::kCertificate &&
        !tls->require_client_cert)
      errors.push_back(
          "grpc_tls.node_identity: \"certificate\" needs "
          "require_client_cert");
  }
  if (options.rollup_retention_seconds < options.raw_retention_seconds)
    errors.push_back(
        "storage.rollup_retention_days: must not be shorter than "
        "raw_retention_days");
  if (absl::Status s = Detector::ValidateOptions(options.detector); !s.ok())
    errors.push_back(absl::StrCat("detection.", s.message()));
  if (!(options.detector.baseline.k_sigma > options.detector.baseline.k_clear))
    errors.push_back(absl::StrCat("detection.k_sigma: must be above the clear "
                                  "band of ",
                                  options.detector.baseline.k_clear, " sigmas"));
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

}  // namespace vigil
