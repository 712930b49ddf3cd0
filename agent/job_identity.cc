#include "agent/job_identity.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/command_runner.h"

namespace vigil::agent {
namespace {

constexpr double kCommandTimeoutSeconds = 10;

absl::string_view Absl(std::string_view s) { return {s.data(), s.size()}; }

bool AllDigits(absl::string_view s) {
  return !s.empty() && s.size() <= 20 &&
         s.find_first_not_of("0123456789") == std::string_view::npos;
}

// A Kubernetes pod UID: 32 hex digits in 8-4-4-4-12 groups, with '-' or
// (systemd cgroup driver) '_' between them. Returned with '-'.
std::optional<std::string> PodUid(absl::string_view s) {
  if (s.size() != 36) return std::nullopt;
  std::string uid(s);
  for (size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash) {
      if (uid[i] != '-' && uid[i] != '_') return std::nullopt;
      uid[i] = '-';
    } else if (!absl::ascii_isxdigit(static_cast<unsigned char>(uid[i]))) {
      return std::nullopt;
    }
  }
  return absl::AsciiStrToLower(uid);
}

// The job of one cgroup path ("/slurm/uid_1000/job_42/step_0").
std::optional<ProcessJob> JobFromPath(absl::string_view path,
                                      std::optional<uint32_t>* uid) {
  bool slurm = false;
  bool kubepods = false;
  std::optional<uint32_t> path_uid;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (absl::StartsWith(part, "slurm")) slurm = true;
    if (absl::StartsWith(part, "kubepods")) kubepods = true;
    if (slurm) {
      uint32_t n = 0;
      if (absl::ConsumePrefix(&part, "uid_") && absl::SimpleAtoi(part, &n)) {
        path_uid = n;
      } else if (absl::ConsumePrefix(&part, "job_") && AllDigits(part)) {
        if (uid != nullptr) *uid = path_uid;
        return ProcessJob{"slurm", std::string(part), ""};
      }
    }
    if (kubepods) {
      // cgroupfs: "pod<uid>"; systemd: "kubepods-burstable-pod<uid>.slice".
      absl::string_view rest = part;
      absl::ConsumeSuffix(&rest, ".slice");
      size_t pod = rest.rfind("pod");
      if (pod != absl::string_view::npos &&
          (pod == 0 || rest[pod - 1] == '-')) {
        if (std::optional<std::string> id = PodUid(rest.substr(pod + 3)))
          return ProcessJob{"kubernetes", *id, ""};
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

SchedulerCommand DefaultRun() {
  return [](const std::vector<std::string>& argv)
             -> absl::StatusOr<std::string> {
    CommandOptions options;
    options.timeout_seconds = kCommandTimeoutSeconds;
    absl::StatusOr<CommandResult> result =
        RunCommand(argv, options, *RealClock());
    if (!result.ok()) return result.status();
    if (result->exit_code != 0)
      return absl::UnavailableError(
          absl::StrCat(CommandLine(argv), " exited with ", result->exit_code,
                       ": ", absl::StripAsciiWhitespace(result->err)));
    return result->out;
  };
}

}  // namespace

std::optional<ProcessJob> JobFromCgroup(std::string_view cgroup_text,
                                        std::optional<uint32_t>* cgroup_uid) {
  std::optional<ProcessJob> found;
  std::optional<uint32_t> found_uid;
  for (absl::string_view line : absl::StrSplit(Absl(cgroup_text), '\n')) {
    // "hierarchy-ID:controller-list:cgroup-path"
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    std::optional<uint32_t> uid;
    std::optional<ProcessJob> job = JobFromPath(fields[2], &uid);
    if (!job) continue;
    if (found && (found->scheduler != job->scheduler ||
                  found->job_id != job->job_id)) {
      return std::nullopt;  // two different jobs: trust neither
    }
    if (!found || (!found_uid && uid)) found_uid = uid;
    found = std::move(job);
  }
  if (found && cgroup_uid != nullptr) *cgroup_uid = found_uid;
  return found;
}

std::optional<std::string> JobFromPidinfo(std::string_view output) {
  // "Slurm JobId=42 ends at ..." (Slurm 22 and later) or "Slurm job id 42
  // ends at ..." (earlier).
  for (std::string_view says : {"Slurm JobId=", "Slurm job id "}) {
    size_t at = output.find(says);
    if (at == std::string_view::npos) continue;
    absl::string_view rest = Absl(output.substr(at + says.size()));
    absl::string_view id =
        rest.substr(0, rest.find_first_not_of("0123456789"));
    if (AllDigits(id)) return std::string(id);
  }
  return std::nullopt;
}

absl::StatusOr<SlurmJobInfo> ParseSqueueJob(std::string_view output) {
  absl::string_view text = absl::StripAsciiWhitespace(Absl(output));
  if (text.empty()) return absl::NotFoundError("squeue lists no such job");
  absl::string_view line = text.substr(0, text.find('\n'));
  std::vector<absl::string_view> fields =
      absl::StrSplit(line, absl::MaxSplits('|', 2));
  SlurmJobInfo info;
  if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &info.uid) ||
      fields[1].empty())
    return absl::InvalidArgumentError(
        absl::StrCat("squeue printed '", line, "', not UID|STATE|NAME"));
  info.state = std::string(fields[1]);
  info.name = std::string(fields[2]);
  return info;
}

SchedulerJobResolver::SchedulerJobResolver(SchedulerJobResolverOptions options)
    : options_([&] {
        if (!options.run) options.run = DefaultRun();
        return std::move(options);
      }()),
      clock_(options_.clock != nullptr ? options_.clock : RealClock()) {}

absl::StatusOr<SlurmJobInfo> SchedulerJobResolver::SlurmJob(
    const std::string& job_id) {
  const double now = clock_->Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end() && now - it->second.at < options_.cache_seconds)
      return it->second.info;
  }
  absl::StatusOr<std::string> out =
      options_.run({"squeue", "-h", "-j", job_id, "-o", "%U|%T|%j"});
  if (!out.ok()) {
    // squeue exits non-zero for a job it no longer knows.
    if (absl::StrContains(out.status().message(), "Invalid job id"))
      return absl::NotFoundError(
          absl::StrCat("Slurm does not know job ", job_id));
    return absl::UnavailableError(absl::StrCat(
        "cannot ask Slurm about job ", job_id, ": ", out.status().message()));
  }
  absl::StatusOr<SlurmJobInfo> info = ParseSqueueJob(*out);
  if (!info.ok()) {
    if (absl::IsNotFound(info.status()))
      return absl::NotFoundError(
          absl::StrCat("Slurm does not know job ", job_id));
    return absl::UnavailableError(info.status().message());
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Jobs come and go; a node never runs many at once.
  if (jobs_.size() > 1024) jobs_.clear();
  jobs_[job_id] = Cached{now, *info};
  return info;
}

