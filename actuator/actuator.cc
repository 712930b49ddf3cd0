#include "actuator/actuator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "actuator/noop_scheduler.h"
#include "common/status_macros.h"

namespace vigil::actuator {

const char kActuatorUsage[] =
    "usage: vigil-actuator --secret-file PATH --backend slurm|kubernetes|noop\n"
    "                      --audit-log PATH [flags]\n"
    "  --listen HOST:PORT                 webhook address (127.0.0.1:9191; port 0: any)\n"
    "  --secret-file PATH                 shared HMAC secret of the signed webhooks\n"
    "  --backend NAME                     slurm, kubernetes or noop (dry run)\n"
    "  --audit-log PATH                   append-only JSON-lines audit log\n"
    "  --replay-window-seconds N          accepted timestamp skew (300)\n"
    "  --checkpoint-timeout-seconds N     default checkpoint wait (300)\n"
    "  --checkpoint-poll-seconds N        how often a checkpoint is checked (slurm 1, k8s 2)\n"
    "  --quiet                            do not echo audit records on stderr\n"
    " slurm:\n"
    "  --checkpoint-dir DIR               where jobs write <jobid>.checkpointed (required)\n"
    "  --checkpoint-signal SIG            signal asking for a checkpoint (USR1)\n"
    "  --scontrol/--scancel/--squeue PATH client programs (from PATH)\n"
    "  --command-timeout-seconds N        each client command's limit (30)\n"
    " kubernetes:\n"
    "  --k8s-api https://HOST:PORT        API server (required)\n"
    "  --k8s-token-file PATH              bearer token (service account token)\n"
    "  --k8s-ca-file PATH                 API server CA (service account CA; empty: system)\n"
    "  --k8s-namespace NS                 namespace of jobs given without one (default)\n"
    "  --k8s-timeout-seconds N            each API request's limit (10)\n";

namespace {

constexpr const char* kSignals[] = {"HUP",  "INT",  "QUIT", "USR1", "USR2",
                                    "TERM", "CONT", "STOP", "TSTP", "URG",
                                    "ALRM", "WINCH", "XCPU", "PWR"};

absl::StatusOr<double> PositiveSeconds(const std::string& flag, const std::string& value) {
  double seconds = 0;
  auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (value.empty() || error != std::errc() || end != value.data() + value.size() ||
      !std::isfinite(seconds) || seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", value, "' is not a positive number of seconds"));
  }
  return seconds;
}

// "USR1", "SIGUSR1" or "usr1" as scancel's "USR1".
absl::StatusOr<std::string> SignalName(const std::string& value) {
  std::string name = absl::AsciiStrToUpper(value);
  if (absl::StartsWith(name, "SIG")) name = name.substr(3);
  for (const char* known : kSignals) {
    if (name == known) return name;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--checkpoint-signal: '", value, "' is not a signal name (e.g. USR1, USR2, TERM)"));
}

absl::StatusOr<std::string> ReadSecret(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read the secret file '", path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string secret(absl::StripAsciiWhitespace(text.str()));
  if (secret.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the secret file '", path, "' is empty"));
  }
  return secret;
}

absl::Status CheckProgram(const std::string& flag, const std::string& program) {
  if (program.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": empty program"));
  }
  if (program.find('/') != std::string::npos && access(program.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", program, "' is not an executable file"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ActuatorOptions> ParseActuatorFlags(const std::vector<std::string>& args) {
  static const char* const kValued[] = {
      "listen", "secret-file", "backend", "audit-log", "replay-window-seconds",
      "checkpoint-timeout-seconds", "checkpoint-poll-seconds", "checkpoint-dir",
      "checkpoint-signal", "scontrol", "scancel", "squeue", "command-timeout-seconds",
      "k8s-api", "k8s-token-file", "k8s-ca-file", "k8s-namespace", "k8s-timeout-seconds"};
  std::map<std::string, std::string> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") return absl::CancelledError("help requested");
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "quiet" && !value) {
      flags[name] = "true";
      continue;
    }
    bool valued = false;
    for (const char* known : kValued) valued |= name == known;
    if (!valued) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (!value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = args[++i];
    }
    flags[name] = *value;
  }

