#include "rules/engine.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "rules/hint.h"

namespace vigil {
namespace {

using C = HintCategory;

// The job's raises kept for hints, at most (besides hint_window_s).
constexpr size_t kMaxHistory = 512;

// Categories that explain a job-wide slowdown and take over its symptom.
bool IsCause(C c) {
  return c == C::kGpuHardware || c == C::kCommunication ||
         c == C::kDataPipeline || c == C::kNode;
}

// Categories whose incident a throughput (step-time) drop of its job joins:
// the causes, and memory (a GPU near its limit retries allocations and
// flushes its cache, and in synchronous training the whole job waits).
bool ExplainsSlowdown(C c) { return IsCause(c) || c == C::kMemory; }

// How well a rule names an incident, in increasing order: the family (a
// general fluctuation < a job-wide symptom < a cause), then the severity,
// then a cause-specific rule over a generic baseline one.
std::tuple<int, int, bool> Specificity(const Rule& r) {
  const int family = r.category == C::kGeneral       ? 0
                     : r.category == C::kPerformance ? 1
                                                     : 2;
  return {family, -static_cast<int>(r.severity), !r.generic};
}

// A generic baseline drop (power, clock, traffic below baseline): what a
// slower job shows on every GPU and NIC.
bool IsSlowdownConsequence(const Anomaly& a, const Rule& rule) {
  return rule.generic && a.kind == AnomalyKind::kBaselineLow;
}

// Categories whose anomalies are pinned to hardware on one node.
bool IsLocal(C c) {
  return c == C::kGpuHardware || c == C::kCommunication || c == C::kNode;
}

// Identity of a condition: its raise and clear share it.
std::string ConditionKey(const Anomaly& a) {
  std::string key = absl::StrCat(
      a.job, "|", std::string(AnomalyKindName(a.kind)), "|", a.node, "|",
      a.gpu ? *a.gpu : -1, "|", a.dev, "|",
      a.series_id ? static_cast<int64_t>(*a.series_id) : -1);
  if (a.code) absl::StrAppend(&key, "|", *a.code);
  return key;
}

// Node-silent kinds: per-node conditions that one incident may gather.
bool IsNodeSilence(AnomalyKind k) {
  return k == AnomalyKind::kNodeSilent || k == AnomalyKind::kIdleNodeSilent;
}

// "n1", "n1 and n2", "n1, n2 and n3"; at most kMaxNamed names, then
// "and N more".
constexpr size_t kMaxNamed = 8;
std::string JoinNodes(const std::vector<std::string>& nodes) {
  std::string out;
  const size_t named = nodes.size() > kMaxNamed ? kMaxNamed : nodes.size();
  for (size_t i = 0; i < named; ++i) {
    if (i > 0) out += (i + 1 == named && named == nodes.size()) ? " and " : ", ";
    out += nodes[i];
  }
  if (named < nodes.size()) {
    absl::StrAppend(&out, " and ", nodes.size() - named, " more");
  }
  return out;
}

// One condition attached to an incident.
struct Condition {
  AnomalyKind kind = AnomalyKind::kBaselineHigh;
  bool active = true;
  bool inhibited = false;
  int evidence = -1;  // Index into Incident::evidence; -1 when dropped.
  const Rule* rule = nullptr;
  std::string node;
  std::optional<int> gpu;
};

// One incident that implicated a node (repeat offenders).
struct Implication {
  double ts = 0;
  std::string job;
  std::string id;
  std::string kind;
  std::optional<int> gpu;
};

// An incident and what the engine needs to keep it up to date.
struct Tracked {
  Incident inc;
  // Category of the primary rule: drives grouping and the hint.
  HintCategory category = C::kGeneral;
  Anomaly primary;
  const Rule* primary_rule = nullptr;
  std::string primary_key;
  // Ordered so that derived fields do not depend on hash order.
  std::map<std::string, Condition> conditions;
  int active = 0;
  double last_change_ts = 0;
  std::set<std::string> silent_nodes;  // Nodes with an active node_silent.
  double last_silence_ts = -std::numeric_limits<double>::infinity();
  int hangs_active = 0;
  bool risk_raised = false;
  std::string lemon_node;  // set for a lemon_node incident
  std::string fleet_cause;  // set for a fleet_wide_fault incident
  // Since it (re)opened: its node was counted toward a lemon, and it was
  // counted as a fault of its fleet-wide class. An incident that opens as
  // a P3 and becomes P2 hardware (a baseline deviation joined by the
  // throttle that explains it) counts when it becomes one.
  bool implicated = false;
  bool fleet_noted = false;
};

std::string Where(const Tracked& t) {
  if (t.inc.nodes.size() > 1) return JoinNodes(t.inc.nodes);
  if (t.inc.node.empty()) return absl::StrCat("job ", t.inc.job);
  if (t.inc.gpu) return absl::StrCat(t.inc.node, " gpu", *t.inc.gpu);
  if (!t.primary.dev.empty() && t.primary.node == t.inc.node) {
    return absl::StrCat(t.inc.node, " ", t.primary.dev);
  }
  return t.inc.node;
}

// The fleet-wide class of `t`'s fault, or nullptr: a job's P0-P2 incident
// whose cause the job may share with others.
const char* FleetCauseOf(const Tracked& t) {
  if (t.inc.job.empty() || !t.lemon_node.empty() || !t.fleet_cause.empty() ||
      t.inc.severity > Severity::kP2) {
    return nullptr;
  }
  if (t.primary.kind == AnomalyKind::kJobHang) return "hang";
  switch (t.category) {
    case C::kDataPipeline: return "storage";
    case C::kCommunication: return "network";
    case C::kNode: return "nodes";
    default: return nullptr;
  }
}

// What to look at when faults of `cause` hit several jobs at once.
std::string FleetHint(std::string_view cause) {
  if (cause == "storage") {
    return "Several jobs starve for data at once: look at what they read "
           "from and write to (the shared file system's servers and "
           "metadata service, object store, checkpoint target), not at each "
           "job's dataloader.";
  }
  if (cause == "network") {
    return "Several jobs lose packets or links at once: look at the fabric "
           "they share (a leaf or spine switch, its port counters, the "
           "subnet manager's log: ibdiagnet, perfquery), not at each node's "
           "NIC.";
  }
  if (cause == "nodes") {
    return "Nodes of several jobs stopped reporting at once: look at what "
           "they share (rack power, a top-of-rack switch, a network "
           "partition toward Vigil), and at Vigil's own reachability, "
           "before the nodes themselves.";
  }
  return "Several jobs hung at once: look at what they share (a file system "
         "that stopped answering, the fabric, the scheduler or a library "
         "rolled out to all of them) before dumping each job's stacks.";
}

// Whether `a` and `b` are the same rule: the same object, or rules of one
// name from the rule sets before and after a reload (SetRules).
bool SameRule(const Rule* a, const Rule* b) {
  return a == b || (a != nullptr && b != nullptr && a->name == b->name);
}

}  // namespace

struct IncidentEngine::Impl {
  explicit Impl(RuleSet r) : rules(&rule_sets.emplace_back(std::move(r))) {}

