// LoadRuleSet: the JSON rule document onto the default catalogue. Every
// error is collected with its position; nothing is applied unless the whole
// document is valid.
#include <algorithm>
#include <initializer_list>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "common/json_syntax.h"
#include "rules/rule.h"

namespace vigil {
namespace {

using json = nlohmann::json;

class Loader {
 public:
  explicit Loader(RuleSet* set) : set_(set) {}

  // Applies `doc` to the rule set; returns every error.
  std::vector<std::string> Apply(const json& doc) {
    if (!doc.is_object()) {
      Error("$", absl::StrCat("the document must be an object, not ",
                              doc.type_name()));
      return errors_;
    }
    CheckKeys(doc, "", {"rules", "settings"});
    if (auto it = doc.find("settings"); it != doc.end()) Settings(*it);
    if (auto it = doc.find("rules"); it != doc.end()) {
      if (!it->is_array()) {
        Error("rules", TypeError("an array", *it));
      } else {
        for (size_t i = 0; i < it->size(); ++i) RuleEntry((*it)[i], i);
      }
    }
    if (errors_.empty()) {
      // New rules go before the catalogue, in file order.
      set_->rules.insert(set_->rules.begin(), added_.begin(), added_.end());
    }
    return errors_;
  }

 private:
  void Error(std::string_view path, std::string_view message) {
    errors_.push_back(
        absl::StrCat(std::string(path), ": ", std::string(message)));
  }

  static std::string TypeError(std::string_view want, const json& got) {
    return absl::StrCat("must be ", std::string(want), ", not ",
                        got.type_name());
  }

  static std::string Join(std::string_view path, std::string_view key) {
    return path.empty()
               ? std::string(key)
               : absl::StrCat(std::string(path), ".", std::string(key));
  }

  void CheckKeys(const json& obj, std::string_view path,
                 std::initializer_list<std::string_view> known) {
    std::string list;
    for (std::string_view k : known) {
      absl::StrAppend(&list, list.empty() ? "" : ", ", std::string(k));
    }
    for (const auto& [key, value] : obj.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        Error(Join(path, key), absl::StrCat("unknown key (known: ", list, ")"));
      }
    }
  }

