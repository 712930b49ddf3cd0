#include "actuator/action_handler.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/json_syntax.h"
#include "notify/signing.h"

namespace vigil::actuator {
namespace {

// requested_by of the requests Vigil makes by itself (not approved by an
// operator).
constexpr std::string_view kAutomaticRequester = "vigil";

using nlohmann::json;

constexpr size_t kMaxIdLength = 128;
constexpr size_t kMaxFieldLength = 1024;
constexpr double kMaxCheckpointTimeoutSeconds = 86400;
constexpr const char* kStringFields[] = {"id",  "action", "incident_id",
                                         "severity", "job", "node",
                                         "reason", "requested_by"};

bool IsValidId(std::string_view id) {
  return !id.empty() && id.size() <= kMaxIdLength &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == ':' ||
                  c == '-';
         });
}

// "2026-12-02T14:20:49.123Z" for unix time `t`.
std::string Rfc3339(double t) {
  time_t seconds = static_cast<time_t>(std::floor(t));
  int millis = std::clamp(static_cast<int>((t - std::floor(t)) * 1000), 0, 999);
  struct tm utc;
  gmtime_r(&seconds, &utc);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                         utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                         utc.tm_sec, millis);
}

// The fields an audit record repeats from the body: exact for a valid
// action, best effort (whatever strings are there) for a refused one.
json BodyFields(std::string_view body) {
  json fields = json::object();
  json parsed = json::parse(body, nullptr, false);
  if (!parsed.is_object()) return fields;
  for (const char* name : {"id", "action", "job", "node", "incident_id", "requested_by"}) {
    auto it = parsed.find(name);
    if (it == parsed.end() || !it->is_string()) continue;
    std::string value = it->get<std::string>();
    if (value.size() > kMaxFieldLength) value.resize(kMaxFieldLength);
    fields[name] = value;
  }
  return fields;
}

}  // namespace

bool IsJsonContentType(std::string_view content_type) {
  std::string media(absl::StripAsciiWhitespace(
      absl::string_view(content_type.data(), content_type.size())
          .substr(0, content_type.find(';'))));
  absl::AsciiStrToLower(&media);
  return media.empty() || media == "application/json";
}

absl::StatusOr<ActionRequest> ParseActionRequest(
    std::string_view body, double default_checkpoint_timeout_seconds) {
  json parsed = json::parse(body, nullptr, false);
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("body is not valid JSON: ", JsonSyntaxError(body)));
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError("body must be a JSON object");
  }
  std::map<std::string, std::string> text;
  for (const char* name : kStringFields) {
    auto it = parsed.find(name);
    if (it == parsed.end() || it->is_null()) continue;
    if (!it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": must be a string"));
    }
    text[name] = it->get<std::string>();
    if (text[name].size() > kMaxFieldLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": longer than ", kMaxFieldLength, " bytes"));
    }
  }
  ActionRequest request;
  request.id = text["id"];
  if (request.id.empty()) return absl::InvalidArgumentError("id: required");
  if (!IsValidId(request.id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id: must be 1 to ", kMaxIdLength, " of A-Z a-z 0-9 . _ : -"));
  }
  std::optional<ActionType> type = ActionTypeFromName(text["action"]);
  if (!type) {
    return absl::InvalidArgumentError(absl::StrCat(
        "action: ", text["action"].empty() ? "required" : "unknown '" + text["action"] + "'",
        " (one of checkpoint_then_pause_job, pause_job, cordon_node, "
        "uncordon_node, diagnostic_report)"));
  }
  request.type = *type;
  request.incident_id = text["incident_id"];
  request.severity = text["severity"];
  request.job = text["job"];
  request.node = text["node"];
  request.reason = text["reason"];
  request.requested_by = text["requested_by"];
  std::string action_name(ActionTypeName(request.type));
  switch (request.type) {
    case ActionType::kCheckpointThenPause:
    case ActionType::kPause:
      if (request.job.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("job: required for ", action_name));
      }
      break;
    case ActionType::kCordon:
    case ActionType::kUncordon:
      if (request.node.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("node: required for ", action_name));
      }
      break;
    case ActionType::kDiagnosticReport:
      if (request.job.empty() && request.node.empty()) {
        return absl::InvalidArgumentError("job or node: diagnostic_report needs one");
      }
      break;
  }
  request.checkpoint_timeout_seconds = default_checkpoint_timeout_seconds;
  if (auto it = parsed.find("checkpoint_timeout_seconds");
      it != parsed.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() <= 0 ||
        it->get<double>() > kMaxCheckpointTimeoutSeconds) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint_timeout_seconds: must be a number in (0, ",
          kMaxCheckpointTimeoutSeconds, "]"));
    }
    request.checkpoint_timeout_seconds = it->get<double>();
  }
  return request;
}

ActionHandler::ActionHandler(ActionHandlerOptions options, Scheduler& scheduler,
                             AuditLog& audit, Clock& clock)
    : options_(std::move(options)), scheduler_(scheduler), audit_(audit), clock_(clock) {
  Restore(audit_.existing_records());
}

