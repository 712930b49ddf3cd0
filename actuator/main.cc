// vigil-actuator: flags -> options -> start -> wait for SIGINT/SIGTERM ->
// stop. Receives Vigil's signed action webhooks and performs them on Slurm
// or Kubernetes (actuator/README.md). Exit status 2 for bad flags or
// unusable settings, 1 when it cannot start otherwise.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "actuator/actuator.h"

int main(int argc, char** argv) {
  absl::StatusOr<vigil::actuator::ActuatorOptions> options =
      vigil::actuator::ParseActuatorFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!options.ok()) {
    if (options.status().code() == absl::StatusCode::kCancelled) {
      std::fputs(vigil::actuator::kActuatorUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "vigil-actuator: %s\n%s",
                 std::string(options.status().message()).c_str(), vigil::actuator::kActuatorUsage);
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
