#include "actuator/job_query_handler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_syntax.h"
#include "notify/signing.h"

namespace vigil::actuator {

using nlohmann::json;

absl::StatusOr<std::vector<std::string>> ParseJobQuery(std::string_view body) {
  json parsed = json::parse(body, nullptr, false);
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("body is not valid JSON: ", JsonSyntaxError(body)));
  }
  if (!parsed.is_object()) return absl::InvalidArgumentError("body must be a JSON object");
  auto it = parsed.find("jobs");
  if (it == parsed.end()) return absl::InvalidArgumentError("jobs: required");
  if (!it->is_array()) {
    return absl::InvalidArgumentError("jobs: must be an array of job ids or names");
  }
  if (it->empty() || it->size() > kMaxQueryJobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("jobs: must name 1 to ", kMaxQueryJobs, " jobs, not ", it->size()));
  }
  std::vector<std::string> jobs;
  jobs.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& job = (*it)[i];
    if (!job.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("jobs[", i, "]: must be a string"));
    }
    const std::string& text = job.get_ref<const std::string&>();
    if (text.empty() || text.size() > kMaxQueryJobBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("jobs[", i, "]: must be 1 to ", kMaxQueryJobBytes, " bytes"));
    }
    jobs.push_back(text);
  }
  return jobs;
}

json JobStatusJson(const JobStatus& status) {
  return {{"job", status.job},
          {"job_id", status.job_id},
          {"name", status.name},
          {"state", JobStateName(status.state)},
          {"scheduler_state", status.scheduler_state},
          {"nodes", status.nodes},
          {"user", status.user},
          {"end_time", status.end_time ? json(*status.end_time) : json()}};
}

JobQueryHandler::JobQueryHandler(JobQueryHandlerOptions options, Scheduler& scheduler,
                                 Clock& clock)
    : options_(std::move(options)), scheduler_(scheduler), clock_(clock) {}

JobQueryCounters JobQueryHandler::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

WebhookReply JobQueryHandler::Fail(int http_status, const std::string& error,
                                   const WebhookRequest& request,
                                   uint64_t JobQueryCounters::*counter) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++(counters_.*counter);
  }
  // 501 is the backend's standing answer (noop), not a failure to report
  // every time the server asks.
  if (options_.on_failure && http_status != 501) {
    options_.on_failure(absl::StrCat("job query from ", request.remote, ": HTTP ",
                                     http_status, ": ", error));
  }
  WebhookReply reply;
  reply.http_status = http_status;
  reply.body = {{"error", error}};
  return reply;
}

WebhookReply JobQueryHandler::Handle(const WebhookRequest& request) {
  double now = clock_.Now();
  // The signature comes first: a refused request is not even parsed.
  if (absl::Status verified =
          VerifyWebhook(options_.secret, request.timestamp, request.signature,
                        request.body, now, options_.replay_window_seconds);
      !verified.ok()) {
    return Fail(401, absl::StrCat("signature refused: ", verified.message()), request,
                &JobQueryCounters::unauthorized);
  }
  if (!IsJsonContentType(request.content_type)) {
    return Fail(400,
                absl::StrCat("Content-Type must be application/json, not '",
                             request.content_type, "'"),
                request, &JobQueryCounters::bad_request);
  }
  absl::StatusOr<std::vector<std::string>> jobs = ParseJobQuery(request.body);
  if (!jobs.ok()) {
    return Fail(400, std::string(jobs.status().message()), request,
                &JobQueryCounters::bad_request);
  }
  absl::StatusOr<std::vector<JobStatus>> answers = scheduler_.QueryJobs(*jobs);
  if (answers.ok() && answers->size() != jobs->size()) {
    answers = absl::InternalError(absl::StrCat("the ", std::string(scheduler_.Name()),
                                               " backend answered ", answers->size(), " of ",
                                               jobs->size(), " jobs"));
  }
  if (!answers.ok()) {
    std::string message(answers.status().message());
    switch (answers.status().code()) {
      case absl::StatusCode::kInvalidArgument:
        return Fail(400, message, request, &JobQueryCounters::bad_request);
      case absl::StatusCode::kUnimplemented:
        return Fail(501, message, request, &JobQueryCounters::unimplemented);
      default:
        return Fail(502, message, request, &JobQueryCounters::failed);
    }
  }
  json listed = json::array();
  for (const JobStatus& status : *answers) listed.push_back(JobStatusJson(status));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.answered;
    counters_.jobs_answered += answers->size();
  }
  WebhookReply reply;
  reply.body = {{"scheduler", std::string(scheduler_.Name())},
                {"as_of", now},
                {"jobs", std::move(listed)}};
  return reply;
}

}  // namespace vigil::actuator
