// DefaultEscalationConfig and ParseEscalationConfig: the escalation
// section onto the defaults, every error collected with its JSON path.
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/config_schema.h"
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

// A policy as the config writes it.
json PolicyJson(const EscalationPolicy& policy) {
  json steps = json::array();
  for (const EscalationStep& step : policy.steps) {
    steps.push_back({{"targets", step.targets},
                     {"channels", step.channels},
                     {"wait_minutes", ConfigSchema::Number(step.wait_seconds / kMinute)},
                     {"repeat", step.repeat}});
  }
  return {{"steps", std::move(steps)},
          {"ack_timeout_minutes", ConfigSchema::Number(policy.ack_timeout_seconds / kMinute)},
          {"notify_resolved", policy.notify_resolved}};
}

class ConfigParser {
 public:
  // With `schema`, also documents every key it asks for, under `prefix`.
  ConfigParser(EscalationConfig* config, ConfigSchema* schema, std::string_view prefix)
      : config_(config), schema_(schema), prefix_(prefix) {}

  absl::Status Parse(const json& section) {
    if (!checker_.Object(section, "$")) return checker_.ToStatus();
    CheckKeys(section, "", {"users", "schedules", "policies", "interlocks"});
    // Users first: schedules and targets refer to them.
    if (const json* v = Section(section, "", "users", SectionShape::kObjectArray,
                                json::array(),
                                "People who can be paged; a given list replaces the "
                                "default (none)"))
      Users(*v);
    for (const User& u : config_->users) user_names_.insert(u.name);
    if (const json* v = Section(section, "", "schedules", SectionShape::kObjectArray,
                                json::array(),
                                "On-call schedules: rotations plus overrides; the newest "
                                "override covering a time wins, else the last layer that "
                                "started. The default policies name \"primary\" and "
                                "\"secondary\", which resolve to nobody until defined"))
      Schedules(*v);
    for (const Schedule& s : config_->schedules) schedule_names_.insert(s.name);
    json policies = json::object();
    for (int i = 0; i < 4; ++i) {
      policies[std::string(SeverityName(static_cast<Severity>(i)))] =
          PolicyJson(config_->policies[i]);
    }
    if (const json* v = Section(section, "", "policies", SectionShape::kObjectMap,
                                std::move(policies),
                                {"How incidents of each severity escalate; a given "
                                 "severity's keys replace its defaults one by one",
                                 "keys: P0, P1, P2, P3"},
                                "severity"))
      Policies(*v);
    if (const json* v = Section(section, "", "interlocks", SectionShape::kObject,
                                nullptr, "Safety interlocks of automatic actions"))
      Interlocks(*v);
    return checker_.ToStatus();
  }

 private:
  // `path` (relative to the section) as the reference names it.
  std::string Documented(std::string_view path) const {
    return path.empty() ? prefix_ : Member(prefix_, path);
  }

  // Records the keys `obj` accepts and reports the others.
  void CheckKeys(const json& obj, std::string_view path,
                 std::initializer_list<std::string_view> known) {
    checker_.CheckKeys(obj, path, known);
    if (schema_ != nullptr) {
      std::set<std::string> keys;
      for (std::string_view k : known) keys.insert(std::string(k));
      schema_->AddObject(Documented(path), keys);
    }
  }

  // The member `key` of `obj` (at `path`), or nullptr; documented as a
  // key of `type` whose absent value means `default_value`.
  const json* Find(const json& obj, std::string_view path, const char* key,
                   const char* type, json default_value, KeyDoc doc) {
    if (schema_ != nullptr) {
      schema_->AddKey({Documented(Member(path, key)), type, std::string(doc.values),
                       doc.required ? nullptr : std::move(default_value),
                       std::string(doc.meaning), doc.required});
    }
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }

  // As Find, for a section; when documenting, an absent one is replaced by
  // an empty stand-in so that its keys are documented too.
  const json* Section(const json& obj, std::string_view path, const char* key,
                      SectionShape shape, json default_value, KeyDoc doc,
                      std::string_view entry = "name") {
    auto it = obj.find(key);
    const json* v = it == obj.end() ? nullptr : &*it;
    if (schema_ == nullptr) return v;
    const json* placeholder = schema_->AddSection(
        {Documented(Member(path, key)), "", std::string(doc.values),
         doc.required ? nullptr : std::move(default_value), std::string(doc.meaning),
         doc.required},
        shape, entry);
    return v != nullptr ? v : placeholder;
  }

  // The required member `key` of `obj`, or nullptr (reported).
  const json* Required(const json& obj, std::string_view path, const char* key,
                       const char* type, KeyDoc doc) {
    doc.required = true;
    const json* v = Find(obj, path, key, type, nullptr, doc);
    if (v == nullptr) checker_.Error(Member(path, key), "required");
    return v;
  }

