// DefaultEscalationConfig and ParseEscalationConfig: the escalation
// section onto the defaults, every error collected with its JSON path.
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "escalation/channels.h"
#include "escalation/escalation.h"
#include "escalation/json_checker.h"

namespace vigil {
namespace {

using escalation_internal::Element;
using escalation_internal::IsGroupChannel;
using escalation_internal::IsPersonalChannel;
using escalation_internal::JsonChecker;
using escalation_internal::Member;
using json = nlohmann::json;

constexpr double kMinute = 60;
constexpr double kDay = 86400;

EscalationStep MakeStep(std::vector<std::string> targets,
                        std::vector<std::string> channels, double wait_seconds,
                        int repeat) {
  EscalationStep step;
  step.targets = std::move(targets);
  step.channels = std::move(channels);
  step.wait_seconds = wait_seconds;
  step.repeat = repeat;
  return step;
}

// "+" and 6 to 15 digits.
bool IsE164(std::string_view phone) {
  if (phone.size() < 7 || phone.size() > 16 || phone[0] != '+') return false;
  for (char c : phone.substr(1)) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

class ConfigParser {
 public:
  explicit ConfigParser(EscalationConfig* config) : config_(config) {}

  absl::Status Parse(const json& section) {
    if (!checker_.Object(section, "$")) return checker_.ToStatus();
    checker_.CheckKeys(section, "",
                       {"users", "schedules", "policies", "interlocks"});
    // Users first: schedules and targets refer to them.
    if (auto it = section.find("users"); it != section.end()) Users(*it);
    for (const User& u : config_->users) user_names_.insert(u.name);
    if (auto it = section.find("schedules"); it != section.end()) {
      Schedules(*it);
    }
    for (const Schedule& s : config_->schedules) schedule_names_.insert(s.name);
    if (auto it = section.find("policies"); it != section.end()) Policies(*it);
    if (auto it = section.find("interlocks"); it != section.end()) {
      Interlocks(*it);
    }
    return checker_.ToStatus();
  }

 private:
  // The required member `key` of `obj`, or nullptr (reported).
  const json* Required(const json& obj, std::string_view path,
                       const char* key) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      checker_.Error(Member(path, key), "required");
      return nullptr;
    }
    return &*it;
  }

  // A user name that must be configured.
  void KnownUser(const std::string& name, std::string_view path) {
    if (!user_names_.contains(name)) {
      checker_.Error(
          path, absl::StrCat("unknown user \"", name, "\" (not in \"users\")"));
    }
  }

  void Users(const json& v) {
    if (!checker_.Array(v, "users")) return;
    config_->users.clear();
    std::map<std::string, size_t> seen;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string path = Element("users", i);
      const json& u = v[i];
      if (!checker_.Object(u, path)) continue;
      checker_.CheckKeys(u, path, {"name", "phone", "email", "im"});
      User user;
      if (const json* name = Required(u, path, "name")) {
        if (auto s = checker_.String(*name, Member(path, "name"))) {
          user.name = *s;
          if (auto [it, inserted] = seen.emplace(*s, i); !inserted) {
            checker_.Error(Member(path, "name"),
                           absl::StrCat("duplicate user \"", *s,
                                        "\" (also users[", it->second, "])"));
          }
        }
      }
      if (auto it = u.find("phone"); it != u.end()) {
        if (auto s = checker_.Text(*it, Member(path, "phone"))) {
          if (!s->empty() && !IsE164(*s)) {
            checker_.Error(Member(path, "phone"),
                           absl::StrCat("must be an E.164 number (\"+\" and "
                                        "digits), not \"",
                                        *s, "\""));
          }
          user.phone = *s;
        }
      }
      if (auto it = u.find("email"); it != u.end()) {
        if (auto s = checker_.Text(*it, Member(path, "email"))) {
          const size_t at = s->find('@');
          if (!s->empty() &&
              (at == std::string::npos || at == 0 || at + 1 == s->size())) {
            checker_.Error(Member(path, "email"),
                           absl::StrCat("not an e-mail address: \"", *s, "\""));
          }
          user.email = *s;
        }
      }
      if (auto it = u.find("im"); it != u.end()) {
        if (auto s = checker_.Text(*it, Member(path, "im"))) user.im = *s;
      }
      config_->users.push_back(std::move(user));
    }
  }