void ActionHandler::Restore(const std::vector<json>& records) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const json& record : records) {
    auto id = record.find("id");
    auto hash = record.find("body_sha256");
    auto result = record.find("result");
    if (id == record.end() || !id->is_string() || hash == record.end() ||
        !hash->is_string() || result == record.end()) {
      continue;
    }
    body_hashes_[*id] = *hash;
    auto response = record.find("response");
    if (*result == "done" && response != record.end() && response->is_object()) {
      answers_[*id] = StoredAnswer{*hash, *response};
    }
  }
}

size_t ActionHandler::remembered_answers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return answers_.size();
}

absl::Status ActionHandler::Audit(const json& record) {
  absl::Status written = audit_.Append(record);
  if (options_.on_record) options_.on_record(record);
  return written;
}

void ActionHandler::AuditOrWarn(const json& record) {
  // The request has been answered or acted on already; all that is left is
  // to say the record is missing.
  if (absl::Status s = Audit(record); !s.ok()) {
    std::fprintf(stderr, "vigil-actuator: audit record lost: %s\n",
                 std::string(s.message()).c_str());
  }
}

WebhookReply ActionHandler::Refuse(int http_status, const std::string& error,
                                   json record) {
  WebhookReply reply;
  reply.http_status = http_status;
  reply.body = {{"error", std::string(error)}};
  if (record.contains("id")) reply.body["id"] = record["id"];
  record["result"] = "refused";
  record["http_status"] = http_status;
  record["error"] = std::string(error);
  if (record.value("verified", true) || AuditUnsigned(record.value("ts", 0.0)))
    AuditOrWarn(record);
  return reply;
}

bool ActionHandler::AuditUnsigned(double now) {
  const double minute = std::floor(now / 60) * 60;
  uint64_t summary = 0;
  double summary_minute = 0;
  bool audit;
  {
    std::lock_guard<std::mutex> l(unsigned_mu_);
    if (minute != unsigned_minute_) {
      summary = std::exchange(unsigned_unaudited_, 0);
      summary_minute = unsigned_minute_;
      unsigned_minute_ = minute;
      unsigned_audited_ = 0;
    }
    audit = unsigned_audited_ < options_.max_unsigned_audits_per_minute;
    if (audit) {
      ++unsigned_audited_;
    } else {
      ++unsigned_unaudited_;
    }
  }
  if (summary > 0)
    AuditOrWarn({{"ts", now},
                 {"time", Rfc3339(now)},
                 {"result", "refused_unaudited"},
                 {"count", summary},
                 {"minute", Rfc3339(summary_minute)},
                 {"error", "unsigned requests refused beyond the audit limit"}});
  return audit;
}

absl::Status ActionHandler::CheckJobOnNode(ActionRequest& action,
                                           std::string* note) {
  if (action.type != ActionType::kPause &&
      action.type != ActionType::kCheckpointThenPause)
    return absl::OkStatus();
  if (action.node.empty()) {
    if (action.requested_by == kAutomaticRequester)
      return absl::FailedPreconditionError(absl::StrCat(
          "automatic ", std::string(ActionTypeName(action.type)), " of job ", action.job,
          " names no node: Vigil acts by itself only on a job a node's agent "
          "verified, and names that node so it can be checked here"));
    return absl::OkStatus();  // an operator's decision
  }
  absl::StatusOr<std::vector<JobStatus>> jobs =
      scheduler_.QueryJobs({action.job});
  if (!jobs.ok()) {
    if (absl::IsUnimplemented(jobs.status())) {
      *note = absl::StrCat("# not checked that job ", action.job, " runs on ",
                           action.node, ": the ", std::string(scheduler_.Name()),
                           " backend has no scheduler to ask\n");
      return absl::OkStatus();
    }
    if (absl::IsInvalidArgument(jobs.status())) return jobs.status();
    return absl::UnavailableError(absl::StrCat(
        "cannot check that job ", action.job, " runs on ", action.node, ": ",
        jobs.status().message()));
  }
  if (jobs->size() != 1)
    return absl::UnavailableError("the scheduler answered for no job");
  const JobStatus& job = jobs->front();
  const bool alive =
      job.state == JobState::kRunning || job.state == JobState::kSuspended;
  const bool there = std::find(job.nodes.begin(), job.nodes.end(),
                               action.node) != job.nodes.end();
  if (!alive || !there)
    return absl::FailedPreconditionError(absl::StrCat(
        "refused: job ", action.job, " does not run on node ", action.node,
        " (the scheduler says ", std::string(JobStateName(job.state)),
        job.nodes.empty() ? "" : " on ", absl::StrJoin(job.nodes, ","),
        "); the node's claim that it does is not trusted"));
  *note = absl::StrCat("# checked: job ", action.job, " is ", std::string(scheduler_.Name()),
                       " job ", job.job_id, ", ", std::string(JobStateName(job.state)), " on ",
                       action.node, "\n");
  // Act on that one job, never on every job that shares its name.
  action.job = job.job_id;
  return absl::OkStatus();
}

