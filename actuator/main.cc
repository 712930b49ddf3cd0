// vigil-actuator: flags -> options -> start -> wait for SIGINT/SIGTERM ->
// stop. Receives Vigil's signed action webhooks and performs them on Slurm
// or Kubernetes (actuator/README.md). Exit status 2 for bad flags or
// unusable settings, 1 when it cannot start otherwise.
//
// The flags are Abseil flags below, parsed by common/flags.h (--help,
// --version, exit 2 on a bad flag; docs/CLI.md). The flags given are then
// handed, as "--name=value", to ParseActuatorFlags (actuator/actuator.h),
// which checks what they mean together (required flags, the backend's own,
// positive seconds, signal names) and builds the options.
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "actuator/actuator.h"
#include "common/flags.h"

namespace {

// The defaults, as the library has them.
const vigil::actuator::ActuatorOptions& Defaults() {
  static const auto* const kDefaults = new vigil::actuator::ActuatorOptions();
  return *kDefaults;
}

}  // namespace

ABSL_FLAG(std::string, listen, Defaults().listen, "HOST:PORT: webhook address (port 0: any)");
ABSL_FLAG(std::string, secret_file, "", "PATH: shared HMAC secret of the signed webhooks (required)");
ABSL_FLAG(std::string, backend, "", "NAME: slurm, kubernetes or noop (dry run) (required)");
ABSL_FLAG(std::string, audit_log, "", "PATH: append-only JSON-lines audit log (required)");
ABSL_FLAG(double, replay_window_seconds, Defaults().replay_window_seconds,
          "N: seconds of accepted timestamp skew of a signed request");
ABSL_FLAG(double, checkpoint_timeout_seconds, Defaults().checkpoint_timeout_seconds,
          "N: seconds a checkpoint is waited for when a request names none");
ABSL_FLAG(std::optional<double>, checkpoint_poll_seconds, std::nullopt,
          "N: seconds between checks of a checkpoint (default: slurm 1, kubernetes 2)");
ABSL_FLAG(bool, quiet, false, "do not echo audit records on stderr");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "DIR: where jobs write <jobid>.checkpointed (required with --backend slurm)");
ABSL_FLAG(std::string, checkpoint_signal, Defaults().slurm.checkpoint_signal,
          "SIG: signal asking a job for a checkpoint");
ABSL_FLAG(std::string, scontrol, Defaults().slurm.scontrol, "PATH: Slurm's scontrol (from PATH)");
ABSL_FLAG(std::string, scancel, Defaults().slurm.scancel, "PATH: Slurm's scancel (from PATH)");
ABSL_FLAG(std::string, squeue, Defaults().slurm.squeue, "PATH: Slurm's squeue (from PATH)");
ABSL_FLAG(double, command_timeout_seconds, Defaults().slurm.command_timeout_seconds,
          "N: seconds each Slurm client command may take");
ABSL_FLAG(std::string, k8s_api, "",
          "URL: API server, https://HOST:PORT (required with --backend kubernetes)");
ABSL_FLAG(std::string, k8s_token_file, Defaults().kubernetes.token_file,
          "PATH: bearer token (the service account's)");
ABSL_FLAG(std::string, k8s_ca_file, Defaults().kubernetes.ca_file,
          "PATH: API server CA (the service account's; empty: the system's)");
ABSL_FLAG(std::string, k8s_namespace, Defaults().kubernetes.default_namespace,
          "NS: namespace of jobs given without one");
ABSL_FLAG(double, k8s_timeout_seconds, Defaults().kubernetes.request_timeout_seconds,
          "N: seconds each API request may take");

namespace {

vigil::flags::Program ActuatorProgram() {
  return {
      .name = "vigil-actuator",
      .synopsis = "vigil-actuator --secret-file PATH --backend slurm|kubernetes|noop\n"
                  "                      --audit-log PATH [flags]",
      .about = "Receives Vigil's signed action webhooks and performs them on Slurm (its client\n"
               "programs) or Kubernetes (its HTTPS API), and answers signed job-state queries\n"
               "(actuator/README.md).",
      .notes = "exit codes: 0 stopped by SIGINT or SIGTERM; 1 cannot start; 2 bad flags or\n"
               "unusable settings",
      .flags_file = __FILE__,
      .groups = {{"slurm", {"checkpoint-dir", "checkpoint-signal", "scontrol", "scancel", "squeue",
                            "command-timeout-seconds"}},
                 {"kubernetes", {"k8s-api", "k8s-token-file", "k8s-ca-file", "k8s-namespace",
                                 "k8s-timeout-seconds"}}},
  };
}

// The flags given on the command line as "--name=value" ("--quiet" for the
// switch), for ParseActuatorFlags.
std::vector<std::string> GivenArgs(const vigil::flags::Parsed& flags) {
  std::vector<std::string> args;
  for (const std::string& name : flags.given) {
    if (name == "quiet") {
      args.push_back("--quiet");
      continue;
    }
    std::string absl_name = name;
    for (char& c : absl_name) {
      if (c == '-') c = '_';
    }
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(absl_name);
    args.push_back("--" + name + "=" + (flag == nullptr ? "" : flag->CurrentValue()));
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  const vigil::flags::Parsed flags = vigil::flags::ParseOrExit(ActuatorProgram(), argc, argv);
  absl::StatusOr<vigil::actuator::ActuatorOptions> options =
      vigil::actuator::ParseActuatorFlags(GivenArgs(flags));
  if (!options.ok()) {
    std::fprintf(stderr, "vigil-actuator: %s (see --help)\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }

  // Block the signals before any thread starts, so sigwait() gets them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<vigil::actuator::Actuator>> actuator =
      vigil::actuator::Actuator::Start(*options, *vigil::RealClock());
  if (!actuator.ok()) {
    std::fprintf(stderr, "vigil-actuator: cannot start: %s\n",
                 std::string(actuator.status().message()).c_str());
    return actuator.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::string host = options->listen.substr(0, options->listen.rfind(':'));
  std::printf("vigil-actuator: listening on http://%s:%d/v1/actions (backend %s, "
              "audit log %s, %zu done actions remembered)\n",
              host.c_str(), (*actuator)->port(), std::string((*actuator)->backend()).c_str(),
              options->audit_log.c_str(), (*actuator)->remembered_answers());
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::fprintf(stderr, "vigil-actuator: signal %d, stopping\n", signal_number);
  (*actuator)->Stop();
  return 0;
}
