#include "actuator/kubernetes_scheduler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "notify/signing.h"

namespace vigil::actuator {
namespace {

using nlohmann::json;

constexpr char kMergePatch[] = "application/merge-patch+json";
// A cordon that loses a race with another writer of the Node (409
// Conflict on its resourceVersion) reads it again this many times.
constexpr int kConflictAttempts = 3;

// RFC 1123 label: 1-63 of a-z 0-9 '-', alphanumeric at both ends.
bool IsDnsLabel(std::string_view name) {
  return !name.empty() && name.size() <= 63 && absl::ascii_isalnum(name.front()) &&
         absl::ascii_isalnum(name.back()) &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'z') || c == '-';
         });
}

// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
bool IsDnsSubdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    if (!IsDnsLabel(name.substr(start, dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

absl::Status ValidateNodeName(std::string_view node) {
  if (IsDnsSubdomain(node)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "node '", std::string(node),
      "' is not a valid Kubernetes node name (lower-case RFC 1123 subdomain)"));
}

struct JobRef {
  std::string name_space;
  std::string name;
  std::string Path() const {
    return absl::StrCat("/apis/batch/v1/namespaces/", name_space, "/jobs/", name);
  }
};

absl::StatusOr<JobRef> ParseJob(std::string_view job,
                                const std::string& default_namespace) {
  JobRef ref{default_namespace, std::string(job)};
  if (size_t slash = job.find('/'); slash != std::string_view::npos) {
    ref.name_space = std::string(job.substr(0, slash));
    ref.name = std::string(job.substr(slash + 1));
  }
  if (!IsDnsLabel(ref.name_space) || !IsDnsSubdomain(ref.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job '", std::string(job),
        "' is not a Kubernetes Job reference (\"name\" or \"namespace/name\", "
        "lower-case RFC 1123 names)"));
  }
  return ref;
}

// `text` made a valid label value (taint values are label values): at most
// 63 of A-Z a-z 0-9 - _ . with alphanumeric ends; other characters become
// '_'.
std::string LabelValue(std::string_view text) {
  std::string value(text.substr(0, 63));
  for (char& c : value) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.') c = '_';
  }
  while (!value.empty() && !absl::ascii_isalnum(value.back())) value.pop_back();
  while (!value.empty() && !absl::ascii_isalnum(value.front())) value.erase(0, 1);
  return value;
}

// obj[key] when `obj` is an object that has `key`, else null.
const json& At(const json& obj, const std::string& key) {
  static const json* const kNull = new json();
  if (!obj.is_object()) return *kNull;
  auto it = obj.find(key);
  return it == obj.end() ? *kNull : *it;
}

std::optional<int64_t> ParseUnixSeconds(const json& value) {
  if (!value.is_string()) return std::nullopt;
  const std::string& text = value.get_ref<const std::string&>();
  int64_t seconds = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return seconds;
}

// One action's API requests and their outcomes, in order.
class Transcript {
 public:
  void Add(std::string_view line) { absl::StrAppend(&text_, std::string(line), "\n"); }
  absl::Status Error(absl::StatusCode code, absl::string_view error) const {
    return absl::Status(code, absl::StrCat(text_, error));
  }
  std::string text() const {
    return std::string(absl::StripTrailingAsciiWhitespace(text_));
  }

 private:
  std::string text_;
};

// Talks to the API server on behalf of one action.
class ApiClient {
 public:
  ApiClient(const KubernetesOptions& options, Transcript& transcript)
      : options_(options), transcript_(transcript) {}

  absl::StatusOr<json> Get(const std::string& path, bool record = true) {
    return Call("GET", path, json(), record);
  }
  absl::StatusOr<json> MergePatch(const std::string& path, const json& patch) {
    return Call("PATCH", path, patch, /*record=*/true);
  }