  // The required section `key` of `obj`, or nullptr (reported); when
  // documenting, an empty stand-in.
  const json* RequiredSection(const json& obj, std::string_view path, const char* key,
                              SectionShape shape, KeyDoc doc) {
    if (!obj.contains(key)) checker_.Error(Member(path, key), "required");
    doc.required = true;
    return Section(obj, path, key, shape, nullptr, doc);
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
      CheckKeys(u, path, {"name", "phone", "email", "im"});
      User user;
      if (const json* name = Required(u, path, "name", "string",
                                      "The user's name, unique; targets say user:NAME")) {
        if (auto s = checker_.String(*name, Member(path, "name"))) {
          user.name = *s;
          if (auto [it, inserted] = seen.emplace(*s, i); !inserted) {
            checker_.Error(Member(path, "name"),
                           absl::StrCat("duplicate user \"", *s,
                                        "\" (also users[", it->second, "])"));
          }
        }
      }
      if (const json* it = Find(u, path, "phone", "string", "",
                                {"Phone number for the phone and sms channels; empty: none",
                                 "E.164: \"+\" and 6 to 15 digits"})) {
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
      if (const json* it = Find(u, path, "email", "string", "",
                                "E-mail address for the email channel; empty: none")) {
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
      if (const json* it = Find(u, path, "im", "string", "",
                                "IM handle mentioned in IM pages (a Slack member id, a "
                                "mobile number for DingTalk); empty: none")) {
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
      CheckKeys(s, path, {"name", "layers", "overrides"});
      Schedule schedule;
      if (const json* name = Required(s, path, "name", "string",
                                      "The schedule's name, unique; targets say "
                                      "schedule:NAME")) {
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
      if (const json* layers = RequiredSection(
              s, path, "layers", SectionShape::kObjectArray,
              "Rotations, at least one; at a given time the last layer that has "
              "started decides")) {
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
      if (const json* it = Section(s, path, "overrides", SectionShape::kObjectArray,
                                   json::array(),
                                   "Stand-ins for a while; the newest one covering a "
                                   "time wins over the layers")) {
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
    CheckKeys(l, path, {"name", "rotation", "start", "users"});
    RotationLayer layer;
    if (const json* it = Find(l, path, "name", "string", "",
                              "A name for the layer, shown with who is on call")) {
      if (auto s = checker_.String(*it, Member(path, "name"))) layer.name = *s;
    }
    if (const json* it = Find(l, path, "rotation", "string",
                              layer.period_seconds == kDay ? "daily" : "weekly",
                              {"How long each user's turn lasts", "\"daily\", \"weekly\""})) {
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
    if (const json* start = Required(l, path, "start", "time",
                                     "When the first user's first turn begins; turns hand "
                                     "over at start + k periods")) {
      if (auto t = checker_.Time(*start, Member(path, "start"))) {
        layer.start_ts = *t;
      }
    }
    if (const json* users = Required(l, path, "users", "string list",
                                     "Names of configured users, taking turns in this "
                                     "order; at least one")) {
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
    CheckKeys(o, path, {"user", "start", "end"});
    ScheduleOverride ov;
    if (const json* user = Required(o, path, "user", "string",
                                    "The configured user on call from start to end")) {
      if (auto s = checker_.String(*user, Member(path, "user"))) {
        KnownUser(*s, Member(path, "user"));
        ov.user = *s;
      }
    }
    std::optional<double> start, end;
    if (const json* v = Required(o, path, "start", "time", "Start of the override")) {
      start = checker_.Time(*v, Member(path, "start"));
    }
    if (const json* v = Required(o, path, "end", "time",
                                 "End of the override (excluded); after start")) {
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
      if (severity) {
        Policy(value, path, &config_->policies[static_cast<int>(*severity)]);
      } else if (schema_ != nullptr) {
        // Documenting: the "<severity>" stand-in, on a policy's own defaults.
        EscalationPolicy placeholder;
        Policy(value, path, &placeholder);
      } else {
        checker_.Error(path, "unknown severity (known: P0, P1, P2, P3)");
      }
    }
  }

  void Policy(const json& p, const std::string& path,
              EscalationPolicy* policy) {
    if (!checker_.Object(p, path)) return;
    CheckKeys(p, path, {"steps", "ack_timeout_minutes", "notify_resolved"});
    if (const json* it = Section(p, path, "steps", SectionShape::kObjectArray, nullptr,
                                 "Escalation steps in order, replacing the severity's "
                                 "(default: the severity's steps in policies); after "
                                 "the last step's last wait paging stops. [] records "
                                 "only")) {
      const std::string spath = Member(path, "steps");
      if (checker_.Array(*it, spath)) {
        policy->steps.clear();
        for (size_t i = 0; i < it->size(); ++i) {
          Step((*it)[i], Element(spath, i), policy);
        }
      }
    }
    if (const json* it = Find(p, path, "ack_timeout_minutes", "number",
                              ConfigSchema::Number(policy->ack_timeout_seconds / kMinute),
                              {"Minutes after which an acknowledgement lapses if the "
                               "incident still fires (escalation starts again); 0: never",
                               ">= 0"})) {
      if (auto m =
              checker_.Number(*it, Member(path, "ack_timeout_minutes"), 0)) {
        policy->ack_timeout_seconds = *m * kMinute;
      }
    }
    if (const json* it = Find(p, path, "notify_resolved", "bool", policy->notify_resolved,
                              "Tell whoever was paged when the incident resolves")) {
      if (auto b = checker_.Bool(*it, Member(path, "notify_resolved"))) {
        policy->notify_resolved = *b;
      }
    }
  }

  void Step(const json& s, const std::string& path, EscalationPolicy* policy) {
    if (!checker_.Object(s, path)) return;
    CheckKeys(s, path, {"targets", "channels", "wait_minutes", "repeat"});
    EscalationStep step;
    if (const json* targets = Required(
            s, path, "targets", "string list",
            {"Who is paged: whoever is on call in a schedule when the page goes out, or "
             "a user; both must be configured. Non-empty",
             "\"schedule:NAME\", \"user:NAME\""})) {
      const std::string tpath = Member(path, "targets");
      for (const std::string& t : NonEmptyStrings(*targets, tpath)) {
        Target(t, tpath);
        step.targets.push_back(t);
      }
    }
    if (const json* channels = Required(
            s, path, "channels", "string list",
            {"How: phone, sms, email page each person; im, pagerduty, webhook, ticket "
             "page once per round naming everyone (notifications.channels routes "
             "them). Non-empty, no repeats",
             "phone, sms, email, im, pagerduty, webhook, ticket"})) {
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
    if (const json* it = Find(s, path, "wait_minutes", "number",
                              ConfigSchema::Number(step.wait_seconds / kMinute),
                              {"Minutes between this step's pages, and after its last "
                               "page before the next step; > 0 when repeat > 1",
                               ">= 0"})) {
      if (auto m = checker_.Number(*it, Member(path, "wait_minutes"), 0)) {
        step.wait_seconds = *m * kMinute;
      }
    }
    if (const json* it = Find(s, path, "repeat", "integer", step.repeat,
                              {"Pages sent by this step before the next step",
                               "[1, 100]"})) {
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
    CheckKeys(v, path,
              {"dry_run", "approval_severities", "max_cordons", "max_pauses",
               "window_minutes", "max_job_node_percent"});
    InterlockConfig& out = config_->interlocks;
    if (const json* it = Find(v, path, "dry_run", "bool", out.dry_run,
                              "Decide and record actions, run none")) {
      if (auto b = checker_.Bool(*it, Member(path, "dry_run"))) {
        out.dry_run = *b;
      }
    }
    json approval = json::array();
    for (Severity severity : out.approval_severities)
      approval.push_back(std::string(SeverityName(severity)));
    if (const json* it = Find(v, path, "approval_severities", "string list",
                              std::move(approval),
                              {"Severities whose automatic actions wait for an "
                               "operator's approval (vigilctl approve)",
                               "P0, P1, P2, P3"})) {
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
    struct Limit {
      const char* key;
      int* field;
      const char* meaning;
    };
    for (const Limit& limit :
         {Limit{"max_cordons", &out.max_cordons,
                "Circuit breaker: most node cordons per window; past it actions stop and "
                "a P1 remediation_halted incident pages"},
          Limit{"max_pauses", &out.max_pauses,
                "Circuit breaker: most job pauses per window"}}) {
      if (const json* it = Find(v, path, limit.key, "integer", *limit.field,
                                {limit.meaning, "[1, 100000]"})) {
        if (auto n = checker_.Integer(*it, Member(path, limit.key), 1, 100000)) {
          *limit.field = static_cast<int>(*n);
        }
      }
    }
    if (const json* it = Find(v, path, "window_minutes", "number",
                              ConfigSchema::Number(out.window_seconds / kMinute),
                              {"Sliding window of the circuit breaker, in minutes",
                               "> 0"})) {
      if (auto m = checker_.Number(*it, Member(path, "window_minutes"), 0)) {
        if (*m == 0) {
          checker_.Error(Member(path, "window_minutes"), "must be positive");
        }
        out.window_seconds = *m * kMinute;
      }
    }
    if (const json* it = Find(v, path, "max_job_node_percent", "number",
                              ConfigSchema::Number(out.max_job_node_percent),
                              {"Most share of one job's nodes that may be cordoned, in "
                               "percent (one node of any job always may)",
                               "(0, 100]"})) {
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
  ConfigSchema* const schema_;  // null unless documenting
  const std::string prefix_;
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
  return ParseEscalationConfig(section, nullptr, "");
}

absl::StatusOr<EscalationConfig> ParseEscalationConfig(
    const nlohmann::json& section, ConfigSchema* schema, std::string_view path) {
  EscalationConfig config = DefaultEscalationConfig();
  ConfigParser parser(&config, schema, path);
  if (absl::Status s = parser.Parse(section); !s.ok()) return s;
  return config;
}

}  // namespace vigil
