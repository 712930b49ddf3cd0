#include "agent/agent_config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/json_reader.h"
#include "common/series_key.h"

namespace vigil::agent {
namespace {

using Json = nlohmann::json;

// HOST:PORT with a non-empty host and a port in [0, 65535].
bool IsHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  int port = 0;
  return colon != std::string::npos && colon > 0 &&
         absl::SimpleAtoi(address.substr(colon + 1), &port) && port >= 0 &&
         port <= 65535;
}

void ParseTransport(const Json& j, JsonConfigReader& r,
                    AgentTransportConfig* t) {
  const std::string path = "transport";
  if (!r.CheckObject(j, path,
                     {"insecure", "ca_file", "cert_file", "key_file",
                      "server_name", "token_file"})) {
    return;
  }
  r.Bool(j, path, "insecure", &t->insecure,
         "Talk plaintext gRPC to the server; never the default (--insecure)");
  r.String(j, path, "ca_file", &t->ca_file,
           "PEM CA that signed the server's certificate (--tls-ca)");
  r.String(j, path, "cert_file", &t->cert_file,
           "PEM client certificate of this node, for mTLS (--tls-cert)");
  r.String(j, path, "key_file", &t->key_file,
           "PEM key of cert_file (--tls-key)");
  r.String(j, path, "server_name", &t->server_name,
           "Name to check the server's certificate against instead of the host of "
           "server, e.g. when dialling an IP (--tls-server-name)");
  r.String(j, path, "token_file", &t->token_file,
           "File holding this node's token, sent as a bearer token on every stream; "
           "empty: none (--token-file)");
}

void ParseCollectors(const Json& j, JsonConfigReader& r, AgentConfig* c) {
  if (!r.CheckObject(j, "collectors",
                     {"nvml", "infiniband", "disk", "cpu", "training", "exporter"})) {
    return;
  }
  // Reads one collector's section, checking its keys.
  auto section = [&](const char* name, std::set<std::string> keys, bool* enabled,
                     KeyDoc doc) -> const Json* {
    const Json* it = r.Object(j, "collectors", name, doc);
    if (it == nullptr) return nullptr;
    const std::string path = absl::StrCat("collectors.", name);
    keys.insert("enabled");
    if (!r.CheckObject(*it, path, keys)) return nullptr;
    r.Bool(*it, path, "enabled", enabled,
           "Run the collector (--collectors names the ones to run instead); one "
           "that cannot start is reported and left out");
    return it;
  };
  if (const Json* s = section("nvml", {"library", "events"}, &c->nvml.enabled,
                              "GPUs through NVML, dlopened at run time")) {
    r.String(*s, "collectors.nvml", "library", &c->nvml.library,
             "NVML library to dlopen; a bare name is searched the usual way "
             "(--nvml-library)");
    r.Bool(*s, "collectors.nvml", "events", &c->nvml.events,
           "Wait for XID and ECC events on a thread and send them at once, as their "
           "own frame");
    if (c->nvml.library.empty())
      r.Error("collectors.nvml.library", "must not be empty");
  }
  section("infiniband", {}, &c->infiniband.enabled,
          "RDMA NICs (InfiniBand, RoCE) through their sysfs counters");
  if (const Json* s = section("disk", {"devices"}, &c->disk.enabled,
                              "Disks through /proc/diskstats")) {
    r.StringList(*s, "collectors.disk", "devices", &c->disk.devices,
                 "Devices to report (e.g. \"nvme0n1\"); empty: every whole disk");
  }
  section("cpu", {}, &c->cpu.enabled, "Host CPU (iowait, busy) through /proc/stat");
  std::set<std::string> exporter_keys = {"urls", "timeout_seconds"};
  for (const std::string& key : promcompat::MappingKeys(promcompat::MappingScope::kSeriesOnly))
    exporter_keys.insert(key);
  if (const Json* s = section("exporter", exporter_keys, &c->exporter.enabled,
                              "Prometheus exporters on the node (dcgm-exporter, "
                              "node_exporter) scraped every tick and mapped onto "
                              "Vigil's series (docs/PROMETHEUS.md), under the "
                              "agent's own node and job")) {
    r.StringList(*s, "collectors.exporter", "urls", &c->exporter.urls,
                 {"Exporter pages to scrape; at least one when enabled",
                  "http://HOST:PORT[/path] URLs (path default /metrics)"});
    r.Positive(*s, "collectors.exporter", "timeout_seconds", 1, 60,
               &c->exporter.timeout_seconds,
               "Seconds one scrape may take, connect to last byte");
    promcompat::ParseMappingKeys(*s, "collectors.exporter", r, &c->exporter.mapping,
                                 promcompat::MappingScope::kSeriesOnly);
    if (c->exporter.enabled && c->exporter.urls.empty())
      r.Error("collectors.exporter.urls", "at least one exporter URL is needed when enabled");
  }
  if (const Json* s = section("training",
                              {"socket", "stale_seconds",
                               "disconnect_grace_seconds", "verify_jobs",
                               "refuse_unverified"},
                              &c->training.enabled,
                              "Step metrics pushed by the training processes "
                              "(python/README.md)")) {
    r.String(*s, "collectors.training", "socket", &c->training.socket,
             "Unix socket the ranks connect to (--training-socket)");
    r.Positive(*s, "collectors.training", "stale_seconds", 1, 86400,
               &c->training.stale_seconds,
               "Seconds after its last message a rank's readings stop counting");
    r.Positive(*s, "collectors.training", "disconnect_grace_seconds", 1, 3600,
               &c->training.disconnect_grace_seconds,
               "Seconds a rank whose connections all closed may take to reconnect "
               "before its job has ended on the node (the frame carries job_end)");
    if (c->training.socket.empty())
      r.Error("collectors.training.socket", "must not be empty");
    r.String(*s, "collectors.training", "verify_jobs", &c->training.verify_jobs,
             {"How a rank's job claim is checked: \"scheduler\" asks the kernel "
              "(cgroup) and Slurm which job the process runs in; \"off\" leaves every "
              "claim unverified (the server then never acts automatically on this "
              "node's jobs)",
              "\"scheduler\", \"off\""});
    if (c->training.verify_jobs != "scheduler" && c->training.verify_jobs != "off")
      r.Error("collectors.training.verify_jobs",
              "must be \"scheduler\" or \"off\"");
    r.Bool(*s, "collectors.training", "refuse_unverified",
           &c->training.refuse_unverified,
           "Refuse ranks whose job cannot be verified (processes outside any "
           "scheduler job) instead of accepting them unverified");
  }
}

// Reads the config document `doc` into `*c`.
void ReadAgentConfig(const Json& doc, JsonConfigReader& r, AgentConfig* c) {
  if (!r.CheckObject(doc, "",
                     {"server", "node", "idle_job", "interval_seconds",
                      "transport", "spool_dir", "spool_max_mb",
                      "metrics_listen", "sysfs_root", "proc_root",
                      "collectors", "unreachable_after_seconds",
                      "status_file"}))
    return;
  r.String(doc, "", "server", &c->server,
           KeyDoc::Required("The server to stream to, here or by --server; for a "
                            "cluster, any of its servers or several separated by commas "
                            "(the agent asks who owns its job)",
                            "HOST:PORT[,HOST:PORT...]"));
  r.String(doc, "", "node", &c->node,
           "This node's name; empty: the host name up to its first dot (--node)");
  r.String(doc, "", "idle_job", &c->idle_job,
           "Job reported while no training process on the node has named its job "
           "(--idle-job)");
  r.Positive(doc, "", "interval_seconds", 1, 3600, &c->interval_seconds,
             "Seconds between frames (--interval)");
  r.String(doc, "", "spool_dir", &c->spool_dir,
           "Directory of the on-disk spool of unacknowledged batches (one agent per "
           "directory); empty: in memory only, 64 MiB (--spool-dir)");
  r.Integer(doc, "", "spool_max_mb", 1, int64_t{1} << 20, 1, &c->spool_max_mb,
            "Bound of the spool in MiB; beyond it the oldest batches are dropped and "
            "counted (--spool-max-mb)");
  r.String(doc, "", "metrics_listen", &c->metrics_listen,
           {"Where the agent serves its own /metrics; empty: nowhere "
            "(--metrics-listen)",
            "IPV4:PORT"});
  r.Positive(doc, "", "unreachable_after_seconds", 1, 7 * 86400,
             &c->unreachable_after_seconds,
             "Seconds without an acknowledgement after which the agent says it cannot "
             "reach the server (a log line, vigil_agent_server_unreachable 1)");
  r.String(doc, "", "status_file", &c->status_file,
           "node_exporter textfile-collector file holding "
           "vigil_agent_server_unreachable and vigil_agent_seconds_since_last_ack, "
           "replaced every 10 s (or unreachable_after_seconds / 2 if shorter); "
           "empty: none");
  r.String(doc, "", "sysfs_root", &c->sysfs_root,
           "Where sysfs is mounted (tests point it at a fixture tree) (--sysfs-root)");
  r.String(doc, "", "proc_root", &c->proc_root,
           "Where procfs is mounted (--proc-root)");
  if (const Json* s = r.Object(doc, "", "transport",
                               "How the agent reaches the server: mTLS unless insecure"))
    ParseTransport(*s, r, &c->transport);
  if (const Json* s = r.Object(doc, "", "collectors",
                               "What the agent reads; every collector can be switched "
                               "off (--collectors)"))
    ParseCollectors(*s, r, c);
}

}  // namespace

