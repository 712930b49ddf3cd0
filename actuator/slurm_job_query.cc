// SlurmScheduler::QueryJobs: job states from squeue, one call for all the
// ids and one for all the names of a query.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "actuator/hostlist.h"
#include "actuator/slurm_scheduler.h"
#include "common/status_macros.h"

namespace vigil::actuator {
namespace {

// One row per job or array element: raw id, array base id, array index
// ("N/A" outside arrays), the id as users write it, state, submit time, end
// time, user, nodes, and the name last (the only field that may hold '|').
constexpr char kFormat[] = "%A|%F|%K|%i|%T|%V|%e|%u|%N|%j";
constexpr int kFields = 10;
// Prints %V and %e as Unix seconds.
constexpr char kTimeFormat[] = "SLURM_TIME_FORMAT=%s";
// squeue filters that the actuator's environment must not add to a query:
// a job they hid would be answered not_found.
constexpr const char* kUnsetFilters[] = {
    "SQUEUE_ACCOUNT", "SQUEUE_NAMES", "SQUEUE_PARTITION", "SQUEUE_QOS",
    "SQUEUE_STATES",  "SQUEUE_USERS", "SQUEUE_LICENSES",  "SQUEUE_FORMAT",
    "SQUEUE_FORMAT2", "SQUEUE_SORT"};
// squeue -j takes ids up to INT32_MAX ("Invalid job id" above, for the
// whole list); Slurm makes none above NO_VAL - 1.
constexpr uint64_t kMaxSqueueJobId = 2147483647;
constexpr uint64_t kMaxJobId = 4294967293;
// A query's output is a row per job (or array element) asked for.
constexpr size_t kMaxOutputBytes = 16 << 20;

bool AllDigits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
}

std::optional<uint64_t> Number(std::string_view text) {
  if (!AllDigits(text) || text.size() > 19) return std::nullopt;
  uint64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// A job asked for by id: "123" (a job, or every element of array 123) or
// "123_4" (one element).
struct IdQuery {
  uint64_t id = 0;
  std::optional<uint64_t> task;
};

// Digits as a number; UINT64_MAX (no job has that id) when too long.
uint64_t IdNumber(std::string_view digits) {
  return Number(digits).value_or(UINT64_MAX);
}

// `job` as an id query, or nullopt when it is a name.
std::optional<IdQuery> ParseIdQuery(std::string_view job) {
  size_t underscore = job.find('_');
  std::string_view id = job.substr(0, underscore);
  if (!AllDigits(id)) return std::nullopt;
  IdQuery query{IdNumber(id), std::nullopt};
  if (underscore != std::string_view::npos) {
    std::string_view task = job.substr(underscore + 1);
    if (!AllDigits(task)) return std::nullopt;
    query.task = IdNumber(task);
  }
  return query;
}

struct Row {
  uint64_t raw_id = 0;
  uint64_t base_id = 0;
  std::optional<uint64_t> task;
  std::string display_id;
  std::string state;
  double submitted = 0;
  std::optional<double> ended;
  std::string user;
  std::vector<std::string> nodes;
  std::string name;
};

std::optional<double> Seconds(std::string_view text) {
  std::optional<uint64_t> value = Number(text);
  if (!value || *value == 0) return std::nullopt;
  return static_cast<double>(*value);
}

absl::StatusOr<Row> ParseRow(std::string_view line) {
  std::vector<std::string_view> fields;
  for (absl::string_view field : absl::StrSplit(absl::string_view(line.data(), line.size()),
                                                absl::MaxSplits('|', kFields - 1))) {
    fields.emplace_back(field.data(), field.size());
  }
  auto bad = [&](std::string_view why) {
    return absl::InternalError(absl::StrCat("squeue printed an unexpected line (", std::string(why),
                                            "): ", std::string(line.substr(0, 300))));
  };
  if (fields.size() != kFields) return bad("not 10 fields");
  Row row;
  std::optional<uint64_t> raw = Number(fields[0]);
  std::optional<uint64_t> base = Number(fields[1]);
  if (!raw || !base) return bad("job id");
  row.raw_id = *raw;
  row.base_id = *base;
  if (fields[2] != "N/A") {
    row.task = Number(fields[2]);
    if (!row.task) return bad("array index");
  }
  row.display_id = std::string(fields[3]);
  row.state = std::string(fields[4]);
  if (row.state.empty()) return bad("state");
  row.submitted = Seconds(fields[5]).value_or(0);
  row.ended = Seconds(fields[6]);
  row.user = std::string(fields[7]);
  std::string_view nodes = fields[8];
  if (nodes != "(null)" && nodes != "None assigned") {
    absl::StatusOr<std::vector<std::string>> expanded = ExpandHostlist(nodes);
    if (!expanded.ok()) {
      return bad(std::string_view(expanded.status().message().data(),
                                  expanded.status().message().size()));
    }
    row.nodes = std::move(*expanded);
  }
  row.name = std::string(fields[9]);
  return row;
}

// Alive first: a job with one element running runs.
int Rank(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return 0;
    case JobState::kSuspended:
      return 1;
    case JobState::kPending:
      return 2;
    case JobState::kUnknown:
      return 3;
    case JobState::kEnded:
      return 4;
    case JobState::kNotFound:
      return 5;
  }
  return 5;
}

// The answer for `job` from the rows of one job (several for an array).
JobStatus Summarize(const std::string& job, std::vector<const Row*> rows) {
  JobStatus status;
  status.job = job;
  if (rows.empty()) return status;
  std::sort(rows.begin(), rows.end(), [](const Row* a, const Row* b) {
    return std::tuple(a->base_id, a->task.value_or(0), a->raw_id) <
           std::tuple(b->base_id, b->task.value_or(0), b->raw_id);
  });
  const Row* first = nullptr;
  status.state = JobState::kNotFound;
  for (const Row* row : rows) {
    JobState state = SlurmJobState(row->state);
    if (first == nullptr || Rank(state) < Rank(status.state)) {
      first = row;
      status.state = state;
    }
  }
  status.job_id = rows.size() == 1 ? first->display_id : absl::StrCat(first->base_id);
  status.name = first->name;
  status.scheduler_state = first->state;
  status.user = first->user;
  std::set<std::string> nodes;
  for (const Row* row : rows) {
    if (SlurmJobState(row->state) != status.state) continue;
    nodes.insert(row->nodes.begin(), row->nodes.end());
    if (status.state == JobState::kEnded && row->ended) {
      status.end_time = std::max(status.end_time.value_or(0), *row->ended);
    }
  }
  status.nodes.assign(nodes.begin(), nodes.end());
  return status;
}

}  // namespace

