// ActionGate: dry-run, approval and the circuit breaker for automatic
// actions.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "escalation/escalation.h"
#include "escalation/json_checker.h"

namespace vigil {
namespace {

using escalation_internal::Element;
using escalation_internal::JsonChecker;
using escalation_internal::Member;
using json = nlohmann::json;

constexpr int kGateStateVersion = 1;

// "cordon node n3 of job llama", for reasons.
std::string Describe(const ActionRequest& r) {
  const std::string of_job =
      r.job.empty() ? std::string() : absl::StrCat(" of job ", r.job);
  if (r.action == "cordon_node")
    return absl::StrCat("cordon node ", r.node, of_job);
  if (r.action == "uncordon_node") {
    return absl::StrCat("uncordon node ", r.node, of_job);
  }
  if (r.action == "pause_job") return absl::StrCat("pause job ", r.job);
  if (r.action == "checkpoint_then_pause_job") {
    return absl::StrCat("checkpoint then pause job ", r.job);
  }
  if (r.action == "diagnostic_report") {
    return absl::StrCat("write a diagnostic report",
                        r.job.empty() ? "" : " for job ", r.job);
  }
  return absl::StrCat("run \"", r.action, "\"");
}

ActionDecision Decision(ActionVerdict verdict, std::string reason,
                        bool tripped = false) {
  return ActionDecision{verdict, std::move(reason), tripped};
}

}  // namespace

std::string_view ActionVerdictName(ActionVerdict verdict) {
  switch (verdict) {
    case ActionVerdict::kRun:
      return "run";
    case ActionVerdict::kDryRun:
      return "dry_run";
    case ActionVerdict::kNeedsApproval:
      return "needs_approval";
    case ActionVerdict::kHalted:
      return "halted";
  }
  return "unknown";
}

ActionGate::ActionGate(InterlockConfig config) : config_(std::move(config)) {}

bool ActionGate::tripped() const { return tripped_; }

void ActionGate::Prune(double now) {
  const double oldest = now - config_.window_seconds;
  for (std::deque<double>* times : {&cordon_times_, &pause_times_}) {
    while (!times->empty() && times->front() <= oldest) times->pop_front();
  }
}

ActionDecision ActionGate::Decide(const ActionRequest& request, int job_nodes,
                                  bool approved, double now, SharedBreaker* shared) {
  const std::string what = Describe(request);
  const std::string& action = request.action;
  if (action == "diagnostic_report" || action == "uncordon_node") {
    if (config_.dry_run) {
      return Decision(ActionVerdict::kDryRun,
                      absl::StrCat("dry run: would ", what));
    }
    if (action == "uncordon_node") {
      for (auto it = cordoned_.begin(); it != cordoned_.end();) {
        it->second.erase(request.node);
        it = it->second.empty() ? cordoned_.erase(it) : std::next(it);
      }
    }
    return Decision(ActionVerdict::kRun, what);
  }
  const bool cordon = action == "cordon_node";
  if (!cordon && action != "pause_job" &&
      action != "checkpoint_then_pause_job") {
    return Decision(ActionVerdict::kHalted,
                    absl::StrCat("unknown action \"", action,
                                 "\": never run automatically"));
  }
  if (cordon && request.node.empty()) {
    return Decision(ActionVerdict::kHalted,
                    "cordon_node names no node: nothing to cordon");
  }
  if (tripped_) {
    return Decision(ActionVerdict::kHalted,
                    absl::StrCat("will not ", what,
                                 ": the circuit breaker is "
                                 "open (",
                                 trip_reason_, "); an admin must reset it"));
  }
  if (config_.dry_run) {
    return Decision(ActionVerdict::kDryRun,
                    absl::StrCat("dry run: would ", what));
  }
  if (!approved &&
      std::find(config_.approval_severities.begin(),
                config_.approval_severities.end(),
                request.severity) != config_.approval_severities.end()) {
    return Decision(ActionVerdict::kNeedsApproval,
                    absl::StrCat(what, " waits for a human approval: ",
                                 std::string(SeverityName(request.severity)),
                                 " actions need one"));
  }
  if (!approved && request.unverified_node) {
    return Decision(ActionVerdict::kNeedsApproval,
                    absl::StrCat(what,
                                 " waits for a human approval: the incident's node is "
                                 "named only by remote-written series (no agent streams "
                                 "it), which any remote_write token holder could send"));
  }
  if (!approved && !cordon && request.unverified_job) {
    return Decision(ActionVerdict::kNeedsApproval,
                    absl::StrCat(what,
                                 " waits for a human approval: no node running "
                                 "the job verified it with the scheduler (its "
                                 "agents only claim it)"));
  }
  Prune(now);
  return DecideBreaker(request, job_nodes, approved, now, shared);
}

void ActionGate::Trip(std::string reason) {
  tripped_ = true;
  trip_reason_ = std::move(reason);
}

ActionDecision ActionGate::DecideBreaker(const ActionRequest& request,
                                         int job_nodes, bool approved,
                                         double now, SharedBreaker* shared) {
  const std::string what = Describe(request);
  const double window_minutes = config_.window_seconds / 60;
  auto trip = [&](std::string reason) {
    tripped_ = true;
    trip_reason_ = reason;
    return Decision(ActionVerdict::kHalted, std::move(reason), true);
  };
  // The fleet-wide count, asked last: only for an action this gate would
  // run and count. Nullopt: go on; else the decision.
  auto ask_fleet = [&](bool cordon) -> std::optional<ActionDecision> {
    if (shared == nullptr) return std::nullopt;
    const int limit = cordon ? config_.max_cordons : config_.max_pauses;
    absl::StatusOr<bool> taken = shared->Take(cordon, limit, config_.window_seconds);
    if (!taken.ok()) {
      if (approved) return std::nullopt;
      return Decision(ActionVerdict::kNeedsApproval,
                      absl::StrCat(what,
                                   " waits for a human approval: the fleet-wide "
                                   "circuit breaker cannot be asked (",
                                   taken.status().message(), ")"));
    }
    if (*taken) return std::nullopt;
    return trip(absl::StrCat("circuit breaker: the fleet's servers together ran ",
                             limit, cordon ? " cordons" : " pauses", " in the last ",
                             window_minutes, " min (max ", limit, ")"));
  };
  if (request.action != "cordon_node") {
    if (static_cast<int>(pause_times_.size()) >= config_.max_pauses) {
      return trip(absl::StrCat("circuit breaker: ", pause_times_.size(),
                               " pauses in the last ", window_minutes,
                               " min (max ", config_.max_pauses, ")"));
    }
    if (std::optional<ActionDecision> fleet = ask_fleet(false)) return *fleet;
    pause_times_.push_back(now);
    return Decision(ActionVerdict::kRun,
                    absl::StrCat(what, " (", pause_times_.size(), " of ",
                                 config_.max_pauses, " pauses in the last ",
                                 window_minutes, " min)"));
  }
  auto job = cordoned_.find(request.job);
  if (job != cordoned_.end() && job->second.contains(request.node)) {
    return Decision(
        ActionVerdict::kRun,
        absl::StrCat(what, " (already cordoned: not counted again)"));
  }
  if (static_cast<int>(cordon_times_.size()) >= config_.max_cordons) {
    return trip(absl::StrCat("circuit breaker: ", cordon_times_.size(),
                             " cordons in the last ", window_minutes,
                             " min (max ", config_.max_cordons, ")"));
  }
  const size_t cordoned = job == cordoned_.end() ? 0 : job->second.size();
  // A node with no job is not held to a job's share.
  if (!request.job.empty()) {
    const int allowed = std::max(
        1, static_cast<int>(std::floor(std::max(job_nodes, 0) *
                                       config_.max_job_node_percent / 100)));
    if (static_cast<int>(cordoned) + 1 > allowed) {
      return trip(absl::StrCat(
          "circuit breaker: cordoning ", request.node, " would take ",
          cordoned + 1, " of job ", request.job, "'s ", job_nodes,
          " nodes (max ", allowed, ", ", config_.max_job_node_percent, "%)"));
    }
  }
  if (std::optional<ActionDecision> fleet = ask_fleet(true)) return *fleet;
  cordon_times_.push_back(now);
  cordoned_[request.job].insert(request.node);
  return Decision(ActionVerdict::kRun,
                  absl::StrCat(what, " (", cordon_times_.size(), " of ",
                               config_.max_cordons, " cordons in the last ",
                               window_minutes, " min)"));
}

void ActionGate::Reset(double now) {
  tripped_ = false;
  trip_reason_.clear();
  // The storm is over: what was counted up to now no longer counts.
  for (std::deque<double>* times : {&cordon_times_, &pause_times_}) {
    while (!times->empty() && times->front() <= now) times->pop_front();
  }
}

nlohmann::json ActionGate::Export() const {
  json cordoned = json::object();
  for (const auto& [job, nodes] : cordoned_) cordoned[job] = nodes;
  return {{"version", kGateStateVersion}, {"cordons", cordon_times_},
          {"pauses", pause_times_},       {"cordoned", std::move(cordoned)},
          {"tripped", tripped_},          {"trip_reason", trip_reason_}};
}

absl::Status ActionGate::Import(const nlohmann::json& state) {
  JsonChecker checker;
  if (!checker.Object(state, "$")) return checker.ToStatus();
  checker.CheckKeys(
      state, "",
      {"version", "cordons", "pauses", "cordoned", "tripped", "trip_reason"});
  for (const char* key :
       {"version", "cordons", "pauses", "cordoned", "tripped", "trip_reason"}) {
    if (!state.contains(key)) checker.Error(key, "required");
  }
  if (auto it = state.find("version"); it != state.end()) {
    checker.Integer(*it, "version", kGateStateVersion, kGateStateVersion);
  }
  std::deque<double> cordons, pauses;
  for (auto [key, out] :
       {std::pair<const char*, std::deque<double>*>{"cordons", &cordons},
        {"pauses", &pauses}}) {
    auto it = state.find(key);
    if (it == state.end() || !checker.Array(*it, key)) continue;
    for (size_t i = 0; i < it->size(); ++i) {
      if (auto t = checker.Number((*it)[i], Element(key, i),
                                  std::numeric_limits<double>::lowest())) {
        out->push_back(*t);
      }
    }
    std::sort(out->begin(), out->end());
  }
  std::map<std::string, std::set<std::string>> cordoned;
  if (auto it = state.find("cordoned");
      it != state.end() && checker.Object(*it, "cordoned")) {
    for (const auto& [job, nodes] : it->items()) {
      const std::string path = Member("cordoned", job);
      if (!checker.Array(nodes, path)) continue;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (auto node = checker.String(nodes[i], Element(path, i))) {
          cordoned[job].insert(*node);
        }
      }
    }
  }
  bool tripped = false;
  if (auto it = state.find("tripped"); it != state.end()) {
    if (auto b = checker.Bool(*it, "tripped")) tripped = *b;
  }
  std::string reason;
  if (auto it = state.find("trip_reason"); it != state.end()) {
    if (auto s = checker.Text(*it, "trip_reason")) reason = *s;
  }
  if (absl::Status s = checker.ToStatus(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not an action gate state written by Export: ", s.message()));
  }
  cordon_times_ = std::move(cordons);
  pause_times_ = std::move(pauses);
  cordoned_ = std::move(cordoned);
  tripped_ = tripped;
  trip_reason_ = std::move(reason);
  return absl::OkStatus();
}

}  // namespace vigil
