#include "server/config/config.h"

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
  r.String(section, path, "cert_file", &tls.cert_file);
  r.String(section, path, "key_file", &tls.key_file);
  r.String(section, path, "client_ca_file", &tls.client_ca_file);
  r.Bool(section, path, "require_client_cert", &tls.require_client_cert);
  r.Integer(section, path, "reload_seconds", 1, 86400, 1, &tls.reload_seconds);
  // With mTLS the certificate names the node unless told otherwise: a
  // node's token or certificate must not report for another node.
  std::string identity = tls.require_client_cert ? "certificate" : "none";
  r.String(section, path, "node_identity", &identity);
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
  r.String(section, path, "file", &tokens.file);
  if (auto it = section.find("sha256"); it != section.end()) {
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
  auto it = section.find("trusted_proxies");
  if (it == section.end()) return;
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
  r.Bool(section, "auth", "anonymous_read", &auth->anonymous_read);
  auto it = section.find("tokens");
  if (it == section.end()) return;
  if (!it->is_array()) return r.Error("auth.tokens", "must be an array");
  auth->tokens.clear();
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string path = absl::StrCat("auth.tokens[", i, "]");
    if (!r.CheckObject(t, path, {"name", "role", "sha256"})) continue;
    ApiToken token;
    std::string role = "viewer";
    r.String(t, path, "name", &token.name);
    r.String(t, path, "role", &role);
    r.String(t, path, "sha256", &token.sha256_hex);
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

// The "notifications" section; receivers are checked with ValidateReceiver
// and channel routes must name configured receivers.
void ParseNotifications(const Json& section, Reader& r,
                        NotificationOptions* out) {
  if (!r.CheckObject(section, "notifications",
                     {"public_url", "receivers", "channels", "retry_base_seconds",
                      "retry_max_seconds"}))
    return;
  NotificationOptions n;
  r.String(section, "notifications", "public_url", &n.public_url);
  r.Positive(section, "notifications", "retry_base_seconds", 1, 3600,
             &n.retry_base_seconds);
  r.Positive(section, "notifications", "retry_max_seconds", 1, 86400,
             &n.retry_max_seconds);
  std::set<std::string> names;
  if (auto it = section.find("receivers"); it != section.end()) {
    if (!it->is_array()) {
      r.Error("notifications.receivers", "must be an array");
    } else {
      for (size_t i = 0; i < it->size(); ++i) {
        const Json& j = (*it)[i];
        const std::string path = absl::StrCat("notifications.receivers[", i, "]");
        if (!r.CheckObject(j, path, {"name", "type", "settings", "rate_per_minute"}))
          continue;
        ReceiverConfig receiver;
        r.String(j, path, "name", &receiver.name);
        r.String(j, path, "type", &receiver.type);
        r.Integer(j, path, "rate_per_minute", 0, 100000, 1,
                  &receiver.rate_per_minute);
        if (auto s = j.find("settings"); s != j.end()) receiver.settings = *s;
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
  if (auto it = section.find("channels"); it != section.end() &&
      r.CheckObject(*it, "notifications.channels",
                    {"phone", "sms", "im", "email", "pagerduty", "webhook",
                     "ticket"})) {
    for (const auto& [channel, j] : it->items()) {
      const std::string path = absl::StrCat("notifications.channels.", channel);
      if (!r.CheckObject(j, path, {"receivers", "failover"})) continue;
      ChannelRoute route;
      r.Bool(j, path, "failover", &route.failover);
      auto list = j.find("receivers");
      if (list == j.end() || !list->is_array()) {
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

}  // namespace

absl::Status ParseServerConfig(std::string_view text, ServerOptions* options) {
  Json root = Json::parse(text, nullptr, false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("(top level): not valid JSON: ", JsonSyntaxError(text)));
  }
  ServerOptions o = *options;
  Reader r;
  if (r.CheckObject(root, "", {"data_dir", "memory", "grpc_listen",
                               "grpc_tls", "grpc_insecure", "node_tokens",
                               "http_listen", "web_dir", "storage", "ingest",
                               "http", "detection", "auth", "escalation",
                               "notifications", "actuator", "watchdog",
                               "remote_write", "remote_write_receiver", "alertmanager",
                               "cluster"})) {
    r.String(root, "", "data_dir", &o.data_dir);
    r.Bool(root, "", "memory", &o.memory);
    r.String(root, "", "grpc_listen", &o.grpc_listen);
    if (auto it = root.find("grpc_tls"); it != root.end())
      ParseGrpcTls(*it, r, &o.grpc_tls);
    r.Bool(root, "", "grpc_insecure", &o.grpc_insecure);
    if (auto it = root.find("node_tokens"); it != root.end())
      ParseNodeTokens(*it, r, &o.node_tokens);
    r.String(root, "", "http_listen", &o.http_listen);
    r.String(root, "", "web_dir", &o.web_dir);
    constexpr double kDay = 86400;
    constexpr double kTenYears = 3660;
    if (auto it = root.find("storage"); it != root.end() &&
        r.CheckObject(*it, "storage",
                      {"raw_retention_days", "rollup_retention_days",
                       "sync_frame_log", "block_samples", "block_seconds",
                       "max_series", "frame_log_checkpoint_mb",
                       "memtable_mb", "incident_after_seconds"})) {
      r.Positive(*it, "storage", "raw_retention_days", kDay, kTenYears,
                 &o.raw_retention_seconds);
      r.Positive(*it, "storage", "rollup_retention_days", kDay, kTenYears,
                 &o.rollup_retention_seconds);
      r.Bool(*it, "storage", "sync_frame_log", &o.sync_frame_log);
      r.Integer(*it, "storage", "block_samples", 1, 1'000'000, 1,
                &o.block_samples);
      r.Positive(*it, "storage", "block_seconds", 1, kDay, &o.block_seconds);
      r.Integer(*it, "storage", "max_series", 1,
                std::numeric_limits<uint32_t>::max() - 1, 1, &o.max_series);
      r.Integer(*it, "storage", "frame_log_checkpoint_mb", 1, 1 << 20,
                1 << 20, &o.frame_log_checkpoint_bytes);
      r.Integer(*it, "storage", "memtable_mb", 0, 1 << 20, 1 << 20,
                &o.memtable_budget_bytes);
      r.Positive(*it, "storage", "incident_after_seconds", 1, kDay,
                 &o.storage_incident_after_seconds);
    }
    if (auto it = root.find("ingest"); it != root.end() &&
        r.CheckObject(*it, "ingest",
                      {"max_future_skew_seconds", "max_message_mb",
                       "max_series_per_stream", "max_new_series_per_node",
                       "max_new_series_per_job", "max_streams",
                       "first_batch_seconds"})) {
      r.Integer(*it, "ingest", "max_streams", 1, 1'000'000, 1, &o.max_streams);
      r.Positive(*it, "ingest", "first_batch_seconds", 1, 3600,
                 &o.first_batch_seconds);
      r.Positive(*it, "ingest", "max_future_skew_seconds", 1, kDay,
                 &o.max_future_skew_seconds);
      r.Integer(*it, "ingest", "max_series_per_stream", 0, 100'000'000, 1,
                &o.max_series_per_stream);
      r.Integer(*it, "ingest", "max_new_series_per_node", 0, 1'000'000'000, 1,
                &o.max_new_series_per_node);
      r.Integer(*it, "ingest", "max_new_series_per_job", 0, 1'000'000'000, 1,
                &o.max_new_series_per_job);
      r.Integer(*it, "ingest", "max_message_mb", 1, 1024, 1 << 20,
                &o.max_message_bytes);
    }
    if (auto it = root.find("http"); it != root.end() &&
        r.CheckObject(*it, "http", {"max_points", "threads", "max_requests_per_client",
                                    "secure_cookies", "trusted_proxies"})) {
      ParseTrustedProxies(*it, r, &o.http_trusted_proxies);
      r.Bool(*it, "http", "secure_cookies", &o.http_secure_cookies);
      r.Integer(*it, "http", "max_requests_per_client", 1, 256, 1,
                &o.http_max_requests_per_client);
      r.Integer(*it, "http", "max_points", 1, 1'000'000'000, 1,
                &o.max_query_points);
      r.Integer(*it, "http", "threads", 1, 256, 1, &o.http_threads);
    }
    if (auto it = root.find("detection"); it != root.end() &&
        r.CheckObject(*it, "detection",
                      {"enabled", "rules_file", "learn_steps", "k_sigma",
                       "learn_max_seconds", "rewarm_seconds", "warmup_steps",
                       "warmup_max_seconds",
                       "family_pattern", "snapshot_seconds",
                       "scheduler_poll_seconds", "await_scheduler_seconds",
                       "restart_resolve_seconds", "workers",
                       "queue_batches"})) {
      r.Bool(*it, "detection", "enabled", &o.detection_enabled);
      r.String(*it, "detection", "rules_file", &o.rules_file);
      r.Integer(*it, "detection", "learn_steps", 1, 100'000'000, 1,
                &o.detector.baseline.learn_steps);
      r.Positive(*it, "detection", "k_sigma", 1, 100, &o.detector.baseline.k_sigma);
      r.Positive(*it, "detection", "learn_max_seconds", 1, 30 * 86400,
                 &o.detector.baseline.learn_max_s);
      r.Integer(*it, "detection", "rewarm_seconds", 0, 3600, 1,
                &o.detector.lifecycle.rewarm_s);
      r.Integer(*it, "detection", "warmup_steps", 0, 100'000'000, 1,
                &o.detector.baseline.warmup_steps);
      r.Integer(*it, "detection", "warmup_max_seconds", 0, 30 * 86400, 1,
                &o.detector.baseline.warmup_max_s);
      r.String(*it, "detection", "family_pattern",
               &o.detector.lifecycle.family_pattern);
      r.Integer(*it, "detection", "snapshot_seconds", 0, 86400, 1,
                &o.detection_snapshot_seconds);
      r.Integer(*it, "detection", "scheduler_poll_seconds", 0, 3600, 1,
                &o.scheduler_poll_seconds);
      r.Integer(*it, "detection", "await_scheduler_seconds", 0, 3600, 1,
                &o.await_scheduler_seconds);
      r.Integer(*it, "detection", "restart_resolve_seconds", 1, 7 * 86400, 1,
                &o.restart_resolve_seconds);
      r.Integer(*it, "detection", "workers", 1, 256, 1, &o.detection_workers);
      r.Integer(*it, "detection", "queue_batches", 1, 10'000'000, 1,
                &o.detection_queue_batches);
    }
    if (auto it = root.find("auth"); it != root.end())
      ParseAuth(*it, r, &o.auth);
    if (auto it = root.find("escalation"); it != root.end()) {
      absl::StatusOr<EscalationConfig> escalation = ParseEscalationConfig(*it);
      if (escalation.ok()) {
        o.escalation = *std::move(escalation);
      } else {
        for (absl::string_view line :
             absl::StrSplit(escalation.status().message(), '\n'))
          r.Error("escalation", std::string(line));
      }
    }
    if (auto it = root.find("notifications"); it != root.end())
      ParseNotifications(*it, r, &o.notifications);
    if (auto it = root.find("actuator"); it != root.end() &&
        r.CheckObject(*it, "actuator",
                      {"url", "secret_file", "checkpoint_timeout_seconds"})) {
      r.String(*it, "actuator", "url", &o.actuator.url);
      r.String(*it, "actuator", "secret_file", &o.actuator.secret_file);
      r.Positive(*it, "actuator", "checkpoint_timeout_seconds", 1, 86400,
                 &o.actuator.checkpoint_timeout_seconds);
    }
    if (auto it = root.find("watchdog"); it != root.end())
      ReadWatchdogConfig(*it, r, &o.watchdog);
    if (auto it = root.find("remote_write"); it != root.end())
      ParseRemoteWriteSection(*it, r, &o.remote_write);
    if (auto it = root.find("alertmanager"); it != root.end())
      ParseAlertmanagerSection(*it, r, &o.alertmanager);
    if (auto it = root.find("remote_write_receiver"); it != root.end())
      ParseRemoteWriteReceiverSection(*it, r, &o.remote_write_receiver);
    if (auto it = root.find("cluster"); it != root.end())
      cluster::ParseClusterSection(*it, r, &o.cluster);
  }
  if (!r.errors().empty())
    return absl::InvalidArgumentError(absl::StrJoin(r.errors(), "\n"));
  *options = std::move(o);
  return absl::OkStatus();
}

absl::Status LoadServerConfigFile(const std::string& path,
                                  ServerOptions* options) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream text;
  text << in.rdbuf();
  absl::Status s = ParseServerConfig(text.str(), options);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(PrefixLines(path, s.message()));
}

absl::StatusOr<RuleSet> LoadRuleFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<RuleSet> rules = LoadRuleSet(text.str());
  if (rules.ok()) return rules;
  return absl::InvalidArgumentError(PrefixLines(path, rules.status().message()));
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
