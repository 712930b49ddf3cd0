// POST /v1/jobs/query, free of any HTTP library: checks the Vigil
// signature and replay window exactly like /v1/actions, validates the list
// of jobs and asks the Scheduler what state each is in and where it runs.
// Read-only: nothing is written to the audit log; queries are counted and
// failures reported through a callback. The contract: actuator/README.md.
#ifndef VIGIL_ACTUATOR_JOB_QUERY_HANDLER_H_
#define VIGIL_ACTUATOR_JOB_QUERY_HANDLER_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "actuator/action_handler.h"
#include "actuator/scheduler.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace vigil::actuator {

// A query names 1 to kMaxQueryJobs jobs, each 1 to kMaxQueryJobBytes bytes.
inline constexpr size_t kMaxQueryJobs = 1000;
inline constexpr size_t kMaxQueryJobBytes = 256;

struct JobQueryHandlerOptions {
  // The shared HMAC secret (the same as for actions). Required.
  std::string secret;
  // Requests whose X-Vigil-Timestamp is further than this from the clock
  // are refused. Default 300 s.
  double replay_window_seconds = 300;
  // Called with one line for every query refused (401, 400) or failed
  // (502); not for 501 (noop's standing answer). May be empty.
  std::function<void(const std::string& line)> on_failure;
};

// How queries went since start. Each query counts once, under its answer.
struct JobQueryCounters {
  uint64_t answered = 0;       // 200
  uint64_t jobs_answered = 0;  // jobs in the 200 answers
  uint64_t unauthorized = 0;   // 401: signature or timestamp refused
  uint64_t bad_request = 0;    // 400
  uint64_t unimplemented = 0;  // 501: the backend has no scheduler
  uint64_t failed = 0;         // 502: the scheduler command or API failed
};

// The jobs in a query body {"jobs": ["12345", "llama-70b"]}, in order
// (repeats kept). kInvalidArgument naming the problem: not JSON, not an
// object, "jobs" missing or not an array of 1 to kMaxQueryJobs strings,
// an empty entry or one over kMaxQueryJobBytes. Other keys are ignored.
absl::StatusOr<std::vector<std::string>> ParseJobQuery(std::string_view body);

// `status` as the answer's JSON object: {"job", "job_id", "name", "state",
// "scheduler_state", "nodes", "user", "end_time" (number or null)}.
nlohmann::json JobStatusJson(const JobStatus& status);

// Answers job-state queries. Thread-safe: queries run concurrently.
class JobQueryHandler {
 public:
  // `scheduler` and `clock` must outlive this.
  JobQueryHandler(JobQueryHandlerOptions options, Scheduler& scheduler, Clock& clock);

  // The answer to `request`: 200 {"scheduler", "as_of", "jobs": [...]} in
  // request order; 401 for a refused signature (the scheduler is never
  // asked); 400 for a bad body or a job the backend cannot pass on; 501
  // when the backend has no scheduler; 502 when the scheduler failed.
  WebhookReply Handle(const WebhookRequest& request);

  JobQueryCounters counters() const;

 private:
  WebhookReply Fail(int http_status, const std::string& error,
                    const WebhookRequest& request, uint64_t JobQueryCounters::*counter);

  const JobQueryHandlerOptions options_;
  Scheduler& scheduler_;
  Clock& clock_;

  mutable std::mutex mu_;
  JobQueryCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vigil::actuator

#endif  // VIGIL_ACTUATOR_JOB_QUERY_HANDLER_H_
