// vigil-actuator as a library: options, building the chosen backend, and
// the running service (audit log + action and query handlers + HTTP
// endpoint).
#ifndef VIGIL_ACTUATOR_ACTUATOR_H_
#define VIGIL_ACTUATOR_ACTUATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actuator/action_handler.h"
#include "actuator/audit_log.h"
#include "actuator/http_server.h"
#include "actuator/job_query_handler.h"
#include "actuator/kubernetes_scheduler.h"
#include "actuator/scheduler.h"
#include "actuator/slurm_scheduler.h"
#include "common/clock.h"

namespace vigil::actuator {

struct ActuatorOptions {
  // Address of the webhook endpoint. Default "127.0.0.1:9191".
  std::string listen = "127.0.0.1:9191";
  // File holding the shared HMAC secret (surrounding whitespace ignored).
  // Required.
  std::string secret_file;
  // "slurm", "kubernetes" or "noop". Required.
  std::string backend;
  // The append-only audit log (JSON lines). Required.
  std::string audit_log;
  // Signed timestamps further than this from now are refused. Default 300.
  double replay_window_seconds = 300;
  // Checkpoint wait when a request names none. Default 300 s.
  double checkpoint_timeout_seconds = 300;
  // Backend settings; only the chosen backend's are used.
  SlurmOptions slurm;
  KubernetesOptions kubernetes;
  // Echo every audit record on stderr. Default false.
  bool echo_audit = false;
};

// The options in command-line `args` (without the program name): flags
// "--name value" or "--name=value" as listed in kActuatorUsage.
// kInvalidArgument naming the flag when one is unknown, lacks a value, has
// a bad value, or a required one is missing; kCancelled for --help.
absl::StatusOr<ActuatorOptions> ParseActuatorFlags(const std::vector<std::string>& args);

// Usage text of vigil-actuator.
extern const char kActuatorUsage[];

// The backend `options.backend` names. kInvalidArgument when its settings
// are unusable (unknown backend, missing checkpoint directory, unreadable
// token file, ...).
absl::StatusOr<std::unique_ptr<Scheduler>> MakeScheduler(const ActuatorOptions& options,
                                                         Clock& clock);

// A running actuator. Not copyable; stopping is idempotent.
class Actuator {
 public:
  // Reads the secret, opens the audit log (restoring the answers of done
  // actions), builds the backend and starts serving. kInvalidArgument for
  // unusable options (unreadable or empty secret file, ...); kUnavailable
  // when the audit log cannot be opened or the address cannot be bound.
  // `clock` must outlive the result.
  static absl::StatusOr<std::unique_ptr<Actuator>> Start(const ActuatorOptions& options,
                                                         Clock& clock);
  ~Actuator();

  // The bound HTTP port.
  int port() const { return http_->port(); }
  std::string_view backend() const { return scheduler_->Name(); }
  // Done actions answered from memory/the audit log rather than redone.
  size_t remembered_answers() const { return handler_->remembered_answers(); }
  // How job-state queries went.
  JobQueryCounters job_queries() const { return queries_->counters(); }
  // Stops serving; in-flight requests finish first.
  void Stop();

 private:
  Actuator() = default;

  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<ActionHandler> handler_;
  std::unique_ptr<JobQueryHandler> queries_;
  std::unique_ptr<ActuatorHttpServer> http_;
};

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_ACTUATOR_H_
