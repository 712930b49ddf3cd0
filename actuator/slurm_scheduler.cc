#include "actuator/slurm_scheduler.h"

#include <sys/stat.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace vigil::actuator {
namespace {

constexpr size_t kMaxNameLength = 128;
constexpr size_t kMaxReasonLength = 256;
// File timestamps come from a coarse kernel clock (and some filesystems
// keep whole or even two seconds), so a confirmation written right after
// the request may carry an mtime slightly before it.
constexpr double kMtimeSlackSeconds = 1.0;

// What Slurm prints when a job or node does not exist.
bool SaysUnknown(std::string_view err) {
  for (std::string_view says : {"Invalid job id", "Invalid node name", "not found"}) {
    if (err.find(says) != std::string_view::npos) return true;
  }
  return false;
}

bool IsJobId(std::string_view job) {
  return !job.empty() && job.size() <= 20 &&
         std::all_of(job.begin(), job.end(), absl::ascii_isdigit);
}

// squeue's %i: "123", "123_4", or a pending array "123_[1-5,7]".
bool IsListedJobId(std::string_view id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isdigit(c) || c == '_' || c == '[' || c == ']' ||
           c == '-' || c == ',';
  });
}

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> lines;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) lines.emplace_back(line);
  }
  return lines;
}

// `text` on one line, without control characters.
std::string OneLine(std::string_view text) {
  std::string line(text);
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return line;
}

std::string DrainReason(const ActionRequest& request) {
  std::string reason = "vigil";
  if (!request.incident_id.empty()) {
    absl::StrAppend(&reason, " ", OneLine(request.incident_id));
  }
  if (!request.reason.empty()) {
    absl::StrAppend(&reason, ": ", OneLine(request.reason));
  }
  if (reason.size() > kMaxReasonLength) reason.resize(kMaxReasonLength);
  return reason;
}

}  // namespace

// The commands run for one action and what they printed, in order.
class SlurmScheduler::Transcript {
 public:
  void Add(const std::vector<std::string>& argv, const CommandResult& result) {
    absl::StrAppend(&text_, "$ ", CommandLine(argv), "\n");
    AppendBlock(result.out, "");
    AppendBlock(result.err, "stderr: ");
    if (result.exit_code != 0) {
      absl::StrAppend(&text_, "exit status ", result.exit_code, "\n");
    }
  }
  void Note(std::string_view line) { absl::StrAppend(&text_, "# ", std::string(line), "\n"); }
  // `code` with the transcript so far and `error` as the message.
  absl::Status Error(absl::StatusCode code, absl::string_view error) const {
    return absl::Status(code, absl::StrCat(text_, error));
  }
  std::string text() const {
    return std::string(absl::StripTrailingAsciiWhitespace(text_));
  }

 private:
  void AppendBlock(std::string_view block, std::string_view prefix) {
    absl::string_view trimmed = absl::StripTrailingAsciiWhitespace(
        absl::string_view(block.data(), block.size()));
    if (trimmed.empty()) return;
    absl::StrAppend(&text_, std::string(prefix), trimmed, "\n");
  }

  std::string text_;
};

absl::Status ValidateSlurmName(std::string_view what, std::string_view name) {
  bool ok = !name.empty() && name.size() <= kMaxNameLength && name[0] != '-' &&
            std::all_of(name.begin(), name.end(), [](char c) {
              return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
            });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(what), " '", OneLine(name), "' is not a valid Slurm name (1 to ",
      kMaxNameLength, " of A-Z a-z 0-9 . _ -, not starting with '-')"));
}