  void Schedules(const json& v) {
    if (!checker_.Array(v, "schedules")) return;
    config_->schedules.clear();
    std::map<std::string, size_t> seen;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string path = Element("schedules", i);
      const json& s = v[i];
      if (!checker_.Object(s, path)) continue;
      checker_.CheckKeys(s, path, {"name", "layers", "overrides"});
      Schedule schedule;
      if (const json* name = Required(s, path, "name")) {
        if (auto n = checker_.String(*name, Member(path, "name"))) {
          schedule.name = *n;
          if (auto [it, inserted] = seen.emplace(*n, i); !inserted) {
            checker_.Error(
                Member(path, "name"),
                absl::StrCat("duplicate schedule \"", *n, "\" (also schedules[",
                             it->second, "])"));
          }
        }
      }
      if (const json* layers = Required(s, path, "layers")) {
        const std::string lpath = Member(path, "layers");
        if (checker_.Array(*layers, lpath)) {
          if (layers->empty()) {
            checker_.Error(lpath, "needs at least one layer");
          }
          for (size_t j = 0; j < layers->size(); ++j) {
            Layer((*layers)[j], Element(lpath, j), &schedule);
          }
        }
      }
      if (auto it = s.find("overrides"); it != s.end()) {
        const std::string opath = Member(path, "overrides");
        if (checker_.Array(*it, opath)) {
          for (size_t j = 0; j < it->size(); ++j) {
            Override((*it)[j], Element(opath, j), &schedule);
          }
        }
      }
      config_->schedules.push_back(std::move(schedule));
    }
  }

  void Layer(const json& l, const std::string& path, Schedule* schedule) {
    if (!checker_.Object(l, path)) return;
    checker_.CheckKeys(l, path, {"name", "rotation", "start", "users"});
    RotationLayer layer;
    if (auto it = l.find("name"); it != l.end()) {
      if (auto s = checker_.String(*it, Member(path, "name"))) layer.name = *s;
    }
    if (auto it = l.find("rotation"); it != l.end()) {
      if (*it == "daily") {
        layer.period_seconds = kDay;
      } else if (*it == "weekly") {
        layer.period_seconds = 7 * kDay;
      } else {
        checker_.Error(
            Member(path, "rotation"),
            absl::StrCat("must be \"daily\" or \"weekly\", not ", it->dump()));
      }
    }
    if (const json* start = Required(l, path, "start")) {
      if (auto t = checker_.Time(*start, Member(path, "start"))) {
        layer.start_ts = *t;
      }
    }
    if (const json* users = Required(l, path, "users")) {
      const std::string upath = Member(path, "users");
      if (!users->is_array() || users->empty()) {
        checker_.Error(upath, absl::StrCat("must be a non-empty array of user "
                                           "names, not ",
                                           users->dump()));
      } else {
        for (size_t k = 0; k < users->size(); ++k) {
          if (auto s = checker_.String((*users)[k], Element(upath, k))) {
            KnownUser(*s, upath);
            layer.users.push_back(*s);
          }
        }
      }
    }
    schedule->layers.push_back(std::move(layer));
  }

  void Override(const json& o, const std::string& path, Schedule* schedule) {
    if (!checker_.Object(o, path)) return;
    checker_.CheckKeys(o, path, {"user", "start", "end"});
    ScheduleOverride ov;
    if (const json* user = Required(o, path, "user")) {
      if (auto s = checker_.String(*user, Member(path, "user"))) {
        KnownUser(*s, Member(path, "user"));
        ov.user = *s;
      }
    }
    std::optional<double> start, end;
    if (const json* v = Required(o, path, "start")) {
      start = checker_.Time(*v, Member(path, "start"));
    }
    if (const json* v = Required(o, path, "end")) {
      end = checker_.Time(*v, Member(path, "end"));
    }
    if (start && end) {
      if (*end <= *start) {
        checker_.Error(Member(path, "end"), "must be after \"start\"");
      }
      ov.start_ts = *start;
      ov.end_ts = *end;
    }
    schedule->overrides.push_back(std::move(ov));
  }

  void Policies(const json& v) {
    if (!checker_.Object(v, "policies")) return;
    for (const auto& [key, value] : v.items()) {
      const std::string path = Member("policies", key);
      const std::optional<Severity> severity = ParseSeverity(key);
      if (!severity) {
        checker_.Error(path, "unknown severity (known: P0, P1, P2, P3)");
        continue;
      }
      Policy(value, path, &config_->policies[static_cast<int>(*severity)]);
    }
  }

  void Policy(const json& p, const std::string& path,
              EscalationPolicy* policy) {
    if (!checker_.Object(p, path)) return;
    checker_.CheckKeys(p, path,
                       {"steps", "ack_timeout_minutes", "notify_resolved"});
    if (auto it = p.find("steps"); it != p.end()) {
      const std::string spath = Member(path, "steps");
      if (checker_.Array(*it, spath)) {
        policy->steps.clear();
        for (size_t i = 0; i < it->size(); ++i) {
          Step((*it)[i], Element(spath, i), policy);
        }
      }
    }
    if (auto it = p.find("ack_timeout_minutes"); it != p.end()) {
      if (auto m =
              checker_.Number(*it, Member(path, "ack_timeout_minutes"), 0)) {
        policy->ack_timeout_seconds = *m * kMinute;
      }
    }
    if (auto it = p.find("notify_resolved"); it != p.end()) {
      if (auto b = checker_.Bool(*it, Member(path, "notify_resolved"))) {
        policy->notify_resolved = *b;
      }
    }
  }

  void Step(const json& s, const std::string& path, EscalationPolicy* policy) {
    if (!checker_.Object(s, path)) return;
    checker_.CheckKeys(s, path,
                       {"targets", "channels", "wait_minutes", "repeat"});
    EscalationStep step;
    if (const json* targets = Required(s, path, "targets")) {
      const std::string tpath = Member(path, "targets");
      for (const std::string& t : NonEmptyStrings(*targets, tpath)) {
        Target(t, tpath);
        step.targets.push_back(t);
      }
    }
    if (const json* channels = Required(s, path, "channels")) {
      const std::string cpath = Member(path, "channels");
      std::set<std::string> seen;
      for (const std::string& c : NonEmptyStrings(*channels, cpath)) {
        if (!IsPersonalChannel(c) && !IsGroupChannel(c)) {
          checker_.Error(cpath,
                         absl::StrCat("unknown channel \"", c,
                                      "\" (known: phone, sms, email, im, "
                                      "pagerduty, webhook, ticket)"));
        } else if (!seen.insert(c).second) {
          checker_.Error(cpath,
                         absl::StrCat("channel \"", c, "\" listed twice"));
        }
        step.channels.push_back(c);
      }
    }
    if (auto it = s.find("wait_minutes"); it != s.end()) {
      if (auto m = checker_.Number(*it, Member(path, "wait_minutes"), 0)) {
        step.wait_seconds = *m * kMinute;
      }
    }
    if (auto it = s.find("repeat"); it != s.end()) {
      if (auto r = checker_.Integer(*it, Member(path, "repeat"), 1, 100)) {
        step.repeat = static_cast<int>(*r);
      }
    }
    if (step.wait_seconds == 0 && step.repeat > 1) {
      checker_.Error(
          Member(path, "repeat"),
          absl::StrCat("a step with wait_minutes 0 would send its ",
                       step.repeat, " pages at once; give wait_minutes > 0"));
    }
    policy->steps.push_back(std::move(step));
  }

  // "schedule:NAME" or "user:NAME" naming something configured.
  void Target(const std::string& target, const std::string& path) {
    constexpr std::string_view kSchedule = "schedule:";
    constexpr std::string_view kUser = "user:";
    if (target.starts_with(kSchedule) && target.size() > kSchedule.size()) {
      const std::string name = target.substr(kSchedule.size());
      if (!schedule_names_.contains(name)) {
        checker_.Error(path, absl::StrCat("unknown schedule \"", name,
                                          "\" (not in \"schedules\")"));
      }
    } else if (target.starts_with(kUser) && target.size() > kUser.size()) {
      KnownUser(target.substr(kUser.size()), path);
    } else {
      checker_.Error(path, absl::StrCat("target must be \"schedule:NAME\" or "
                                        "\"user:NAME\", not \"",
                                        target, "\""));
    }
  }

  // The strings of a non-empty array of non-empty strings (the bad ones
  // reported).
  std::vector<std::string> NonEmptyStrings(const json& v,
                                           const std::string& path) {
    std::vector<std::string> out;
    if (!v.is_array() || v.empty()) {
      checker_.Error(path, absl::StrCat("must be a non-empty array of "
                                        "strings, not ",
                                        v.dump()));
      return out;
    }
    for (size_t i = 0; i < v.size(); ++i) {
      if (auto s = checker_.String(v[i], Element(path, i))) out.push_back(*s);
    }
    return out;
  }

  void Interlocks(const json& v) {
    const std::string path = "interlocks";
    if (!checker_.Object(v, path)) return;
    checker_.CheckKeys(
        v, path,
        {"dry_run", "approval_severities", "max_cordons", "max_pauses",
         "window_minutes", "max_job_node_percent"});
    InterlockConfig& out = config_->interlocks;
    if (auto it = v.find("dry_run"); it != v.end()) {
      if (auto b = checker_.Bool(*it, Member(path, "dry_run"))) {
        out.dry_run = *b;
      }
    }
    if (auto it = v.find("approval_severities"); it != v.end()) {
      const std::string apath = Member(path, "approval_severities");
      if (checker_.Array(*it, apath)) {
        out.approval_severities.clear();
        for (const json& s : *it) {
          const std::optional<Severity> severity =
              s.is_string() ? ParseSeverity(s.get<std::string>())
                            : std::nullopt;
          if (!severity) {
            checker_.Error(apath, absl::StrCat("unknown severity ", s.dump(),
                                               " (known: P0, P1, P2, P3)"));
          } else {
            out.approval_severities.push_back(*severity);
          }
        }
      }
    }
    for (auto [key, field] :
         {std::pair<const char*, int*>{"max_cordons", &out.max_cordons},
          {"max_pauses", &out.max_pauses}}) {
      if (auto it = v.find(key); it != v.end()) {
        if (auto n = checker_.Integer(*it, Member(path, key), 1, 100000)) {
          *field = static_cast<int>(*n);
        }
      }
    }
    if (auto it = v.find("window_minutes"); it != v.end()) {
      if (auto m = checker_.Number(*it, Member(path, "window_minutes"), 0)) {
        if (*m == 0) {
          checker_.Error(Member(path, "window_minutes"), "must be positive");
        }
        out.window_seconds = *m * kMinute;
      }
    }
    if (auto it = v.find("max_job_node_percent"); it != v.end()) {
      const std::string ppath = Member(path, "max_job_node_percent");
      if (auto p = checker_.Number(*it, ppath, 0)) {
        if (*p == 0 || *p > 100) {
          checker_.Error(ppath, absl::StrCat("must be in (0, 100], not ", *p));
        }
        out.max_job_node_percent = *p;
      }
    }
  }

  EscalationConfig* config_;
  JsonChecker checker_;
  std::set<std::string> user_names_;
  std::set<std::string> schedule_names_;
};

}  // namespace

