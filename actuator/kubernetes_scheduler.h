// Performs actions through the Kubernetes API over HTTPS with a bearer
// token: cordon/uncordon by patching the Node, pause by suspending the
// batch/v1 Job; answers job-state queries from the Job and its pods.
// Requests, RBAC, state mapping and the checkpoint protocol:
// actuator/README.md.
#ifndef VIGIL_ACTUATOR_KUBERNETES_SCHEDULER_H_
#define VIGIL_ACTUATOR_KUBERNETES_SCHEDULER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actuator/scheduler.h"
#include "common/clock.h"

namespace vigil::actuator {

struct KubernetesOptions {
  // The API server, "https://host:port". Required.
  std::string api_url;
  // File holding the bearer token; read for every action, so a rotated
  // token is picked up. Default: the in-cluster service account token.
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  // CA bundle that signed the API server's certificate; empty: the system
  // store. Default: the in-cluster service account CA.
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  // Namespace of a job written without "ns/". Default "default".
  std::string default_namespace = "default";
  // How often a checkpointing Job is read back. Default 2 s.
  double checkpoint_poll_seconds = 2;
  // Connect/read/write timeout of each API request. Default 10 s.
  double request_timeout_seconds = 10;
};

// Taint key cordon_node adds (value: the incident id, effect NoSchedule).
inline constexpr char kVigilTaintKey[] = "vigil.io/fault";
// Job annotations of the checkpoint protocol (unix seconds, as strings).
inline constexpr char kCheckpointRequestedAnnotation[] =
    "vigil.io/checkpoint-requested";
inline constexpr char kCheckpointDoneAnnotation[] = "vigil.io/checkpoint-done";

// Kubernetes backend. A job is "name" (in the default namespace) or
// "namespace/name" of a batch/v1 Job. Non-2xx answers fail with the API's
// Status message (404: kNotFound). Thread-safe.
class KubernetesScheduler : public Scheduler {
 public:
  // `clock` must outlive this.
  KubernetesScheduler(KubernetesOptions options, Clock& clock);

  std::string_view Name() const override { return "kubernetes"; }
  absl::StatusOr<ActionOutcome> CheckpointThenPause(
      const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Pause(const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Cordon(const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Uncordon(const ActionRequest& request) override;
  absl::StatusOr<ActionOutcome> Report(const ActionRequest& request) override;
  // GET of each Job, then one pod list per namespace (label controller-uid)
  // for pod phases and node names.
  absl::StatusOr<std::vector<JobStatus>> QueryJobs(
      const std::vector<std::string>& jobs) override;

 private:
  absl::StatusOr<ActionOutcome> PatchNode(const ActionRequest& request,
                                          bool cordon);

  const KubernetesOptions options_;
  Clock& clock_;
};

// OK when `options` can be used: an https:// api_url and a readable
// token file. kInvalidArgument saying what is wrong otherwise.
absl::Status ValidateKubernetesOptions(const KubernetesOptions& options);

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_KUBERNETES_SCHEDULER_H_