SlurmScheduler::SlurmScheduler(SlurmOptions options, Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

absl::StatusOr<CommandResult> SlurmScheduler::Run(
    const std::vector<std::string>& argv, Transcript& transcript,
    std::string_view tolerated) {
  CommandOptions command_options;
  command_options.timeout_seconds = options_.command_timeout_seconds;
  absl::StatusOr<CommandResult> result = RunCommand(argv, command_options, clock_);
  if (!result.ok()) {
    transcript.Note(absl::StrCat("$ ", CommandLine(argv)));
    // A missing client program is a broken installation, not a missing job.
    absl::StatusCode code = result.status().code() == absl::StatusCode::kNotFound
                                ? absl::StatusCode::kUnavailable
                                : result.status().code();
    return transcript.Error(code, result.status().message());
  }
  transcript.Add(argv, *result);
  if (result->exit_code != 0 &&
      (tolerated.empty() || result->err.find(tolerated) == std::string::npos)) {
    absl::StatusCode code = SaysUnknown(result->err)
                                ? absl::StatusCode::kNotFound
                                : absl::StatusCode::kUnavailable;
    return transcript.Error(code, absl::StrCat(argv[0], " failed"));
  }
  return result;
}

absl::StatusOr<std::vector<std::string>> SlurmScheduler::ResolveJob(
    const std::string& job, Transcript& transcript) {
  VIGIL_RETURN_IF_ERROR(ValidateSlurmName("job", job));
  if (IsJobId(job)) return std::vector<std::string>{job};
  VIGIL_ASSIGN_OR_RETURN(
      CommandResult listed,
      Run({options_.squeue, "-h", absl::StrCat("--name=", job), "-o", "%i"},
          transcript));
  std::vector<std::string> ids = Lines(listed.out);
  if (ids.empty()) {
    return transcript.Error(absl::StatusCode::kNotFound,
                            absl::StrCat("no Slurm job named ", job));
  }
  for (const std::string& id : ids) {
    if (!IsListedJobId(id)) {
      return transcript.Error(absl::StatusCode::kInternal,
                              absl::StrCat("squeue listed an unexpected job id '",
                                           OneLine(id), "'"));
    }
  }
  return ids;
}

absl::Status SlurmScheduler::PauseJobId(const std::string& job_id,
                                        Transcript& transcript) {
  VIGIL_ASSIGN_OR_RETURN(
      CommandResult listed,
      Run({options_.squeue, "-h", "-j", job_id, "-o", "%T"}, transcript));
  std::vector<std::string> lines = Lines(listed.out);
  std::set<std::string> states(lines.begin(), lines.end());
  if (states.empty()) {
    return transcript.Error(absl::StatusCode::kNotFound,
                            absl::StrCat("Slurm has no job ", job_id));
  }
  bool acted = false;
  if (states.count("RUNNING")) {
    VIGIL_RETURN_IF_ERROR(Run({options_.scontrol, "suspend", job_id}, transcript).status());
    acted = true;
  }
  if (states.count("PENDING")) {
    VIGIL_RETURN_IF_ERROR(Run({options_.scontrol, "hold", job_id}, transcript).status());
    acted = true;
  }
  if (acted) return absl::OkStatus();
  if (states == std::set<std::string>{"SUSPENDED"}) {
    transcript.Note(absl::StrCat("job ", job_id, " is already suspended"));
    return absl::OkStatus();
  }
  return transcript.Error(
      absl::StatusCode::kFailedPrecondition,
      absl::StrCat("job ", job_id, " is ", absl::StrJoin(states, ","),
                   "; only running or pending jobs can be paused"));
}

bool SlurmScheduler::WaitForCheckpoints(const std::vector<std::string>& job_ids,
                                        double since, double deadline) {
  std::mutex mu;
  std::condition_variable never_notified;
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    bool all_confirmed = true;
    for (const std::string& id : job_ids) {
      std::string path =
          absl::StrCat(options_.checkpoint_dir, "/", id, ".checkpointed");
      struct stat info;
      bool confirmed =
          stat(path.c_str(), &info) == 0 &&
          info.st_mtim.tv_sec + info.st_mtim.tv_nsec * 1e-9 >=
              since - kMtimeSlackSeconds;
      all_confirmed = all_confirmed && confirmed;
    }
    if (all_confirmed) return true;
    double now = clock_.Now();
    if (now >= deadline) return false;
    clock_.WaitUntil(lock, never_notified,
                     std::min(now + options_.checkpoint_poll_seconds, deadline));
  }
}

