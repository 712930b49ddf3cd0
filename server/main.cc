// vigil-server: flags -> options -> start -> wait for SIGINT/SIGTERM -> stop;
// SIGHUP reloads the config (VigilServer::Reload).
//
//   vigil-server --data-dir DIR --grpc-listen HOST:PORT --http-listen HOST:PORT
//                [--config FILE] [--memory] [--web-dir DIR] [--rules FILE]
//                [--no-detect] [--grpc-insecure]
//                [--etcd URL[,URL...]] [--shard NAME] [--replica NAME]
//                [--advertise-grpc HOST:PORT] [--advertise-http URL]
// The flags are Abseil flags below, parsed by common/flags.h (--help,
// --version, exit 2 on a bad flag; docs/CLI.md). Flags override the config
// file; --etcd (or a "cluster" section) turns cluster mode on
// (docs/SCALING.md). Agents connect over TLS (the config's grpc_tls
// section) unless --grpc-insecure or "grpc_insecure" asks for plaintext;
// with neither, the server refuses to start. Port 0 picks a free port; the
// bound addresses are printed on stdout. A bad config or rule file is
// reported (every error, with its position) and the server exits non-zero;
// --check-config checks it and exits.
#include <malloc.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/flags.h"
#include "server/config/config.h"
#include "server/config/reload.h"
#include "server/server.h"

// Each flag overrides its config key only when given.
ABSL_FLAG(std::string, config, "",
          "FILE: JSON config (every key: docs/CONFIG.md); flags override it");
ABSL_FLAG(bool, config_reference, false,
          "print every key of the JSON config (type, default, range, meaning) as JSON and "
          "exit; docs/CONFIG.md is made from it");
ABSL_FLAG(bool, check_config, false,
          "check the config (and the flags over it) and exit: it parses and validates, every "
          "file it names can be read, the rules file parses; exit 0 when so, 1 with every "
          "problem listed");
ABSL_FLAG(std::string, data_dir, "", "DIR: directory of the store (required unless --memory)");
ABSL_FLAG(std::string, grpc_listen, vigil::ServerOptions().grpc_listen,
          "HOST:PORT: where agents stream frames (gRPC); port 0 picks a free port");
ABSL_FLAG(std::string, http_listen, vigil::ServerOptions().http_listen,
          "HOST:PORT: where the HTTP API and UI listen; port 0 picks a free port");
ABSL_FLAG(bool, memory, false, "keep everything in memory (no data dir)");
ABSL_FLAG(std::string, web_dir, "", "DIR: serve the web UI from DIR (default: the source tree's web/)");
ABSL_FLAG(std::string, rules, "",
          "FILE: JSON rule document applied on top of the built-in catalogue (rules/rule.h); "
          "errors stop the server");
ABSL_FLAG(bool, no_detect, false,
          "store frames without running detection (stored incidents are still served)");
ABSL_FLAG(bool, grpc_insecure, false,
          "accept agents over plaintext gRPC, replacing the config's grpc_tls (tests, demos, "
          "trusted networks); without it the config must have a grpc_tls section");
ABSL_FLAG(std::string, etcd, "", "URL[,URL]: etcd endpoints (http://host:2379)");
ABSL_FLAG(std::string, shard, "", "NAME: the shard pair this server belongs to");
ABSL_FLAG(std::string, replica, "", "NAME: its name within the pair (e.g. the pod name)");
ABSL_FLAG(std::string, advertise_grpc, "", "HOST:PORT: where agents reach this server");
ABSL_FLAG(std::string, advertise_http, "", "URL: where other servers reach its API");

