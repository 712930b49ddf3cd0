#include "server/fleet/scheduler_query.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "notify/signing.h"
#include "server/config/config.h"

namespace vigil {
namespace {

using nlohmann::json;

constexpr char kQueryPath[] = "/v1/jobs/query";
constexpr size_t kMaxJobsPerRequest = 1000;  // the actuator's limit
// The libcurl transport keeps this much of an answer and drops the rest
// (notify/curl_transport.cc); a longer answer arrives cut off.
constexpr size_t kTransportResponseCap = 64 * 1024;

constexpr std::pair<SchedulerJobState, std::string_view> kStateNames[] = {
    {SchedulerJobState::kRunning, "running"},
    {SchedulerJobState::kSuspended, "suspended"},
    {SchedulerJobState::kPending, "pending"},
    {SchedulerJobState::kEnded, "ended"},
    {SchedulerJobState::kNotFound, "not_found"},
    {SchedulerJobState::kUnknown, "unknown"},
};

absl::Status Malformed(std::string_view what) {
  return absl::InternalError(
      absl::StrCat("malformed answer from vigil-actuator: ", std::string(what)));
}

// `item[key]` into `out` when present; an error naming `path` when it has
// another type. `required`: absence is an error too.
absl::Status ReadString(const json& item, const char* key, const std::string& path,
                        bool required, std::string* out) {
  auto it = item.find(key);
  if (it == item.end() || it->is_null()) {
    if (required) return Malformed(absl::StrCat(path, ".", key, " is missing"));
    return absl::OkStatus();
  }
  if (!it->is_string()) return Malformed(absl::StrCat(path, ".", key, " is not a string"));
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::StatusOr<SchedulerJobStatus> ParseJob(const json& item, const std::string& path) {
  if (!item.is_object()) return Malformed(absl::StrCat(path, " is not an object"));
  SchedulerJobStatus status;
  VIGIL_RETURN_IF_ERROR(ReadString(item, "job", path, true, &status.job));
  VIGIL_RETURN_IF_ERROR(ReadString(item, "job_id", path, false, &status.job_id));
  VIGIL_RETURN_IF_ERROR(ReadString(item, "name", path, false, &status.name));
  std::string state;
  VIGIL_RETURN_IF_ERROR(ReadString(item, "state", path, true, &state));
  status.state = SchedulerJobState::kUnknown;
  for (const auto& [value, name] : kStateNames) {
    if (state == name) status.state = value;
  }
  VIGIL_RETURN_IF_ERROR(
      ReadString(item, "scheduler_state", path, false, &status.scheduler_state));
  VIGIL_RETURN_IF_ERROR(ReadString(item, "user", path, false, &status.user));
  if (auto nodes = item.find("nodes"); nodes != item.end() && !nodes->is_null()) {
    if (!nodes->is_array()) return Malformed(absl::StrCat(path, ".nodes is not an array"));
    for (const json& node : *nodes) {
      if (!node.is_string()) {
        return Malformed(absl::StrCat(path, ".nodes has an entry that is not a string"));
      }
      status.nodes.push_back(node.get<std::string>());
    }
  }
  if (auto end = item.find("end_time"); end != item.end() && !end->is_null()) {
    if (!end->is_number() || !std::isfinite(end->get<double>())) {
      return Malformed(absl::StrCat(path, ".end_time is not a number"));
    }
    status.end_time = end->get<double>();
  }
  return status;
}

// The error text of a non-200 answer: its {"error"} when there is one.
std::string ErrorText(const TransportResult& result) {
  json body = json::parse(result.body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_string()) {
    return body["error"].get<std::string>();
  }
  std::string text(absl::StripAsciiWhitespace(result.body));
  if (text.size() > 500) text.resize(500);
  return text;
}

}  // namespace

std::string_view SchedulerJobStateName(SchedulerJobState state) {
  for (const auto& [value, name] : kStateNames) {
    if (value == state) return name;
  }
  return "unknown";
}

absl::StatusOr<std::string> JobQueryUrl(std::string_view actions_url) {
  std::string url(absl::StripAsciiWhitespace(
      absl::string_view(actions_url.data(), actions_url.size())));
  size_t scheme_end = url.find("://");
  std::string scheme = url.substr(0, scheme_end);
  absl::AsciiStrToLower(&scheme);
  if (scheme_end == std::string::npos || (scheme != "http" && scheme != "https")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the actuator url '", url, "' is not an http:// or https:// URL"));
  }
  size_t host_start = scheme_end + 3;
  size_t host_end = url.find_first_of("/?#", host_start);
  std::string authority = url.substr(host_start, host_end - host_start);
  if (authority.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the actuator url '", url, "' has no host"));
  }
  return absl::StrCat(scheme, "://", authority, kQueryPath);
}

absl::StatusOr<SchedulerQueryOptions> SchedulerQueryOptionsFrom(
    const ActuatorOptions& actuator) {
  if (actuator.url.empty()) {
    return absl::InvalidArgumentError("no actuator url is configured");
  }
  SchedulerQueryOptions options;
  options.actions_url = actuator.url;
  options.secret = actuator.secret;
  if (options.secret.empty() && !actuator.secret_file.empty()) {
    std::ifstream in(actuator.secret_file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read the actuator secret file '", actuator.secret_file, "'"));
    }
    std::stringstream text;
    text << in.rdbuf();
    options.secret = std::string(absl::StripAsciiWhitespace(text.str()));
  }
  if (options.secret.empty()) {
    return absl::InvalidArgumentError("the actuator secret is empty");
  }
  return options;
}

absl::StatusOr<std::vector<SchedulerJobStatus>> ParseJobQueryAnswer(
    std::string_view body, const std::vector<std::string>& jobs) {
  json parsed = json::parse(body, nullptr, false);
  if (parsed.is_discarded()) return Malformed("not JSON");
  if (!parsed.is_object()) return Malformed("not a JSON object");
  for (const char* key : {"scheduler", "as_of", "jobs"}) {
    if (!parsed.contains(key)) return Malformed(absl::StrCat(key, " is missing"));
  }
  if (!parsed["scheduler"].is_string()) return Malformed("scheduler is not a string");
  if (!parsed["as_of"].is_number()) return Malformed("as_of is not a number");
  const json& listed = parsed["jobs"];
  if (!listed.is_array()) return Malformed("jobs is not an array");
  if (listed.size() != jobs.size()) {
    return Malformed(absl::StrCat(listed.size(), " jobs for ", jobs.size(), " asked"));
  }
  std::vector<SchedulerJobStatus> answers;
  answers.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::string path = absl::StrCat("jobs[", i, "]");
    VIGIL_ASSIGN_OR_RETURN(SchedulerJobStatus status, ParseJob(listed[i], path));
    if (status.job != jobs[i]) {
      return Malformed(absl::StrCat(path, " answers for '", status.job, "', not '", jobs[i], "'"));
    }
    answers.push_back(std::move(status));
  }
  return answers;
}

absl::StatusOr<std::unique_ptr<SchedulerQuery>> SchedulerQuery::Create(
    SchedulerQueryOptions options, Clock& clock) {
  if (options.secret.empty()) {
    return absl::InvalidArgumentError("the actuator secret is empty");
  }
  if (options.max_jobs_per_request < 1 || options.max_jobs_per_request > kMaxJobsPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_jobs_per_request must be 1 to ", kMaxJobsPerRequest));
  }
  std::string url = options.url;
  if (url.empty()) {
    VIGIL_ASSIGN_OR_RETURN(url, JobQueryUrl(options.actions_url));
  } else if (!absl::StartsWithIgnoreCase(url, "http://") &&
             !absl::StartsWithIgnoreCase(url, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job query url '", url, "' is not an http:// or https:// URL"));
  }
  return std::unique_ptr<SchedulerQuery>(
      new SchedulerQuery(std::move(options), std::move(url), clock));
}

SchedulerQuery::SchedulerQuery(SchedulerQueryOptions options, std::string url, Clock& clock)
    : options_(std::move(options)), url_(std::move(url)), clock_(clock) {
  transport_ = options_.transport;
  if (transport_ == nullptr) {
    own_transport_ = NewCurlTransport();
    transport_ = own_transport_.get();
  }
}

SchedulerQuery::~SchedulerQuery() = default;

absl::StatusOr<std::vector<SchedulerJobStatus>> SchedulerQuery::Query(
    const std::vector<std::string>& jobs) {
  if (jobs.empty()) return absl::InvalidArgumentError("no jobs to ask about");
  std::vector<SchedulerJobStatus> answers;
  answers.reserve(jobs.size());
  for (size_t start = 0; start < jobs.size(); start += options_.max_jobs_per_request) {
    size_t end = std::min(jobs.size(), start + options_.max_jobs_per_request);
    VIGIL_ASSIGN_OR_RETURN(
        std::vector<SchedulerJobStatus> part,
        Ask(std::vector<std::string>(jobs.begin() + start, jobs.begin() + end)));
    for (SchedulerJobStatus& status : part) answers.push_back(std::move(status));
  }
  return answers;
}

absl::StatusOr<std::vector<SchedulerJobStatus>> SchedulerQuery::Ask(
    const std::vector<std::string>& jobs) {
  OutboundRequest request;
  request.method = "POST";
  request.url = url_;
  request.body = json({{"jobs", jobs}}).dump(-1, ' ', false, json::error_handler_t::replace);
  const int64_t timestamp = static_cast<int64_t>(std::floor(clock_.Now()));
  request.headers = {{"Content-Type", "application/json"},
                     {"X-Vigil-Timestamp", absl::StrCat(timestamp)},
                     {"X-Vigil-Signature", SignWebhook(options_.secret, timestamp, request.body)}};
  TransportResult result = transport_->Send(request, options_.timeout_seconds);
  std::string where = absl::StrCat("vigil-actuator at ", url_);
  switch (result.http_status) {
    case 200:
      break;
    case 0:
      return absl::UnavailableError(absl::StrCat(where, ": no answer: ", result.error));
    case 400:
      return absl::InvalidArgumentError(absl::StrCat(where, " refused the query: ",
                                                     ErrorText(result)));
    case 401:
      return absl::UnauthenticatedError(absl::StrCat(where, " refused the signature: ",
                                                     ErrorText(result)));
    case 501:
      return absl::UnimplementedError(absl::StrCat(where, " has no scheduler: ",
                                                   ErrorText(result)));
    default:
      return absl::UnavailableError(absl::StrCat(where, " answered HTTP ", result.http_status,
                                                 ": ", ErrorText(result)));
  }
  absl::StatusOr<std::vector<SchedulerJobStatus>> answers = ParseJobQueryAnswer(result.body, jobs);
  if (answers.ok() || result.body.size() < kTransportResponseCap) return answers;
  // Cut off by the transport: ask for each half on its own.
  if (jobs.size() == 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        where, ": the answer for job '", jobs[0], "' is longer than ", kTransportResponseCap,
        " bytes"));
  }
  size_t half = jobs.size() / 2;
  VIGIL_ASSIGN_OR_RETURN(std::vector<SchedulerJobStatus> first,
                         Ask(std::vector<std::string>(jobs.begin(), jobs.begin() + half)));
  VIGIL_ASSIGN_OR_RETURN(std::vector<SchedulerJobStatus> second,
                         Ask(std::vector<std::string>(jobs.begin() + half, jobs.end())));
  for (SchedulerJobStatus& status : second) first.push_back(std::move(status));
  return first;
}

}  // namespace vigil