absl::StatusOr<ActionOutcome> SlurmScheduler::CheckpointThenPause(
    const ActionRequest& request) {
  Transcript transcript;
  VIGIL_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                         ResolveJob(request.job, transcript));
  for (const std::string& id : ids) {
    VIGIL_RETURN_IF_ERROR(
        Run({options_.scancel,
             absl::StrCat("--signal=", options_.checkpoint_signal), "--full", id},
            transcript)
            .status());
  }
  std::vector<std::string> files;
  for (const std::string& id : ids) {
    files.push_back(absl::StrCat(options_.checkpoint_dir, "/", id, ".checkpointed"));
  }
  transcript.Note(absl::StrCat("waiting up to ", request.checkpoint_timeout_seconds,
                               " s for ", absl::StrJoin(files, ", ")));
  bool confirmed = WaitForCheckpoints(
      ids, request.received_at, clock_.Now() + request.checkpoint_timeout_seconds);
  transcript.Note(confirmed ? "checkpoint confirmed"
                            : "no checkpoint confirmation in time; pausing anyway");
  for (const std::string& id : ids) {
    VIGIL_RETURN_IF_ERROR(PauseJobId(id, transcript));
  }
  return ActionOutcome{transcript.text(), confirmed ? "confirmed" : "timed_out"};
}

absl::StatusOr<ActionOutcome> SlurmScheduler::Pause(const ActionRequest& request) {
  Transcript transcript;
  VIGIL_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                         ResolveJob(request.job, transcript));
  for (const std::string& id : ids) {
    VIGIL_RETURN_IF_ERROR(PauseJobId(id, transcript));
  }
  return ActionOutcome{transcript.text(), ""};
}

absl::StatusOr<ActionOutcome> SlurmScheduler::UpdateNode(
    const ActionRequest& request, bool drain) {
  VIGIL_RETURN_IF_ERROR(ValidateSlurmName("node", request.node));
  Transcript transcript;
  std::vector<std::string> argv = {options_.scontrol, "update",
                                   absl::StrCat("NodeName=", request.node)};
  if (drain) {
    argv.push_back("State=DRAIN");
    argv.push_back(absl::StrCat("Reason=", DrainReason(request)));
  } else {
    argv.push_back("State=RESUME");
  }
  // Resuming a node that is not drained fails with this; it is the state
  // asked for, so uncordoning twice succeeds.
  VIGIL_RETURN_IF_ERROR(
      Run(argv, transcript, drain ? "" : "Invalid node state specified").status());
  return ActionOutcome{transcript.text(), ""};
}

absl::StatusOr<ActionOutcome> SlurmScheduler::Cordon(const ActionRequest& request) {
  return UpdateNode(request, /*drain=*/true);
}

absl::StatusOr<ActionOutcome> SlurmScheduler::Uncordon(
    const ActionRequest& request) {
  return UpdateNode(request, /*drain=*/false);
}

absl::StatusOr<ActionOutcome> SlurmScheduler::Report(const ActionRequest& request) {
  if (request.node.empty() && request.job.empty()) {
    return absl::InvalidArgumentError("a report needs a job or a node");
  }
  if (!request.node.empty()) {
    VIGIL_RETURN_IF_ERROR(ValidateSlurmName("node", request.node));
  }
  if (!request.job.empty()) {
    VIGIL_RETURN_IF_ERROR(ValidateSlurmName("job", request.job));
  }
  Transcript transcript;
  if (!request.node.empty()) {
    VIGIL_RETURN_IF_ERROR(
        Run({options_.scontrol, "show", "node", request.node}, transcript).status());
  }
  if (!request.job.empty()) {
    VIGIL_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                           ResolveJob(request.job, transcript));
    for (const std::string& id : ids) {
      VIGIL_RETURN_IF_ERROR(
          Run({options_.scontrol, "show", "job", id}, transcript).status());
    }
  }
  return ActionOutcome{transcript.text(), ""};
}

}  // namespace vigil::actuator