EscalationConfig DefaultEscalationConfig() {
  EscalationConfig config;
  const std::vector<std::string> primary = {"schedule:primary"};
  EscalationPolicy& p0 = config.policies[static_cast<int>(Severity::kP0)];
  p0.steps = {MakeStep(primary, {"phone", "sms", "im"}, 5 * kMinute, 2),
              MakeStep({"schedule:primary", "schedule:secondary"},
                       {"phone", "sms", "im"}, 10 * kMinute, 3)};
  EscalationPolicy& p1 = config.policies[static_cast<int>(Severity::kP1)];
  p1.steps = {MakeStep(primary, {"im"}, 15 * kMinute, 1),
              MakeStep(primary, {"phone", "im"}, 15 * kMinute, 2)};
  EscalationPolicy& p2 = config.policies[static_cast<int>(Severity::kP2)];
  p2.steps = {MakeStep(primary, {"email", "ticket"}, 0, 1)};
  // P3: record only.
  return config;
}

absl::StatusOr<EscalationConfig> ParseEscalationConfig(
    const nlohmann::json& section) {
  EscalationConfig config = DefaultEscalationConfig();
  ConfigParser parser(&config);
  if (absl::Status s = parser.Parse(section); !s.ok()) return s;
  return config;
}

}  // namespace vigil