JobState SlurmJobState(std::string_view state) {
  static const auto* const kStates = new std::map<std::string_view, JobState>{
      {"RUNNING", JobState::kRunning},
      {"CONFIGURING", JobState::kRunning},
      {"RESIZING", JobState::kRunning},
      {"SIGNALING", JobState::kRunning},
      {"SUSPENDED", JobState::kSuspended},
      {"STOPPED", JobState::kSuspended},
      {"PENDING", JobState::kPending},
      {"REQUEUED", JobState::kPending},
      {"REQUEUE_HOLD", JobState::kPending},
      {"REQUEUE_FED", JobState::kPending},
      {"RESV_DEL_HOLD", JobState::kPending},
      {"COMPLETING", JobState::kEnded},
      {"STAGE_OUT", JobState::kEnded},
      {"COMPLETED", JobState::kEnded},
      {"CANCELLED", JobState::kEnded},
      {"FAILED", JobState::kEnded},
      {"TIMEOUT", JobState::kEnded},
      {"PREEMPTED", JobState::kEnded},
      {"NODE_FAIL", JobState::kEnded},
      {"OUT_OF_MEMORY", JobState::kEnded},
      {"BOOT_FAIL", JobState::kEnded},
      {"DEADLINE", JobState::kEnded},
      {"SPECIAL_EXIT", JobState::kEnded},
      {"REVOKED", JobState::kEnded},
  };
  auto it = kStates->find(state);
  return it == kStates->end() ? JobState::kUnknown : it->second;
}