std::vector<std::string> CollectorNames() {
  return {"nvml", "infiniband", "disk", "cpu", "training", "exporter"};
}

absl::Status ParseAgentConfig(std::string_view text, AgentConfig* config) {
  absl::StatusOr<Json> doc = ParseJsonDocument(text, "agent config");
  if (!doc.ok()) return doc.status();
  JsonConfigReader r;
  AgentConfig c = *config;
  ReadAgentConfig(*doc, r, &c);
  if (absl::Status s = r.Result("agent config"); !s.ok()) return s;
  *config = std::move(c);
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> AgentConfigReference() {
  ConfigSchema schema;
  JsonConfigReader r(&schema);
  AgentConfig config;
  ReadAgentConfig(Json::object(), r, &config);
  if (absl::Status s = schema.CheckComplete(); !s.ok()) return s;
  return schema.ToJson("vigil-agent");
}

absl::Status LoadAgentConfigFile(const std::string& path, AgentConfig* config) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read agent config ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::Status s = ParseAgentConfig(text.str(), config);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

absl::Status EnableOnlyCollectors(std::string_view list, AgentConfig* config) {
  AgentConfig c = *config;
  c.nvml.enabled = c.infiniband.enabled = c.disk.enabled = c.cpu.enabled =
      c.training.enabled = c.exporter.enabled = false;
  if (list != "none") {
    for (absl::string_view name :
         absl::StrSplit(absl::string_view(list.data(), list.size()), ',')) {
      bool* enabled = name == "nvml"         ? &c.nvml.enabled
                      : name == "infiniband" ? &c.infiniband.enabled
                      : name == "disk"       ? &c.disk.enabled
                      : name == "cpu"        ? &c.cpu.enabled
                      : name == "training"   ? &c.training.enabled
                      : name == "exporter"   ? &c.exporter.enabled
                                             : nullptr;
      if (enabled == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown collector \"", name,
            "\" (want nvml, infiniband, disk, cpu, training, exporter or none)"));
      }
      *enabled = true;
    }
  }
  *config = std::move(c);
  return absl::OkStatus();
}