 private:
  absl::StatusOr<json> Call(const std::string& method, const std::string& path,
                            const json& patch, bool record) {
    std::string request_line = absl::StrCat(method, " ", path);
    if (method == "PATCH") absl::StrAppend(&request_line, " ", patch.dump());
    absl::StatusOr<std::string> token = ReadToken();
    if (!token.ok()) return transcript_.Error(token.status().code(), token.status().message());

    httplib::Client client(options_.api_url);
    client.set_bearer_token_auth(*token);
    if (!options_.ca_file.empty()) client.set_ca_cert_path(options_.ca_file);
    client.enable_server_certificate_verification(true);
    double timeout = options_.request_timeout_seconds;
    time_t whole = static_cast<time_t>(timeout);
    time_t micros = static_cast<time_t>((timeout - std::floor(timeout)) * 1e6);
    client.set_connection_timeout(whole, micros);
    client.set_read_timeout(whole, micros);
    client.set_write_timeout(whole, micros);
    httplib::Headers headers = {{"Accept", "application/json"}};
    httplib::Result result =
        method == "GET" ? client.Get(path.c_str(), headers)
                        : client.Patch(path.c_str(), headers, patch.dump(), kMergePatch);
    if (!result) {
      transcript_.Add(absl::StrCat(request_line, " -> no answer"));
      return transcript_.Error(
          absl::StatusCode::kUnavailable,
          absl::StrCat(method, " ", options_.api_url, path, " failed: ",
                       httplib::to_string(result.error())));
    }
    int status = result->status;
    if (record || status < 200 || status > 299) {
      transcript_.Add(absl::StrCat(request_line, " -> ", status));
    }
    json body = json::parse(result->body, nullptr, false);
    if (status < 200 || status > 299) {
      // The API server answers errors with a Status object.
      std::string message = At(body, "message").is_string()
                                ? At(body, "message").get<std::string>()
                                : std::string(absl::StripAsciiWhitespace(result->body));
      absl::StatusCode code = status == 404   ? absl::StatusCode::kNotFound
                              : status == 409 ? absl::StatusCode::kAborted
                                              : absl::StatusCode::kUnavailable;
      return transcript_.Error(
          code, absl::StrCat("Kubernetes API answered ", status, ": ", message));
    }
    if (body.is_discarded() || !body.is_object()) {
      return transcript_.Error(absl::StatusCode::kInternal,
                               absl::StrCat("Kubernetes API answered ", status,
                                            " with a body that is not a JSON object"));
    }
    return body;
  }

  absl::StatusOr<std::string> ReadToken() const {
    std::ifstream in(options_.token_file);
    if (!in) {
      return absl::UnavailableError(
          absl::StrCat("cannot read the token file ", options_.token_file));
    }
    std::stringstream text;
    text << in.rdbuf();
    std::string token(absl::StripAsciiWhitespace(text.str()));
    if (token.empty()) {
      return absl::UnavailableError(
          absl::StrCat("the token file ", options_.token_file, " is empty"));
    }
    return token;
  }

  const KubernetesOptions& options_;
  Transcript& transcript_;
};

// The node's taints without Vigil's, plus Vigil's for `incident_id` when
// `add` is set.
json TaintsWith(const json& node, bool add, std::string_view incident_id) {
  json taints = json::array();
  const json& existing = At(At(node, "spec"), "taints");
  if (existing.is_array()) {
    for (const json& taint : existing) {
      if (At(taint, "key") == kVigilTaintKey) continue;
      taints.push_back(taint);
    }
  }
  if (add) {
    taints.push_back({{"key", kVigilTaintKey},
                      {"value", LabelValue(incident_id)},
                      {"effect", "NoSchedule"}});
  }
  return taints;
}

json NodeSummary(const json& node) {
  const json& spec = At(node, "spec");
  const json& status = At(node, "status");
  json conditions = json::array();
  if (At(status, "conditions").is_array()) {
    for (const json& c : At(status, "conditions")) {
      conditions.push_back({{"type", At(c, "type")},
                            {"status", At(c, "status")},
                            {"reason", At(c, "reason")},
                            {"message", At(c, "message")}});
    }
  }
  return {{"name", At(At(node, "metadata"), "name")},
          {"unschedulable", At(spec, "unschedulable").is_boolean()
                                ? At(spec, "unschedulable")
                                : json(false)},
          {"taints", At(spec, "taints")},
          {"conditions", conditions},
          {"allocatable", At(status, "allocatable")}};
}

json JobSummary(const json& job) {
  const json& metadata = At(job, "metadata");
  const json& spec = At(job, "spec");
  const json& status = At(job, "status");
  json vigil_annotations = json::object();
  if (At(metadata, "annotations").is_object()) {
    for (const auto& [key, value] : At(metadata, "annotations").items()) {
      if (absl::StartsWith(key, "vigil.io/")) vigil_annotations[key] = value;
    }
  }
  return {{"namespace", At(metadata, "namespace")},
          {"name", At(metadata, "name")},
          {"suspend", At(spec, "suspend").is_boolean() ? At(spec, "suspend") : json(false)},
          {"parallelism", At(spec, "parallelism")},
          {"active", At(status, "active")},
          {"succeeded", At(status, "succeeded")},
          {"failed", At(status, "failed")},
          {"conditions", At(status, "conditions")},
          {"vigil_annotations", vigil_annotations}};
}