  void Raise(const Anomaly& a, std::vector<IncidentUpdate>* out);
  // Node silence: one incident for nodes of a job silent together.
  void RaiseSilence(const Anomaly& a, const Rule* rule,
                    std::vector<IncidentUpdate>* out);
  // Ends the conditions of a.job (on a.node when set) but node silence.
  void EndConditions(const Anomaly& a);
  // Records that `t` implicated its node, once since it (re)opened, if it
  // is of a kind and severity that does; opens or updates a lemon.
  void Implicate(Tracked& t, std::vector<IncidentUpdate>* out);
  // Opens or grows the lemon of `node` if its window holds lemon_jobs jobs
  // (and this engine raises fleet incidents).
  void CheckLemon(const std::string& node, std::vector<IncidentUpdate>* out);
  // Nodes other engines implicated since the last CheckLemon of them.
  std::set<std::string> lemons_dirty;
  // Implications made since TakeImplications last ran.
  std::vector<IncidentEngine::NodeImplication> recorded;
  bool record_implications = false;
  // Lemons whose window expired; GPU-hours at risk.
  void CheckLemons(std::vector<IncidentUpdate>* out);
  // Records `t` as a fault of its fleet-wide class, if it has one (once
  // since it (re)opened).
  void NoteFleetFault(Tracked& t);
  // Opens, grows or clears the fleet-wide fault of each class.
  void CheckFleet(std::vector<IncidentUpdate>* out);
  // Raises what other engines' implications completed: lemons of dirty
  // nodes, fleet-wide faults if dirty.
  void CheckFleetIncidents(std::vector<IncidentUpdate>* out);
  void CheckRisk(std::vector<IncidentUpdate>* out);
  void Clear(const Anomaly& a);
  void Resolve(std::vector<IncidentUpdate>* out);
  void Remember(const Anomaly& a, const Rule* rule);
  Tracked* Inhibitor(const Anomaly& a);
  Tracked* GroupTarget(const Anomaly& a, const Rule& rule);
  // The slowdown incident that explains the slowdown consequence `a`.
  Tracked* SlowdownOf(const Anomaly& a, const Rule& rule);
  // Attaches the condition `key`; true when the evidence list grew.
  bool AddCondition(Tracked& t, const std::string& key, const Anomaly& a,
                    const Rule* rule, bool inhibited);
  void Attach(Tracked& t, const std::string& key, const Anomaly& a,
              const Rule* rule, bool inhibited,
              std::vector<IncidentUpdate>* out);
  void Reraise(Tracked& t, const std::string& key, const Anomaly& a,
               const Rule* rule, std::vector<IncidentUpdate>* out);
  // Opens an incident for `a` (or reopens its recently resolved one) with
  // `more` conditions of the same rule attached before it is announced.
  void OpenOrReopen(const std::string& key, const Anomaly& a, const Rule* rule,
                    std::vector<IncidentUpdate>* out,
                    const std::vector<Anomaly>& more = {});
  // Recomputes localisation, responses, summary and hint.
  void Refresh(Tracked& t);
  bool RaiseSeverity(Tracked& t, const Rule* rule, double ts);
  // Makes the condition `key` the primary if `rule` is more specific than
  // the primary rule; true when it did.
  static bool TakeOver(Tracked& t, const std::string& key, const Anomaly& a,
                       const Rule* rule);
  static void Emit(UpdateType type, double ts, const Tracked& t,
                   std::vector<IncidentUpdate>* out) {
    out->push_back({type, ts, t.inc});
  }