absl::Status ValidateAgentConfig(const AgentConfig& config) {
  if (config.server.empty()) return absl::InvalidArgumentError("no server set");
  for (absl::string_view server : absl::StrSplit(config.server, ',')) {
    if (!IsHostPort(std::string(server))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server \"", config.server, "\" is not HOST:PORT (or, for a cluster, several "
          "HOST:PORT separated by commas)"));
    }
  }
  if (config.node.empty()) return absl::InvalidArgumentError("no node name");
  if (absl::Status s = ValidateLabelValue("node", config.node); !s.ok())
    return s;
  if (absl::Status s = ValidateLabelValue("job", config.idle_job); !s.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("idle_job: ", s.message()));
  if (!(config.interval_seconds > 0) || config.interval_seconds > 3600) {
    return absl::InvalidArgumentError("interval_seconds must be in (0, 3600]");
  }
  if (config.spool_max_mb < 1 || config.spool_max_mb > (uint64_t{1} << 20)) {
    return absl::InvalidArgumentError("spool_max_mb must be in [1, 1048576]");
  }
  if (!config.metrics_listen.empty() && !IsHostPort(config.metrics_listen)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics_listen \"", config.metrics_listen, "\" is not HOST:PORT"));
  }
  return absl::OkStatus();
}

}  // namespace vigil::agent