  void Settings(const json& s) {
    if (!s.is_object()) {
      Error("settings", TypeError("an object", s));
      return;
    }
    CheckKeys(s, "settings",
              {"resolve_after_s", "reopen_window_s", "group_window_s",
               "hint_window_s", "max_evidence", "node_group_window_s",
               "lemon_window_s", "lemon_jobs", "risk_gpu_hours",
               "fleet_window_s", "fleet_jobs"});
    RuleSettings& out = set_->settings;
    for (auto [key, field] : {std::pair<const char*, double*>{
                                  "resolve_after_s", &out.resolve_after_s},
                              {"reopen_window_s", &out.reopen_window_s},
                              {"group_window_s", &out.group_window_s},
                              {"hint_window_s", &out.hint_window_s},
                              {"node_group_window_s",
                               &out.node_group_window_s},
                              {"lemon_window_s", &out.lemon_window_s},
                              {"fleet_window_s", &out.fleet_window_s},
                              {"risk_gpu_hours", &out.risk_gpu_hours}}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      const std::string path = Join("settings", key);
      if (!it->is_number()) {
        Error(path, TypeError("a number of seconds", *it));
      } else if (it->get<double>() < 0) {
        Error(path, "must not be negative");
      } else {
        *field = it->get<double>();
      }
    }
    if (auto it = s.find("max_evidence"); it != s.end()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
          it->get<int64_t>() > 100000) {
        Error("settings.max_evidence", "must be an integer in [1, 100000]");
      } else {
        out.max_evidence = it->get<int>();
      }
    }
    if (auto it = s.find("lemon_jobs"); it != s.end()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 2 ||
          it->get<int64_t>() > 1000) {
        Error("settings.lemon_jobs", "must be an integer in [2, 1000]");
      } else {
        out.lemon_jobs = it->get<int>();
      }
    }
    if (auto it = s.find("fleet_jobs"); it != s.end()) {
      if (!it->is_number_integer() ||
          (it->get<int64_t>() != 0 &&
           (it->get<int64_t>() < 2 || it->get<int64_t>() > 1000))) {
        Error("settings.fleet_jobs", "must be 0 (off) or an integer in [2, 1000]");
      } else {
        out.fleet_jobs = it->get<int>();
      }
    }
  }

  // A string or a non-empty array of strings, each passed to `each`
  // (path, text).
  template <typename F>
  void Strings(const json& v, const std::string& path, F each) {
    if (v.is_string()) {
      each(path, v.get<std::string>());
      return;
    }
    if (!v.is_array() || v.empty()) {
      Error(path, TypeError("a string or a non-empty array of strings", v));
      return;
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = absl::StrCat(path, "[", i, "]");
      if (!v[i].is_string()) {
        Error(p, TypeError("a string", v[i]));
      } else {
        each(p, v[i].get<std::string>());
      }
    }
  }

  void Match(const json& m, const std::string& path, RuleMatch* out) {
    if (!m.is_object()) {
      Error(path, TypeError("an object", m));
      return;
    }
    CheckKeys(m, path, {"kind", "metric", "tier", "min_score", "xid_codes"});
    *out = RuleMatch();
    if (auto it = m.find("kind"); it == m.end()) {
      Error(Join(path, "kind"), "required");
    } else {
      Strings(*it, Join(path, "kind"),
              [&](const std::string& p, const std::string& name) {
                if (auto kind = ParseAnomalyKind(name)) {
                  out->kinds.push_back(*kind);
                } else {
                  Error(p, absl::StrCat("unknown anomaly kind \"", name, "\""));
                }
              });
    }
    if (auto it = m.find("metric"); it != m.end()) {
      Strings(*it, Join(path, "metric"),
              [&](const std::string& p, const std::string& name) {
                if (name.empty()) {
                  Error(p, "must not be empty");
                } else {
                  out->metrics.push_back(name);
                }
              });
    }
    if (auto it = m.find("tier"); it != m.end()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
          it->get<int64_t>() > 2) {
        Error(Join(path, "tier"), "must be the integer 1 or 2");
      } else {
        out->tier = it->get<int>();
      }
    }
    if (auto it = m.find("min_score"); it != m.end()) {
      if (!it->is_number() || it->get<double>() < 0) {
        Error(Join(path, "min_score"), "must be a non-negative number");
      } else {
        out->min_score = it->get<double>();
      }
    }
    if (auto it = m.find("xid_codes"); it != m.end()) {
      const std::string p = Join(path, "xid_codes");
      if (!it->is_array() || it->empty()) {
        Error(p, TypeError("a non-empty array of integers", *it));
      } else {
        for (size_t i = 0; i < it->size(); ++i) {
          const json& c = (*it)[i];
          if (!c.is_number_integer() || c.get<int64_t>() < 0 ||
              c.get<int64_t>() > 100000) {
            Error(absl::StrCat(p, "[", i, "]"),
                  "must be an XID code (integer)");
          } else {
            out->xid_codes.push_back(c.get<int>());
          }
        }
        if (std::find(out->kinds.begin(), out->kinds.end(),
                      AnomalyKind::kXid) == out->kinds.end()) {
          Error(p, "only applies to kind \"xid\"");
        }
      }
    }
  }

  void Summary(const std::string& text, const std::string& path) {
    size_t i = 0;
    while ((i = text.find_first_of("{}", i)) != std::string::npos) {
      if (text[i] == '}') {
        Error(path, absl::StrCat("unmatched '}' at character ", i));
        ++i;
        continue;
      }
      const size_t close = text.find_first_of("{}", i + 1);
      if (close == std::string::npos || text[close] == '{') {
        Error(path, absl::StrCat("unclosed '{' at character ", i));
        i = close == std::string::npos ? text.size() : close;
        continue;
      }
      const std::string name = text.substr(i + 1, close - i - 1);
      if (!IsSummaryPlaceholder(name)) {
        Error(path, absl::StrCat("unknown placeholder {", name, "}"));
      }
      i = close + 1;
    }
  }

  void RuleEntry(const json& r, size_t index) {
    const std::string path = absl::StrCat("rules[", index, "]");
    if (!r.is_object()) {
      Error(path, TypeError("an object", r));
      return;
    }
    CheckKeys(r, path,
              {"name", "enabled", "match", "severity", "responses", "summary",
               "category", "generic"});
    std::string name;
    if (auto it = r.find("name"); it == r.end()) {
      Error(Join(path, "name"), "required");
    } else if (!it->is_string() || it->get<std::string>().empty()) {
      Error(Join(path, "name"), TypeError("a non-empty string", *it));
    } else {
      name = it->get<std::string>();
      auto [seen, inserted] = names_.emplace(name, index);
      if (!inserted) {
        Error(Join(path, "name"),
              absl::StrCat("duplicate rule name \"", name, "\" (also rules[",
                           seen->second, "])"));
      }
    }
    Rule scratch;
    Rule* rule = &scratch;
    bool is_new = true;
    for (Rule& d : set_->rules) {
      if (!name.empty() && d.name == name) {
        rule = &d;
        is_new = false;
      }
    }
    rule->name = name;
    if (is_new && !name.empty()) {
      for (const char* key : {"match", "severity"}) {
        if (!r.contains(key)) {
          Error(path, absl::StrCat("new rule \"", name, "\" (not in the ",
                                   "catalogue) needs \"", key, "\""));
        }
      }
    }
    if (auto it = r.find("enabled"); it != r.end()) {
      if (!it->is_boolean()) {
        Error(Join(path, "enabled"), TypeError("a boolean", *it));
      } else {
        rule->enabled = it->get<bool>();
      }
    }
    if (auto it = r.find("match"); it != r.end()) {
      Match(*it, Join(path, "match"), &rule->match);
    }
    if (auto it = r.find("severity"); it != r.end()) {
      const std::optional<Severity> s =
          it->is_string() ? ParseSeverity(it->get<std::string>())
                          : std::nullopt;
      if (!s) {
        Error(
            Join(path, "severity"),
            absl::StrCat("must be one of \"P0\", \"P1\", \"P2\", \"P3\", not ",
                         it->dump()));
      } else {
        rule->severity = *s;
        rule->responses = DefaultResponses(*s);
      }
    }
    if (auto it = r.find("responses"); it != r.end()) {
      const std::string p = Join(path, "responses");
      if (!it->is_array()) {
        Error(p, TypeError("an array of response names", *it));
      } else {
        rule->responses.clear();
        for (size_t i = 0; i < it->size(); ++i) {
          const json& v = (*it)[i];
          const std::optional<Response> resp =
              v.is_string() ? ParseResponse(v.get<std::string>())
                            : std::nullopt;
          if (!resp) {
            Error(absl::StrCat(p, "[", i, "]"),
                  absl::StrCat("unknown response ", v.dump()));
          } else {
            rule->responses.push_back(*resp);
          }
        }
      }
    }
    if (auto it = r.find("summary"); it != r.end()) {
      if (!it->is_string()) {
        Error(Join(path, "summary"), TypeError("a string", *it));
      } else {
        rule->summary = it->get<std::string>();
        Summary(rule->summary, Join(path, "summary"));
      }
    } else if (is_new) {
      rule->summary = "{metric} on {where}: {detail}";
    }
    if (auto it = r.find("category"); it != r.end()) {
      const std::optional<HintCategory> c =
          it->is_string() ? ParseHintCategory(it->get<std::string>())
                          : std::nullopt;
      if (!c) {
        Error(Join(path, "category"),
              absl::StrCat("unknown category ", it->dump()));
      } else {
        rule->category = *c;
      }
    }
    if (auto it = r.find("generic"); it != r.end()) {
      if (!it->is_boolean()) {
        Error(Join(path, "generic"), TypeError("a boolean", *it));
      } else {
        rule->generic = it->get<bool>();
      }
    }
    if (is_new) added_.push_back(std::move(scratch));
  }

  RuleSet* set_;
  std::vector<std::string> errors_;
  std::map<std::string, size_t> names_;
  std::vector<Rule> added_;
};

}  // namespace

absl::StatusOr<RuleSet> LoadRuleSet(std::string_view text) {
  const json doc = json::parse(text.begin(), text.end(), nullptr,
                               /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(JsonSyntaxError(text));
  }
  RuleSet set = DefaultRuleSet();
  const std::vector<std::string> errors = Loader(&set).Apply(doc);
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }
  return set;
}

}  // namespace vigil