  // Every rule set this engine used, the one in use last: an incident keeps
  // pointers to the rules that opened and joined it, so a replaced set
  // stays alive (a few KB per reload; std::deque never moves them).
  std::deque<RuleSet> rule_sets;
  // The rules in use (rule_sets.back()).
  const RuleSet* rules;
  // Firing incidents and those resolved within reopen_window_s, oldest
  // first.
  std::vector<std::unique_ptr<Tracked>> incidents;
  // Condition key -> the incident that last attached it.
  absl::flat_hash_map<std::string, Tracked*> by_condition;
  // Per job: recent raises, for hints.
  std::map<std::string, std::deque<Observation>> history;
  // Per node: incidents that implicated it, oldest first (lemons).
  std::map<std::string, std::deque<Implication>> implicated;
  // Per fleet-wide class: faults of jobs, oldest first.
  std::map<std::string, std::deque<Implication>> fleet_faults;
  bool raises_fleet = true;
  bool fleet_dirty = false;
  const JobContextSource* context = nullptr;
  double next_risk_check = -std::numeric_limits<double>::infinity();
  int64_t next_id = 1;
  double now = -std::numeric_limits<double>::infinity();
};

void IncidentEngine::Impl::Remember(const Anomaly& a, const Rule* rule) {
  std::deque<Observation>& h = history[a.job];
  h.push_back({a, rule ? rule->category : C::kGeneral});
  while (!h.empty() &&
         (h.size() > kMaxHistory ||
          h.front().anomaly.ts < a.ts - rules->settings.hint_window_s)) {
    h.pop_front();
  }
}

Tracked* IncidentEngine::Impl::Inhibitor(const Anomaly& a) {
  for (const auto& t : incidents) {
    if (t->inc.state != IncidentState::kFiring || t->inc.job != a.job) continue;
    if (a.kind != AnomalyKind::kNodeSilent && !a.node.empty() &&
        t->silent_nodes.count(a.node) > 0) {
      return t.get();
    }
  }
  if (!IsHangConsequence(a.kind)) return nullptr;
  for (const auto& t : incidents) {
    if (t->inc.state == IncidentState::kFiring && t->inc.job == a.job &&
        t->hangs_active > 0) {
      return t.get();
    }
  }
  return nullptr;
}

Tracked* IncidentEngine::Impl::GroupTarget(const Anomaly& a, const Rule& rule) {
  const double window = rules->settings.group_window_s;
  const C rc = rule.category;
  Tracked* best = nullptr;
  std::tuple<int, Severity> best_rank;
  for (const auto& tp : incidents) {
    Tracked& t = *tp;
    if (t.inc.state != IncidentState::kFiring || t.inc.job != a.job) continue;
    const C tc = t.category;
    const bool live = t.active > 0 || a.ts - t.last_change_ts <= window;
    // 0: same fault; 1: a cause for this symptom; 2: symptom-only incident.
    int rank = -1;
    if (rc == C::kPerformance) {
      if (ExplainsSlowdown(tc) && t.inc.severity <= Severity::kP2 && live) {
        rank = 1;
      } else if (tc == C::kPerformance) {
        rank = 2;
      }
    } else if (rc == C::kModel || rc == C::kMemory || rc == C::kDataPipeline) {
      if (tc == rc) rank = 0;
    } else if (IsLocal(rc)) {
      // A GPU fault stays with its GPU; links and nodes group per node.
      // The incident's own GPU, or one of its (uninhibited) conditions':
      // NVLink trouble on gpu3 also lowers its peers' traffic, which makes
      // the incident node-wide, and gpu3's XID 74 is still the same fault.
      bool same_gpu = a.gpu && t.inc.gpu == a.gpu;
      for (const auto& [key, c] : t.conditions) {
        if (same_gpu || !a.gpu) break;
        same_gpu = !c.inhibited && c.node == a.node && c.gpu == a.gpu;
      }
      const bool same_family =
          tc == rc && (rc != C::kGpuHardware || !a.gpu.has_value());
      if (!a.node.empty() && t.inc.node == a.node &&
          (same_gpu || same_family)) {
        rank = 0;
      }
    } else if (!a.node.empty() && t.inc.node == a.node &&
               (!a.gpu || t.inc.gpu == a.gpu)) {
      rank = 0;  // General: context of whatever is open on that hardware.
    }
    if (rank < 0 && ExplainsSlowdown(rc) && tc == C::kPerformance &&
        rule.severity <= Severity::kP2 && a.ts - t.inc.ts <= window) {
      rank = 2;  // Take over the symptom it explains.
    }
    if (rank < 0) continue;
    // An incident of generic baseline fluctuations only (P3 context) does
    // not capture a real cause: the cause takes over the symptom it
    // explains, or opens its own incident, rather than hide in a P3.
    if (rank == 0 && !rule.generic && rule.severity <= Severity::kP2 &&
        t.primary_rule != nullptr && t.primary_rule->generic &&
        t.inc.severity > Severity::kP2) {
      rank = 3;
    }
    const auto r = std::make_tuple(rank, t.inc.severity);
    if (best == nullptr || r < best_rank) {
      best = &t;
      best_rank = r;
    }
  }
  return best;
}

Tracked* IncidentEngine::Impl::SlowdownOf(const Anomaly& a, const Rule& rule) {
  if (!IsSlowdownConsequence(a, rule)) return nullptr;
  Tracked* best = nullptr;
  std::tuple<bool, Severity> best_rank;
  for (const auto& tp : incidents) {
    Tracked& t = *tp;
    if (t.inc.state != IncidentState::kFiring || t.inc.job != a.job) continue;
    const bool cause = IsCause(t.category) && t.inc.severity <= Severity::kP2;
    if (!cause && t.category != C::kPerformance) continue;
    if (t.active == 0 &&
        a.ts - t.last_change_ts > rules->settings.group_window_s) {
      continue;
    }
    const auto r = std::make_tuple(!cause, t.inc.severity);
    if (best == nullptr || r < best_rank) {
      best = &t;
      best_rank = r;
    }
  }
  return best;
}

bool IncidentEngine::Impl::AddCondition(Tracked& t, const std::string& key,
                                        const Anomaly& a, const Rule* rule,
                                        bool inhibited) {
  auto [it, inserted] = t.conditions.try_emplace(key);
  Condition& c = it->second;
  const bool was_active = !inserted && c.active;
  c.kind = a.kind;
  c.active = true;
  c.inhibited = inhibited;
  c.rule = rule;
  c.node = a.node;
  c.gpu = a.gpu;
  by_condition[key] = &t;
  t.last_change_ts = std::max(t.last_change_ts, a.ts);
  bool grew = false;
  if (!was_active) {
    ++t.active;
    if (IsNodeSilence(a.kind)) {
      t.silent_nodes.insert(a.node);
      t.last_silence_ts = std::max(t.last_silence_ts, a.ts);
    }
    if (a.kind == AnomalyKind::kJobHang) ++t.hangs_active;
  }
  if (c.evidence >= 0) {
    Evidence& e = t.inc.evidence[c.evidence];
    e.anomaly = a;
    e.rule = rule->name;
    e.active = true;
    e.inhibited = inhibited;
  } else if (inserted) {
    if (static_cast<int>(t.inc.evidence.size()) < rules->settings.max_evidence) {
      c.evidence = static_cast<int>(t.inc.evidence.size());
      t.inc.evidence.push_back({a, rule->name, true, inhibited});
      grew = true;
    } else {
      ++t.inc.evidence_dropped;
    }
  }
  return grew;
}

bool IncidentEngine::Impl::TakeOver(Tracked& t, const std::string& key,
                                    const Anomaly& a, const Rule* rule) {
  if (Specificity(*rule) <= Specificity(*t.primary_rule)) return false;
  t.category = rule->category;
  t.primary = a;
  t.primary_rule = rule;
  t.primary_key = key;
  t.inc.kind = rule->name;
  return true;
}

bool IncidentEngine::Impl::RaiseSeverity(Tracked& t, const Rule* rule,
                                         double ts) {
  if (!(rule->severity < t.inc.severity)) return false;
  t.inc.severity = rule->severity;
  t.inc.severity_history.push_back({rule->severity, ts, rule->name});
  return true;
}

void IncidentEngine::Impl::Attach(Tracked& t, const std::string& key,
                                  const Anomaly& a, const Rule* rule,
                                  bool inhibited,
                                  std::vector<IncidentUpdate>* out) {
  const bool grew = AddCondition(t, key, a, rule, inhibited);
  if (!inhibited) TakeOver(t, key, a, rule);
  const bool raised = !inhibited && RaiseSeverity(t, rule, a.ts);
  t.inc.last_update_ts = a.ts;
  Refresh(t);
  if (raised) {
    Emit(UpdateType::kSeverityRaised, a.ts, t, out);
  } else if (grew) {
    Emit(UpdateType::kEvidenceAdded, a.ts, t, out);
  }
  Implicate(t, out);
  NoteFleetFault(t);
}

void IncidentEngine::Impl::Reraise(Tracked& t, const std::string& key,
                                   const Anomaly& a, const Rule* rule,
                                   std::vector<IncidentUpdate>* out) {
  Condition& c = t.conditions[key];
  const bool inhibited = c.inhibited;
  const Rule* old_rule = c.rule;
  // Keep the baseline at detection; take the escalated tier and score.
  Anomaly kept = c.evidence >= 0 ? t.inc.evidence[c.evidence].anomaly : a;
  const bool was_active = c.active;
  if (a.tier > kept.tier) {
    kept.tier = a.tier;
    kept.score = a.score;
    kept.value = a.value;
  }
  // An XID storm (and a lemon's history) grows in place: count and rate.
  const bool update = a.kind == AnomalyKind::kXid ||
                      a.kind == AnomalyKind::kRepeatOffender ||
                      a.kind == AnomalyKind::kFleetWideFault;
  if (update) {
    kept.value = a.value;
    kept.score = a.score;
    kept.detail = a.detail;
  }
  AddCondition(t, key, kept, rule, inhibited);
  if (update && key == t.primary_key) t.primary = kept;
  const bool took = !inhibited && TakeOver(t, key, kept, rule);
  const bool raised = !inhibited && RaiseSeverity(t, rule, a.ts);
  if (raised || took || !SameRule(rule, old_rule) || update || !was_active) {
    t.inc.last_update_ts = a.ts;
    Refresh(t);
  }
  if (raised) {
    Emit(UpdateType::kSeverityRaised, a.ts, t, out);
  } else if (update && was_active) {
    Emit(UpdateType::kEvidenceAdded, a.ts, t, out);
  }
  Implicate(t, out);
  NoteFleetFault(t);
}

void IncidentEngine::Impl::OpenOrReopen(const std::string& key,
                                        const Anomaly& a, const Rule* rule,
                                        std::vector<IncidentUpdate>* out,
                                        const std::vector<Anomaly>& more) {
  const bool pinned =
      rule->category != C::kPerformance && rule->category != C::kModel &&
      rule->category != C::kApplication && rule->category != C::kLifecycle;
  const std::string node = pinned ? a.node : "";
  const int gpu = pinned && !node.empty() && a.gpu ? *a.gpu : -1;
  Tracked* reopen = nullptr;
  for (const auto& t : incidents) {
    if (t->inc.state == IncidentState::kResolved && t->inc.job == a.job &&
        t->inc.kind == rule->name && t->inc.node == node &&
        t->inc.gpu.value_or(-1) == gpu &&
        (a.kind != AnomalyKind::kFleetWideFault || t->fleet_cause == a.dev)) {
      reopen = t.get();  // The most recent one wins.
    }
  }
  Tracked* t = reopen;
  if (t == nullptr) {
    incidents.push_back(std::make_unique<Tracked>());
    t = incidents.back().get();
    t->inc.id = absl::StrFormat("inc-%06d", next_id++);
    t->inc.job = a.job;
    t->inc.ts = a.ts;
    t->inc.step = a.step;
  } else {
    t->inc.state = IncidentState::kFiring;
    t->inc.resolved_ts.reset();
    ++t->inc.reopen_count;
  }
  t->category = rule->category;
  t->primary = a;
  t->primary_rule = rule;
  t->primary_key = key;
  t->risk_raised = false;
  t->implicated = false;
  t->fleet_noted = false;
  if (a.kind == AnomalyKind::kRepeatOffender) t->lemon_node = a.node;
  if (a.kind == AnomalyKind::kFleetWideFault) t->fleet_cause = a.dev;
  t->inc.kind = rule->name;
  t->inc.severity = rule->severity;
  t->inc.severity_history.push_back({rule->severity, a.ts, rule->name});
  t->inc.last_update_ts = a.ts;
  AddCondition(*t, key, a, rule, /*inhibited=*/false);
  for (const Anomaly& b : more) {
    AddCondition(*t, ConditionKey(b), b, rule, /*inhibited=*/false);
  }
  Refresh(*t);
  Emit(reopen ? UpdateType::kReopened : UpdateType::kOpened, a.ts, *t, out);
  Implicate(*t, out);
  NoteFleetFault(*t);
}

void IncidentEngine::Impl::Refresh(Tracked& t) {
  // Localisation: the hardware evidence if any, else general evidence;
  // job-wide incidents (performance, model) stay unlocalised.
  std::vector<const Condition*> specific, local, general;
  for (const auto& [key, c] : t.conditions) {
    if (c.inhibited) continue;
    const C cat = c.rule->category;
    if (cat == C::kGeneral) {
      general.push_back(&c);
    } else if (cat != C::kPerformance && cat != C::kModel) {
      local.push_back(&c);
      if (!c.rule->generic) specific.push_back(&c);
    }
  }
  // A cause's own conditions localise it; generic baseline moves on other
  // GPUs of the node are context (a slower job moves every GPU's power).
  const std::vector<const Condition*>& cand =
      !specific.empty() ? specific : !local.empty() ? local : general;
  t.inc.node.clear();
  t.inc.gpu.reset();
  t.inc.nodes.clear();
  if (!t.lemon_node.empty()) {
    t.inc.node = t.lemon_node;
    t.inc.gpu = t.primary.gpu;
  } else if (!cand.empty() && t.category != C::kPerformance &&
             t.category != C::kModel && t.category != C::kApplication &&
             t.category != C::kLifecycle) {
    bool same_node = !cand[0]->node.empty(),
         same_gpu = cand[0]->gpu.has_value();
    for (const Condition* c : cand) {
      same_node = same_node && c->node == cand[0]->node;
      same_gpu = same_gpu && c->gpu == cand[0]->gpu;
    }
    if (same_node) {
      t.inc.node = cand[0]->node;
      if (same_gpu) t.inc.gpu = cand[0]->gpu;
    } else {
      std::set<std::string> distinct;
      for (const Condition* c : cand) {
        if (!c->node.empty()) distinct.insert(c->node);
      }
      if (distinct.size() > 1) {
        t.inc.nodes.assign(distinct.begin(), distinct.end());
      }
    }
  }
  // A job-wide finding that names its nodes (job_unreachable) keeps them.
  if (t.inc.node.empty() && t.inc.nodes.empty() &&
      t.primary.nodes.size() > 1) {
    t.inc.nodes = t.primary.nodes;
  }
  // Responses: every matched rule's, in enum order.
  std::set<Response> responses;
  for (const auto& [key, c] : t.conditions) {
    if (c.inhibited) continue;
    responses.insert(c.rule->responses.begin(), c.rule->responses.end());
  }
  if (t.inc.node.empty()) responses.erase(Response::kCordonNode);
  t.inc.responses.assign(responses.begin(), responses.end());
  // Summary: the primary rule's, plus the job-wide symptoms it caused. A
  // multi-node incident names each of its nodes once.
  if (t.inc.nodes.size() > 1) {
    Anomaly named = t.primary;
    named.node = JoinNodes(t.inc.nodes);
    t.inc.summary = RenderSummary(t.primary_rule->summary, named, Where(t));
  } else {
    t.inc.summary =
        RenderSummary(t.primary_rule->summary, t.primary, Where(t));
  }
  bool hung = false;
  double drop = 0;
  for (const auto& [key, c] : t.conditions) {
    if (key == t.primary_key || c.evidence < 0) continue;
    const Anomaly& e = t.inc.evidence[c.evidence].anomaly;
    if (e.kind == AnomalyKind::kJobHang) hung = true;
    if (e.kind == AnomalyKind::kThroughputDrop) drop = std::max(drop, e.score);
  }
  if (hung) t.inc.summary += "; job hung";
  if (drop > 0) {
    t.inc.summary += absl::StrFormat("; throughput down %.0f %%", 100 * drop);
  }
  // Hint: the incident's own evidence and the job's recent raises.
  std::vector<Observation> obs;
  const auto h = history.find(t.inc.job);
  if (h != history.end()) obs.assign(h->second.begin(), h->second.end());
  for (const auto& [key, c] : t.conditions) {
    if (c.inhibited || c.evidence < 0) continue;
    obs.push_back({t.inc.evidence[c.evidence].anomaly, c.rule->category});
  }
  Hint hint = BuildHint(t.category, obs);
  if (!t.fleet_cause.empty()) hint.text = FleetHint(t.fleet_cause);
  t.inc.hint_category = hint.category;
  t.inc.hint = std::move(hint.text);
}

void IncidentEngine::Impl::Raise(const Anomaly& a,
                                 std::vector<IncidentUpdate>* out) {
  if (a.kind == AnomalyKind::kJobEnded) {
    EndConditions(a);
    if (!a.node.empty()) return;  // one node's part; the job's end follows
  }
  const Rule* rule = rules->Find(a);
  Remember(a, rule);
  if (rule == nullptr) return;
  if (IsNodeSilence(a.kind)) {
    RaiseSilence(a, rule, out);
    return;
  }
  const std::string key = ConditionKey(a);
  if (auto it = by_condition.find(key);
      it != by_condition.end() &&
      it->second->inc.state == IncidentState::kFiring) {
    Reraise(*it->second, key, a, rule, out);
    return;
  }
  if (Tracked* t = Inhibitor(a)) {
    Attach(*t, key, a, rule, /*inhibited=*/true, out);
  } else if (Tracked* g = GroupTarget(a, *rule)) {
    Attach(*g, key, a, rule, /*inhibited=*/false, out);
  } else if (Tracked* s = SlowdownOf(a, *rule)) {
    Attach(*s, key, a, rule, /*inhibited=*/true, out);
  } else {
    OpenOrReopen(key, a, rule, out);
  }
}

void IncidentEngine::Impl::RaiseSilence(const Anomaly& a, const Rule* rule,
                                        std::vector<IncidentUpdate>* out) {
  // One condition per node; the anomaly may name several.
  std::vector<Anomaly> each;
  if (a.nodes.empty()) {
    each.push_back(a);
  } else {
    for (const std::string& node : a.nodes) {
      Anomaly b = a;
      b.node = node;
      b.nodes.clear();
      each.push_back(std::move(b));
    }
  }
  // Already part of a firing incident (re-raised): leave it there.
  Tracked* target = nullptr;
  for (const Anomaly& b : each) {
    auto it = by_condition.find(ConditionKey(b));
    if (it != by_condition.end() &&
        it->second->inc.state == IncidentState::kFiring) {
      target = it->second;
    }
  }
  // Nodes of the job that fell silent shortly before: the same outage.
  for (const auto& tp : incidents) {
    if (target != nullptr) break;
    Tracked& t = *tp;
    if (t.inc.state == IncidentState::kFiring && t.inc.job == a.job &&
        SameRule(t.primary_rule, rule) && !t.silent_nodes.empty() &&
        a.ts - t.last_silence_ts <= rules->settings.node_group_window_s) {
      target = &t;
    }
  }
  if (target == nullptr) {
    // The opening line names every node.
    const std::vector<Anomaly> more(each.begin() + 1, each.end());
    OpenOrReopen(ConditionKey(each[0]), each[0], rule, out, more);
    return;
  }
  bool grew = false, raised = false;
  for (const Anomaly& b : each) {
    grew = AddCondition(*target, ConditionKey(b), b, rule, false) || grew;
  }
  raised = RaiseSeverity(*target, rule, a.ts);
  target->inc.last_update_ts = a.ts;
  Refresh(*target);
  if (raised) {
    Emit(UpdateType::kSeverityRaised, a.ts, *target, out);
  } else if (grew) {
    Emit(UpdateType::kEvidenceAdded, a.ts, *target, out);
  }
}

void IncidentEngine::Impl::EndConditions(const Anomaly& a) {
  for (const auto& tp : incidents) {
    Tracked& t = *tp;
    if (t.inc.state != IncidentState::kFiring || t.inc.job != a.job) continue;
    for (auto& [key, c] : t.conditions) {
      if (!c.active || IsNodeSilence(c.kind)) continue;
      if (!a.node.empty() && c.node != a.node) continue;
      c.active = false;
      --t.active;
      if (c.evidence >= 0) t.inc.evidence[c.evidence].active = false;
      if (c.kind == AnomalyKind::kJobHang) --t.hangs_active;
      t.last_change_ts = std::max(t.last_change_ts, a.ts);
    }
  }
}

void IncidentEngine::Impl::Implicate(Tracked& t,
                                     std::vector<IncidentUpdate>* out) {
  if (t.implicated || t.inc.node.empty() || t.inc.job.empty() || !t.lemon_node.empty() ||
      t.inc.severity > Severity::kP2 ||
      !(t.category == C::kGpuHardware || t.category == C::kCommunication ||
        t.category == C::kNode)) {
    return;
  }
  t.implicated = true;
  std::deque<Implication>& h = implicated[t.inc.node];
  h.push_back({t.inc.ts, t.inc.job, t.inc.id, t.inc.kind, t.inc.gpu});
  if (record_implications)
    recorded.push_back({t.inc.node, "", t.inc.ts, t.inc.job, t.inc.id, t.inc.kind, t.inc.gpu});
  CheckLemon(t.inc.node, out);
}

void IncidentEngine::Impl::CheckLemon(const std::string& node,
                                      std::vector<IncidentUpdate>* out) {
  const RuleSettings& s = rules->settings;
  if (!raises_fleet) return;
  std::deque<Implication>& h = implicated[node];
  while (!h.empty() && h.front().ts < now - s.lemon_window_s) h.pop_front();
  std::set<std::string> jobs;
  std::set<int> gpus;
  bool all_gpus = true;
  for (const Implication& i : h) {
    jobs.insert(i.job);
    if (i.gpu) {
      gpus.insert(*i.gpu);
    } else {
      all_gpus = false;
    }
  }
  if (h.empty() || static_cast<int>(jobs.size()) < s.lemon_jobs) return;
  Anomaly a;
  a.kind = AnomalyKind::kRepeatOffender;
  a.node = node;
  if (all_gpus && gpus.size() == 1) a.gpu = *gpus.begin();
  a.ts = std::max(now, h.back().ts);
  a.value = static_cast<double>(h.size());
  a.score = static_cast<double>(jobs.size());
  a.detail = absl::StrFormat("%d incidents in %d jobs within %.0f days: ",
                             h.size(), jobs.size(), s.lemon_window_s / 86400);
  for (size_t i = 0; i < h.size(); ++i) {
    const Implication& im = h[i];
    absl::StrAppend(&a.detail, i > 0 ? "; " : "", im.id, " ", im.kind,
                    " (job ", im.job,
                    im.gpu ? absl::StrCat(", gpu", *im.gpu) : std::string(),
                    ")");
  }
  absl::StrAppend(&a.detail, ". Suggested: drain ", a.node,
                  " and run diagnostics before it takes new jobs");
  const Rule* rule = rules->Find(a);
  if (rule == nullptr) return;
  const std::string key = ConditionKey(a);
  if (auto it = by_condition.find(key);
      it != by_condition.end() &&
      it->second->inc.state == IncidentState::kFiring) {
    Reraise(*it->second, key, a, rule, out);
    return;
  }
  OpenOrReopen(key, a, rule, out);
}

void IncidentEngine::Impl::NoteFleetFault(Tracked& t) {
  const char* cause = FleetCauseOf(t);
  if (t.fleet_noted || cause == nullptr || rules->settings.fleet_jobs <= 0) return;
  t.fleet_noted = true;
  // When it (re)opened: a fault that came back counts now.
  const double ts = t.inc.last_update_ts;
  std::deque<Implication>& h = fleet_faults[cause];
  // Kept in time order (the window drops the front).
  auto at = h.end();
  while (at != h.begin() && std::prev(at)->ts > ts) --at;
  h.insert(at, Implication{ts, t.inc.job, t.inc.id, t.inc.kind, std::nullopt});
  if (record_implications)
    recorded.push_back({"", cause, ts, t.inc.job, t.inc.id, t.inc.kind, std::nullopt});
  fleet_dirty = true;
}

void IncidentEngine::Impl::CheckFleet(std::vector<IncidentUpdate>* out) {
  fleet_dirty = false;
  const RuleSettings& s = rules->settings;
  for (auto& [cause, h] : fleet_faults) {
    while (!h.empty() && h.front().ts < now - s.fleet_window_s) h.pop_front();
    std::set<std::string> jobs;
    for (const Implication& i : h) jobs.insert(i.job);
    Anomaly a;
    a.kind = AnomalyKind::kFleetWideFault;
    a.dev = cause;
    const std::string key = ConditionKey(a);
    const auto it = by_condition.find(key);
    const bool firing = it != by_condition.end() &&
                        it->second->inc.state == IncidentState::kFiring;
    if (s.fleet_jobs <= 0 || static_cast<int>(jobs.size()) < s.fleet_jobs) {
      if (!firing) continue;
      a.cleared = true;
      a.ts = now;
      Clear(a);
      continue;
    }
    // Raised (or grown) only when it names more jobs than it does (its
    // primary's score counts them).
    if (!raises_fleet ||
        (firing && static_cast<double>(jobs.size()) <= it->second->primary.score)) {
      continue;
    }
    a.ts = std::max(now, h.back().ts);
    a.value = static_cast<double>(h.size());
    a.score = static_cast<double>(jobs.size());
    a.detail = absl::StrFormat("%s faults in %d jobs within %.0f min: ", cause,
                               jobs.size(), s.fleet_window_s / 60);
    // Named by kind and job: the ids the shards publish differ from the
    // engines'.
    for (size_t i = 0; i < h.size(); ++i) {
      const Implication& im = h[i];
      absl::StrAppend(&a.detail, i > 0 ? "; " : "", im.kind, " (job ", im.job, ")");
    }
    const Rule* rule = rules->Find(a);
    if (rule == nullptr) continue;
    if (firing) {
      Reraise(*it->second, key, a, rule, out);
    } else {
      OpenOrReopen(key, a, rule, out);
    }
  }
}

void IncidentEngine::set_raises_fleet_incidents(bool raises) {
  if (raises && !impl_->raises_fleet) {
    impl_->fleet_dirty = true;
    // Offenders the others completed while this engine only counted; not
    // those it knows a lemon of (firing, or resolved by an operator).
    std::set<std::string> known;
    for (const auto& t : impl_->incidents) {
      if (!t->lemon_node.empty()) known.insert(t->lemon_node);
    }
    for (const auto& [node, h] : impl_->implicated) {
      if (!h.empty() && !known.contains(node)) impl_->lemons_dirty.insert(node);
    }
  }
  impl_->raises_fleet = raises;
}

void IncidentEngine::set_record_implications(bool record) {
  impl_->record_implications = record;
  if (!record) impl_->recorded.clear();
}

void IncidentEngine::TakeImplications(std::vector<NodeImplication>* out) {
  for (NodeImplication& i : impl_->recorded) out->push_back(std::move(i));
  impl_->recorded.clear();
}

void IncidentEngine::AddImplication(const NodeImplication& i) {
  if (!i.cause.empty()) impl_->fleet_dirty = true;
  std::deque<Implication>& h = i.cause.empty() ? impl_->implicated[i.node]
                                               : impl_->fleet_faults[i.cause];
  // In time order, as Implicate keeps them (the window drops the front).
  auto at = h.end();
  while (at != h.begin() && std::prev(at)->ts > i.ts) --at;
  // Known already (told again by another server): nothing to add.
  for (auto same = at; same != h.begin() && std::prev(same)->ts == i.ts; --same) {
    if (std::prev(same)->job == i.job && std::prev(same)->gpu == i.gpu) return;
  }
  h.insert(at, Implication{i.ts, i.job, i.id, i.kind, i.gpu});
  if (i.cause.empty() && impl_->raises_fleet) impl_->lemons_dirty.insert(i.node);
}

void IncidentEngine::Impl::CheckFleetIncidents(std::vector<IncidentUpdate>* out) {
  for (const std::string& node : lemons_dirty) CheckLemon(node, out);
  lemons_dirty.clear();
  if (fleet_dirty) CheckFleet(out);
}

void IncidentEngine::Impl::CheckLemons(std::vector<IncidentUpdate>* out) {
  (void)out;
  const RuleSettings& s = rules->settings;
  for (const auto& tp : incidents) {
    Tracked& t = *tp;
    if (t.lemon_node.empty() || t.active == 0) continue;
    std::deque<Implication>& h = implicated[t.lemon_node];
    while (!h.empty() && h.front().ts < now - s.lemon_window_s) h.pop_front();
    std::set<std::string> jobs;
    for (const Implication& i : h) jobs.insert(i.job);
    if (static_cast<int>(jobs.size()) >= s.lemon_jobs) continue;
    Anomaly a;
    a.kind = AnomalyKind::kRepeatOffender;
    a.cleared = true;
    a.node = t.lemon_node;
    a.gpu = t.primary.gpu;
    a.ts = now;
    Clear(a);
  }
}

void IncidentEngine::Impl::CheckRisk(std::vector<IncidentUpdate>* out) {
  const RuleSettings& s = rules->settings;
  if (context == nullptr || !(s.risk_gpu_hours > 0)) return;
  Anomaly probe;
  probe.kind = AnomalyKind::kGpuHoursAtRisk;
  const Rule* rule = rules->Find(probe);
  if (rule == nullptr) return;
  for (const auto& tp : incidents) {
    Tracked& t = *tp;
    if (t.inc.state != IncidentState::kFiring || t.risk_raised ||
        t.inc.job.empty() || !(t.inc.severity > rule->severity) ||
        t.inc.severity != Severity::kP2) {
      continue;
    }
    const std::optional<JobContext> ctx = context->Context(t.inc.job);
    if (!ctx || ctx->ended || ctx->gpus <= 0) continue;
    const double since_ts = std::isfinite(ctx->last_checkpoint_ts)
                                ? ctx->last_checkpoint_ts
                                : ctx->run_start_ts;
    if (!std::isfinite(since_ts)) continue;
    const double hours = std::max(0.0, now - since_ts) / 3600;
    const double at_risk = ctx->gpus * hours;
    if (at_risk < s.risk_gpu_hours) continue;
    Anomaly a;
    a.kind = AnomalyKind::kGpuHoursAtRisk;
    a.job = t.inc.job;
    a.ts = now;
    a.value = at_risk;
    a.score = ctx->gpus;
    a.baseline_mean = s.risk_gpu_hours;
    a.detail = absl::StrFormat(
        "%.0f GPU-hours at risk in job %s: %d GPUs x %.1f h since its %s "
        "(>= %.0f)",
        at_risk, t.inc.job, ctx->gpus, hours,
        std::isfinite(ctx->last_checkpoint_ts) ? "last checkpoint"
                                               : "start, no checkpoint seen",
        s.risk_gpu_hours);
    t.risk_raised = true;
    // Evidence of the incident, not its cause: it raises the severity but
    // neither renames nor re-localises it.
    const std::string key = ConditionKey(a) + "|" + t.inc.id;
    AddCondition(t, key, a, rule, /*inhibited=*/false);
    Condition& c = t.conditions[key];
    c.active = false;  // a figure, not a condition that must clear
    --t.active;
    if (c.evidence >= 0) t.inc.evidence[c.evidence].active = false;
    RaiseSeverity(t, rule, now);
    t.inc.last_update_ts = now;
    Refresh(t);
    Emit(UpdateType::kSeverityRaised, now, t, out);
  }
}

void IncidentEngine::Impl::Clear(const Anomaly& a) {
  const std::string key = ConditionKey(a);
  const auto it = by_condition.find(key);
  if (it == by_condition.end()) return;
  Tracked& t = *it->second;
  Condition& c = t.conditions[key];
  if (!c.active) return;
  c.active = false;
  --t.active;
  if (c.evidence >= 0) t.inc.evidence[c.evidence].active = false;
  t.last_change_ts = std::max(t.last_change_ts, a.ts);
  if (a.kind == AnomalyKind::kNodeSilent) t.silent_nodes.erase(a.node);
  if (a.kind == AnomalyKind::kJobHang) --t.hangs_active;
}

void IncidentEngine::Impl::Resolve(std::vector<IncidentUpdate>* out) {
  const RuleSettings& s = rules->settings;
  for (const auto& tp : incidents) {
    Tracked& t = *tp;
    if (t.inc.state != IncidentState::kFiring || t.active > 0 ||
        now - t.last_change_ts < s.resolve_after_s) {
      continue;
    }
    const double ts = t.last_change_ts + s.resolve_after_s;
    t.inc.state = IncidentState::kResolved;
    t.inc.resolved_ts = ts;
    t.inc.last_update_ts = ts;
    Emit(UpdateType::kResolved, ts, t, out);
  }
  auto expired = [&](const std::unique_ptr<Tracked>& t) {
    return t->inc.state == IncidentState::kResolved &&
           now - *t->inc.resolved_ts > s.reopen_window_s;
  };
  for (const auto& t : incidents) {
    if (!expired(t)) continue;
    for (const auto& [key, c] : t->conditions) {
      auto it = by_condition.find(key);
      if (it != by_condition.end() && it->second == t.get()) {
        by_condition.erase(it);
      }
    }
  }
  incidents.erase(std::remove_if(incidents.begin(), incidents.end(), expired),
                  incidents.end());
}

IncidentEngine::IncidentEngine(RuleSet rules)
    : impl_(std::make_unique<Impl>(std::move(rules))) {}

IncidentEngine::~IncidentEngine() = default;

std::vector<IncidentUpdate> IncidentEngine::Process(
    const std::vector<Anomaly>& anomalies) {
  std::vector<IncidentUpdate> out;
  for (const Anomaly& a : anomalies) {
    impl_->now = std::max(impl_->now, a.ts);
    impl_->Resolve(&out);
    if (a.cleared) {
      impl_->Clear(a);
    } else {
      impl_->Raise(a, &out);
    }
  }
  impl_->CheckFleetIncidents(&out);
  return out;
}

std::vector<IncidentUpdate> IncidentEngine::Advance(double ts) {
  std::vector<IncidentUpdate> out;
  Impl& m = *impl_;
  m.now = std::max(m.now, ts);
  // Risk and lemon windows move slowly: a look a minute is enough.
  if (m.now >= m.next_risk_check) {
    m.next_risk_check = m.now + 60;
    m.CheckRisk(&out);
    m.CheckLemons(&out);
    m.fleet_dirty = true;  // the fleet window moved
  }
  m.CheckFleetIncidents(&out);
  m.Resolve(&out);
  return out;
}

void IncidentEngine::set_context_source(const JobContextSource* source) {
  impl_->context = source;
}

namespace {

using ImplicationWindows = std::map<std::string, std::deque<Implication>>;

nlohmann::json WindowsToJson(const ImplicationWindows& windows) {
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& [name, h] : windows) {
    nlohmann::json list = nlohmann::json::array();
    for (const Implication& i : h) {
      list.push_back({{"ts", i.ts},
                      {"job", i.job},
                      {"id", i.id},
                      {"kind", i.kind},
                      {"gpu", i.gpu ? nlohmann::json(*i.gpu)
                                    : nlohmann::json(nullptr)}});
    }
    if (!list.empty()) doc[name] = std::move(list);
  }
  return doc;
}

// Reads what WindowsToJson wrote (`what` names it in errors).
absl::Status WindowsFromJson(const nlohmann::json& doc, const char* what,
                             ImplicationWindows* out) {
  if (!doc.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, ": not an object"));
  for (const auto& [name, list] : doc.items()) {
    if (!list.is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " of ", name, ": not a list"));
    }
    for (const nlohmann::json& e : list) {
      if (!e.is_object() || !e.contains("ts") || !e["ts"].is_number() ||
          !e.contains("job") || !e["job"].is_string() || !e.contains("id") ||
          !e["id"].is_string() || !e.contains("kind") ||
          !e["kind"].is_string() ||
          (e.contains("gpu") && !e["gpu"].is_null() &&
           !e["gpu"].is_number_integer())) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " of ", name, ": a malformed entry"));
      }
      Implication i;
      i.ts = e["ts"].get<double>();
      i.job = e["job"].get<std::string>();
      i.id = e["id"].get<std::string>();
      i.kind = e["kind"].get<std::string>();
      if (e.contains("gpu") && e["gpu"].is_number_integer()) {
        i.gpu = e["gpu"].get<int>();
      }
      (*out)[name].push_back(std::move(i));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Fleet-wide classes are saved beside the nodes under "@" and the class:
// node names never start with '@' (the ingest refuses them), and a reader
// from before they were saved takes them for nodes no frame names.
std::string IncidentEngine::SaveHistory() const {
  nlohmann::json doc = WindowsToJson(impl_->implicated);
  nlohmann::json fleet = WindowsToJson(impl_->fleet_faults);
  for (auto& [cause, list] : fleet.items()) doc[absl::StrCat("@", cause)] = std::move(list);
  return doc.dump();
}

absl::Status IncidentEngine::RestoreHistory(std::string_view text) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  ImplicationWindows windows;
  if (absl::Status s = WindowsFromJson(doc, "repeat-offender history", &windows); !s.ok())
    return s;
  ImplicationWindows nodes, fleet;
  for (auto& [name, h] : windows) {
    if (name.starts_with('@')) {
      fleet[name.substr(1)] = std::move(h);
    } else {
      nodes[name] = std::move(h);
    }
  }
  impl_->implicated = std::move(nodes);
  impl_->fleet_faults = std::move(fleet);
  impl_->fleet_dirty = true;
  return absl::OkStatus();
}

std::vector<Incident> IncidentEngine::Incidents() const {
  std::vector<Incident> out;
  out.reserve(impl_->incidents.size());
  for (const auto& t : impl_->incidents) out.push_back(t->inc);
  return out;
}

const RuleSet& IncidentEngine::rules() const { return *impl_->rules; }

void IncidentEngine::SetRules(RuleSet rules) {
  impl_->rules = &impl_->rule_sets.emplace_back(std::move(rules));
}

}  // namespace vigil
