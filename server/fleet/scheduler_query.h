// Asks the scheduler, through vigil-actuator, what state jobs are in and on
// which nodes they run: POST /v1/jobs/query, signed like the action
// webhooks (notify/signing.h). The server holds no scheduler credentials;
// the actuator does. Contract and state mapping: actuator/README.md.
#ifndef VIGIL_SERVER_FLEET_SCHEDULER_QUERY_H_
#define VIGIL_SERVER_FLEET_SCHEDULER_QUERY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "notify/notify.h"

namespace vigil {

struct ActuatorOptions;  // server/config/config.h

// What a job is doing, in the scheduler's word.
enum class SchedulerJobState : uint8_t {
  kRunning,    // its processes run on `nodes`
  kSuspended,  // stopped in place
  kPending,    // waiting to start, or to start again (requeued)
  kEnded,      // finished, failed, cancelled or ending; not a fault by itself
  kNotFound,   // the scheduler does not know it (never ran, or forgotten)
  kUnknown,    // a state the actuator does not know: no conclusion
};

// "running", "suspended", "pending", "ended", "not_found", "unknown".
std::string_view SchedulerJobStateName(SchedulerJobState state);

// One job of an answer.
struct SchedulerJobStatus {
  std::string job;     // as asked
  std::string job_id;  // the job answered for (a name: its newest job)
  std::string name;
  SchedulerJobState state = SchedulerJobState::kNotFound;
  std::string scheduler_state;     // raw: "RUNNING", "NODE_FAIL", "Complete"
  std::vector<std::string> nodes;  // sorted host names
  std::string user;
  std::optional<double> end_time;  // unix seconds, ended jobs only
};

struct SchedulerQueryOptions {
  // The query endpoint. Empty: derived from actions_url (its scheme, host
  // and port + "/v1/jobs/query").
  std::string url;
  // vigil-actuator's action endpoint (the server's actuator.url), e.g.
  // "http://127.0.0.1:9191/v1/actions". Used when url is empty.
  std::string actions_url;
  // The shared HMAC secret. Required.
  std::string secret;
  // Each request's limit, connecting included. Default 10 s.
  double timeout_seconds = 10;
  // Jobs per request; longer lists go in several. An answer too long for
  // the transport (64 KiB, e.g. jobs on thousands of nodes) is asked again
  // in halves. Default 100; at most 1000 (the actuator's limit).
  size_t max_jobs_per_request = 100;
  // Sends the requests; not owned, must outlive the SchedulerQuery.
  // Default (null): libcurl.
  Transport* transport = nullptr;
};

// The options for the actuator in the server's `actuator` settings: its
// url and secret (read from secret_file when secret is empty).
// kInvalidArgument when no url is set or the secret file is unreadable or
// empty.
absl::StatusOr<SchedulerQueryOptions> SchedulerQueryOptionsFrom(
    const ActuatorOptions& actuator);

// "scheme://host:port/v1/jobs/query" for the action endpoint
// `actions_url`. kInvalidArgument when it is not an http(s) URL with a
// host.
absl::StatusOr<std::string> JobQueryUrl(std::string_view actions_url);

// The jobs of a 200 answer `body` to a query for `jobs`, in order.
// kInternal saying what is wrong when the body is not the contract's
// (not JSON, a field of the wrong type, another number of jobs or another
// job than asked at a position). An unknown state string is kUnknown, so a
// newer actuator's states do not break an older server.
absl::StatusOr<std::vector<SchedulerJobStatus>> ParseJobQueryAnswer(
    std::string_view body, const std::vector<std::string>& jobs);

// The client. Thread-safe: concurrent queries share nothing but the
// transport.
class SchedulerQuery {
 public:
  // kInvalidArgument for an empty secret, no usable url, or
  // max_jobs_per_request not in 1..1000. `clock` signs the requests and
  // must outlive the result.
  static absl::StatusOr<std::unique_ptr<SchedulerQuery>> Create(
      SchedulerQueryOptions options, Clock& clock);
  ~SchedulerQuery();

  // The state of each of `jobs` (Slurm: ids like "123" or "123_4", else
  // names; Kubernetes: "name" or "namespace/name"), in order. Errors:
  // kInvalidArgument (no jobs, or the actuator refused one: HTTP 400),
  // kUnimplemented (the actuator has no scheduler, HTTP 501),
  // kUnauthenticated (the secret or the clocks disagree, HTTP 401),
  // kUnavailable (no answer, the scheduler failed: HTTP 502, or another
  // status), kInternal (a malformed answer), kResourceExhausted (one job's
  // answer is longer than the transport keeps). The message says which.
  absl::StatusOr<std::vector<SchedulerJobStatus>> Query(
      const std::vector<std::string>& jobs);

  // Where queries go.
  const std::string& url() const { return url_; }

 private:
  SchedulerQuery(SchedulerQueryOptions options, std::string url, Clock& clock);
  // One request for `jobs`, split when the answer is cut off.
  absl::StatusOr<std::vector<SchedulerJobStatus>> Ask(
      const std::vector<std::string>& jobs);

  const SchedulerQueryOptions options_;
  const std::string url_;
  Clock& clock_;
  std::unique_ptr<Transport> own_transport_;
  Transport* transport_;
};

}  // namespace vigil

#endif  // VIGIL_SERVER_FLEET_SCHEDULER_QUERY_H_
