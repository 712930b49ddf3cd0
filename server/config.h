// vigil-server configuration: the ServerOptions struct with documented
// defaults, and loading it from a JSON config file. Flags (main.cc) are
// applied on top of what the file sets.
#ifndef VIGIL_SERVER_CONFIG_H_
#define VIGIL_SERVER_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "detector/options.h"
#include "rules/rule.h"

namespace vigil {

// Everything vigil-server can be configured with. Plain data; copyable.
//
// JSON config file form (every key optional, unknown keys are errors):
//   {"data_dir": "...", "grpc_listen": "H:P", "http_listen": "H:P",
//    "memory": false, "web_dir": "...",
//    "storage": {"raw_retention_days": 7, "rollup_retention_days": 183,
//                "sync_frame_log": false, "block_samples": 720,
//                "block_seconds": 7200, "max_series": 10000000,
//                "frame_log_checkpoint_mb": 64},
//    "ingest": {"max_future_skew_seconds": 300, "max_message_mb": 4},
//    "http": {"max_points": 1000000, "threads": 8},
//    "detection": {"enabled": true, "rules_file": "...",
//                  "learn_steps": 1000, "k_sigma": 3}}
struct ServerOptions {
  // Directory of the RocksDB store; required unless `memory`.
  std::string data_dir;
  // Keep everything in memory (no durability); for tests and demos.
  bool memory = false;
  // Where the gRPC ingest service listens; port 0 picks a free port.
  std::string grpc_listen = "127.0.0.1:7070";
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
  // Frame log size that triggers a checkpoint of the open blocks.
  uint64_t frame_log_checkpoint_bytes = 64ull << 20;

  // Frames stamped more than this far ahead of the server clock are refused.
  double max_future_skew_seconds = 300;
  // Largest FrameBatch accepted; larger ones get RESOURCE_EXHAUSTED.
  int max_message_bytes = 4 << 20;

  // Most points one /api/v1/query answer may hold (400 beyond, asking for
  // a step).
  uint64_t max_query_points = 1'000'000;
  // Threads serving HTTP requests.
  int http_threads = 8;

  // Run detection on every accepted frame. When false, stored incidents
  // are still served but no new ones are raised.
  bool detection_enabled = true;
  // JSON rule document applied on top of the built-in catalogue (see
  // rules/rule.h); empty: the catalogue alone. A file with errors makes
  // VigilServer::Start() fail.
  std::string rules_file;
  // Detector tunables; the config file sets baseline.learn_steps
  // ("learn_steps") and baseline.k_sigma ("k_sigma"), the rest keep the
  // defaults of detector/options.h.
  DetectorOptions detector;
};

// Applies the JSON config `text` on top of `*options`. On any problem
// returns kInvalidArgument listing every error, one per line, each starting
// with its key path (e.g. "storage.block_samples: must be an integer >= 1");
// `*options` is then left unchanged.
absl::Status ParseServerConfig(std::string_view text, ServerOptions* options);

// Reads the file at `path` and applies it as ParseServerConfig does.
// kNotFound if it cannot be read; errors are prefixed with the path.
absl::Status LoadServerConfigFile(const std::string& path,
                                  ServerOptions* options);

// The rule set of the rule document at `path` (see LoadRuleSet).
// kNotFound if it cannot be read; kInvalidArgument listing every error, one
// per line, each prefixed with the path and its position.
absl::StatusOr<RuleSet> LoadRuleFile(const std::string& path);

// Checks the combination of options (e.g. data_dir set unless memory,
// listen addresses of the form HOST:PORT). kInvalidArgument listing every
// problem otherwise.
absl::Status ValidateServerOptions(const ServerOptions& options);

}  // namespace vigil

#endif  // VIGIL_SERVER_CONFIG_H_