WebhookReply ActionHandler::Act(ActionRequest action) {
  std::string note;
  absl::Status checked = CheckJobOnNode(action, &note);
  absl::StatusOr<ActionOutcome> outcome =
      checked.ok() ? Perform(scheduler_, action)
                   : absl::StatusOr<ActionOutcome>(checked);
  WebhookReply reply;
  if (outcome.ok()) {
    reply.body = {{"id", action.id},
                  {"status", "done"},
                  {"detail", note + outcome->detail}};
    if (!outcome->checkpoint.empty()) reply.body["checkpoint"] = outcome->checkpoint;
    return reply;
  }
  std::string message(outcome.status().message());
  switch (outcome.status().code()) {
    case absl::StatusCode::kInvalidArgument:
      reply.http_status = 400;
      reply.body = {{"id", action.id}, {"error", message}};
      break;
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      reply.http_status = 422;
      reply.body = {{"id", action.id}, {"status", "failed"}, {"detail", message}};
      break;
    default:
      reply.http_status = 502;
      reply.body = {{"id", action.id}, {"status", "failed"}, {"detail", message}};
      break;
  }
  return reply;
}

WebhookReply ActionHandler::Handle(const WebhookRequest& request) {
  double now = clock_.Now();
  json record = {{"ts", now},
                 {"time", Rfc3339(now)},
                 {"remote", request.remote},
                 {"idempotency_key", request.idempotency_key}};
  record.update(BodyFields(request.body));
  if (absl::Status verified =
          VerifyWebhook(options_.secret, request.timestamp, request.signature,
                        request.body, now, options_.replay_window_seconds);
      !verified.ok()) {
    record["verified"] = false;
    return Refuse(401, absl::StrCat("signature refused: ", verified.message()), record);
  }
  record["verified"] = true;
  if (!IsJsonContentType(request.content_type)) {
    return Refuse(400, absl::StrCat("Content-Type must be application/json, not '",
                                    request.content_type, "'"),
                  record);
  }
  absl::StatusOr<ActionRequest> action =
      ParseActionRequest(request.body, options_.default_checkpoint_timeout_seconds);
  if (!action.ok()) return Refuse(400, std::string(action.status().message()), record);
  action->received_at = now;
  // Key order and spacing do not make a different body.
  std::string body_sha256 =
      HexEncode(Sha256(json::parse(request.body, nullptr, false).dump()));
  record["body_sha256"] = body_sha256;

  std::shared_ptr<Attempt> attempt;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto known = body_hashes_.find(action->id);
    if (known != body_hashes_.end() && known->second != body_sha256) {
      lock.unlock();
      return Refuse(409,
                    absl::StrCat("id ", action->id,
                                 " was already used for a different request"),
                    record);
    }
    WebhookReply earlier;
    if (auto done = answers_.find(action->id); done != answers_.end()) {
      earlier.body = done->second.response;
    } else if (auto running = in_flight_.find(action->id); running != in_flight_.end()) {
      std::shared_ptr<Attempt> other = running->second;
      attempt_finished_.wait(lock, [&] { return other->finished; });
      earlier = other->reply;
    } else {
      attempt = std::make_shared<Attempt>();
      in_flight_[action->id] = attempt;
      body_hashes_[action->id] = body_sha256;
    }
    if (!attempt) {
      lock.unlock();
      earlier.replayed = true;
      record["result"] = "replayed";
      record["http_status"] = earlier.http_status;
      AuditOrWarn(record);
      return earlier;
    }
  }

  // Nothing is done that the audit log cannot record.
  record["result"] = "started";
  WebhookReply reply;
  if (absl::Status s = Audit(record); !s.ok()) {
    reply.http_status = 503;
    reply.body = {{"id", action->id}, {"error", std::string(s.message())}};
  } else {
    reply = Act(*action);
    record["http_status"] = reply.http_status;
    if (reply.http_status == 200) {
      record["result"] = "done";
      record["response"] = reply.body;
    } else if (reply.http_status == 400) {
      record["result"] = "refused";
      record["error"] = reply.body.value("error", "");
    } else {
      record["result"] = "failed";
      record["detail"] = reply.body.value("detail", "");
    }
    record["ts"] = clock_.Now();
    record["time"] = Rfc3339(record["ts"].get<double>());
    AuditOrWarn(record);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (reply.http_status == 200) {
    answers_[action->id] = StoredAnswer{body_sha256, reply.body};
  } else if (reply.http_status == 503) {
    body_hashes_.erase(action->id);  // never accepted
  }
  in_flight_.erase(action->id);
  attempt->finished = true;
  attempt->reply = reply;
  attempt_finished_.notify_all();
  return reply;
}

}  // namespace vigil::actuator