absl::StatusOr<ProcessJob> SchedulerJobResolver::Resolve(pid_t pid,
                                                         uid_t uid) {
  if (pid <= 0)
    return absl::NotFoundError("the connection's process is unknown");
  std::optional<ProcessJob> job;
  std::optional<uint32_t> cgroup_uid;
  const std::string cgroup_file =
      absl::StrCat(options_.proc_root, "/", pid, "/cgroup");
  if (std::optional<std::string> text = ReadSmallFile(cgroup_file))
    job = JobFromCgroup(*text, &cgroup_uid);
  if (job && job->scheduler == "kubernetes") return *job;
  if (!job) {
    absl::StatusOr<std::string> out =
        options_.run({"scontrol", "pidinfo", absl::StrCat(pid)});
    if (out.ok()) {
      if (std::optional<std::string> id = JobFromPidinfo(*out))
        job = ProcessJob{"slurm", *id, ""};
    } else if (!absl::StrContains(out.status().message(),
                                  "Failed to locate job") &&
               !absl::IsNotFound(out.status())) {
      // scontrol missing (kNotFound) means no Slurm here; anything else
      // is a Slurm that could not answer.
      return absl::UnavailableError(absl::StrCat(
          "cannot ask Slurm about pid ", pid, ": ", out.status().message()));
    }
  }
  if (!job)
    return absl::NotFoundError(
        absl::StrCat("process ", pid, " runs in no Slurm job or pod"));
  if (uid != 0 && cgroup_uid && *cgroup_uid != uid)
    return absl::PermissionDeniedError(
        absl::StrCat("process ", pid, " (uid ", uid, ") is in the cgroup of uid ",
                     *cgroup_uid, "'s job ", job->job_id));
  absl::StatusOr<SlurmJobInfo> info = SlurmJob(job->job_id);
  if (!info.ok()) {
    if (absl::IsNotFound(info.status()))
      return absl::PermissionDeniedError(info.status().message());
    return info.status();
  }
  if (uid != 0 && info->uid != uid)
    return absl::PermissionDeniedError(
        absl::StrCat("Slurm job ", job->job_id, " belongs to uid ", info->uid,
                     ", not to uid ", uid, " (process ", pid, ")"));
  if (info->state != "RUNNING" && info->state != "COMPLETING")
    return absl::PermissionDeniedError(absl::StrCat(
        "Slurm job ", job->job_id, " is ", info->state, ", not running"));
  job->job_name = info->name;
  return *job;
}

}  // namespace vigil::agent