// Unix seconds of an RFC 3339 timestamp ("2026-12-02T14:20:49Z"), or
// nullopt when `value` is not one.
std::optional<double> ParseRfc3339(const json& value) {
  if (!value.is_string()) return std::nullopt;
  absl::Time time;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, value.get<std::string>(), &time, &error)) {
    return std::nullopt;
  }
  return absl::ToDoubleSeconds(time - absl::UnixEpoch());
}

// The "True" condition of `job` whose type ends the Job, or null.
const json* EndingCondition(const json& job) {
  const json& conditions = At(At(job, "status"), "conditions");
  if (!conditions.is_array()) return nullptr;
  for (const json& condition : conditions) {
    const json& type = At(condition, "type");
    // Complete and Failed end a Job; SuccessCriteriaMet and FailureTarget
    // (Kubernetes 1.31+) say its pods are being terminated to end it.
    bool ends = type == "Complete" || type == "Failed" || type == "SuccessCriteriaMet" ||
                type == "FailureTarget";
    if (ends && At(condition, "status") == "True") return &condition;
  }
  return nullptr;
}

// The answer for a Job (`job`, as the API returned it) from its pods.
JobStatus JobStatusOf(const json& job, const std::vector<const json*>& pods) {
  JobStatus status;
  const json& metadata = At(job, "metadata");
  std::string name_space =
      At(metadata, "namespace").is_string() ? At(metadata, "namespace").get<std::string>() : "";
  status.name = At(metadata, "name").is_string() ? At(metadata, "name").get<std::string>() : "";
  status.job_id = absl::StrCat(name_space, "/", status.name);
  // Pod phases in the order that decides: a Job with one pod running runs.
  std::map<std::string, std::set<std::string>> nodes_by_phase;
  for (const json* pod : pods) {
    const json& phase = At(At(*pod, "status"), "phase");
    const json& node = At(At(*pod, "spec"), "nodeName");
    std::set<std::string>& nodes =
        nodes_by_phase[phase.is_string() ? phase.get<std::string>() : "Unknown"];
    if (node.is_string() && !node.get<std::string>().empty()) nodes.insert(node.get<std::string>());
  }
  auto take_nodes = [&](std::initializer_list<const char*> phases) {
    std::set<std::string> nodes;
    for (const char* phase : phases) {
      auto it = nodes_by_phase.find(phase);
      if (it != nodes_by_phase.end()) nodes.insert(it->second.begin(), it->second.end());
    }
    status.nodes.assign(nodes.begin(), nodes.end());
  };
  if (const json* ending = EndingCondition(job)) {
    status.state = JobState::kEnded;
    status.scheduler_state = At(*ending, "type").get<std::string>();
    status.end_time = ParseRfc3339(At(At(job, "status"), "completionTime"));
    if (!status.end_time) status.end_time = ParseRfc3339(At(*ending, "lastTransitionTime"));
    take_nodes({"Running", "Pending", "Succeeded", "Failed", "Unknown"});
  } else if (At(At(job, "spec"), "suspend") == true) {
    status.state = JobState::kSuspended;
    status.scheduler_state = "Suspended";
    take_nodes({"Running", "Pending", "Unknown"});  // pods still being deleted
  } else if (nodes_by_phase.count("Running")) {
    status.state = JobState::kRunning;
    status.scheduler_state = "Running";
    take_nodes({"Running"});
  } else if (nodes_by_phase.count("Unknown")) {
    // The kubelet of its node stopped reporting: no conclusion.
    status.state = JobState::kUnknown;
    status.scheduler_state = "Unknown";
    take_nodes({"Unknown"});
  } else {
    // Pods waiting to start, or none yet / between pods: the controller
    // starts more or marks the Job done.
    status.state = JobState::kPending;
    status.scheduler_state = "Pending";
    take_nodes({"Pending"});
  }
  return status;
}

}  // namespace