namespace {

vigil::flags::Program ServerProgram() {
  return {
      .name = "vigil-server",
      .synopsis = "vigil-server --data-dir DIR --grpc-listen HOST:PORT --http-listen HOST:PORT\n"
                  "                    [--config FILE] [--memory] [--web-dir DIR] [--rules FILE]\n"
                  "                    [--no-detect] [--grpc-insecure] [cluster flags]",
      .about = "Receives the agents' frames, stores them, runs detection and serves the HTTP API\n"
               "and UI. Flags override the config file. Agents connect over TLS (the config's\n"
               "grpc_tls section) unless --grpc-insecure or \"grpc_insecure\" asks for plaintext;\n"
               "with neither, the server refuses to start. The bound addresses are printed on\n"
               "stdout.",
      .notes = "SIGHUP (or POST /-/reload, admin role) reads the config file again: API tokens,\n"
               "escalation, notification receivers and channels and the rules change at once;\n"
               "what else changed is listed and waits for a restart; a config with an error\n"
               "changes nothing (README, \"Checking and changing the config of a running\n"
               "server\").\n"
               "exit codes: 0 stopped by SIGINT or SIGTERM, or --check-config found no problem;\n"
               "1 cannot start (a bad rule file, an address in use, ...), the flush on stop\n"
               "failed, or --check-config found problems; 2 bad flags or a bad config (every\n"
               "error printed, with its position)",
      .flags_file = __FILE__,
      .groups = {{"cluster mode (docs/SCALING.md; the config's \"cluster\" section)",
                  {"etcd", "shard", "replica", "advertise-grpc", "advertise-http"}}},
  };
}

// Sets what the flags given on the command line say, over the config file.
void ApplyFlags(const vigil::flags::Parsed& flags, vigil::ServerOptions* options) {
  if (flags.Given("data-dir")) options->data_dir = absl::GetFlag(FLAGS_data_dir);
  if (flags.Given("grpc-listen")) options->grpc_listen = absl::GetFlag(FLAGS_grpc_listen);
  if (flags.Given("http-listen")) options->http_listen = absl::GetFlag(FLAGS_http_listen);
  if (flags.Given("web-dir")) options->web_dir = absl::GetFlag(FLAGS_web_dir);
  if (absl::GetFlag(FLAGS_memory)) options->memory = true;
  if (flags.Given("rules")) options->rules_file = absl::GetFlag(FLAGS_rules);
  if (absl::GetFlag(FLAGS_no_detect)) options->detection_enabled = false;
  if (absl::GetFlag(FLAGS_grpc_insecure)) {
    options->grpc_insecure = true;
    options->grpc_tls.reset();
  }
  if (flags.Given("etcd") || flags.Given("shard") || flags.Given("replica") ||
      flags.Given("advertise-grpc") || flags.Given("advertise-http")) {
    if (!options->cluster.has_value()) options->cluster.emplace();
    vigil::cluster::ClusterOptions& c = *options->cluster;
    if (flags.Given("etcd")) {
      c.etcd_endpoints = absl::StrSplit(absl::GetFlag(FLAGS_etcd), ',', absl::SkipEmpty());
    }
    if (flags.Given("shard")) c.shard = absl::GetFlag(FLAGS_shard);
    if (flags.Given("replica")) c.replica = absl::GetFlag(FLAGS_replica);
    if (flags.Given("advertise-grpc")) c.advertise_grpc = absl::GetFlag(FLAGS_advertise_grpc);
    if (flags.Given("advertise-http")) c.advertise_http = absl::GetFlag(FLAGS_advertise_http);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // glibc gives each thread that meets a locked arena a new one, up to 8 a
  // core; the server's ~50 threads (gRPC's, the frame workers', the
  // store's) then scatter their allocations over 16 arenas on 2 cores, and
  // memory freed in one cannot serve another: at 1,250 streams, 635 MiB
  // held for 517 in use, RSS 636 MiB; with 2 arenas RSS 473 MiB at the
  // same point, at the same CPU (bench/RESULTS.md, "Where a series'
  // memory goes"). One arena per two cores, at least 2, unless the
  // operator set MALLOC_ARENA_MAX.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) {
    mallopt(M_ARENA_MAX, std::max(2, static_cast<int>(std::thread::hardware_concurrency()) / 2));
  }
  // Debian's Abseil checks every absl::Mutex acquisition against a global
  // lock graph (GraphCycles): a few percent of the server's CPU at 1,250
  // streams, for a check our lock order comments and tests already make.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const vigil::flags::Parsed flags = vigil::flags::ParseOrExit(ServerProgram(), argc, argv);
  if (absl::GetFlag(FLAGS_config_reference)) {
    absl::StatusOr<nlohmann::json> reference = vigil::ServerConfigReference();
    if (!reference.ok()) {
      std::fprintf(stderr, "vigil-server: %s\n", std::string(reference.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", reference->dump(2).c_str());
    return 0;
  }
  // The options: defaults, the config file, the flags on top. A reload
  // (SIGHUP, POST /-/reload) reads the same source again.
  vigil::ConfigSource source;
  source.base.web_dir = VIGIL_SOURCE_DIR "/web";
  if (flags.Given("config")) source.file = absl::GetFlag(FLAGS_config);
  source.overrides = [flags](vigil::ServerOptions* options) { ApplyFlags(flags, options); };
  // A bad file or combination is a config error (exit 2: restarting cannot
  // fix it); --check-config answers 1 for any problem.
  const bool check_only = absl::GetFlag(FLAGS_check_config);
  absl::StatusOr<vigil::LoadedConfig> loaded = vigil::LoadConfig(source);
  if (!loaded.ok()) {
    std::fprintf(stderr, "vigil-server: bad config:\n%s\n",
                 std::string(loaded.status().message()).c_str());
    return check_only ? 1 : 2;
  }
  if (check_only) {
    if (absl::Status s = vigil::CheckConfigFiles(*loaded); !s.ok()) {
      std::fprintf(stderr, "vigil-server: bad config:\n%s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf("vigil-server: config OK%s%s\n", source.file.empty() ? "" : ": ",
                source.file.c_str());
    return 0;
  }
  const vigil::ServerOptions options = loaded->options;

  // Block the signals before any thread starts, so sigwait() gets them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  vigil::VigilServer server(options);
  server.EnableReload(source, *std::move(loaded));
  if (absl::Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "vigil-server: cannot start:\n%s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  std::string grpc_host = options.grpc_listen.substr(0, options.grpc_listen.rfind(':'));
  std::string http_host = options.http_listen.substr(0, options.http_listen.rfind(':'));
  std::string security =
      options.grpc_insecure
          ? "PLAINTEXT, no TLS"
          : options.grpc_tls->require_client_cert ? "mTLS" : "TLS";
  if (options.node_tokens.enabled()) security += ", node tokens";
  if (options.grpc_tls.has_value() &&
      options.grpc_tls->node_identity == vigil::NodeIdentity::kCertificate)
    security += ", node names bound to certificates";
  const vigil::VigilServer::StartupTimes& took = server.startup_times();
  std::printf("vigil-server: ingest (gRPC, %s) on %s:%d, HTTP API on "
              "http://%s:%d/ (/metrics, /api/v1/series, /api/v1/incidents), "
              "data in %s, detection %s; started in %.1f s (store %.1f s, "
              "incidents and detection state %.1f s)\n",
              security.c_str(), grpc_host.c_str(), server.grpc_port(),
              http_host.c_str(), server.http_port(),
              options.memory ? "memory" : options.data_dir.c_str(),
              options.detection_enabled ? "on" : "off", took.total_s,
              took.store_s, took.state_s);
  std::fflush(stdout);
  if (options.grpc_insecure && options.node_tokens.enabled())
    std::fprintf(stderr,
                 "vigil-server: warning: node tokens cross the network in "
                 "clear text without grpc_tls\n");

  // SIGHUP reloads the config (the result is logged and audited); SIGINT
  // and SIGTERM stop.
  int signal = 0;
  while (sigwait(&signals, &signal) == 0 && signal == SIGHUP)
    (void)server.Reload(vigil::Identity{"SIGHUP", vigil::Role::kAdmin});
  std::printf("vigil-server: %s, stopping\n", strsignal(signal));
  std::fflush(stdout);
  if (absl::Status s = server.Stop(); !s.ok()) {
    std::fprintf(stderr, "vigil-server: flush on stop failed: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
