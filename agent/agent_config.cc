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
  r.Bool(j, path, "insecure", &t->insecure);
  r.String(j, path, "ca_file", &t->ca_file);
  r.String(j, path, "cert_file", &t->cert_file);
  r.String(j, path, "key_file", &t->key_file);
  r.String(j, path, "server_name", &t->server_name);
  r.String(j, path, "token_file", &t->token_file);
}

void ParseCollectors(const Json& j, JsonConfigReader& r, AgentConfig* c) {
  if (!r.CheckObject(j, "collectors",
                     {"nvml", "infiniband", "disk", "cpu", "training", "exporter"})) {
    return;
  }
  // Reads one collector's section, checking its keys.
  auto section = [&](const char* name, std::set<std::string> keys,
                     bool* enabled) -> const Json* {
    auto it = j.find(name);
    if (it == j.end()) return nullptr;
    const std::string path = absl::StrCat("collectors.", name);
    keys.insert("enabled");
    if (!r.CheckObject(*it, path, keys)) return nullptr;
    r.Bool(*it, path, "enabled", enabled);
    return &*it;
  };
  if (const Json* s = section("nvml", {"library", "events"}, &c->nvml.enabled)) {
    r.String(*s, "collectors.nvml", "library", &c->nvml.library);
    r.Bool(*s, "collectors.nvml", "events", &c->nvml.events);
    if (c->nvml.library.empty())
      r.Error("collectors.nvml.library", "must not be empty");
  }
  section("infiniband", {}, &c->infiniband.enabled);
  if (const Json* s = section("disk", {"devices"}, &c->disk.enabled)) {
    r.StringList(*s, "collectors.disk", "devices", &c->disk.devices);
  }
  section("cpu", {}, &c->cpu.enabled);
  std::set<std::string> exporter_keys = {"urls", "timeout_seconds"};
  for (const std::string& key : promcompat::MappingKeys()) exporter_keys.insert(key);
  if (const Json* s = section("exporter", exporter_keys, &c->exporter.enabled)) {
    r.StringList(*s, "collectors.exporter", "urls", &c->exporter.urls);
    r.Positive(*s, "collectors.exporter", "timeout_seconds", 1, 60, &c->exporter.timeout_seconds);
    promcompat::ParseMappingKeys(*s, "collectors.exporter", r, &c->exporter.mapping);
    if (c->exporter.enabled && c->exporter.urls.empty())
      r.Error("collectors.exporter.urls", "at least one exporter URL is needed when enabled");
  }
  if (const Json* s = section("training",
                              {"socket", "stale_seconds",
                               "disconnect_grace_seconds", "verify_jobs",
                               "refuse_unverified"},
                              &c->training.enabled)) {
    r.String(*s, "collectors.training", "socket", &c->training.socket);
    r.Positive(*s, "collectors.training", "stale_seconds", 1, 86400,
               &c->training.stale_seconds);
    r.Positive(*s, "collectors.training", "disconnect_grace_seconds", 1, 3600,
               &c->training.disconnect_grace_seconds);
    if (c->training.socket.empty())
      r.Error("collectors.training.socket", "must not be empty");
    r.String(*s, "collectors.training", "verify_jobs", &c->training.verify_jobs);
    if (c->training.verify_jobs != "scheduler" && c->training.verify_jobs != "off")
      r.Error("collectors.training.verify_jobs",
              "must be \"scheduler\" or \"off\"");
    r.Bool(*s, "collectors.training", "refuse_unverified",
           &c->training.refuse_unverified);
  }
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
  if (r.CheckObject(*doc, "",
                    {"server", "node", "idle_job", "interval_seconds",
                     "transport", "spool_dir", "spool_max_mb",
                     "metrics_listen", "sysfs_root", "proc_root",
                     "collectors", "unreachable_after_seconds",
                     "status_file"})) {
    r.String(*doc, "", "server", &c.server);
    r.String(*doc, "", "node", &c.node);
    r.String(*doc, "", "idle_job", &c.idle_job);
    r.Positive(*doc, "", "interval_seconds", 1, 3600, &c.interval_seconds);
    r.String(*doc, "", "spool_dir", &c.spool_dir);
    r.Integer(*doc, "", "spool_max_mb", 1, int64_t{1} << 20, 1,
              &c.spool_max_mb);
    r.String(*doc, "", "metrics_listen", &c.metrics_listen);
    r.Positive(*doc, "", "unreachable_after_seconds", 1, 7 * 86400,
               &c.unreachable_after_seconds);
    r.String(*doc, "", "status_file", &c.status_file);
    r.String(*doc, "", "sysfs_root", &c.sysfs_root);
    r.String(*doc, "", "proc_root", &c.proc_root);
    if (auto it = doc->find("transport"); it != doc->end())
      ParseTransport(*it, r, &c.transport);
    if (auto it = doc->find("collectors"); it != doc->end())
      ParseCollectors(*it, r, &c);
  }
  if (absl::Status s = r.Result("agent config"); !s.ok()) return s;
  *config = std::move(c);
  return absl::OkStatus();
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