absl::Status ValidateKubernetesOptions(const KubernetesOptions& options) {
  if (!absl::StartsWith(options.api_url, "https://") ||
      options.api_url.size() <= std::string_view("https://").size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the Kubernetes API URL must be https://host:port, not '", options.api_url, "'"));
  }
  if (!std::ifstream(options.token_file)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the Kubernetes token file '", options.token_file, "'"));
  }
  if (!options.ca_file.empty() && !std::ifstream(options.ca_file)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the Kubernetes CA file '", options.ca_file, "'"));
  }
  if (!IsDnsLabel(options.default_namespace)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", options.default_namespace, "' is not a valid Kubernetes namespace"));
  }
  return absl::OkStatus();
}

KubernetesScheduler::KubernetesScheduler(KubernetesOptions options, Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

absl::StatusOr<ActionOutcome> KubernetesScheduler::PatchNode(
    const ActionRequest& request, bool cordon) {
  VIGIL_RETURN_IF_ERROR(ValidateNodeName(request.node));
  Transcript transcript;
  ApiClient api(options_, transcript);
  std::string path = absl::StrCat("/api/v1/nodes/", request.node);
  for (int attempt = 1;; ++attempt) {
    VIGIL_ASSIGN_OR_RETURN(json node, api.Get(path));
    json patch = {{"spec",
                   {{"unschedulable", cordon},
                    {"taints", TaintsWith(node, cordon, request.incident_id)}}}};
    // The taint list is replaced as a whole: the resourceVersion makes the
    // API server refuse the patch if someone changed the node meanwhile.
    const json& version = At(At(node, "metadata"), "resourceVersion");
    if (version.is_string()) patch["metadata"] = {{"resourceVersion", version}};
    absl::StatusOr<json> patched = api.MergePatch(path, patch);
    if (patched.ok()) break;
    if (patched.status().code() != absl::StatusCode::kAborted ||
        attempt == kConflictAttempts) {
      return patched.status();
    }
  }
  return ActionOutcome{transcript.text(), ""};
}

absl::StatusOr<ActionOutcome> KubernetesScheduler::Cordon(
    const ActionRequest& request) {
  return PatchNode(request, /*cordon=*/true);
}

absl::StatusOr<ActionOutcome> KubernetesScheduler::Uncordon(
    const ActionRequest& request) {
  return PatchNode(request, /*cordon=*/false);
}

absl::StatusOr<ActionOutcome> KubernetesScheduler::Pause(
    const ActionRequest& request) {
  VIGIL_ASSIGN_OR_RETURN(JobRef job, ParseJob(request.job, options_.default_namespace));
  Transcript transcript;
  ApiClient api(options_, transcript);
  VIGIL_RETURN_IF_ERROR(
      api.MergePatch(job.Path(), {{"spec", {{"suspend", true}}}}).status());
  return ActionOutcome{transcript.text(), ""};
}

absl::StatusOr<ActionOutcome> KubernetesScheduler::CheckpointThenPause(
    const ActionRequest& request) {
  VIGIL_ASSIGN_OR_RETURN(JobRef job, ParseJob(request.job, options_.default_namespace));
  Transcript transcript;
  ApiClient api(options_, transcript);
  int64_t requested = static_cast<int64_t>(std::floor(clock_.Now()));
  json annotate = {{"metadata",
                    {{"annotations",
                      {{kCheckpointRequestedAnnotation, std::to_string(requested)}}}}}};
  VIGIL_RETURN_IF_ERROR(api.MergePatch(job.Path(), annotate).status());

  double deadline = clock_.Now() + request.checkpoint_timeout_seconds;
  std::mutex mu;
  std::condition_variable never_notified;
  std::unique_lock<std::mutex> lock(mu);
  bool confirmed = false;
  int reads = 0;
  while (true) {
    ++reads;
    VIGIL_ASSIGN_OR_RETURN(json current, api.Get(job.Path(), /*record=*/false));
    std::optional<int64_t> done = ParseUnixSeconds(
        At(At(At(current, "metadata"), "annotations"), kCheckpointDoneAnnotation));
    if (done && *done >= requested) {
      confirmed = true;
      break;
    }
    double now = clock_.Now();
    if (now >= deadline) break;
    clock_.WaitUntil(lock, never_notified,
                     std::min(now + options_.checkpoint_poll_seconds, deadline));
  }
  transcript.Add(absl::StrCat(
      "GET ", job.Path(), " x", reads, ": ",
      confirmed ? absl::StrCat(kCheckpointDoneAnnotation, " >= ", requested,
                               ", checkpoint confirmed")
                : absl::StrCat("no ", kCheckpointDoneAnnotation, " >= ", requested,
                               " within ", request.checkpoint_timeout_seconds,
                               " s; pausing anyway")));
  VIGIL_RETURN_IF_ERROR(
      api.MergePatch(job.Path(), {{"spec", {{"suspend", true}}}}).status());
  return ActionOutcome{transcript.text(), confirmed ? "confirmed" : "timed_out"};
}

absl::StatusOr<ActionOutcome> KubernetesScheduler::Report(
    const ActionRequest& request) {
  if (request.node.empty() && request.job.empty()) {
    return absl::InvalidArgumentError("a report needs a job or a node");
  }
  if (!request.node.empty()) VIGIL_RETURN_IF_ERROR(ValidateNodeName(request.node));
  std::optional<JobRef> job;
  if (!request.job.empty()) {
    VIGIL_ASSIGN_OR_RETURN(job, ParseJob(request.job, options_.default_namespace));
  }
  Transcript transcript;
  ApiClient api(options_, transcript);
  json report = json::object();
  if (!request.node.empty()) {
    VIGIL_ASSIGN_OR_RETURN(json node,
                           api.Get(absl::StrCat("/api/v1/nodes/", request.node)));
    report["node"] = NodeSummary(node);
  }
  if (job) {
    VIGIL_ASSIGN_OR_RETURN(json current, api.Get(job->Path()));
    report["job"] = JobSummary(current);
  }
  return ActionOutcome{absl::StrCat(transcript.text(), "\n", report.dump(2)), ""};
}

absl::StatusOr<std::vector<JobStatus>> KubernetesScheduler::QueryJobs(
    const std::vector<std::string>& jobs) {
  std::vector<JobRef> refs;
  for (const std::string& job : jobs) {
    VIGIL_ASSIGN_OR_RETURN(JobRef ref, ParseJob(job, options_.default_namespace));
    refs.push_back(std::move(ref));
  }
  Transcript transcript;
  ApiClient api(options_, transcript);
  // Each Job once, then one pod list per namespace for all of its Jobs.
  std::map<std::string, json> found;  // by "ns/name"; null: not found
  std::map<std::string, std::set<std::string>> uids_by_namespace;
  for (const JobRef& ref : refs) {
    std::string key = absl::StrCat(ref.name_space, "/", ref.name);
    if (found.count(key)) continue;
    absl::StatusOr<json> job = api.Get(ref.Path());
    if (!job.ok() && job.status().code() != absl::StatusCode::kNotFound) return job.status();
    found[key] = job.ok() ? *job : json();
    const json& uid = At(At(found[key], "metadata"), "uid");
    if (uid.is_string()) uids_by_namespace[ref.name_space].insert(uid.get<std::string>());
  }
  std::map<std::string, std::vector<json>> pods_by_uid;
  for (const auto& [name_space, uids] : uids_by_namespace) {
    std::string selector = absl::StrCat("controller-uid in (", absl::StrJoin(uids, ","), ")");
    VIGIL_ASSIGN_OR_RETURN(
        json pods, api.Get(absl::StrCat("/api/v1/namespaces/", name_space,
                                        "/pods?labelSelector=", UrlEncode(selector))));
    if (!At(pods, "items").is_array()) {
      return transcript.Error(absl::StatusCode::kInternal,
                              "the pod list has no items array");
    }
    for (const json& pod : pods["items"]) {
      const json& uid = At(At(At(pod, "metadata"), "labels"), "controller-uid");
      if (uid.is_string()) pods_by_uid[uid.get<std::string>()].push_back(pod);
    }
  }
  std::vector<JobStatus> answers;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const json& job = found[absl::StrCat(refs[i].name_space, "/", refs[i].name)];
    JobStatus status;
    if (!job.is_null()) {
      std::vector<const json*> pods;
      const json& uid = At(At(job, "metadata"), "uid");
      if (uid.is_string()) {
        for (const json& pod : pods_by_uid[uid.get<std::string>()]) pods.push_back(&pod);
      }
      status = JobStatusOf(job, pods);
    }
    status.job = jobs[i];
    answers.push_back(std::move(status));
  }
  return answers;
}

}  // namespace vigil::actuator
