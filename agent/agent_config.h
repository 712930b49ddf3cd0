// The agent's configuration: one JSON file (every key below; unknown keys are
// errors), with command-line flags of vigil-agent overriding it. Every key
// with its type, default, range and meaning: docs/CONFIG.md, generated from
// the parser by AgentConfigReference; an example: deploy/systemd/agent.json.
#ifndef VIGIL_AGENT_AGENT_CONFIG_H_
#define VIGIL_AGENT_AGENT_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "promcompat/metric_mapping.h"

namespace vigil::agent {

// How the agent reaches the server. Plain text only with `insecure`.
struct AgentTransportConfig {
  // Talk plain text; never the default.
  bool insecure = false;
  // PEM files: the CA that signed the server's certificate, and this node's
  // client certificate and key (mTLS).
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // Name to check the server's certificate against instead of the host of
  // `server` (e.g. when dialling an IP).
  std::string server_name;
  // File holding this node's token, sent as a bearer token on every stream;
  // empty sends none.
  std::string token_file;
};

// The NVML (GPU) collector.
struct NvmlConfig {
  bool enabled = true;
  // Library to dlopen; a bare name is searched the usual way.
  std::string library = "libnvidia-ml.so.1";
  // Wait for XID and ECC events on a thread and send them at once.
  bool events = true;
};

// The RDMA / InfiniBand / RoCE collector (sysfs counters).
struct InfinibandConfig {
  bool enabled = true;
};

// The disk collector (/proc/diskstats).
struct DiskConfig {
  bool enabled = true;
  // Devices to report (e.g. "nvme0n1"); empty: every whole disk.
  std::vector<std::string> devices;
};

// The host CPU collector (/proc/stat: iowait).
struct CpuConfig {
  bool enabled = true;
};

// Prometheus exporters on the node scraped every tick (dcgm-exporter,
// node_exporter; agent/exporter_collector.h). Off unless enabled with urls.
struct ExporterConfig {
  bool enabled = false;
  std::vector<std::string> urls;
  double timeout_seconds = 0.5;
  // Which exporter metrics become which Vigil series (docs/PROMETHEUS.md);
  // the node is always the agent's, the job the agent's.
  promcompat::MappingOptions mapping;
};

// The endpoint training processes push step metrics into.
struct TrainingConfig {
  bool enabled = true;
  // Unix socket the ranks connect to (python/README.md).
  std::string socket = "/run/vigil/train.sock";
  // A rank's readings stop counting this long after its last message.
  double stale_seconds = 300;
  // A rank whose connections all closed stops counting after this long
  // without reconnecting: its job ended on the node (Tick::job_end).
  double disconnect_grace_seconds = 5;
  // How a connecting rank's job claim is checked (agent/job_identity.h):
  // "scheduler" asks the kernel (cgroup) and Slurm which job the process
  // runs in; "off" leaves every claim unverified (the server then never
  // acts automatically on this node's jobs).
  std::string verify_jobs = "scheduler";
  // Refuse ranks whose job cannot be verified (processes outside any
  // scheduler job) instead of accepting them unverified.
  bool refuse_unverified = false;
};

// Everything vigil-agent is configured with.
struct AgentConfig {
  // Server address, HOST:PORT. Required. For a cluster (docs/SCALING.md),
  // any of its servers, or several separated by commas: the agent asks
  // them who owns its job and streams to both servers of that shard.
  std::string server;
  // Node name; empty: the host name up to its first dot.
  std::string node;
  // Job reported while no training process on the node has named its job
  // (frames always carry a job).
  std::string idle_job = "idle";
  // Seconds between frames.
  double interval_seconds = 1.0;
  AgentTransportConfig transport;
  // Directory of the on-disk spool of unacknowledged batches; empty keeps
  // them in memory (64 MiB) only.
  std::string spool_dir;
  // Bound of the spool in MiB; the oldest batches are dropped beyond it.
  uint64_t spool_max_mb = 256;
  // Where the agent serves its own /metrics, IPV4:PORT (e.g.
  // 127.0.0.1:9465); empty: nowhere.
  std::string metrics_listen;
  // Without an acknowledgement from the server for this long, the agent
  // says it cannot reach it: a log line, vigil_agent_server_unreachable 1
  // (agent/server_reachability.h).
  double unreachable_after_seconds = 300;
  // node_exporter textfile-collector file for the node's own monitoring
  // (e.g. /var/lib/node_exporter/textfile_collector/vigil_agent.prom),
  // holding vigil_agent_server_unreachable and
  // vigil_agent_seconds_since_last_ack, replaced atomically every 10 s
  // (or every unreachable_after_seconds / 2 when that is shorter);
  // empty: none.
  std::string status_file;
  // Roots of sysfs and procfs (tests point them at fixture trees).
  std::string sysfs_root = "/sys";
  std::string proc_root = "/proc";
  NvmlConfig nvml;
  InfinibandConfig infiniband;
  DiskConfig disk;
  CpuConfig cpu;
  TrainingConfig training;
  ExporterConfig exporter;
};

// Names of the collectors, as used in the config and --collectors.
std::vector<std::string> CollectorNames();

// Applies the JSON document `text` on top of `config`. kInvalidArgument
// listing every problem (syntax with line and column, unknown keys, wrong
// types, out-of-range values); `config` is unchanged then.
absl::Status ParseAgentConfig(std::string_view text, AgentConfig* config);

// Every key of the config file, for `vigil-agent --config-reference` and
// docs/CONFIG.md: {"program": "vigil-agent", "keys": [{"path", "type",
// "range", "default", "meaning"}, ...]} (common/config_schema.h), defaults
// as AgentConfig has them. kInternal naming the keys the parser accepts
// without documenting them.
absl::StatusOr<nlohmann::json> AgentConfigReference();

// Reads the file at `path` and applies it as ParseAgentConfig does; the
// error names the file.
absl::Status LoadAgentConfigFile(const std::string& path, AgentConfig* config);

// Enables exactly the collectors in the comma-separated `list` (e.g.
// "nvml,training"; "none" disables all). kInvalidArgument on an unknown name.
absl::Status EnableOnlyCollectors(std::string_view list, AgentConfig* config);

// OK if `config` can run: server set and HOST:PORT, a node name, an idle job
// name, interval in (0, 3600], spool bound in [1, 1048576], a HOST:PORT or
// nothing for metrics. kInvalidArgument naming the first problem otherwise.
// The transport is checked by TransportSecurity::Create
// (agent/transport_security.h).
absl::Status ValidateAgentConfig(const AgentConfig& config);

}  // namespace vigil::agent

#endif  // VIGIL_AGENT_AGENT_CONFIG_H_