  ActuatorOptions options;
  options.echo_audit = !flags.count("quiet");
  if (flags.count("listen")) {
    options.listen = flags["listen"];
    std::string host;
    int port = 0;
    VIGIL_RETURN_IF_ERROR(SplitHostPort(options.listen, &host, &port));
  }
  for (const char* required : {"secret-file", "backend", "audit-log"}) {
    if (flags[required].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--", required, " is required"));
    }
  }
  options.secret_file = flags["secret-file"];
  options.backend = flags["backend"];
  options.audit_log = flags["audit-log"];
  if (options.backend != "slurm" && options.backend != "kubernetes" &&
      options.backend != "noop") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--backend: '", options.backend, "' is not slurm, kubernetes or noop"));
  }
  if (flags.count("replay-window-seconds")) {
    VIGIL_ASSIGN_OR_RETURN(options.replay_window_seconds,
                           PositiveSeconds("replay-window-seconds",
                                           flags["replay-window-seconds"]));
  }
  if (flags.count("checkpoint-timeout-seconds")) {
    VIGIL_ASSIGN_OR_RETURN(options.checkpoint_timeout_seconds,
                           PositiveSeconds("checkpoint-timeout-seconds",
                                           flags["checkpoint-timeout-seconds"]));
  }
  if (flags.count("checkpoint-poll-seconds")) {
    VIGIL_ASSIGN_OR_RETURN(double poll, PositiveSeconds("checkpoint-poll-seconds",
                                                        flags["checkpoint-poll-seconds"]));
    options.slurm.checkpoint_poll_seconds = poll;
    options.kubernetes.checkpoint_poll_seconds = poll;
  }
  if (flags.count("command-timeout-seconds")) {
    VIGIL_ASSIGN_OR_RETURN(options.slurm.command_timeout_seconds,
                           PositiveSeconds("command-timeout-seconds",
                                           flags["command-timeout-seconds"]));
  }
  if (flags.count("k8s-timeout-seconds")) {
    VIGIL_ASSIGN_OR_RETURN(options.kubernetes.request_timeout_seconds,
                           PositiveSeconds("k8s-timeout-seconds",
                                           flags["k8s-timeout-seconds"]));
  }
  if (flags.count("checkpoint-signal")) {
    VIGIL_ASSIGN_OR_RETURN(options.slurm.checkpoint_signal,
                           SignalName(flags["checkpoint-signal"]));
  }
  if (flags.count("checkpoint-dir")) options.slurm.checkpoint_dir = flags["checkpoint-dir"];
  if (flags.count("scontrol")) options.slurm.scontrol = flags["scontrol"];
  if (flags.count("scancel")) options.slurm.scancel = flags["scancel"];
  if (flags.count("squeue")) options.slurm.squeue = flags["squeue"];
  if (flags.count("k8s-api")) options.kubernetes.api_url = flags["k8s-api"];
  if (flags.count("k8s-token-file")) options.kubernetes.token_file = flags["k8s-token-file"];
  if (flags.count("k8s-ca-file")) options.kubernetes.ca_file = flags["k8s-ca-file"];
  if (flags.count("k8s-namespace")) options.kubernetes.default_namespace = flags["k8s-namespace"];
  if (options.backend == "slurm" && options.slurm.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--checkpoint-dir is required with --backend slurm");
  }
  if (options.backend == "kubernetes" && options.kubernetes.api_url.empty()) {
    return absl::InvalidArgumentError("--k8s-api is required with --backend kubernetes");
  }
  return options;
}

absl::StatusOr<std::unique_ptr<Scheduler>> MakeScheduler(const ActuatorOptions& options,
                                                         Clock& clock) {
  if (options.backend == "noop") return std::make_unique<NoopScheduler>();
  if (options.backend == "slurm") {
    const SlurmOptions& slurm = options.slurm;
    struct stat info;
    if (stat(slurm.checkpoint_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the checkpoint directory '", slurm.checkpoint_dir, "' is not a directory"));
    }
    VIGIL_RETURN_IF_ERROR(CheckProgram("scontrol", slurm.scontrol));
    VIGIL_RETURN_IF_ERROR(CheckProgram("scancel", slurm.scancel));
    VIGIL_RETURN_IF_ERROR(CheckProgram("squeue", slurm.squeue));
    return std::make_unique<SlurmScheduler>(slurm, clock);
  }
  if (options.backend == "kubernetes") {
    VIGIL_RETURN_IF_ERROR(ValidateKubernetesOptions(options.kubernetes));
    return std::make_unique<KubernetesScheduler>(options.kubernetes, clock);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", options.backend, "'"));
}

absl::StatusOr<std::unique_ptr<Actuator>> Actuator::Start(const ActuatorOptions& options,
                                                          Clock& clock) {
  ActionHandlerOptions handler_options;
  VIGIL_ASSIGN_OR_RETURN(handler_options.secret, ReadSecret(options.secret_file));
  handler_options.replay_window_seconds = options.replay_window_seconds;
  handler_options.default_checkpoint_timeout_seconds = options.checkpoint_timeout_seconds;
  if (options.echo_audit) {
    handler_options.on_record = [](const nlohmann::json& record) {
      std::fprintf(stderr, "vigil-actuator: audit %s\n",
                   record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                       .c_str());
    };
  }
  std::unique_ptr<Actuator> actuator(new Actuator());
  VIGIL_ASSIGN_OR_RETURN(actuator->scheduler_, MakeScheduler(options, clock));
  VIGIL_ASSIGN_OR_RETURN(actuator->audit_, AuditLog::Open(options.audit_log));
  if (actuator->audit_->skipped_lines() > 0) {
    std::fprintf(stderr, "vigil-actuator: skipped %d malformed line(s) of %s\n",
                 actuator->audit_->skipped_lines(), options.audit_log.c_str());
  }
  JobQueryHandlerOptions query_options;
  query_options.secret = handler_options.secret;
  query_options.replay_window_seconds = options.replay_window_seconds;
  // Queries are not audited; what went wrong is still worth a line.
  query_options.on_failure = [](const std::string& line) {
    std::fprintf(stderr, "vigil-actuator: %s\n", line.c_str());
  };
  actuator->handler_ = std::make_unique<ActionHandler>(
      std::move(handler_options), *actuator->scheduler_, *actuator->audit_, clock);
  actuator->queries_ = std::make_unique<JobQueryHandler>(std::move(query_options),
                                                         *actuator->scheduler_, clock);
  actuator->http_ = std::make_unique<ActuatorHttpServer>(
      *actuator->handler_, *actuator->queries_, std::string(actuator->scheduler_->Name()));
  VIGIL_RETURN_IF_ERROR(actuator->http_->Start(options.listen));
  return actuator;
}

Actuator::~Actuator() { Stop(); }

void Actuator::Stop() {
  if (http_) http_->Stop();
}

}  // namespace vigil::actuator
