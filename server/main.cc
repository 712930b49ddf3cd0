// vigil-server: flags -> options -> start -> wait for SIGINT/SIGTERM -> stop.
//
//   vigil-server --data-dir DIR --grpc-listen HOST:PORT --http-listen HOST:PORT
//                [--config FILE] [--memory] [--web-dir DIR] [--rules FILE]
//                [--no-detect] [--grpc-insecure]
//                [--etcd URL[,URL...]] [--shard NAME] [--replica NAME]
//                [--advertise-grpc HOST:PORT] [--advertise-http URL]
// Flags override the config file; --etcd (or a "cluster" section) turns
// cluster mode on (docs/SCALING.md). Agents connect over TLS (the config's
// grpc_tls section) unless --grpc-insecure or "grpc_insecure" asks for
// plaintext; with neither, the server refuses to start. Port 0 picks a free port; the bound
// addresses are printed on stdout. A bad config or rule file is reported
// (every error, with its position) and the server exits non-zero.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "server/config/config.h"
#include "server/server.h"

namespace {

constexpr char kUsage[] =
    "usage: vigil-server --data-dir DIR --grpc-listen HOST:PORT "
    "--http-listen HOST:PORT [--config FILE] [--memory] [--web-dir DIR]\n"
    "                    [--rules FILE] [--no-detect] [--grpc-insecure]\n"
    "  --config FILE   JSON config (server/config/config.h); flags override it\n"
    "  --memory        keep everything in memory (no data dir)\n"
    "  --web-dir DIR   serve the web UI from DIR\n"
    "  --rules FILE    JSON rule document applied on top of the built-in\n"
    "                  catalogue (rules/rule.h); errors stop the server\n"
    "  --no-detect     store frames without running detection (stored\n"
    "                  incidents are still served)\n"
    "  --grpc-insecure accept agents over plaintext gRPC, replacing the\n"
    "                  config's grpc_tls (tests, demos, trusted networks);\n"
    "                  without it the config must have a grpc_tls section\n"
    "  cluster mode (docs/SCALING.md; the config's \"cluster\" section):\n"
    "  --etcd URL[,URL] etcd endpoints (http://host:2379)\n"
    "  --shard NAME    the shard pair this server belongs to\n"
    "  --replica NAME  its name within the pair (e.g. the pod name)\n"
    "  --advertise-grpc HOST:PORT  where agents reach this server\n"
    "  --advertise-http URL        where other servers reach its API\n";

// Parses "--name value", "--name=value" and the switches "--memory",
// "--no-detect" and "--grpc-insecure" into `flags`. False (after printing why) on anything else.
bool ParseFlags(int argc, char** argv, std::map<std::string, std::string>* flags) {
  static const char* const kValued[] = {"data-dir", "grpc-listen",
                                        "http-listen", "config", "web-dir",
                                        "rules", "etcd", "shard", "replica",
                                        "advertise-grpc", "advertise-http"};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    if (arg.rfind("--", 0) != 0) {
      std::fprintf(stderr, "vigil-server: unexpected argument '%s'\n", argv[i]);
      return false;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    if ((name == "memory" || name == "no-detect" || name == "grpc-insecure") &&
        !has_value) {
      (*flags)[name] = "true";
      continue;
    }
    bool valued = false;
    for (const char* known : kValued) valued |= name == known;
    if (!valued) {
      std::fprintf(stderr, "vigil-server: unknown flag '--%s'\n", name.c_str());
      return false;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "vigil-server: --%s needs a value\n", name.c_str());
        return false;
      }
      value = argv[++i];
    }
    (*flags)[name] = value;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's Abseil checks every absl::Mutex acquisition against a global
  // lock graph (GraphCycles): a few percent of the server's CPU at 1,250
  // streams, for a check our lock order comments and tests already make.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::map<std::string, std::string> flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  vigil::ServerOptions options;
  options.web_dir = VIGIL_SOURCE_DIR "/web";
  if (flags.count("config")) {
    if (absl::Status s = vigil::LoadServerConfigFile(flags["config"], &options);
        !s.ok()) {
      std::fprintf(stderr, "vigil-server: bad config:\n%s\n",
                   std::string(s.message()).c_str());
      return 2;
    }
  }
  if (flags.count("data-dir")) options.data_dir = flags["data-dir"];
  if (flags.count("grpc-listen")) options.grpc_listen = flags["grpc-listen"];
  if (flags.count("http-listen")) options.http_listen = flags["http-listen"];
  if (flags.count("web-dir")) options.web_dir = flags["web-dir"];
  if (flags.count("memory")) options.memory = true;
  if (flags.count("rules")) options.rules_file = flags["rules"];
  if (flags.count("no-detect")) options.detection_enabled = false;
  if (flags.count("grpc-insecure")) {
    options.grpc_insecure = true;
    options.grpc_tls.reset();
  }
  if (flags.count("etcd") || flags.count("shard") || flags.count("replica") ||
      flags.count("advertise-grpc") || flags.count("advertise-http")) {
    if (!options.cluster.has_value()) options.cluster.emplace();
    vigil::cluster::ClusterOptions& c = *options.cluster;
    if (flags.count("etcd")) {
      c.etcd_endpoints = absl::StrSplit(flags["etcd"], ',', absl::SkipEmpty());
    }
    if (flags.count("shard")) c.shard = flags["shard"];
    if (flags.count("replica")) c.replica = flags["replica"];
    if (flags.count("advertise-grpc")) c.advertise_grpc = flags["advertise-grpc"];
    if (flags.count("advertise-http")) c.advertise_http = flags["advertise-http"];
  }

  // A bad combination is a config error (exit 2: restarting cannot fix it).
  if (absl::Status s = vigil::ValidateServerOptions(options); !s.ok()) {
    std::fprintf(stderr, "vigil-server: bad config:\n%s\n",
                 std::string(s.message()).c_str());
    return 2;
  }

  // Block the signals before any thread starts, so sigwait() gets them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  vigil::VigilServer server(options);
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
  std::printf("vigil-server: ingest (gRPC, %s) on %s:%d, HTTP API on "
              "http://%s:%d/ (/metrics, /api/v1/series, /api/v1/incidents), "
              "data in %s, detection %s\n",
              security.c_str(), grpc_host.c_str(), server.grpc_port(),
              http_host.c_str(), server.http_port(),
              options.memory ? "memory" : options.data_dir.c_str(),
              options.detection_enabled ? "on" : "off");
  std::fflush(stdout);
  if (options.grpc_insecure && options.node_tokens.enabled())
    std::fprintf(stderr,
                 "vigil-server: warning: node tokens cross the network in "
                 "clear text without grpc_tls\n");

  int signal = 0;
  sigwait(&signals, &signal);
  std::printf("vigil-server: %s, stopping\n", strsignal(signal));
  std::fflush(stdout);
  if (absl::Status s = server.Stop(); !s.ok()) {
    std::fprintf(stderr, "vigil-server: flush on stop failed: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