absl::StatusOr<std::vector<JobStatus>> SlurmScheduler::QueryJobs(
    const std::vector<std::string>& jobs) {
  // Sort the asked jobs into ids and names; refuse what cannot be passed on.
  std::vector<std::optional<IdQuery>> ids(jobs.size());
  std::set<uint64_t> asked_ids;
  std::set<std::string> asked_names;
  bool filter_ids = true;
  for (size_t i = 0; i < jobs.size(); ++i) {
    ids[i] = ParseIdQuery(jobs[i]);
    if (ids[i]) {
      if (ids[i]->id == 0 || ids[i]->id > kMaxJobId) continue;  // cannot exist
      asked_ids.insert(ids[i]->id);
      filter_ids = filter_ids && ids[i]->id <= kMaxSqueueJobId;
      continue;
    }
    VIGIL_RETURN_IF_ERROR(ValidateSlurmName("job", jobs[i]));
    asked_names.insert(jobs[i]);
  }

  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> squeue = {options_.squeue, "-h", "-a", "-r", "-t", "all",
                                     "-o", kFormat};
  if (!asked_ids.empty()) {
    commands.push_back(squeue);
    // Without -j (ids squeue -j refuses): every job, matched here.
    if (filter_ids) {
      commands.back().push_back(absl::StrCat("--jobs=", absl::StrJoin(asked_ids, ",")));
    }
  }
  if (!asked_names.empty()) {
    commands.push_back(squeue);
    commands.back().push_back(absl::StrCat("--name=", absl::StrJoin(asked_names, ",")));
  }
  CommandOptions command_options;
  command_options.timeout_seconds = options_.command_timeout_seconds;
  command_options.max_output_bytes = kMaxOutputBytes;
  command_options.environment = {kTimeFormat};
  for (const char* name : kUnsetFilters) command_options.environment.push_back(name);

  std::vector<Row> rows;
  // A job asked for by id and by name is listed by both commands. Pending
  // array elements share the raw id, so the index is part of the key.
  std::set<std::pair<uint64_t, std::optional<uint64_t>>> listed;
  for (const std::vector<std::string>& argv : commands) {
    absl::StatusOr<CommandResult> result = RunCommand(argv, command_options, clock_);
    if (!result.ok()) {
      // A missing program is a broken installation, not a missing job.
      return absl::UnavailableError(
          absl::StrCat("$ ", CommandLine(argv), "\n", result.status().message()));
    }
    std::string err(absl::StripTrailingAsciiWhitespace(result->err));
    // One unknown id: squeue says so and fails (with several it just lists
    // the others).
    bool unknown_id = asked_ids.size() == 1 && filter_ids &&
                      result->exit_code == 1 && argv.back().starts_with("--jobs=") &&
                      err.find("Invalid job id specified") != std::string::npos;
    if (unknown_id) continue;
    if (result->exit_code != 0 || result->truncated) {
      return absl::UnavailableError(absl::StrCat(
          "$ ", CommandLine(argv), "\n", err.empty() ? "" : absl::StrCat("stderr: ", err, "\n"),
          result->truncated ? absl::StrCat("output over ", kMaxOutputBytes, " bytes\n") : "",
          "exit status ", result->exit_code, "\n", argv[0], " failed"));
    }
    for (absl::string_view line : absl::StrSplit(result->out, '\n')) {
      line = absl::StripTrailingAsciiWhitespace(line);
      if (line.empty()) continue;
      VIGIL_ASSIGN_OR_RETURN(Row row, ParseRow(std::string_view(line.data(), line.size())));
      if (listed.insert({row.raw_id, row.task}).second) rows.push_back(std::move(row));
    }
  }

  // Rows by the ids they answer for (their own, and their array's) and by
  // name and job, so a long query over a long listing stays linear.
  std::map<uint64_t, std::vector<const Row*>> by_id;
  std::map<std::string, std::map<uint64_t, std::vector<const Row*>>> by_name;
  for (const Row& row : rows) {
    by_id[row.raw_id].push_back(&row);
    if (row.base_id != row.raw_id) by_id[row.base_id].push_back(&row);
    by_name[row.name][row.base_id].push_back(&row);
  }
  std::vector<JobStatus> answers;
  answers.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::vector<const Row*> matched;
    if (ids[i]) {
      auto listed_rows = by_id.find(ids[i]->id);
      if (listed_rows != by_id.end()) {
        for (const Row* row : listed_rows->second) {
          // "123_4": element 4 of array 123 only.
          if (!ids[i]->task || (row->base_id == ids[i]->id && row->task == ids[i]->task)) {
            matched.push_back(row);
          }
        }
      }
      answers.push_back(Summarize(jobs[i], std::move(matched)));
      continue;
    }
    // A name: the newest job of that name (an array counts as one job).
    auto named = by_name.find(jobs[i]);
    const std::vector<const Row*>* newest = nullptr;
    double newest_submitted = 0;
    if (named != by_name.end()) {
      for (const auto& [base_id, job_rows] : named->second) {
        double submitted = 0;
        for (const Row* row : job_rows) submitted = std::max(submitted, row->submitted);
        // Ties (the same second) go to the higher id, which came later.
        if (newest == nullptr || submitted >= newest_submitted) {
          newest = &job_rows;
          newest_submitted = submitted;
        }
      }
    }
    answers.push_back(Summarize(jobs[i], newest ? *newest : std::vector<const Row*>()));
  }
  return answers;
}

}  // namespace vigil::actuator
